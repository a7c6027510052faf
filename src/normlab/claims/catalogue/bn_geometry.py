"""Claim "bn-geometry": training-mode BN raises the local affine-region density near data.

ReLU MLPs on 2-D inputs, each built twice from the same initial weights: with BatchNorm1d in
training mode after every hidden Linear (gain 1, shift 0) and without. Conditioned on a
mini-batch, BN recentres every first-layer switching hyperplane on the batch centroid and
rescales every layer's pre-activations, so more hyperplanes cut windows near the data. The
local region density is the exact number of affine (activation) regions in l-inf windows of
half-width ``radius`` around batch points, divided by the window area, counted with
:func:`normlab.probes.bn_geometry.count_regions_2d`; effects are log ratios BN / no BN.

Primary (normlab's reading of the theorem's setting): data centred at the origin, He
(Kaiming-normal) weights and biases drawn from ``N(0, bias_std^2)``. With zero biases every
first-layer switching line of the no-BN network passes through the origin (one point: a
degenerate partition, and BN's lines all pass through the batch centroid, next to it), so
the comparison would be between two pencils of lines; with random biases the no-BN lines sit
at random offsets, as in a trained or default-initialised network. BN cancels every raw
bias (check ``offsets_bias_free``), so the BN arm is the same function under either init.
Secondaries: the zero-bias He init (to show how much the measure depends on the degenerate
pencil), torch's default Linear init on centred data, and on data shifted to (3, 3) (BN is
exactly translation-invariant, so the shift only hurts the no-BN arm and inflates that
ratio; it is not the headline). Premise: the no-BN partition is not already saturated (its
windows hold more than one region on average).
Nothing is trained: the paper's statements are about a given mini-batch at given weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from normlab.claims.common import seed_everything
from normlab.claims.core import (
    Check,
    CheckOutcome,
    Claim,
    Effect,
    FreeSetting,
    Margin,
    Premise,
    cell,
    register_claim,
)
from normlab.models.bn_mlp import bn_mlp
from normlab.papers import paper
from normlab.probes.bn_geometry import region_density, switching_hyperplanes

__all__ = ["ARMS", "CLAIM", "run"]

#: arm -> (BN, centred data, init).
ARMS: dict[str, tuple[bool, bool, str]] = {
    "bn-he-bias": (True, True, "he-bias"),
    "no-bn-he-bias": (False, True, "he-bias"),
    "bn-he": (True, True, "he"),
    "no-bn-he": (False, True, "he"),
    "bn-centred": (True, True, "default"),
    "no-bn-centred": (False, True, "default"),
    "bn": (True, False, "default"),
    "no-bn": (False, False, "default"),
}


def _data(config: Mapping[str, Any], gen: torch.Generator, *, centred: bool = False):
    shift = torch.tensor(config["shift"], dtype=torch.float64) * (0.0 if centred else 1.0)
    return shift + config["spread"] * torch.randn(
        config["batch"], 2, generator=gen, dtype=torch.float64
    )


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Region density around data points for every arm, same weights and batch per pair."""
    seed_everything(seed)
    table = {}
    for name, (bn, centred, init) in ARMS.items():
        x = _data(config, torch.Generator().manual_seed(seed), centred=centred)
        anchors = x[: config["anchors"]]
        net = bn_mlp(
            config["width"],
            config["depth"],
            bn=bn,
            seed=seed,
            init=init,
            bias_std=config["bias_std"],
        )
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
    net = bn_mlp(config["width"], config["depth"], bn=True, seed=0)
    a = switching_hyperplanes(net, x).thresholds
    with torch.no_grad():
        net[0].bias.add_(torch.randn(config["width"], generator=gen, dtype=torch.float64) * 5)
    b = switching_hyperplanes(net, x).thresholds
    err = float(np.abs(a - b).max())
    return CheckOutcome(err < 1e-10, err, f"max threshold change under a bias shift {err:.1e}")


def _ratio(name: str, description: str, suffix: str) -> Effect:
    method, baseline = f"bn{suffix}", f"no-bn{suffix}"
    return Effect(
        name,
        description,
        lambda m: math.log(cell(m, method, "density") / cell(m, baseline, "density")),
        direction="greater",
        margin=Margin(math.log(1.1), "normlab's choice: a 10% denser partition counts"),
        baseline=baseline,
        method=method,
    )


