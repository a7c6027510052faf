"""The operands of a model's linear layers, and the SNR of their products under a low-bit format.

:func:`linear_operands` records the input and weight of every ``nn.Linear`` in one forward
pass; :func:`gemm_snr_profile` quantizes each pair (NVFP4 by default) and reports the mean
over layers of the SNR of the partial dot products, in dB, per dot-product length
(:func:`normlab.quant.gemm_snr`): how a model's own activations and weights fare in a
low-precision GEMM (``paper("ngpt-fp4")``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from normlab.quant.snr import gemm_snr
from normlab.quant.spec import QuantFormat

__all__ = ["gemm_snr_profile", "linear_operands"]


@torch.no_grad()
def linear_operands(model: nn.Module, inputs: torch.Tensor) -> dict[str, tuple[torch.Tensor, ...]]:
    """``{name: (input, weight)}`` of every ``nn.Linear`` in one eval-mode pass on ``inputs``.

    A layer called more than once keeps its last call's input. Hooks are removed and the
    model's modes restored afterwards.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        >>> ops = linear_operands(net, torch.randn(3, 4))
        >>> {name: tuple(x.shape) for name, (x, w) in ops.items()}
        {'0': (3, 4), '2': (3, 8)}
    """
    captured: dict[str, tuple[torch.Tensor, ...]] = {}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):

            def hook(m: nn.Module, args: tuple, name: str = name) -> None:
                captured[name] = (args[0].detach(), m.weight.detach())

            handles.append(module.register_forward_pre_hook(hook))
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        model(inputs)
    finally:
        for handle in handles:
            handle.remove()
        for m, training in modes:
            m.training = training
    return captured


def gemm_snr_profile(
    model: nn.Module,
    inputs: torch.Tensor,
    lengths: Sequence[int],
    *,
    fmt: str | QuantFormat = "nvfp4",
) -> list[float]:
    """Mean over linear layers of ``10 log10 SNR`` of their GEMMs in ``fmt``, per length.

    Each layer's input and weight (:func:`linear_operands`) are fake-quantized as whole
    tensors and the SNR of the partial dot products over the first ``k`` channels is
    measured (:func:`~normlab.quant.gemm_snr`); a layer with fewer than ``k`` input
    features does not count towards length ``k``.

    Args:
        model: any ``nn.Module``.
        inputs: what ``model`` takes.
        lengths: dot-product lengths ``k``.
        fmt: the format of both operands (a :class:`~normlab.quant.QuantFormat` or its name).

    Returns:
        One value in dB per length (NaN where no layer is that long).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> torch.manual_seed(0) and None
        >>> net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
        >>> low, high = gemm_snr_profile(net, torch.randn(32, 64), [16, 64])
        >>> 5 < low < 40 and 5 < high < 40  # NVFP4: tens of dB, not exact
        True
    """
    fmt = QuantFormat(fmt) if isinstance(fmt, str) else fmt
    per_k: dict[int, list[float]] = {k: [] for k in lengths}
    for x, w in linear_operands(model, inputs).values():
        usable = [k for k in lengths if k <= x.shape[-1]]
        for k, snr in gemm_snr(x, w, fmt, lengths=usable).items():
            per_k[k].append(10 * math.log10(snr))
    return [float(np.mean(per_k[k])) if per_k[k] else math.nan for k in lengths]
