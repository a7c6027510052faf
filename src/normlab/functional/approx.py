"""Hardware-style softmax and LayerNorm approximations that keep their normalization exact.

Seed "Hardware-Efficient Softmax and LayerNorm with Guaranteed Normalization for Edge
Devices": cheap approximations of ``exp``, ``1/x`` and ``1/sqrt(x)`` (shifts, a small table,
Newton steps) that still deliver ``sum p = 1`` (softmax) and ``sigma = 1`` (LayerNorm), which
score-oriented tasks need. Only the abstract is public; every formula below is normlab's
emulation of such a datapath in floating point, documented where it is a choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from normlab._checks import check_float, check_trailing_shape
from normlab.functional._precision import upcast
from normlab.functional.norms import row_scale

__all__ = [
    "approx_layer_norm",
    "approx_reciprocal",
    "approx_rsqrt",
    "approx_softmax",
    "layer_norm_approximation_error",
    "softmax_approximation_error",
]

_LOG2E = 1.0 / math.log(2.0)
#: exp2 of the scaled logits is floored at 2^-100: far below any value that survives the
#: normalization, and finite, so masked (-inf) entries give no NaN gradients.
_MIN_EXP2 = -100.0


def _check_table(table_bits: int, newton_steps: int | None) -> None:
    if not isinstance(table_bits, int) or not 0 <= table_bits <= 16:
        raise ValueError(f"table_bits must be an int in [0, 16], got {table_bits!r}.")
    if newton_steps is not None and (not isinstance(newton_steps, int) or newton_steps < 0):
        raise ValueError(f"newton_steps must be a non-negative int or None, got {newton_steps!r}.")


def _leading_one(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``v = m * 2^k`` with ``m`` in [1, 2) and integer ``k`` (leading-one detection)."""
    m, k = torch.frexp(v)
    return 2 * m, (k - 1).to(v.dtype)


def approx_reciprocal(
    s: torch.Tensor, *, newton_steps: int = 1, table_bits: int = 5
) -> torch.Tensor:
    """``1/s`` for ``s > 0`` by leading-one detection, a small table and Newton steps.

    ``s = m 2^k`` with ``m`` in [1, 2); the seed is ``T[i] 2^-k``, where the table holds
    ``1/midpoint`` of ``2^table_bits`` equal segments of [1, 2) (relative error at most
    ``2^-(table_bits + 1)``); each Newton step ``r <- r (2 - s r)`` squares the relative
    error. Differentiable in ``s`` through the Newton steps (the seed is piecewise constant).

    Examples:
        >>> import torch
        >>> s = torch.tensor([3.0, 10.0, 0.02])
        >>> bool((approx_reciprocal(s, newton_steps=0) * s - 1).abs().max() <= 2**-6)
        True
        >>> bool((approx_reciprocal(s, newton_steps=2) * s - 1).abs().max() < 1e-6)
        True
    """
    _check_table(table_bits, newton_steps)
    m, k = _leading_one(s.detach())
    cells = 2.0**table_bits
    mid = 1.0 + (torch.floor((m - 1.0) * cells) + 0.5) / cells
    r = torch.exp2(-k) / mid
    for _ in range(newton_steps):
        r = r * (2.0 - s * r)
    return r


def approx_rsqrt(v: torch.Tensor, *, newton_steps: int = 1, table_bits: int = 5) -> torch.Tensor:
    """``1/sqrt(v)`` for ``v > 0`` by exponent halving, a small table and Newton steps.

    ``v = m 2^k`` with ``m`` in [1, 2); ``2^(-k/2)`` is a shift of ``floor(k/2)`` times
    ``1/sqrt(2)`` when ``k`` is odd, and ``1/sqrt(m)`` comes from a table of
    ``2^table_bits`` segment midpoints (relative error about ``2^-(table_bits + 2)``); each
    Newton step ``r <- r (3 - v r^2) / 2`` maps a relative error ``e`` to about
    ``1.5 e^2``. Differentiable in ``v`` through the Newton steps.

    Examples:
        >>> import torch
        >>> v = torch.tensor([2.0, 50.0, 1e-4])
        >>> err = lambda r: float((r * v.sqrt() - 1).abs().max())
        >>> err(approx_rsqrt(v, newton_steps=0)) < 2**-6, err(approx_rsqrt(v)) < 1e-3
        (True, True)
    """
    _check_table(table_bits, newton_steps)
    m, k = _leading_one(v.detach())
    cells = 2.0**table_bits
    mid = 1.0 + (torch.floor((m - 1.0) * cells) + 0.5) / cells
    half = torch.floor(k / 2)
    odd = k - 2 * half
    r = torch.rsqrt(mid) * torch.exp2(-half - 0.5 * odd)
    for _ in range(newton_steps):
        r = r * (1.5 - 0.5 * v * r.square())
    return r


def _argmax_onehot(e: torch.Tensor, dim: int) -> torch.Tensor:
    idx = e.detach().argmax(dim=dim, keepdim=True)
    return torch.zeros_like(e).scatter_(dim, idx, 1.0)


