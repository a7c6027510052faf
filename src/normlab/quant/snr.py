"""Signal-to-noise ratio of dot products computed on quantized operands.

For a GEMM ``s = x W^T`` (rows of ``x``: tokens, rows of ``W``: output units) and its
quantized version ``s_hat = Q(x) Q(W)^T``, the SNR is ``E[s^2] / E[(s_hat - s)^2]`` over all
entries (a proposal; the nGPT-under-NVFP4 paper does not publish its definition). To see how
signal and noise accumulate along the reduction axis, :func:`gemm_snr` also reports the SNR
of the partial dot products over the first ``k`` channels, ``s_k = sum_{j<k} x_j w_j``, with
the operands quantized as whole tensors first (block scales unchanged): if the products
``x_j w_j`` are weakly positively correlated the signal grows like ``k^2`` while independent
rounding errors grow like ``k``, so the SNR rises with ``k``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from normlab.quant.spec import QuantFormat

__all__ = ["gemm_snr"]


@torch.no_grad()
def gemm_snr(
    x: torch.Tensor,
    w: torch.Tensor,
    fmt: QuantFormat,
    *,
    lengths: Sequence[int] | None = None,
    weight_format: QuantFormat | None = None,
) -> dict[int, float]:
    """SNR of ``x W^T`` under fake quantization, per dot-product length.

    Args:
        x: inputs ``(..., k_max)``.
        w: weight ``(out, k_max)``.
        fmt: the format of ``x`` (and of ``w`` unless ``weight_format`` is given).
        lengths: prefix lengths ``k`` to evaluate; ``None`` for the full length only.
        weight_format: the format of ``w``.

    Returns:
        ``{k: E[s_k^2] / E[(s_hat_k - s_k)^2]}`` computed in float64 (``inf`` when exact).
    """
    if x.shape[-1] != w.shape[-1]:
        raise ValueError(f"x has {x.shape[-1]} input features but w has {w.shape[-1]}.")
    x2 = x.reshape(-1, x.shape[-1]).double()
    w2 = w.double()
    qx = fmt(x2, ste=False)
    qw = (weight_format or fmt)(w2, ste=False)
    full = x.shape[-1]
    out: dict[int, float] = {}
    for k in lengths or (full,):
        if not 0 < k <= full:
            raise ValueError(f"length {k} is outside 1..{full}.")
        s = x2[:, :k] @ w2[:, :k].T
        noise = qx[:, :k] @ qw[:, :k].T - s
        power = noise.pow(2).mean().item()
        out[int(k)] = s.pow(2).mean().item() / power if power > 0 else float("inf")
    return out
