"""KV-cache quantizers: NSNQuant (calibration-free VQ), calibrated k-means VQ, KIVI-style integers.

Each quantizer maps a chunk of cached vectors ``x`` of shape ``(..., tokens, d)`` to a
:class:`QuantizedChunk` (what would be stored, with its size in bits) and back. They share
this interface so one Hugging Face cache (:mod:`normlab.quant.kv_cache`) serves them all.

NSNQuant (``paper("nsnquant")``), per chunk of tokens:

1. Normalize: ``s1 = ||x|| / sqrt(d)`` per token, ``u = x / s1`` (norm ``sqrt(d)``);
2. Shift: ``o = mean_tokens(u)`` per channel, ``w = u - o``;
3. Normalize: ``s2 = ||w|| / sqrt(d)``, ``z = w / s2``;
4. Hadamard: ``h = H z`` (orthonormal, :func:`~normlab.quant.hadamard.hadamard`), whose
   entries are close to N(0, 1);
5. vector-quantize 8-dim sub-vectors of ``h`` with one codebook fitted offline to samples of
   N(0, I) (no calibration data). 1 bit per value: 256 codewords for 8 values; 2 bits:
   residual VQ with a second 256-word codebook fitted to the N(0, I) residuals.

Decoding: ``x_hat = s1 (s2 H^T h_hat + o)``. Stored: the codes, ``s1`` and ``s2`` per token
(fp16) and ``o`` per chunk (fp16), plus one int16 power-of-two exponent per chunk for ``s1``
(see :class:`NSNQuantizer`: any float32 magnitude, 1e-30 to 1e38, dequantizes correctly).

Baselines: :class:`KMeansVQ`, the same (residual) VQ but with codebooks fitted by k-means
to calibration data, one per sub-vector position, on the raw vectors; and :class:`IntKIVI`,
asymmetric min-max integers in groups (KIVI, ``paper("kivi")``: keys per channel over groups
of tokens, values per token over groups of channels), fp16 scale and zero point per group.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch

from normlab._checks import check_float
from normlab._io import cache_dir
from normlab._registry import Method, register
from normlab._tensor_cache import cached_tensor
from normlab.papers import paper
from normlab.quant.hadamard import hadamard

__all__ = [
    "IntKIVI",
    "KMeansVQ",
    "NSNQuantizer",
    "QuantizedChunk",
    "gaussian_codebooks",
    "kmeans",
    "nsn_normalize",
]

SUB = 8  # sub-vector length
CODEWORDS = 256  # 8 bits per 8-dim sub-vector and stage = 1 bit per value
FP16_BITS = 16
EXPONENT_BITS = 16  # the int16 power-of-two exponent of a chunk's s1
#: s1 of a chunk brought to [0, 2) is stored as fp16(s1 * 2^14): below fp16's max (65504)
#: with a factor 2 to spare, and 2^38 of dynamic range inside the chunk before underflow.
_S1_SHIFT = 14


@dataclass(frozen=True)
class QuantizedChunk:
    """What a quantizer stores for one chunk: tensors plus their size in bits.

    Attributes:
        data: the stored tensors by name (codes, scales, ...).
        bits: the storage cost of ``data`` in bits (each entry counted at its stored width).
        shape: the shape of the quantized tensor ``(..., tokens, d)``.
    """

    data: dict[str, torch.Tensor] = field(repr=False)
    bits: int
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> float:
        return self.bits / 8

    @property
    def tokens(self) -> int:
        return self.shape[-2]


def kmeans(
    x: torch.Tensor, k: int, *, iters: int = 25, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Lloyd's k-means on rows of ``x`` ``(N, D)``; returns ``(k, D)`` centroids.

    Initialised from ``k`` distinct random rows; an empty cluster keeps its centroid.
    """
    if x.shape[0] < k:
        raise ValueError(f"k-means needs at least k={k} samples, got {x.shape[0]}.")
    idx = torch.randperm(x.shape[0], generator=generator)[:k]
    centroids = x[idx].clone()
    for _ in range(iters):
        assign = torch.cdist(x, centroids).argmin(-1)
        sums = torch.zeros_like(centroids).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k).to(x.dtype)
        filled = counts > 0
        centroids[filled] = sums[filled] / counts[filled, None]
    return centroids


