"""A plain convolutional classifier without normalization: the BN-free stress test."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from normlab.layers.activations import ZCSwish

__all__ = ["ACTIVATIONS", "PlainCNN", "activation_module", "plain_cnn"]

#: Activation names :func:`plain_cnn` understands.
ACTIVATIONS: tuple[str, ...] = ("relu", "swish", "zc-swish")

ActivationSpec = str | Callable[[int], nn.Module]


def activation_module(spec: ActivationSpec, channels: int) -> nn.Module:
    """An activation module from a name in :data:`ACTIVATIONS` or a ``channels -> module``
    factory. ``"swish"`` is SiLU, ``x sigmoid(x)``; ``"zc-swish"`` is :class:`ZCSwish`
    with one learned ``beta`` per channel."""
    if callable(spec):
        return spec(channels)
    if spec == "relu":
        return nn.ReLU()
    if spec in ("swish", "silu"):
        return nn.SiLU()
    if spec in ("zc-swish", "zcswish", "zc_swish"):
        return ZCSwish(channels)
    raise ValueError(f"Unknown activation {spec!r}; expected one of {ACTIVATIONS} or a factory.")


class PlainCNN(nn.Module):
    """``depth`` conv3x3 + activation layers, global average pooling, a linear head.

    No normalization and no residual connections, so nothing but the activation and the
    initialisation controls how activation statistics drift with depth. Convolutions use
    He (Kaiming normal, fan-in, ReLU gain) initialisation and zero biases.

    Args:
        depth: number of convolution layers.
        width: channels of every convolution.
        activation: name in :data:`ACTIVATIONS` or a ``channels -> module`` factory.
        in_channels: input channels.
        classes: output classes.
    """

    def __init__(
        self,
        depth: int,
        width: int,
        activation: ActivationSpec,
        *,
        in_channels: int = 1,
        classes: int = 10,
    ) -> None:
        super().__init__()
        if depth < 1 or width < 1:
            raise ValueError(f"depth and width must be positive, got {depth} and {width}.")
        self.convs = nn.ModuleList(
            nn.Conv2d(in_channels if i == 0 else width, width, 3, padding=1) for i in range(depth)
        )
        self.acts = nn.ModuleList(activation_module(activation, width) for _ in range(depth))
        self.head = nn.Linear(width, classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """He-normal convolution weights, zero biases; torch's default for the head."""
        for conv in self.convs:
            nn.init.normal_(conv.weight, std=math.sqrt(2.0 / (conv.in_channels * 9)))
            nn.init.zeros_(conv.bias)
        self.head.reset_parameters()

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The output of every activation layer, first to last."""
        out = []
        for conv, act in zip(self.convs, self.acts, strict=True):
            x = act(conv(x))
            out.append(x)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, act in zip(self.convs, self.acts, strict=True):
            x = act(conv(x))
        return self.head(x.mean((2, 3)))


def plain_cnn(depth: int, width: int, activation: ActivationSpec, **kwargs: int) -> PlainCNN:
    """A :class:`PlainCNN`: ``depth`` conv3x3 + ``activation`` layers of ``width`` channels,
    no BatchNorm, no residuals; ``in_channels`` and ``classes`` go through ``kwargs``."""
    return PlainCNN(depth, width, activation, **kwargs)
