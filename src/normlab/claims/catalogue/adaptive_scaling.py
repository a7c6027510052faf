"""Claim "adaptive-scaling": a learned input scaling finds faint streaks like the best fixed one.

The TESS W-Net paper (``paper("adaptive-scaling")``) lets the network learn the range and
the curve of its input scaling (Adaptive Normalization) instead of fixing one. Here a tiny
segmentation net (:class:`~normlab.models.segnet.TinySegNet`) marks the pixels of a faint
moving object in synthetic high-dynamic-range frames (:func:`~normlab.data.streaks.
streak_frames`: sky + noise + power-law stars over four decades + one faint streak). Arms,
all with the same net, steps, batches and learning-rate sweep, differing only in the
scaling (:class:`~normlab.layers.scaling.AdaptiveScaling`):

- fixed: "zscore" (mean / std), "minmax", "asinh" ``asinh((x - median) / sigma)`` with the
  softening ``sigma`` one robust (MAD) standard deviation, the usual astronomical stretch
  (a stronger baseline than a std softening, which the stars inflate ~50x);
- "learned": ``asinh(clamp(u, lo, hi) / s)`` on robust units with the clip bounds at the
  training pixels' min/max and, by default, a neutral start (normlab's choice): the
  softening ``s`` at the larger clip bound, so the curve starts nearly linear (a clipped
  min-max-like scaling, not the asinh stretch it is compared with), then learns
  ``log(-lo)``, ``log(hi)``, ``log(s)`` with the network (``start="asinh"``: ``s = 1``,
  exactly the "asinh" arm);
- "frozen" (control): the learned arm's initial scaling, never trained; separates what the
  learning adds from what its starting curve gives.

Every arm gets the same learning-rate grid (the protocol), selected on validation F1. The
primary names its baseline in advance: the asinh stretch, the astronomers' standard and by
far the strongest fixed scaling here (z-score and min-max reach F1 0-0.03). Secondary: the
fixed arm with the best validation F1 (chosen on validation, so test F1 carries no
selection bias), and "at least as good as every fixed scaling" as an intersection-union
test; F1 is pixel-level over the test set at probability 0.5.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

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
    difference,
    register_claim,
)
from normlab.claims.protocol import tune_arms
from normlab.data.streaks import streak_frames
from normlab.models.segnet import TinySegNet, pixel_f1
from normlab.papers import paper
from normlab.training.fit import Divergence, fit

__all__ = ["ARMS", "CLAIM", "FIXED", "run"]

FIXED = ("zscore", "minmax", "asinh")
ARMS = (*FIXED, "learned", "frozen")


def _net(
    arm: str, train_x: torch.Tensor, frames: int, width: int, start: str = "linear"
) -> TinySegNet:
    """The segmentation net with ``arm``'s scaling fitted to the training pixels; the learned
    and frozen arms start as the asinh stretch (``start="asinh"``) or nearly linear
    (``"linear"``: the softening at the larger clip bound)."""
    if start not in ("linear", "asinh"):
        raise ValueError(f"start must be 'linear' or 'asinh', got {start!r}.")
    net = TinySegNet(frames, scaling="learned" if arm == "frozen" else arm, width=width)
    sc = net.scaling.fit(train_x.reshape(-1, 1))
    if arm in ("learned", "frozen") and start == "linear":
        with torch.no_grad():
            sc.log_soft.copy_(torch.maximum(sc.log_lo, sc.log_hi))
    if arm == "frozen":
        sc.requires_grad_(False)
    return net


def _train(
    arm: str,
    data: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    lr: float,
    config: Mapping[str, Any],
    seed: int,
) -> tuple[float, float, dict[str, float], Divergence | None]:
    """Train one arm at one learning rate: validation F1, test F1, the final curve and the
    divergence or None.

    The curve (learned and frozen arms; empty otherwise) is ``lo``, ``hi`` and the
    softening ``s`` in robust units of the training pixels.
    """
    torch.manual_seed(seed)
    x, y = data["train"]
    net = _net(arm, x, config["frames"], config["width"], config["start"])
    pos = float(y.mean())
    # up-weight the rare streak pixels by ((1 - p) / p) ** pos_power (1 = fully balanced)
    pos_weight = torch.tensor(((1 - pos) / max(pos, 1e-6)) ** config["pos_power"])
    g = torch.Generator().manual_seed(seed)
    result = fit(
        net,
        lambda m, i: F.binary_cross_entropy_with_logits(m(x[i]), y[i], pos_weight=pos_weight),
        lambda step: torch.randint(0, len(x), (config["batch"],), generator=g),
        config["steps"],
        torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=lr),
    )
    curve: dict[str, float] = {}
    if arm in ("learned", "frozen"):
        sc = net.scaling.requires_grad_(False)
        curve = {
            "lo": -float(sc.log_lo.exp()),
            "hi": float(sc.log_hi.exp()),
            "softening": float(sc.log_soft.exp()),
        }
    with torch.no_grad():
        val, test = (pixel_f1(net(data[s][0]), data[s][1]) for s in ("val", "test"))
    return val, test, curve, result.diverged


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Per arm: the learning rate with the best validation F1, and its validation/test F1."""
    seed_everything(seed)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(seed)
    shape = {k: config[k] for k in ("size", "frames", "stars", "amplitude")}
    data = {
        split: streak_frames(config[f"n_{split}"], g, **shape)
        for split in ("train", "val", "test")
    }

    def evaluate(arm: str, params: dict[str, Any]) -> tuple[float, tuple]:
        out = _train(arm, data, params["lr"], config, seed)
        return (-out[0] if out[3] is None else math.inf), out

    # trivial reference: marking every pixel a streak (the best constant predictor's F1)
    every = -pixel_f1(torch.ones_like(data["val"][1]), data["val"][1])
    tuned, records = tune_arms(config, evaluate, reference=every)
    table: dict[str, dict[str, float]] = {}
    diverged: dict[str, Any] = {}
    for arm, t in tuned.items():
        val, test, curve, div = t.result
        table[arm] = {"val_f1": val, "test_f1": test, "lr": float(t.chosen["lr"]), **curve}
        if div is not None:
            diverged[arm] = div.record()
    table["data"] = {"streak_pixel_fraction": float(data["test"][1].mean())}
    return {"table": table, "tuning": records, "diverged": diverged}


