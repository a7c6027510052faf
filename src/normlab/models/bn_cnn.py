"""A small CNN for 8x8 digits whose normalization is BatchNorm, GroupNorm or none.

Used by the "bn-unlearning" claim: the same architecture with BatchNorm (running statistics
that a forward pass in train mode rewrites) and with GroupNorm (per-sample statistics,
nothing to recalibrate) as the control.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["NORMS", "NormCNN", "bn_cnn"]

#: Normalizations a :class:`NormCNN` can use.
NORMS = ("batch", "group", "none")


def _norm(kind: str, channels: int, groups: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(min(groups, channels), channels)
    return nn.Identity()


class NormCNN(nn.Module):
    """``depth x (conv3x3 -> norm -> ReLU)``, a 2x2 max-pool after the second block,
    global average pooling and a linear classifier.

    Args:
        width: channels of every conv layer.
        depth: number of conv blocks (>= 1).
        norm: one of :data:`NORMS`.
        groups: GroupNorm groups (capped at ``width``).
        classes: output classes.
        in_channels: input channels.
    """

    def __init__(
        self,
        width: int = 32,
        depth: int = 3,
        *,
        norm: str = "batch",
        groups: int = 4,
        classes: int = 10,
        in_channels: int = 1,
    ) -> None:
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}.")
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}.")
        self.norm_kind = norm
        convs, norms = [], []
        for i in range(depth):
            convs.append(nn.Conv2d(in_channels if i == 0 else width, width, 3, padding=1))
            norms.append(_norm(norm, width, groups))
        self.convs, self.norms = nn.ModuleList(convs), nn.ModuleList(norms)
        self.head = nn.Linear(width, classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The pooled feature vector ``(batch, width)`` of images ``(batch, C, H, W)``."""
        if x.dim() != 4:
            raise ValueError(f"NormCNN expects images (batch, C, H, W), got {tuple(x.shape)}.")
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            x = F.relu(norm(conv(x)))
            if i == 1:
                x = F.max_pool2d(x, 2)
        return x.mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits ``(batch, classes)``."""
        return self.head(self.features(x))


def bn_cnn(width: int = 32, depth: int = 3, *, norm: str = "batch", seed: int = 0) -> NormCNN:
    """A :class:`NormCNN` for 10-class 8x8 digits, initialised from ``seed``."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return NormCNN(width, depth, norm=norm)
    finally:
        torch.random.set_rng_state(generator_state)