_BASE = {"shift": [3.0, 3.0], "spread": 1.0, "batch": 64, "radius": 0.5, "bias_std": 1.0}

CLAIM = register_claim(
    Claim(
        id="bn-geometry",
        paper=paper("bn-geometry"),
        hypothesis=(
            "With BN in training mode, the local affine-region density near the data is "
            "higher than without BN at matched initialization (centred data, He weights, random "
            "biases)."
        ),
        primary=_ratio(
            "density_log_ratio",
            "log(region density with BN / without BN) in l-inf windows around data points; "
            "centred data, He weights and N(0, bias_std^2) biases",
            "-he-bias",
        ),
        secondary=(
            _ratio(
                "density_log_ratio_zero_bias",
                "the same log ratio, He init with zero biases (every no-BN first-layer line "
                "through the origin: the degenerate pencil)",
                "-he",
            ),
            _ratio(
                "density_log_ratio_default_init",
                "the same log ratio, centred data, torch's default Linear init",
                "-centred",
            ),
            _ratio(
                "density_log_ratio_shifted",
                "the same log ratio, default init, data shifted to (3, 3) (BN is "
                "translation-invariant, so the shift only hurts the no-BN arm)",
                "",
            ),
        ),
        premises=(
            Premise(
                "baseline_not_saturated",
                "the no-BN network's mean region count per window minus 1 (the partition "
                "near the data has room to refine, and is cut at all)",
                lambda m: cell(m, "no-bn-he-bias", "mean_count") - 1.0,
                direction="greater",
                margin=Margin(0.0, "normlab's choice: one region per window is no partition"),
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
        free_settings=(
            FreeSetting.scaled(
                "bias_std",
                "normlab's choice: the scale of a unit pre-activation (He weights on "
                "unit-variance data), so the no-BN offsets fall inside the data cloud",
            ),
            FreeSetting.scaled("radius", "normlab's choice: the window half-width 'local' means"),
            FreeSetting.scaled("width", "normlab's choice: a small ReLU MLP"),
            FreeSetting.scaled("depth", "normlab's choice: hidden layers"),
            FreeSetting.scaled("batch", "normlab's choice: the mini-batch BN normalizes over"),
            FreeSetting.scaled("anchors", "normlab's choice: windows counted per seed"),
            FreeSetting.scaled("spread", "normlab's choice: the data's scale"),
            FreeSetting("shift", [1.5, 1.5], [6.0, 6.0], "normlab's choice: the shifted data"),
        ),
        # "local" is the claim's own quantifier: wider windows reach regions far from the
        # batch, where BN's recentring matters less (both neighbours robust at quick)
        decisive="radius",
        untuned="nothing is trained: the paper's statements are about a given mini-batch at "
        "given (initial) weights",
        quote="we show that BN increases expected local partition refinement in ReLU and more "
        "general piecewise-affine networks",
        headline="Theorem-level: BN increases expected local partition refinement (no number).",
        setup=(
            "ReLU MLP (2 -> width x depth -> 1), batch of 64 points from N(0, I) (secondary: "
            "also N((3, 3), I)); exact region counts in l-inf windows of half-width 0.5 "
            "around 8 (quick) batch points; BN (training mode, gain 1, shift 0) vs identity; "
            "primary with He weights and N(0, 1) biases (no-BN lines at random offsets); "
            "secondaries with zero biases (all no-BN first-layer lines through the origin) "
            "and torch's default init."
        ),
        scale_note="quick and smoke score the partition at initialization only; the "
        "paper's statements are for a given mini-batch, not for training.",
        configs={
            "smoke": {**_BASE, "seeds": 1, "width": 8, "depth": 2, "anchors": 2},
            "quick": {**_BASE, "seeds": 12, "width": 16, "depth": 3, "anchors": 8},
            "full": {**_BASE, "seeds": 20, "width": 32, "depth": 4, "anchors": 32},
        },
        run=run,
    )
)
