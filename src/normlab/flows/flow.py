"""CDFlow: ActNorm -> circulant-diagonal mixing -> coupling, built from zuko's parts.

One flow step (``paper("cdflow")``, after Glow) is

1. ActNorm: ``y = (x - b) * exp(-s)`` per feature, initialised from data so the first
   batch comes out with zero mean and unit variance (:func:`initialize_actnorm`);
2. an invertible linear mixing: :class:`~normlab.flows.circulant.LazyCirculantDiagonal`
   (``(2m - 1) n`` parameters) or, as the baseline of the same depth, zuko's
   ``LULinearTransform`` (``n^2`` parameters, Glow's LU-decomposed 1x1 convolution);
3. zuko's ``GeneralCouplingTransform`` (affine by default, or a rational-quadratic spline),
   with masks alternating between steps.

The base is a standard normal. zuko is imported inside the functions (the ``flows`` extra).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributions import AffineTransform, Transform

from normlab.flows.circulant import LazyCirculantDiagonal

__all__ = [
    "MIXINGS",
    "ActNorm",
    "LazyLULinear",
    "cdflow",
    "initialize_actnorm",
    "mixing_parameters",
]

MIXINGS = ("circulant", "lu", "none")


class ActNorm(nn.Module):
    """Lazy per-feature affine transform ``y = (x - b) exp(-s)`` with data initialisation.

    Args:
        features: the vector size.
    """

    def __init__(self, features: int) -> None:
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(features))
        self.log_scale = nn.Parameter(torch.zeros(features))

    @torch.no_grad()
    def initialize(self, x: torch.Tensor) -> None:
        """Set ``b`` and ``s`` to the mean and log standard deviation of ``x`` (rows)."""
        self.shift.copy_(x.mean(0))
        self.log_scale.copy_(x.std(0).clamp_min(1e-6).log())

    def forward(self, c: torch.Tensor | None = None) -> Transform:
        scale = torch.exp(-self.log_scale)
        return AffineTransform(-self.shift * scale, scale, event_dim=1)


class LazyLULinear(nn.Module):
    """Lazy zuko ``LULinearTransform`` ``y = L U x`` initialised at the identity (n^2 parameters).

    Args:
        features: the vector size.
    """

    def __init__(self, features: int) -> None:
        super().__init__()
        self.LU = nn.Parameter(torch.eye(features))

    def forward(self, c: torch.Tensor | None = None) -> Transform:
        from zuko.transforms import LULinearTransform

        return LULinearTransform(self.LU)


def _mixing(features: int, mixing: str, m: int) -> nn.Module | None:
    if mixing == "circulant":
        return LazyCirculantDiagonal(features, m=m)
    if mixing == "lu":
        return LazyLULinear(features)
    return None


def cdflow(
    features: int,
    *,
    steps: int = 4,
    mixing: str = "circulant",
    m: int = 2,
    coupling: str = "affine",
    hidden: tuple[int, ...] = (64, 64),
    bins: int = 8,
) -> Any:
    """A zuko ``Flow`` of ``steps`` CDFlow steps over ``R^features``.

    Args:
        features: data dimension (>= 2, for the coupling).
        steps: flow steps (ActNorm -> mixing -> coupling each).
        mixing: "circulant" (CDFlow), "lu" (the LU-linear baseline) or "none" (coupling
            masks alone, a control).
        m: diagonal factors of the circulant-diagonal layer.
        coupling: "affine" (RealNVP) or "spline" (rational-quadratic, ``bins`` bins).
        hidden: hidden widths of the couplings' MLPs.
        bins: spline bins.

    Returns:
        A ``zuko.flows.Flow``; ``flow().log_prob(x)`` is the log-density.
    """
    import zuko
    from zuko.flows import GeneralCouplingTransform
    from zuko.lazy import UnconditionalDistribution
    from zuko.transforms import MonotonicAffineTransform, MonotonicRQSTransform

    if mixing not in MIXINGS:
        raise ValueError(f"mixing must be one of {MIXINGS}, got {mixing!r}.")
    if coupling not in ("affine", "spline"):
        raise ValueError(f"coupling must be 'affine' or 'spline', got {coupling!r}.")
    if features < 2:
        raise ValueError(f"a coupling flow needs features >= 2, got {features}.")
    if coupling == "affine":
        univariate, shapes = MonotonicAffineTransform, ((), ())
    else:
        univariate, shapes = MonotonicRQSTransform, ((bins,), (bins,), (bins - 1,))
    transforms: list[nn.Module] = []
    for i in range(steps):
        transforms.append(ActNorm(features))
        mix = _mixing(features, mixing, m)
        if mix is not None:
            transforms.append(mix)
        mask = torch.arange(features) % 2 == i % 2
        transforms.append(
            GeneralCouplingTransform(
                features, mask=mask, univariate=univariate, shapes=shapes, hidden_features=hidden
            )
        )
    base = UnconditionalDistribution(
        zuko.distributions.DiagNormal,
        torch.zeros(features),
        torch.ones(features),
        buffer=True,
    )
    return zuko.flows.Flow(transforms, base)


@torch.no_grad()
def initialize_actnorm(flow: Any, x: torch.Tensor) -> None:
    """Data-initialise every :class:`ActNorm` of ``flow`` on the batch ``x``, in order."""
    for t in flow.transform.transforms:
        if isinstance(t, ActNorm):
            t.initialize(x)
        x = t()(x)


def mixing_parameters(flow: Any) -> int:
    """Number of parameters in the flow's linear mixing layers."""
    kinds = (LazyCirculantDiagonal, LazyLULinear)
    return sum(
        p.numel()
        for t in flow.transform.transforms
        if isinstance(t, kinds)
        for p in t.parameters()
    )
