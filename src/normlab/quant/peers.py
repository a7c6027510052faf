"""The field's own quantized-cache backends (HQQ, optimum-quanto) behind normlab's quantizer API.

transformers quantizes a KV cache through ``HQQQuantizedLayer`` and ``QuantoQuantizedLayer``;
:class:`PeerQuantizer` wraps either as a quantizer with the ``quantize`` / ``dequantize``
methods of :class:`~normlab.quant.NSNQuantizer`, so the peers are measured by the same code
as normlab's own schemes. Both backends are optional (the ``peers`` extra).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch

from normlab.quant.nsn import QuantizedChunk

__all__ = [
    "PEER_BACKENDS",
    "STALE_LOCK_SECONDS",
    "PeerQuantizer",
    "clear_stale_build_lock",
    "peer_quantizers",
]

#: The backends :class:`PeerQuantizer` wraps.
PEER_BACKENDS = ("hqq", "quanto")

#: A C++ extension build takes ~40 s here; a lock older than this was left by a killed build.
STALE_LOCK_SECONDS = 600.0


def clear_stale_build_lock(build_dir: Path, max_age: float = STALE_LOCK_SECONDS) -> bool:
    """Remove ``build_dir/lock`` when it is older than ``max_age`` seconds; whether it did.

    ``torch.utils.cpp_extension.load`` (which optimum-quanto uses to build its CPU kernels
    on first use) waits for as long as that file exists, and a build killed midway leaves
    it behind, so every later first use would hang. A warning names the removed lock.

    Args:
        build_dir: the extension's build directory.
        max_age: age in seconds above which a lock counts as stale.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> clear_stale_build_lock(Path(tempfile.mkdtemp()))  # no lock: nothing to do
        False
    """
    lock = Path(build_dir) / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return False
    if age <= max_age:
        return False
    warnings.warn(
        f"removing {lock}, a C++ extension build lock {age:.0f} s old (an interrupted build "
        "left it; the build runs again)",
        RuntimeWarning,
        stacklevel=2,
    )
    lock.unlink(missing_ok=True)
    return True


class PeerQuantizer:
    """transformers' own quantized-cache layer (HQQ or optimum-quanto) as a quantizer.

    Quantizes a ``(..., tokens, d)`` chunk the way ``HQQQuantizedLayer`` /
    ``QuantoQuantizedLayer`` quantize a cache (axis 0, group ``group``). The chunk it
    returns holds the dequantized values (the backends keep their packed format to
    themselves); its ``bits`` count ``bits`` per value plus an fp16 scale and zero point per
    group, normlab's accounting for every scheme. Before quanto's first use, a stale build
    lock of its CPU kernels is removed (:func:`clear_stale_build_lock`).

    Args:
        backend: "hqq" or "quanto".
        bits: bits per value.
        group: values per quantization group.

    Raises:
        ValueError: for an unknown backend.
        ImportError: when transformers or the backend is not installed.

    Examples:
        >>> import torch
        >>> q = PeerQuantizer("hqq", bits=2, group=64)
        >>> x = torch.randn(1, 1, 32, 64)
        >>> chunk = q.quantize(x)
        >>> chunk.bits == x.numel() * 2 + 32 * x.numel() // 64  # 2 bits + 2 fp16 per group
        True
        >>> q.dequantize(chunk).shape
        torch.Size([1, 1, 32, 64])
    """

    #: Storage shared by every chunk (a codebook); the peers have none.
    codebook_bytes = 0

    def __init__(self, backend: str, *, bits: int = 2, group: int = 64) -> None:
        if backend not in PEER_BACKENDS:
            raise ValueError(f"backend must be one of {PEER_BACKENDS}, got {backend!r}.")
        from transformers.cache_utils import HQQQuantizedLayer, QuantoQuantizedLayer

        cls = {"hqq": HQQQuantizedLayer, "quanto": QuantoQuantizedLayer}[backend]
        if backend == "quanto":
            from optimum.quanto.library.extensions.cpp import ext

            clear_stale_build_lock(Path(ext.build_directory))
        self.layer = cls(nbits=bits, axis_key=0, axis_value=0, q_group_size=group)
        self.layer.keys = torch.zeros(0)  # read for its device and dtype
        self.backend, self.bits, self.group = backend, bits, group

    def quantize(self, x: torch.Tensor) -> QuantizedChunk:
        """Quantize and dequantize ``x`` through the backend; the chunk and its storage."""
        x = x.float().contiguous()
        out = self.layer._dequantize(self.layer._quantize(x, axis=0)).float().reshape(x.shape)
        n = x.numel()
        bits = n * self.bits + 2 * 16 * math.ceil(n / self.group)
        return QuantizedChunk({"values": out}, bits, tuple(x.shape))

    def dequantize(self, chunk: QuantizedChunk) -> torch.Tensor:
        """The values of a chunk from :meth:`quantize`."""
        return chunk.data["values"]

    def __repr__(self) -> str:
        return f"PeerQuantizer({self.backend!r}, bits={self.bits}, group={self.group})"


def peer_quantizers(
    backends: Sequence[str], bits: int, group: int
) -> dict[str, PeerQuantizer | None]:
    """A :class:`PeerQuantizer` per backend of ``backends`` at ``bits`` and ``group``; None
    for a backend whose library is not installed (the ``peers`` extra: no value, not an
    error).

    Examples:
        >>> peers = peer_quantizers(["hqq"], bits=2, group=64)
        >>> list(peers), peers["hqq"] is None or peers["hqq"].bits == 2  # None: not installed
        (['hqq'], True)
    """
    peers: dict[str, PeerQuantizer | None] = {}
    for backend in backends:
        try:
            peers[backend] = PeerQuantizer(backend, bits=bits, group=group)
        except ImportError:
            peers[backend] = None
    return peers
