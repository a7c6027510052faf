"""Hugging Face KV caches that store keys and values with a normlab quantizer.

Usage (this module needs ``transformers``, extra ``hf``; ``normlab.quant`` does not import it)::

    from normlab.quant.kv_cache import NSNQuantCache
    cache = NSNQuantCache(model.config, bits=2, residual_length=128)
    out = model.generate(ids, past_key_values=cache, do_sample=False)
    cache.bytes_per_token()

``KVQuantizedLayer`` subclasses ``transformers.cache_utils.QuantizedLayer`` (its residual
window of recent tokens kept in full precision, ``_quantize``/``_dequantize``), but appends
each full window as a new quantized chunk instead of re-quantizing the whole dequantized
history: NSNQuant's channel mean and KIVI's key groups are per chunk, and quantizing
dequantized values again would compound the error. ``KVQuantizedCache`` takes any quantizer
of :mod:`normlab.quant.nsn` for keys and values; ``NSNQuantCache`` is its NSNQuant preset.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, QuantizedLayer

from normlab.quant.nsn import NSNQuantizer

__all__ = ["KVQuantizedCache", "KVQuantizedLayer", "NSNQuantCache"]


class KVQuantizedLayer(QuantizedLayer):
    """One layer's cache: quantized chunks of ``residual_length`` tokens plus a
    full-precision window of at most ``residual_length - 1`` recent tokens.

    Args:
        key_quantizer: quantizer of the keys (``quantize``/``dequantize``).
        value_quantizer: quantizer of the values.
        residual_length: tokens per quantized chunk and size of the recent window.
    """

    def __init__(
        self, key_quantizer: Any, value_quantizer: Any, residual_length: int = 128
    ) -> None:
        super().__init__(
            nbits=getattr(key_quantizer, "bits", 0),
            axis_key=0,
            axis_value=1,
            residual_length=residual_length,
        )
        self.quantizers = (key_quantizer, value_quantizer)
        self._perms: list[torch.Tensor | None] = []

    def _quantize(self, tensor: torch.Tensor, axis: int) -> Any:
        """Quantize one chunk; ``axis`` 0 selects the key quantizer, 1 the value one."""
        return self.quantizers[axis].quantize(tensor)

    def _dequantize(self, q_tensor: Any) -> torch.Tensor:
        raise NotImplementedError("use _dequantize_chunk(q, axis)")

    def _dequantize_chunk(self, q: Any, axis: int, perm: torch.Tensor | None):
        x = self.quantizers[axis].dequantize(q, self.keys.dtype).to(self.device)
        return x if perm is None else x.index_select(0, perm)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self.cumulative_length += key_states.shape[-2]
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self._quantized_keys, self._quantized_values, self._perms = [], [], []
        keys = torch.cat([self.keys, key_states], dim=-2)
        values = torch.cat([self.values, value_states], dim=-2)
        old = [
            (self._dequantize_chunk(qk, 0, p), self._dequantize_chunk(qv, 1, p))
            for qk, qv, p in zip(
                self._quantized_keys, self._quantized_values, self._perms, strict=True
            )
        ]
        keys_out = torch.cat([o[0] for o in old] + [keys], dim=-2)
        values_out = torch.cat([o[1] for o in old] + [values], dim=-2)
        r = self.residual_length
        full = keys.shape[-2] // r * r
        for start in range(0, full, r):  # move each full window into a quantized chunk
            self._quantized_keys.append(self._quantize(keys[..., start : start + r, :], 0))
            self._quantized_values.append(self._quantize(values[..., start : start + r, :], 1))
            self._perms.append(None)
        self.keys, self.values = keys[..., full:, :], values[..., full:, :]
        return keys_out, values_out

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam reordering: composed into each chunk's batch permutation (no requantizing)."""
        if not self.is_initialized:
            return
        beam_idx = beam_idx.to(self.device)
        self._perms = [beam_idx if p is None else p.index_select(0, beam_idx) for p in self._perms]
        if self.keys.numel():
            self.keys = self.keys.index_select(0, beam_idx)
            self.values = self.values.index_select(0, beam_idx)

    def reset(self) -> None:
        super().reset()
        self._quantized_keys, self._quantized_values, self._perms = [], [], []

    def stored_bits(self) -> tuple[int, int]:
        """``(quantized bits, full-precision window bits)`` currently stored."""
        q = sum(c.bits for c in (*(self._quantized_keys or ()), *(self._quantized_values or ())))
        window = 0
        if self.is_initialized and self.keys.numel():
            window = 8 * self.keys.element_size() * (self.keys.numel() + self.values.numel())
        return q, window

    def quantized_tokens(self) -> int:
        return sum(c.tokens for c in (self._quantized_keys or ()))


class KVQuantizedCache(Cache):
    """A KV cache whose layers are :class:`KVQuantizedLayer`; pass it to ``generate``.

    Args:
        config: the model's config (full-attention layers only).
        key_quantizer: quantizer of the keys (a :mod:`normlab.quant.nsn` quantizer).
        value_quantizer: quantizer of the values; ``None`` for ``key_quantizer``.
        residual_length: tokens per quantized chunk / full-precision window.
    """

    def __init__(
        self,
        config: Any,
        *,
        key_quantizer: Any,
        value_quantizer: Any = None,
        residual_length: int = 128,
    ) -> None:
        text = config.get_text_config(decoder=True)
        types = set(getattr(text, "layer_types", None) or ["full_attention"])
        if types - {"full_attention"}:
            raise ValueError(
                f"KVQuantizedCache supports full-attention layers only; found {sorted(types)}."
            )
        value_quantizer = key_quantizer if value_quantizer is None else value_quantizer
        layers = [
            KVQuantizedLayer(key_quantizer, value_quantizer, residual_length)
            for _ in range(text.num_hidden_layers)
        ]
        super().__init__(layers=layers)

    def bytes_per_token(self, *, quantized_only: bool = False) -> float:
        """Stored bytes per cached token per sequence, all layers, keys and values.

        ``quantized_only`` counts only the quantized chunks over the quantized tokens
        (the asymptotic cost of a long context); otherwise the full-precision window
        is included and divided over every cached token.
        """
        q = sum(layer.stored_bits()[0] for layer in self.layers)
        w = sum(layer.stored_bits()[1] for layer in self.layers)
        batch = self.layers[0].keys.shape[0] if self.layers[0].keys.dim() == 4 else 1
        if quantized_only:
            tokens = self.layers[0].quantized_tokens()
            return q / 8 / (tokens * batch) if tokens else float("nan")
        return (q + w) / 8 / (self.get_seq_length() * batch)


class NSNQuantCache(KVQuantizedCache):
    """NSNQuant KV cache (``paper("nsnquant")``): keys and values by NSN + Hadamard VQ.

    Args:
        config: the model's config.
        bits: 1 or 2 bits per value.
        residual_length: tokens per chunk (one channel mean each) and recent window.
        seed: seed of the offline N(0, I) codebook.
    """

    def __init__(
        self, config: Any, *, bits: int = 2, residual_length: int = 128, seed: int = 0
    ) -> None:
        q = NSNQuantizer(bits=bits, seed=seed)
        super().__init__(config, key_quantizer=q, residual_length=residual_length)