def _best_fixed(m: Mapping[str, Any]) -> str:
    """The fixed scaling with the best validation F1 (first on ties)."""
    return max(FIXED, key=lambda arm: cell(m, arm, "val_f1"))


def _vs_selected(m: Mapping[str, Any]) -> float:
    return cell(m, "learned", "test_f1") - cell(m, _best_fixed(m), "test_f1")


def _gap(method: str, baseline: str):
    return lambda m: cell(m, method, "test_f1") - cell(m, baseline, "test_f1")


_MARGIN = (
    "normlab's choice: 0.05 F1, above the measured noise floor (two identical arms, asinh "
    "and the learned arm's asinh start frozen, differed by 0.032 F1 at quick with 800 "
    "steps); the paper states no number"
)
#: A diverged arm predicts nothing: F1 0.
_DIV = {"test_f1": 0.0, "val_f1": 0.0}


def _check_asinh_start(config: Mapping[str, Any]) -> CheckOutcome:
    """Started at ``start="asinh"``, the learned scaling equals the fixed asinh arm."""
    g = torch.Generator().manual_seed(0)
    x, _ = streak_frames(4, g, size=8, frames=3, stars=2)
    outs = []
    for arm in ("asinh", "learned"):
        torch.manual_seed(0)
        outs.append(_net(arm, x, 3, 4, "asinh").scale(x).detach())
    err = float((outs[0] - outs[1]).abs().max())
    return CheckOutcome(err < 1e-5, err, f"max |learned(asinh start) - asinh| {err:.1e} <= 1e-5")


def _check_linear_start(config: Mapping[str, Any]) -> CheckOutcome:
    """The neutral start is nearly linear over the clip range and its parameters get
    gradients (the curve can learn)."""
    g = torch.Generator().manual_seed(0)
    x, y = streak_frames(4, g, size=8, frames=3, stars=2)
    net = _net("learned", x, 3, 4, "linear")
    sc = net.scaling
    lo, hi = -float(sc.log_lo.detach().exp()), float(sc.log_hi.detach().exp())
    s = float(sc.log_soft.detach().exp())
    u = torch.linspace(lo, hi, 101)
    curve = torch.asinh(u / s)
    bend = float((curve - u / s).abs().max() / (u / s).abs().max())
    loss = F.binary_cross_entropy_with_logits(net(x), y)
    found = torch.autograd.grad(loss, list(sc.parameters()), allow_unused=True)
    grads = all(g is not None and bool(g.abs().sum() > 0) for g in found)
    ok = bend < 0.15 and grads
    return CheckOutcome(ok, bend, f"relative bend {bend:.3f} < 0.15; all 3 get gradients: {grads}")