def _approx_softmax(
    xf: torch.Tensor,
    dim: int,
    newton_steps: int | None,
    table_bits: int,
    bits: int | None,
    guarantee: bool = True,
) -> torch.Tensor:
    m = xf.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)  # a row masked entirely
    z = ((xf - m) * _LOG2E).clamp_min(_MIN_EXP2)
    q = torch.floor(z)
    e = torch.exp2(q) * (1.0 + (z - q))  # 2^z ~ 2^q (1 + f): a shift and an add
    e = torch.where(torch.isneginf(xf), torch.zeros_like(e), e)
    if bits is not None:
        e = torch.round(e * 2.0**bits) / 2.0**bits
    s = e.sum(dim=dim, keepdim=True)
    valid = s > 0  # false only for rows masked entirely, which stay all zero
    s = torch.where(valid, s, torch.ones_like(s))
    if newton_steps is None:
        p = e / s
    else:
        p = e * approx_reciprocal(s, newton_steps=newton_steps, table_bits=table_bits)
    if bits is not None:
        p = torch.round(p * 2.0**bits) / 2.0**bits
    if not guarantee:
        return p
    # The guarantee: whatever the reciprocal and the rounding lost goes to the largest entry.
    return p + _argmax_onehot(e, dim) * (1.0 - p.sum(dim=dim, keepdim=True)) * valid


def approx_softmax(
    x: torch.Tensor,
    dim: int = -1,
    *,
    frac_bits: int | None = None,
    newton_steps: int | None = 1,
    table_bits: int = 5,
    guarantee: bool = True,
) -> torch.Tensor:
    """Softmax from a base-2 shift-and-add exponential, with ``sum p = 1`` guaranteed.

    With ``z = (x - max x) log2(e) = q + f`` (``q = floor(z)``, ``f`` in [0, 1)),
    ``e = 2^q (1 + f)``: the integer part is a shift and ``2^f ~ 1 + f`` (relative error
    at most 6.1%, at ``f = 0.44``). Then ``p = e * R(sum e)`` with ``R`` the
    :func:`approx_reciprocal` (``newton_steps=None`` divides exactly), and the residual
    ``1 - sum p`` is added to the largest entry, so ``sum p = 1`` up to floating-point
    rounding whatever the approximations did. The error against the exact softmax is at
    most ``(sqrt(G) - 1) / (sqrt(G) + 1) = 0.0149`` with ``G = 1.0615`` the largest ratio
    of ``1 + f`` to ``2^f`` (two logits come within 3% of it), plus the reciprocal's residual.

    ``frac_bits=b`` emulates unsigned fixed point with ``b`` fractional bits: ``e`` and
    ``p`` are rounded to multiples of ``2^-b`` (to nearest, so the rounding residual the
    largest entry absorbs has no bias), and ``sum p = 1`` holds exactly in fixed point.
    At few bits and long rows small entries round to 0 and the error grows past the
    bound above (measured: 0.05 at 8 bits over 64 keys). The rounding is piecewise
    constant, so the backward pass is straight-through: the gradient is that of the
    unrounded approximation.

    Entries at ``-inf`` (masked) get exactly 0, and a row masked entirely gives zeros,
    as every normlab score normalizer (``torch.softmax`` gives NaN). Half-precision inputs
    are computed in float32 and cast back.

    Args:
        x: scores.
        dim: the axis to normalize over.
        frac_bits: fixed-point fractional bits of ``e`` and ``p``; None for floating point.
        newton_steps: Newton steps of the reciprocal; None for an exact division.
        table_bits: the reciprocal table has ``2^table_bits`` entries.
        guarantee: add the residual ``1 - sum p`` to the largest entry; ``False`` gives the
            same datapath without it (an unguaranteed control, ``sum p != 1``).

    Examples:
        >>> import torch
        >>> x = torch.tensor([[1.0, 2.0, 3.0], [0.5, -4.0, 0.0]])
        >>> p = approx_softmax(x)
        >>> torch.allclose(p.sum(-1), torch.ones(2)), bool((p - x.softmax(-1)).abs().max() < 0.015)
        (True, True)
        >>> approx_softmax(x, frac_bits=8).mul(256).sum(-1).tolist()  # sum p = 1 in fixed point
        [256.0, 256.0]
        >>> approx_softmax(torch.full((3,), float("-inf"))).tolist()
        [0.0, 0.0, 0.0]
    """
    check_float(x)
    _check_table(table_bits, newton_steps)
    if frac_bits is not None and (not isinstance(frac_bits, int) or not 1 <= frac_bits <= 30):
        raise ValueError(f"frac_bits must be an int in [1, 30] or None, got {frac_bits!r}.")
    xf = upcast(x)
    p = _approx_softmax(xf, dim, newton_steps, table_bits, None, guarantee)
    if frac_bits is not None:
        with torch.no_grad():
            fixed = _approx_softmax(xf, dim, newton_steps, table_bits, frac_bits, guarantee)
        # Forward value exactly `fixed`; gradient of the smooth approximation.
        p = fixed + (p - p.detach())
    return p.to(x.dtype)


