"""Zero-Centered Swish (ZC-Swish), an activation for networks without BatchNorm.

ZC-Swish is an activation, not a normalizer of a tensor's statistics: it is registered as
kind "activation" (``normlab.create("zc-swish", C)``), not "norm".
"""

from __future__ import annotations

import torch
from torch import nn

from normlab import functional as NF
from normlab._checks import check_positive_int
from normlab._registry import Method, register
from normlab.papers import paper

__all__ = ["ZCSwish"]


class ZCSwish(nn.Module):
    """Zero-Centered Swish: ``y = x sigmoid(beta_c x) - m(beta_c)`` with learned ``beta_c``.

    ``m(beta) = E_{z ~ N(0,1)}[z sigmoid(beta z)]`` (``m(1) = 0.2066``) is subtracted so the
    output has zero mean for a standard-normal input, whatever ``beta`` training reaches;
    gradients flow into ``beta`` through ``m`` as well. Swish and ReLU have a positive mean,
    which without BatchNorm compounds into a mean shift with depth (seed "Zero-Centered
    Swish for BatchNorm-Free Networks"). The exact form is normlab's (the seed says only
    "parameterized"); the centering is exact only for standard-normal inputs, see
    :func:`normlab.functional.zc_swish`.

    With ``centred=False`` it is learned-beta Swish, ``x sigmoid(beta_c x)``: the same
    parameters, without the subtraction of ``m(beta_c)``; the baseline that isolates the
    centring.

    Args:
        num_channels: number of channels, one ``beta`` each.
        beta_init: initial ``beta`` (1 is Swish/SiLU shifted by 0.2066).
        channel_dim: the input dimension holding the channels (1 for ``(B, C, ...)``, -1
            for ``(..., C)``).
        learnable: learn ``beta``; otherwise it is a fixed buffer.
        centred: subtract ``m(beta_c)`` (ZC-Swish); False gives learned-beta Swish.

    Examples:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> x = torch.randn(20_000, 4)  # standard normal, channels in dimension 1
        >>> bool(ZCSwish(4)(x).mean().abs() < 0.01)
        True
        >>> round(float(ZCSwish(4, centred=False)(x).detach().mean()), 1)  # Swish's mean
        0.2
    """

    def __init__(
        self,
        num_channels: int,
        *,
        beta_init: float = 1.0,
        channel_dim: int = 1,
        learnable: bool = True,
        centred: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_positive_int(num_channels, "num_channels")
        self.num_channels = num_channels
        self.beta_init = float(beta_init)
        self.channel_dim = channel_dim
        self.learnable = learnable
        self.centred = centred
        beta = torch.empty(num_channels, device=device, dtype=dtype)
        if learnable:
            self.beta = nn.Parameter(beta)
        else:
            self.register_buffer("beta", beta)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``beta`` to ``beta_init``."""
        with torch.no_grad():
            self.beta.fill_(self.beta_init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 0 or not -x.dim() <= self.channel_dim < x.dim():
            raise ValueError(
                f"ZCSwish reads channels from dimension {self.channel_dim}, which an input "
                f"of shape {tuple(x.shape)} does not have; set channel_dim."
            )
        if x.shape[self.channel_dim] != self.num_channels:
            raise ValueError(
                f"ZCSwish was built for {self.num_channels} channels in dimension "
                f"{self.channel_dim}, got shape {tuple(x.shape)}; build it with the input's "
                "channel count or set channel_dim."
            )
        if not self.centred:
            view = [1] * x.dim()
            view[self.channel_dim] = -1
            return x * torch.sigmoid(self.beta.view(view) * x)
        return NF.zc_swish(x, self.beta, channel_dim=self.channel_dim)

    def extra_repr(self) -> str:
        return (
            f"{self.num_channels}, beta_init={self.beta_init}, channel_dim={self.channel_dim}, "
            f"learnable={self.learnable}, centred={self.centred}"
        )


register(
    Method(
        "zc-swish",
        "activation",
        ZCSwish,
        paper("zc-swish"),
        "x sigmoid(beta_c x) - E_z[z sigmoid(beta_c z)]: Swish centred for N(0, 1) inputs",
        aliases=("zcswish", "zero_centered_swish"),
        layout="channels_first",
    )
)
