"""Forecasting backbones: Linear, DLinear, MLP and a small patch transformer.

Every backbone maps a normalized window (B, L, C) to a normalized forecast (B, H, C) and is
channel-independent (the same weights for every channel, as in DLinear and PatchTST), so
one model serves any number of channels. Build them by name with :func:`build_backbone`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "BACKBONES",
    "DLinear",
    "LinearBackbone",
    "MLPBackbone",
    "PatchTransformer",
    "build_backbone",
]


class LinearBackbone(nn.Module):
    """One linear map from the window to the horizon per channel: ``y = W x + b`` over time.

    The "Linear" model of Zeng et al. (2023), with weights shared across channels.
    """

    def __init__(self, lookback: int, horizon: int) -> None:
        super().__init__()
        self.proj = nn.Linear(lookback, horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x.transpose(1, 2)).transpose(1, 2)


class DLinear(nn.Module):
    """DLinear: a moving-average trend and the seasonal remainder, each mapped linearly.

    ``trend = MA_k(x)`` (edge-replicated, kernel ``k = 25``), ``season = x - trend``,
    ``y = W_t trend + W_s season`` (Zeng et al., 2023).
    """

    def __init__(self, lookback: int, horizon: int, *, kernel: int = 25) -> None:
        super().__init__()
        if kernel < 1 or kernel % 2 == 0:
            raise ValueError(f"DLinear's moving-average kernel must be odd, got {kernel}.")
        self.kernel = kernel
        self.trend = nn.Linear(lookback, horizon)
        self.season = nn.Linear(lookback, horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xt = x.transpose(1, 2)
        pad = (self.kernel - 1) // 2
        padded = F.pad(xt, (pad, pad), mode="replicate")
        trend = F.avg_pool1d(padded, self.kernel, stride=1)
        return (self.trend(trend) + self.season(xt - trend)).transpose(1, 2)


class MLPBackbone(nn.Module):
    """A two-layer perceptron over time per channel: ``y = W_2 ReLU(W_1 x + b_1) + b_2``."""

    def __init__(self, lookback: int, horizon: int, *, hidden: int = 256) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(lookback, hidden), nn.ReLU(), nn.Linear(hidden, horizon)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.transpose(1, 2)).transpose(1, 2)


class PatchTransformer(nn.Module):
    """A small PatchTST-like encoder: patches of the series as tokens, a flatten head.

    Each channel's window is padded at the end by ``stride`` (edge value) and cut into
    patches of ``patch`` steps every ``stride`` steps; each patch is embedded linearly, a
    learned position is added, a pre-norm Transformer encoder mixes them, and a linear head
    maps the flattened tokens to the horizon (Nie et al., 2023, without their BatchNorm).
    """

    def __init__(
        self,
        lookback: int,
        horizon: int,
        *,
        patch: int = 16,
        stride: int = 8,
        d_model: int = 32,
        heads: int = 4,
        layers: int = 2,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        if patch > lookback:
            raise ValueError(f"patch={patch} is longer than the lookback {lookback}.")
        self.patch, self.stride = patch, stride
        tokens = (lookback - patch) // stride + 2
        self.embed = nn.Linear(patch, d_model)
        self.position = nn.Parameter(torch.randn(tokens, d_model) / math.sqrt(d_model))
        layer = nn.TransformerEncoderLayer(
            d_model, heads, 2 * d_model, dropout, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(tokens * d_model, horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, c = x.shape
        series = x.transpose(1, 2).reshape(b * c, -1)
        series = F.pad(series.unsqueeze(1), (0, self.stride), mode="replicate").squeeze(1)
        patches = series.unfold(-1, self.patch, self.stride)
        h = self.encoder(self.embed(patches) + self.position)
        return self.head(h.flatten(1)).reshape(b, c, -1).transpose(1, 2)


#: Backbones by name.
BACKBONES: dict[str, type[nn.Module]] = {
    "linear": LinearBackbone,
    "dlinear": DLinear,
    "mlp": MLPBackbone,
    "patch": PatchTransformer,
}


def build_backbone(name: str, *, lookback: int, horizon: int, **kwargs: int | float) -> nn.Module:
    """The backbone called ``name`` (see :data:`BACKBONES`) for ``lookback -> horizon``."""
    if name not in BACKBONES:
        raise ValueError(f"Unknown backbone {name!r}; choose one of {sorted(BACKBONES)}.")
    return BACKBONES[name](lookback, horizon, **kwargs)