def approx_layer_norm(
    x: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    newton_steps: int = 1,
    table_bits: int = 5,
    renormalize: bool = True,
) -> torch.Tensor:
    """LayerNorm with an approximate ``1/sqrt`` and a guaranteed unit standard deviation.

    Exact mean ``mu`` and biased variance ``var`` (integer-exact in hardware), then
    ``r = approx_rsqrt(var + eps)`` (exponent halving, a ``2^table_bits``-entry table and
    ``newton_steps`` Newton steps) and ``y0 = (x - mu) r``. The guarantee (normlab's
    construction): the output's own second moment is measured, ``u = mean(y0^2) + eps r^2``
    (``= (var + eps) r^2``, 1 if ``r`` were exact), and one Newton step for ``1/sqrt(u)``
    from 1 rescales it, ``y = y0 (3 - u) / 2``. Whatever relative error ``d = u - 1`` the
    table, the Newton steps and rounding left, the output's standard deviation is then
    exact LayerNorm's, ``sqrt(var / (var + eps))`` (1 up to ``eps / var``), to within
    ``3 d^2 / 8``: about 1e-8 with the defaults, below float32 resolution. Constant rows
    stay 0. Then ``y * weight + bias``. Rows whose magnitude reaches 2^48 are computed as
    ``x / s`` with ``eps / s^2`` for a power of two ``s`` (an exponent shift in hardware),
    so huge values give LayerNorm's answer instead of NaN.

    Args:
        x: input.
        normalized_shape: trailing dimensions to normalize over.
        weight: elementwise scale, or None.
        bias: elementwise shift, or None.
        eps: added to the variance.
        newton_steps: Newton steps of the inverse square root.
        table_bits: the inverse-square-root table has ``2^table_bits`` entries.
        renormalize: apply the measured-variance correction (the guarantee).

    Examples:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> x = torch.randn(4, 16)
        >>> y = approx_layer_norm(x, (16,), newton_steps=0)
        >>> torch.allclose(y.std(-1, correction=0), torch.ones(4), atol=1e-4)
        True
        >>> torch.allclose(y, torch.nn.functional.layer_norm(x, (16,)), atol=1e-3)
        True
    """
    check_float(x)
    check_trailing_shape(x, normalized_shape)
    xf = upcast(x)
    dims = tuple(range(-len(normalized_shape), 0))
    s = row_scale(xf, dims)
    e: float | torch.Tensor = eps
    if s is not None:
        xf = xf / s
        e = (eps / s / s).clamp_min(torch.finfo(s.dtype).tiny)
    xc = xf - xf.mean(dims, keepdim=True)
    var = xc.square().mean(dims, keepdim=True)
    r = approx_rsqrt(var + e, newton_steps=newton_steps, table_bits=table_bits)
    y = xc * r
    if renormalize:
        u = y.square().mean(dims, keepdim=True) + e * r.square()
        y = y * (1.5 - 0.5 * u)
    if weight is not None:
        y = y * weight.to(y.dtype)
    if bias is not None:
        y = y + bias.to(y.dtype)
    return y.to(x.dtype)


def softmax_approximation_error(
    x: torch.Tensor,
    dim: int = -1,
    *,
    frac_bits: int | None = None,
    newton_steps: int | None = 1,
    table_bits: int = 5,
) -> float:
    """Largest ``|approx_softmax(x) - softmax(x)|`` over ``x``, the reference in float64.

    Examples:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> x = 3 * torch.randn(8, 32)
        >>> softmax_approximation_error(x, newton_steps=None) < 0.0149  # the 2^f ~ 1 + f bound
        True
        >>> softmax_approximation_error(x, frac_bits=4) > softmax_approximation_error(x)
        True
    """
    with torch.no_grad():
        approx = approx_softmax(
            x, dim, frac_bits=frac_bits, newton_steps=newton_steps, table_bits=table_bits
        )
        exact = torch.softmax(x.double(), dim=dim)
        return float((approx.double() - exact).abs().max())


def layer_norm_approximation_error(
    x: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    newton_steps: int = 1,
    table_bits: int = 5,
    renormalize: bool = True,
) -> float:
    """Largest ``|approx_layer_norm(x) - layer_norm(x)|`` over ``x``, reference in float64.

    Examples:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> x = torch.randn(8, 64)
        >>> layer_norm_approximation_error(x, (64,), newton_steps=0) < 1e-3
        True
        >>> layer_norm_approximation_error(x, (64,), newton_steps=0, renormalize=False) > 1e-3
        True
    """
    with torch.no_grad():
        approx = approx_layer_norm(
            x,
            normalized_shape,
            weight,
            bias,
            eps,
            newton_steps=newton_steps,
            table_bits=table_bits,
            renormalize=renormalize,
        )
        w, b = (None if t is None else t.double() for t in (weight, bias))
        exact = F.layer_norm(x.double(), tuple(normalized_shape), w, b, eps)
        return float((approx.double() - exact).abs().max())