_BASE = {
    "frames": 3,
    "amplitude": (10.0, 20.0),
    "batch": 16,
    "width": 8,
    "pos_power": 0.5,
    "start": "linear",
}


def _search(lrs: list[float], extend: int) -> dict[str, Any]:
    return {"arms": list(ARMS), "space": {"lr": lrs}, "extend": extend}


def _vs(arm: str, name: str = "") -> Effect:
    return difference(
        name or f"vs_{arm}",
        f"test F1: learned minus {arm}",
        "learned",
        arm,
        "test_f1",
        direction="no_less",
        margin=Margin(0.05, _MARGIN),
        unit="F1",
        if_diverged=_DIV,
    )


CLAIM = register_claim(
    Claim(
        id="adaptive-scaling",
        paper=paper("adaptive-scaling"),
        hypothesis=(
            "A scaling whose clip range and curve are learned with the segmentation net "
            "(Adaptive Normalization) from a neutral start finds faint moving streaks in "
            "high-dynamic-range frames at least as well as the asinh stretch, the strongest "
            "fixed scaling (z-score, min-max and the validation-selected best are secondary)."
        ),
        primary=_vs("asinh", "f1_vs_asinh"),
        secondary=(
            Effect(
                "f1_vs_best_fixed",
                "test streak-pixel F1: learned scaling minus the fixed scaling with the best "
                "validation F1",
                _vs_selected,
                direction="no_less",
                margin=Margin(0.05, _MARGIN),
                method="learned",
                baseline="best fixed scaling (chosen on validation)",
                unit="F1",
                if_diverged=_DIV,
                exchangeable=(("learned", *FIXED),),
            ),
            Effect(
                "f1_vs_every_fixed",
                "test F1: learned minus each fixed scaling (intersection-union: no worse "
                "than every one)",
                None,
                direction="no_less",
                margin=Margin(0.05, _MARGIN),
                method="learned",
                baseline="every fixed scaling",
                unit="F1",
                parts=tuple(_vs(arm) for arm in FIXED),
            ),
            difference(
                "learning_helps",
                "test F1: learned minus the same initial scaling frozen (the control)",
                "learned",
                "frozen",
                "test_f1",
                direction="greater",
                margin=Margin(0.0, "normlab's choice: any gain shows the learning matters"),
                unit="F1",
                if_diverged=_DIV,
            ),
            difference(
                "f1_vs_zscore",
                "test F1: learned minus z-score (the default scaling)",
                "learned",
                "zscore",
                "test_f1",
                direction="greater",
                margin=Margin(0.05, _MARGIN),
                unit="F1",
                if_diverged=_DIV,
            ),
        ),
        premises=(
            Premise(
                "task_learnable",
                "validation F1 of the best fixed scaling",
                lambda m: cell(m, _best_fixed(m), "val_f1"),
                direction="greater",
                margin=Margin(
                    0.3,
                    "normlab's choice: below 0.3 F1 no scaling has learned the task, so "
                    "scalings cannot be told apart",
                ),
                unit="F1",
                gates=("f1_vs_asinh", "f1_vs_best_fixed", "f1_vs_every_fixed"),
                if_diverged=_DIV,
            ),
            Premise(
                "scaling_matters",
                "test F1 of the best fixed scaling (on validation) minus z-score's",
                lambda m: cell(m, _best_fixed(m), "test_f1") - cell(m, "zscore", "test_f1"),
                direction="greater",
                margin=Margin(
                    0.05,
                    "normlab's choice: the fixed scalings must differ (the dynamic range "
                    "hurts a linear scaling), or there is no range to learn",
                ),
                unit="F1",
                gates=("f1_vs_zscore", "learning_helps"),
                if_diverged=_DIV,
            ),
        ),
        checks=(
            Check(
                "asinh_start_equals_asinh",
                "the learned scaling started at the asinh fit equals the fixed asinh arm",
                _check_asinh_start,
            ),
            Check(
                "neutral_start",
                "the neutral start is within 15% of linear over its clip range, and all three "
                "curve parameters receive gradients",
                _check_linear_start,
            ),
        ),
        free_settings=(
            FreeSetting("start", "asinh", "asinh", "normlab's choice: a neutral (linear) start"),
            FreeSetting.scaled("steps", "normlab's choice: the training budget"),
            FreeSetting.scaled("pos_power", "normlab's choice: the streak-pixel weight"),
            FreeSetting.scaled("batch", "normlab's choice: frames per Adam step"),
            FreeSetting.scaled("width", "normlab's choice: a tiny segmentation net"),
            FreeSetting.scaled("frames", "normlab's choice: frames per sample"),
            FreeSetting.scaled("size", "normlab's choice: pixels per side"),
            FreeSetting.scaled("stars", "normlab's choice: stars per frame"),
            FreeSetting("amplitude", (5.0, 10.0), (20.0, 40.0), "normlab's choice: faint streaks"),
            FreeSetting.scaled("n_train", "normlab's choice: training samples"),
            FreeSetting.scaled("n_val", "normlab's choice: validation samples"),
            FreeSetting.scaled("n_test", "normlab's choice: test samples"),
        ),
        # started at asinh the learned arm reached 0.689 against asinh's 0.671 F1 (issue 34):
        # the start decides the verdict; steps 1200 moved it only to inconclusive
        decisive="start",
        headline=(
            "Adaptive Normalization lets the network learn the ideal range and scaling "
            "distribution (abstract; no number given)."
        ),
        setup=(
            "Frames 16x16 (quick), 3 per sample, 6 stars per 16x16 with peak fluxes 10..1e4 "
            "noise sigma, sky 100-120, one streak of peak 10-20 sigma in 80% of samples; "
            "TinySegNet width 8; Adam, batch 16, 600 steps (quick), lr grid {3e-3, 1e-2, "
            "3e-2} (no edge step at quick) for every arm, BCE with positive weight ((1 - p) / p) "
            "** 0.5 (p "
            "the streak-pixel fraction); lr and best fixed arm chosen on validation; the "
            "learned curve starts nearly linear (softening at the larger clip bound)."
        ),
        scale_note=(
            "No W-Net, no TESS data or 3D U-Nets; a few hundred steps, during which the "
            "learned arm's 3 log-parameters change its bounds and softening by ~lr (relative) "
            "a step; stars are static and the noise is additive, so frame differences remove "
            "the stars for a linear scaling, as they would not with shot noise. The robust "
            "sigma is fitted on all training pixels, so the sky's spread between samples "
            "(100-120) sets it (~10 noise sigma), not the per-frame noise. Reaching the asinh "
            "stretch from the neutral start (softening ~1000 robust units) takes a change of "
            "~7 in the log-softening, and Adam can move it at most about lr x steps: quick "
            "trains 600 steps with a grid up to 3e-2 (bound 18; at 300 steps and a grid "
            "topped at 1e-2 the bound was 3 and asinh chose the top lr in every seed). "
            "Measured at quick, the learned softening moved from ~1000 to ~78 (a change of "
            "2.6) in 2 of 5 seeds and not toward it in the others: its gradient is weak, so the "
            "learned curve stays far from asinh; the full scale trains 3000 steps."
        ),
        configs={
            "smoke": {
                "seeds": 1,
                **_BASE,
                "stars": 2,
                "size": 8,
                "n_train": 16,
                "n_val": 8,
                "n_test": 8,
                "steps": 2,
                "search": _search([1e-2], 0),
            },
            "quick": {
                "seeds": 5,
                **_BASE,
                "stars": 6,
                "size": 16,
                "n_train": 512,
                "n_val": 128,
                "n_test": 256,
                # budget: 600 steps and no edge step; at the grid's top, 3e-2, Adam's bound on
                # the log-softening's travel (lr x steps, 18) exceeds the ~7 the asinh stretch
                # needs (measured: it moved 2.6 at most; see the scale note)
                "steps": 600,
                "search": _search([3e-3, 1e-2, 3e-2], 1),
            },
            "full": {
                "seeds": 10,
                **_BASE,
                "stars": 24,
                "size": 32,
                "n_train": 4096,
                "n_val": 512,
                "n_test": 1024,
                "steps": 3000,
                "search": _search([1e-3, 3e-3, 1e-2, 3e-2], 2),
            },
        },
        run=run,
    )
)