def _vq(x: torch.Tensor, codebooks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual VQ of rows ``x`` ``(N, 8)`` with ``codebooks`` ``(stages, K, 8)``.

    Returns codes ``(stages, N)`` and the reconstruction ``(N, 8)``.
    """
    recon = torch.zeros_like(x)
    codes = []
    for book in codebooks:
        c = torch.cdist(x - recon, book).argmin(-1)
        codes.append(c)
        recon = recon + book[c]
    return torch.stack(codes), recon


def _finite(books: torch.Tensor) -> str | None:
    return None if bool(torch.isfinite(books).all()) else "non-finite codewords"


@functools.cache
def _gaussian_codebooks(stages: int, seed: int, samples: int) -> torch.Tensor:
    # deterministic in its arguments, so stored once under the cache folder, verified on
    # every load (shape, dtype, finite, SHA-256 recorded at write time) and rebuilt if off
    path = cache_dir() / "codebooks" / f"gaussian-{stages}-{seed}-{samples}-v2.safetensors"
    return cached_tensor(
        path,
        lambda: _fit_gaussian_codebooks(stages, seed, samples),
        shape=(stages, CODEWORDS, SUB),
        dtype=torch.float32,
        check=_finite,
    )


def _fit_gaussian_codebooks(stages: int, seed: int, samples: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, SUB, generator=g)
    books, residual = [], x
    for _ in range(stages):
        book = kmeans(residual, CODEWORDS, generator=g)
        books.append(book)
        residual = residual - book[torch.cdist(residual, book).argmin(-1)]
    return torch.stack(books)


def gaussian_codebooks(bits: int, *, seed: int = 0, samples: int = 16_384) -> torch.Tensor:
    """The calibration-free codebooks: residual k-means on ``samples`` draws of N(0, I_8).

    Returns ``(bits, 256, 8)``: one stage per bit per value (cached per arguments).
    """
    if bits not in (1, 2):
        raise ValueError(f"bits must be 1 or 2, got {bits}.")
    return _gaussian_codebooks(bits, seed, samples).clone()


def nsn_normalize(
    x: torch.Tensor, eps: float = 1e-8
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normalize-Shift-Normalize over a chunk ``(..., tokens, d)``.

    Returns ``(z, s1, s2, o)`` with ``x = s1 (s2 z + o)``; ``z`` has norm ``sqrt(d)`` per
    token, ``s1``/``s2`` are ``(..., tokens, 1)`` and ``o`` is ``(..., 1, d)``.
    """
    d = x.shape[-1]
    root = math.sqrt(d)
    s1 = x.norm(dim=-1, keepdim=True).clamp_min(eps) / root
    u = x / s1
    o = u.mean(dim=-2, keepdim=True)
    w = u - o
    s2 = w.norm(dim=-1, keepdim=True).clamp_min(eps) / root
    return w / s2, s1, s2, o


def _check_dim(d: int) -> None:
    if d % SUB or d & (d - 1):
        raise ValueError(f"the vector size must be a power of two >= {SUB}, got {d}.")


def _check_chunk(x: torch.Tensor) -> None:
    check_float(x, "NSNQuant input")
    if x.dim() < 2:
        raise ValueError(
            f"NSNQuant quantizes chunks of shape (..., tokens, d), got shape {tuple(x.shape)}; "
            "add a token dimension, e.g. x[None] for a single vector."
        )
    _check_dim(x.shape[-1])


def _chunk_exponent(x: torch.Tensor) -> torch.Tensor:
    """Integer ``k`` per chunk ``(..., 1, 1)`` with ``max |x| / 2^k`` in [1, 2).

    0 for chunks that are empty, all zero or hold NaN/inf (their result is then as the
    unscaled computation gives it: zeros, or NaN confined to the chunk).
    """
    lead = x.shape[:-2]
    if x.numel() == 0:
        return torch.zeros((*lead, 1, 1), dtype=torch.int32, device=x.device)
    amax = x.abs().amax(dim=(-2, -1), keepdim=True)
    _, exponent = torch.frexp(amax)
    usable = torch.isfinite(amax) & (amax > 0)
    return torch.where(usable, exponent - 1, torch.zeros_like(exponent))


class NSNQuantizer:
    """NSNQuant: Normalize-Shift-Normalize, Hadamard, and VQ with one N(0, I) codebook.

    Args:
        bits: 1 or 2 bits per value (1 or 2 residual VQ stages of 256 8-dim codewords).
        seed: seed of the offline codebook construction.
        samples: N(0, I) samples the codebook is fitted to.
        rotate: apply the Hadamard transform (the paper's method; False is an ablation).
    """

    def __init__(
        self, *, bits: int = 2, seed: int = 0, samples: int = 16_384, rotate: bool = True
    ) -> None:
        self.bits, self.rotate = bits, rotate
        self.codebooks = gaussian_codebooks(bits, seed=seed, samples=samples)

    @property
    def codebook_bytes(self) -> int:
        """Size of the shared codebook(s) in fp16."""
        return self.codebooks.numel() * FP16_BITS // 8

    def quantize(self, x: torch.Tensor) -> QuantizedChunk:
        """Quantize a chunk ``(..., tokens, d)`` (any float dtype; computed in float32).

        The chunk is first brought to unit scale by a power of two ``2^k`` (exact), so the
        norms cannot overflow or underflow; ``s1`` (of the scaled chunk, below 2) is
        stored as fp16 of ``s1 * 2^14`` and ``k - 14`` as one int16 per chunk, so
        ``s1 = fp16 * 2^(k - 14)`` covers float32's whole range where plain fp16 scales
        overflowed from about 1e5 (all NaN) and flushed to zero below about 1e-8. Cost:
        16 bits per chunk (0.125 B per token and head for a 128-token chunk, 2 B/token for
        a one-token chunk); ``s2`` (below 2 by construction) and ``o`` (entries at most
        ``sqrt(d)``) stay fp16.
        """
        _check_chunk(x)
        xf = x.float()
        k = _chunk_exponent(xf)
        z, s1, s2, o = nsn_normalize(torch.ldexp(xf, -k))
        h = hadamard(z) if self.rotate else z
        codes, _ = _vq(h.reshape(-1, SUB), self.codebooks)
        tokens = s1.numel()
        bits = (
            codes.numel() * 8
            + 2 * tokens * FP16_BITS
            + o.numel() * FP16_BITS
            + k.numel() * EXPONENT_BITS
        )
        data = {
            "codes": codes.to(torch.uint8),
            "s1": torch.ldexp(s1, torch.full_like(k, _S1_SHIFT)).half(),
            "s1_exp": (k - _S1_SHIFT).to(torch.int16),
            "s2": s2.half(),
            "o": o.half(),
        }
        return QuantizedChunk(data, bits, tuple(x.shape))

    def dequantize(self, q: QuantizedChunk, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        codes = q.data["codes"].long()
        h = sum(book[c] for book, c in zip(self.codebooks, codes, strict=True))
        h = h.reshape(q.shape)
        z = hadamard(h) if self.rotate else h
        s2, o = (q.data[k].float() for k in ("s2", "o"))
        s1 = torch.ldexp(q.data["s1"].float(), q.data["s1_exp"].int())
        return (s1 * (s2 * z + o)).to(dtype)

    def __repr__(self) -> str:
        return f"NSNQuantizer(bits={self.bits}, rotate={self.rotate})"


class KMeansVQ:
    """Residual VQ with codebooks fitted by k-means to calibration vectors (the CQ-style baseline).

    One codebook set per 8-dim sub-vector position, on the raw vectors (no normalization),
    so it is as good as its calibration data is representative.

    Args:
        codebooks: ``(d / 8, bits, 256, 8)``, e.g. from :meth:`calibrate`.
    """

    def __init__(self, codebooks: torch.Tensor) -> None:
        self.codebooks = codebooks
        self.bits = codebooks.shape[1]

    @classmethod
    def calibrate(
        cls, samples: torch.Tensor, *, bits: int = 2, iters: int = 25, seed: int = 0
    ) -> KMeansVQ:
        """Fit the codebooks to calibration vectors ``samples`` ``(N, d)``."""
        _check_dim(samples.shape[-1])
        g = torch.Generator().manual_seed(seed)
        parts = samples.float().reshape(samples.shape[0], -1, SUB)
        books = []
        for j in range(parts.shape[1]):
            residual, stages = parts[:, j], []
            for _ in range(bits):
                book = kmeans(residual, CODEWORDS, iters=iters, generator=g)
                stages.append(book)
                residual = residual - book[torch.cdist(residual, book).argmin(-1)]
            books.append(torch.stack(stages))
        return cls(torch.stack(books))

    @property
    def codebook_bytes(self) -> int:
        return self.codebooks.numel() * FP16_BITS // 8

    def quantize(self, x: torch.Tensor) -> QuantizedChunk:
        parts = x.float().reshape(-1, x.shape[-1] // SUB, SUB)
        codes = torch.stack(
            [_vq(parts[:, j], self.codebooks[j])[0] for j in range(parts.shape[1])], dim=-1
        )  # (bits, N, d / 8)
        return QuantizedChunk({"codes": codes.to(torch.uint8)}, codes.numel() * 8, tuple(x.shape))

    def dequantize(self, q: QuantizedChunk, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        codes = q.data["codes"].long()
        parts = [
            sum(self.codebooks[j, s][codes[s, :, j]] for s in range(self.bits))
            for j in range(codes.shape[-1])
        ]
        return torch.stack(parts, dim=1).reshape(q.shape).to(dtype)

    def __repr__(self) -> str:
        return f"KMeansVQ(bits={self.bits}, d={self.codebooks.shape[0] * SUB})"


class IntKIVI:
    """Asymmetric min-max integers in groups, KIVI's layout.

    ``q = clamp(round((x - lo) / s), 0, 2^b - 1)``, ``s = (hi - lo) / (2^b - 1)``, with
    ``lo``/``hi`` the group's min/max, stored in fp16 with ``b``-bit codes.

    Args:
        bits: bits per value (1 to 8).
        axis: "channel" (groups of ``group`` tokens per channel: KIVI's keys) or "token"
            (groups of ``group`` channels per token: KIVI's values).
        group: group size (KIVI: 32; capped by the chunk's size along the grouped axis).
    """

    def __init__(self, *, bits: int = 2, axis: str = "token", group: int = 32) -> None:
        if not 1 <= bits <= 8 or axis not in ("channel", "token"):
            raise ValueError(
                f"bits must be in [1, 8] and axis 'channel' or 'token'; got {bits}, {axis!r}."
            )
        self.bits, self.axis, self.group = bits, axis, group
        self.codebook_bytes = 0

    def _grouped(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as ``(..., n_groups, group)``, grouping along the quantized axis."""
        y = x.transpose(-1, -2) if self.axis == "channel" else x  # group along the last axis
        g = min(self.group, y.shape[-1])
        pad = (-y.shape[-1]) % g
        if pad:  # pad with the row's last value so min/max are unchanged
            y = torch.cat([y, y[..., -1:].expand(*y.shape[:-1], pad)], dim=-1)
        return y.unflatten(-1, (-1, g))

    def quantize(self, x: torch.Tensor) -> QuantizedChunk:
        y = self._grouped(x.float())
        lo, hi = y.amin(-1, keepdim=True), y.amax(-1, keepdim=True)
        levels = 2**self.bits - 1
        s = ((hi - lo) / levels).clamp_min(1e-8)
        codes = torch.clamp(torch.round((y - lo) / s), 0, levels)
        n_values = math.prod(x.shape)
        bits = n_values * self.bits + 2 * lo.numel() * FP16_BITS
        data = {"codes": codes.to(torch.uint8), "lo": lo.half(), "scale": s.half()}
        return QuantizedChunk(data, bits, tuple(x.shape))

    def dequantize(self, q: QuantizedChunk, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        y = q.data["codes"].float() * q.data["scale"].float() + q.data["lo"].float()
        y = y.flatten(-2)
        if self.axis == "channel":
            y = y[..., : q.shape[-2]].transpose(-1, -2)
        else:
            y = y[..., : q.shape[-1]]
        return y.reshape(q.shape).to(dtype)

    def __repr__(self) -> str:
        return f"IntKIVI(bits={self.bits}, axis={self.axis!r}, group={self.group})"


register(
    Method(
        "nsnquant",
        "quant",
        NSNQuantizer,
        paper("nsnquant"),
        "KV-cache VQ: normalize, shift, normalize, Hadamard, one N(0, I) codebook (1/2 bits)",
        aliases=("nsn-quant",),
        layout="other",
    )
)
