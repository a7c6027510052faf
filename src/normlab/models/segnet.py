"""A tiny fully convolutional segmentation net with a pluggable input scaling.

Frames ``(batch, frames, H, W)`` go through a per-pixel scaling
(:class:`~normlab.layers.scaling.AdaptiveScaling` with one feature), then a small
encoder-decoder (two 3x3 conv stages, a stride-2 bottleneck, an upsampling skip) that
outputs one logit per pixel and frame: a miniature of the TESS W-Net's U-Nets.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from normlab.layers.scaling import AdaptiveScaling

__all__ = ["TinySegNet", "pixel_f1"]


class TinySegNet(nn.Module):
    """Scaling -> conv encoder-decoder -> per-pixel logits.

    Args:
        frames: input (and output) channels.
        scaling: the :class:`AdaptiveScaling` mode.
        width: conv channels.
    """

    def __init__(self, frames: int, *, scaling: str = "learned", width: int = 16) -> None:
        super().__init__()
        self.scaling = AdaptiveScaling(1, mode=scaling)
        self.enc1 = nn.Conv2d(frames, width, 3, padding=1)
        self.enc2 = nn.Conv2d(width, width, 3, padding=1)
        self.down = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.mid = nn.Conv2d(2 * width, 2 * width, 3, padding=1)
        self.up = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.dec = nn.Conv2d(2 * width, width, 3, padding=1)
        self.head = nn.Conv2d(width, frames, 1)

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        return self.scaling(x.unsqueeze(-1)).squeeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.enc2(F.relu(self.enc1(self.scale(x)))))
        m = F.relu(self.mid(F.relu(self.down(h))))
        u = self.up(m)
        return self.head(F.relu(self.dec(torch.cat([h, u], dim=1))))


def pixel_f1(logits: torch.Tensor, mask: torch.Tensor) -> float:
    """Pixel F1 of the prediction ``logits > 0`` against a 0/1 ``mask``.

    ``F1 = 2 TP / (2 TP + FP + FN)`` over every pixel (the Dice coefficient of the two
    masks); 1 when both are empty.

    Args:
        logits: per-pixel logits, any shape.
        mask: the target, the shape of ``logits``; values above 0.5 are positive.

    Examples:
        >>> import torch
        >>> mask = torch.tensor([1.0, 1.0, 0.0, 0.0])
        >>> pixel_f1(torch.tensor([2.0, -1.0, 3.0, -2.0]), mask)  # TP 1, FN 1, FP 1
        0.5
    """
    pred, true = logits > 0, mask > 0.5
    tp = float((pred & true).sum())
    wrong = float((pred ^ true).sum())
    return 2 * tp / (2 * tp + wrong) if tp + wrong > 0 else 1.0
