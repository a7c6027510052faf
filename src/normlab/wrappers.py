"""Wrapped Normalization Equivariance (WNE): make any backbone normalization-equivariant.

A function is normalization-equivariant (NE) when ``f(a y + b) = a f(y) + b`` for every
``a > 0`` and real ``b`` (``b`` added to every entry). WNE wraps any backbone ``g``::

    mu = mean(y),  sigma = std(y)         (per instance, over all non-batch dims)
    f(y) = sigma * g((y - mu) / sigma) + mu

which is NE exactly, for any ``g``, and every NE function has this form (the seed's
factorisation result). No parameters are added.

Constant inputs: ``sigma = 0`` would divide by zero (the reference code uses eps = 0).
Here the division uses 1 in place of a zero ``sigma``, so ``z = 0`` and the output is
``0 * g(0) + mu``: the constant ``mu`` broadcast to the backbone's output shape. That is the
only value an NE function can take on a constant input (``f(b) = a f(0) + b`` for all
``a > 0`` forces ``f(0) = 0``), so the wrapper stays exactly NE there too. An input that is
constant up to rounding has a ``sigma`` of a few ulps and gives ``mu`` up to a few ulps.

Paper: {wne}.
"""

from __future__ import annotations

import torch
from torch import nn

from normlab.papers import paper

__all__ = ["WNE", "instance_moments"]

__doc__ = __doc__.format(wne=paper("wne"))


def instance_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-instance mean and (population) std of ``x`` over all non-batch dims, shape ``(B,)``."""
    if x.dim() < 2:
        raise ValueError(
            f"WNE needs a batch dimension and at least one more, got shape {tuple(x.shape)}."
        )
    flat = x.reshape(x.shape[0], -1)
    mu = flat.mean(dim=1)
    sigma = (flat - mu[:, None]).square().mean(dim=1).sqrt()
    return mu, sigma


class WNE(nn.Module):
    """Normalize the input per instance, run ``backbone``, denormalize its output.

    ``forward(y) = sigma * backbone((y - mu) / sigma) + mu`` with ``mu, sigma`` the mean and
    std of each instance over all non-batch dimensions (see the module docstring, including
    what a constant input returns). The backbone's output may have any shape with the same
    batch size (images, sequences, forecasts). Low-precision inputs keep their dtype.

    Args:
        backbone: any module mapping ``(B, ...)`` to ``(B, ...)``.

    Paper: {wne}.
    """

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        if not isinstance(backbone, nn.Module):
            raise TypeError(f"WNE wraps an nn.Module, got {type(backbone).__name__}.")
        self.backbone = backbone

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        mu, sigma = instance_moments(y)
        safe = torch.where(sigma > 0, sigma, torch.ones_like(sigma))
        view = (-1,) + (1,) * (y.dim() - 1)
        out = self.backbone((y - mu.view(view)) / safe.view(view))
        if out.shape[0] != y.shape[0]:
            raise ValueError(
                f"The backbone changed the batch size ({y.shape[0]} -> {out.shape[0]})."
            )
        view = (-1,) + (1,) * (out.dim() - 1)
        return out * sigma.view(view).to(out.dtype) + mu.view(view).to(out.dtype)


WNE.__doc__ = (WNE.__doc__ or "").format(wne=paper("wne"))
