"""A language model's KV cache under a quantizer: the error it leaves and what it stores.

NSNQuant (``paper("nsnquant")``) compresses the KV cache with a calibration-free VQ; the
experiment that tests it prefills a quantized cache and lets the model continue. Here a
window of ``T`` tokens is split into a prefix of ``T - window`` tokens, run in full
precision as a prefill does, whose keys and values are then quantized as one chunk, and a
tail of ``window`` tokens whose queries attend over the substituted cache
(:func:`prefilled_cache_error`). It reports the attention-output relative error of the tail,
``sqrt(sum ||a_hat - a||^2 / sum ||a||^2)`` over layers, the tail's bits per byte, and the
stored bytes per prefix token. The model needs the public API of
:class:`~normlab.models.gpt.TinyGPT` (``embed``, ``pos``, ``blocks`` with ``norm1``,
``norm2``, ``norm_scale``, ``mlp`` and ``attn.project`` / ``attn.attend`` /
``attn.output``, ``readout``).

:func:`effective_rank` measures how low-dimensional the cached vectors are, the regime that
decides whether a codebook calibrated on data (k-means) or one fitted to N(0, I) after NSN
normalization fits them better. :func:`comparison_table` runs every scheme of the NSNQuant
comparison on a set of domains, at nominal and at matched storage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from normlab.quant.nsn import IntKIVI, KMeansVQ, NSNQuantizer

__all__ = [
    "comparison_table",
    "effective_rank",
    "kivi_pairs",
    "kmeans_pairs",
    "largest_within",
    "nsn_pairs",
    "prefilled_cache_error",
    "scheme_row",
]


def _roundtrip(quantizers: Sequence[Any], k: torch.Tensor, v: torch.Tensor):
    qk, qv = quantizers
    ck, cv = qk.quantize(k), qv.quantize(v)
    return qk.dequantize(ck), qv.dequantize(cv), ck.bits + cv.bits


@torch.no_grad()
def prefilled_cache_error(
    model: torch.nn.Module,
    idx: torch.Tensor,
    y: torch.Tensor,
    pairs: Sequence[Sequence[Any]] | None,
    window: int,
) -> dict[str, float]:
    """Attention-output error, tail bits per byte and stored bytes per token of one scheme.

    Args:
        model: a TinyGPT-like model (see the module docstring).
        idx: input bytes ``(B, T)``.
        y: next-byte targets ``(B, T)``.
        pairs: per layer, the (key quantizer, value quantizer) with ``quantize`` /
            ``dequantize`` (:mod:`normlab.quant.nsn`); None for full precision.
        window: tail tokens, kept in full precision and scored.

    Returns:
        ``{"attn_err", "bpb", "bytes_per_token"}``.

    Examples:
        >>> from normlab.models.gpt import GPTConfig, TinyGPT
        >>> _ = torch.manual_seed(0)
        >>> model = TinyGPT(GPTConfig(d_model=16, n_heads=1, n_layers=1, context=16)).eval()
        >>> x = torch.randint(0, 256, (2, 16))
        >>> prefilled_cache_error(model, x, x, None, 4)["attn_err"]
        0.0
        >>> r = prefilled_cache_error(model, x, x, kivi_pairs(2, 1, group=16), 4)
        >>> 0 < r["attn_err"] < 1, r["bytes_per_token"] > 0
        (True, True)
    """
    p = idx.shape[1] - window
    num = den = 0.0
    bits = 0
    h = model.embed(idx) + model.pos(torch.arange(idx.shape[1]))
    for i, block in enumerate(model.blocks):
        attn = block.attn
        x = block.norm1(h) * block.norm_scale
        q, k, v = attn.project(x)
        qt = q[..., p:, :]
        exact = attn.attend(qt, k, v)
        if pairs is None:
            kk, vv = k, v
        else:
            kq, vq, b = _roundtrip(pairs[i], k[..., :p, :], v[..., :p, :])
            bits += b
            kk, vv = torch.cat([kq, k[..., p:, :]], -2), torch.cat([vq, v[..., p:, :]], -2)
        tail = attn.attend(qt, kk, vv)  # the tail's queries over the substituted cache
        num += float((tail - exact).pow(2).sum())
        den += float(exact.pow(2).sum())
        h_tail = h[:, p:] + attn.output(tail, x[:, p:])
        h_tail = h_tail + block.mlp(block.norm2(h_tail) * block.norm_scale)
        h = torch.cat([block(h[:, :p])[0], h_tail], 1)  # the prefix: fp and causal
    nll = F.cross_entropy(model.readout(h[:, p:]).flatten(0, 1).float(), y[:, p:].flatten())
    return {
        "attn_err": math.sqrt(num / den),
        "bpb": float(nll) / math.log(2),
        "bytes_per_token": bits / 8 / (idx.shape[0] * p) if pairs is not None else 0.0,
    }


def scheme_row(
    model: torch.nn.Module,
    evals: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    pairs: Sequence[Sequence[Any]],
    window: int,
) -> dict[str, float]:
    """:func:`prefilled_cache_error` of one scheme on each named domain of ``evals``
    (name -> ``(idx, y)``): ``<name>_attn_err``, ``<name>_bpb``, the stored
    ``bytes_per_token`` (of the last domain: every domain has the same shape) and the first
    layer's K and V ``codebook_bytes``.

    Examples:
        >>> from normlab.models.gpt import GPTConfig, TinyGPT
        >>> _ = torch.manual_seed(0)
        >>> model = TinyGPT(GPTConfig(d_model=16, n_heads=1, n_layers=1, context=16)).eval()
        >>> x = torch.randint(0, 256, (2, 16))
        >>> sorted(scheme_row(model, {"code": (x, x)}, kivi_pairs(2, 1, group=16), 4))
        ['bytes_per_token', 'code_attn_err', 'code_bpb', 'codebook_bytes']
    """
    row: dict[str, float] = {}
    for name, (x, y) in evals.items():
        r = prefilled_cache_error(model, x, y, pairs, window)
        row[f"{name}_attn_err"], row[f"{name}_bpb"] = r["attn_err"], r["bpb"]
        row["bytes_per_token"] = r["bytes_per_token"]
    row["codebook_bytes"] = float(pairs[0][0].codebook_bytes + pairs[0][1].codebook_bytes)
    return row


def nsn_pairs(bits: int, layers: int, seed: int = 0) -> list[tuple[NSNQuantizer, NSNQuantizer]]:
    """NSNQuant for keys and values of every layer (one offline codebook, no data).

    Examples:
        >>> len(nsn_pairs(2, 3)), nsn_pairs(2, 1)[0][0].bits
        (3, 2)
    """
    return [(NSNQuantizer(bits=bits, seed=seed),) * 2] * layers


def kivi_pairs(bits: int, layers: int, group: int = 32) -> list[tuple[IntKIVI, IntKIVI]]:
    """KIVI-style integers for every layer: keys per channel, values per token, in groups.

    Examples:
        >>> k, v = kivi_pairs(2, 1)[0]
        >>> k.axis, v.axis, k.group
        ('channel', 'token', 32)
    """
    pair = (
        IntKIVI(bits=bits, axis="channel", group=group),
        IntKIVI(bits=bits, axis="token", group=group),
    )
    return [pair] * layers


def kmeans_pairs(
    kv: Sequence[tuple[torch.Tensor, torch.Tensor]], bits: int, *, iters: int, seed: int = 0
) -> list[tuple[KMeansVQ, KMeansVQ]]:
    """k-means VQ calibrated per layer on the keys and values ``kv`` (``(..., T, d)`` each,
    e.g. :meth:`TinyGPT.keys_values <normlab.models.gpt.TinyGPT.keys_values>`).

    Examples:
        >>> kv = [(torch.randn(1, 1, 300, 8), torch.randn(1, 1, 300, 8))]
        >>> kmeans_pairs(kv, 1, iters=2)[0][0].bits
        1
    """
    return [
        tuple(
            KMeansVQ.calibrate(t.reshape(-1, t.shape[-1]), bits=bits, iters=iters, seed=seed)
            for t in (k, v)
        )
        for k, v in kv
    ]


def effective_rank(x: torch.Tensor) -> float:
    """Effective rank of the vectors ``x`` ``(..., d)`` (rows flattened): ``exp(H(p))``,
    ``p_i = s_i / sum_j s_j`` over the singular values of the centred rows (Roy and
    Vetterli, 2007). ``d`` for isotropic vectors, 1 for vectors on a line.

    Examples:
        >>> g = torch.Generator().manual_seed(0)
        >>> round(effective_rank(torch.randn(4000, 8, generator=g)))
        8
        >>> round(effective_rank(torch.randn(400, 1, generator=g) * torch.ones(8)))
        1
    """
    rows = x.reshape(-1, x.shape[-1]).double()
    s = torch.linalg.svdvals(rows - rows.mean(0))
    p = s / s.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def largest_within(
    target: float, row_of: Callable[[int], dict[str, float]], low: int = 1, high: int = 8
) -> dict[str, float]:
    """The row of the largest setting in ``low..high`` whose ``bytes_per_token`` is at most
    ``target`` (settings tried in increasing order, stopping at the first that stores more;
    the row at ``low`` when even that stores more), with the setting under ``"bits"``.

    Examples:
        >>> largest_within(50.0, lambda b: {"bytes_per_token": 20.0 * b})
        {'bytes_per_token': 40.0, 'bits': 2}
        >>> largest_within(10.0, lambda b: {"bytes_per_token": 20.0 * b})
        {'bytes_per_token': 20.0, 'bits': 1}
    """
    setting, row = low, row_of(low)
    while setting < high:
        bigger = row_of(setting + 1)
        if bigger["bytes_per_token"] > target:
            break
        setting, row = setting + 1, bigger
    return {**row, "bits": setting}


def comparison_table(
    model: torch.nn.Module,
    calibration: Sequence[tuple[torch.Tensor, torch.Tensor]],
    evals: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    *,
    bits: Sequence[int],
    window: int,
    kmeans_iters: int,
    oracle: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
    peers: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """Every scheme of the NSNQuant comparison, one :func:`scheme_row` each on ``evals``.

    Rows: ``nsn-<b>bit``, ``kmeans-<b>bit`` (k-means VQ calibrated on the keys and values
    ``calibration``) and ``kivi-<b>bit`` for each ``b`` in ``bits``; ``kmeans-matched-<b>bit``
    and ``kivi-matched-<b>bit``, the largest setting storing no more bytes per token than
    NSNQuant at ``b`` bits (its setting under ``"bits"``); ``<name>-2bit`` for each peer
    quantizer in ``peers`` (name -> quantizer, or None when the peer is not installed: its
    row is then empty of values); ``kmeans-oracle-2bit``, calibrated on ``oracle`` (the
    evaluation domain itself); ``fp``: each domain's full-precision bits per byte and the
    cache's mean key and value :func:`effective_rank` over layers.

    Examples:
        >>> from normlab.models.gpt import GPTConfig, TinyGPT
        >>> _ = torch.manual_seed(0)
        >>> model = TinyGPT(GPTConfig(d_model=16, n_heads=1, n_layers=1, context=16)).eval()
        >>> x = torch.randint(0, 256, (2, 16))
        >>> kv = model.keys_values(torch.randint(0, 256, (32, 16)))
        >>> t = comparison_table(model, kv, {"code": (x, x)}, bits=[1], window=4, kmeans_iters=2)
        >>> sorted(t)
        ['fp', 'kivi-1bit', 'kivi-matched-1bit', 'kmeans-1bit', 'kmeans-matched-1bit', 'nsn-1bit']
    """
    layers = len(calibration)

    def row(pairs: Sequence[Sequence[Any]]) -> dict[str, float]:
        return scheme_row(model, evals, pairs, window)

    def fit(b: int, data: Sequence[tuple[torch.Tensor, torch.Tensor]] = calibration) -> list:
        return kmeans_pairs(data, b, iters=kmeans_iters, seed=seed)

    fp = {
        f"{name}_bpb": prefilled_cache_error(model, *xy, None, window)["bpb"]
        for name, xy in evals.items()
    }
    for which, i in (("key", 0), ("value", 1)):
        fp[f"{which}_rank"] = sum(effective_rank(t[i]) for t in calibration) / layers
    table: dict[str, dict[str, float]] = {"fp": fp}
    kmeans = {b: fit(b) for b in bits}
    for b in bits:
        table[f"nsn-{b}bit"] = row(nsn_pairs(b, layers, seed))
        table[f"kmeans-{b}bit"] = row(kmeans[b])
        table[f"kivi-{b}bit"] = row(kivi_pairs(b, layers))
    for b in bits:
        target = table[f"nsn-{b}bit"]["bytes_per_token"]
        per_stage = table[f"kmeans-{b}bit"]["bytes_per_token"] / b
        stages = max(1, math.floor(target / per_stage + 1e-9))
        pairs = kmeans[b] if stages == b else fit(stages)
        table[f"kmeans-matched-{b}bit"] = {**row(pairs), "bits": stages}
        table[f"kivi-matched-{b}bit"] = largest_within(
            target, lambda k: row(kivi_pairs(k, layers))
        )
    for name, quantizer in (peers or {}).items():
        empty = dict.fromkeys(table[f"nsn-{bits[-1]}bit"])  # the peer is not installed
        table[f"{name}-2bit"] = empty if quantizer is None else row([(quantizer,) * 2] * layers)
    if oracle is not None:
        table["kmeans-oracle-2bit"] = row(fit(2, oracle))
    return table
