"""Claim "bn-geometry": training-mode BN raises the local affine-region density near data.

ReLU MLPs on 2-D inputs, each built twice from the same initial weights (torch's default
Linear init): with BatchNorm1d in training mode after every hidden Linear (gain 1, shift 0)
and without. Conditioned on a mini-batch, BN recentres every first-layer switching hyperplane
on the batch centroid, so when the data sit away from where the raw hyperplanes pass
(the origin region for small biases) more of them cut windows near the data. The local
region density is the exact number of affine (activation) regions in l-inf windows of
half-width ``radius`` around batch points, divided by the window area, counted with
:func:`normlab.probes.bn_geometry.count_regions_2d`; the effect is the log ratio BN / no BN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from normlab.claims.common import cell, seed_everything
from normlab.claims.core import Check, CheckOutcome, Claim, Effect, Margin, register_claim
from normlab.papers import paper
from normlab.probes.bn_geometry import region_density, switching_hyperplanes

__all__ = ["CLAIM", "make_mlp", "run"]


def make_mlp(width: int, depth: int, *, bn: bool, seed: int) -> nn.Sequential:
    """A 2-D-input ReLU MLP; the same ``seed`` gives the same Linear weights with or without BN."""
    torch.manual_seed(seed)
    linears = [nn.Linear(2 if i == 0 else width, width) for i in range(depth)]
    mods: list[nn.Module] = []
    for lin in linears:
        mods += [lin, nn.BatchNorm1d(width) if bn else nn.Identity(), nn.ReLU()]
    mods.append(nn.Linear(width, 1))
    return nn.Sequential(*mods).double()


def _data(config: Mapping[str, Any], gen: torch.Generator, *, centred: bool = False):
    shift = torch.tensor(config["shift"], dtype=torch.float64) * (0.0 if centred else 1.0)
    return shift + config["spread"] * torch.randn(
        config["batch"], 2, generator=gen, dtype=torch.float64
    )


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Region density around data points, BN vs no BN, same weights and batch."""
    seed_everything(seed)
    table = {}
    for name, bn, centred in (
        ("bn", True, False),
        ("no-bn", False, False),
        ("bn-centred", True, True),
        ("no-bn-centred", False, True),
    ):
        x = _data(config, torch.Generator().manual_seed(seed), centred=centred)
        anchors = x[: config["anchors"]]
        net = make_mlp(config["width"], config["depth"], bn=bn, seed=seed)
        rd = region_density(net, x, anchors, config["radius"])
        hp = switching_hyperplanes(net, x)
        dist = np.abs(hp.normals @ anchors.numpy().T - hp.thresholds[:, None])
        dist = dist / np.linalg.norm(hp.normals, axis=1)[:, None]
        table[name] = {
            "density": rd.density,
            "mean_count": rd.mean_count,
            "first_layer_distance": float(np.median(dist)),
        }
    return {"table": table}


def _check_bias_independence(config: Mapping[str, Any]) -> CheckOutcome:
    gen = torch.Generator().manual_seed(0)
    x = _data(config, gen)
    net = make_mlp(config["width"], config["depth"], bn=True, seed=0)
    a = switching_hyperplanes(net, x).thresholds
    with torch.no_grad():
        net[0].bias.add_(torch.randn(config["width"], generator=gen, dtype=torch.float64) * 5)
    b = switching_hyperplanes(net, x).thresholds
    err = float(np.abs(a - b).max())
    return CheckOutcome(err < 1e-10, err, f"max threshold change under a bias shift {err:.1e}")


def _log_ratio(m: Mapping[str, Any], suffix: str = "") -> float:
    return math.log(cell(m, f"bn{suffix}", "density") / cell(m, f"no-bn{suffix}", "density"))


_BASE = {"shift": [3.0, 3.0], "spread": 1.0, "batch": 64, "radius": 0.5}

CLAIM = register_claim(
    Claim(
        id="bn-geometry",
        paper=paper("bn-geometry"),
        hypothesis=(
            "With BN in training mode, the local affine-region density near the data is "
            "higher than without BN at matched initialization."
        ),
        primary=Effect(
            "density_log_ratio",
            "log(region density with BN / without BN) in l-inf windows around data points",
            _log_ratio,
            direction="greater",
            margin=Margin(math.log(1.1), "normlab's choice: a 10% denser partition counts"),
            baseline="no-bn",
        ),
        secondary=(
            Effect(
                "density_log_ratio_centred",
                "the same log ratio with the data centred at the origin (where the raw "
                "hyperplanes already pass near the data)",
                lambda m: _log_ratio(m, "-centred"),
                direction="greater",
                margin=Margin(math.log(1.1), "normlab's choice: as for the primary"),
                baseline="no-bn-centred",
            ),
        ),
        checks=(
            Check(
                "offsets_bias_free",
                "first-layer switching hyperplanes unchanged when the "
                "raw bias is shifted (to 1e-10)",
                _check_bias_independence,
            ),
        ),
        headline="Theorem-level: BN increases expected local partition refinement (no number).",
        setup=(
            "ReLU MLP (2 -> width x depth -> 1, torch default init), batch of 64 points from "
            "N((3, 3), I); exact region counts in l-inf windows of half-width 0.5 around 8 "
            "(quick) batch points; BN (training mode, gain 1, shift 0) vs identity."
        ),
        scale_note="quick and smoke score the partition at initialization only; the "
        "paper's statements are for a given mini-batch, not for training.",
        configs={
            "smoke": {**_BASE, "seeds": 1, "width": 8, "depth": 2, "anchors": 2},
            "quick": {**_BASE, "seeds": 8, "width": 16, "depth": 3, "anchors": 8},
            "full": {**_BASE, "seeds": 20, "width": 32, "depth": 4, "anchors": 32},
        },
        run=run,
    )
)
