"""Claim "adaptive-scaling": a learned input scaling finds faint streaks like the best fixed one.

A tiny segmentation net marks a faint moving streak in synthetic high-dynamic-range frames
behind each input scaling of :mod:`normlab.training.streaks` (fixed z-score, min-max and
asinh; learned from the asinh start, Adaptive Normalization; that start frozen, the
control); each arm's lr is tuned on validation F1 (pixel-level, at 0.5).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from normlab.claims.arms import Trained, run_arms
from normlab.claims.common import seed_everything
from normlab.claims.core import (
    Check,
    CheckOutcome,
    Claim,
    Effect,
    FreeSetting,
    Margin,
    Premise,
    beats_every,
    cell,
    difference,
    register_claim,
)
from normlab.data.streaks import streak_frames
from normlab.models.segnet import pixel_f1
from normlab.papers import paper
from normlab.training import streaks

__all__ = ["CLAIM", "run"]

_FIXED = ("zscore", "minmax", "asinh")


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Per arm: validation and test F1 at the tuned lr (and the learned curve's end)."""
    seed_everything(seed)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(seed)
    shape = {k: config[k] for k in ("size", "frames", "stars", "amplitude")}
    data = {s: streak_frames(config[f"n_{s}"], g, **shape) for s in ("train", "val", "test")}
    kw = {k: config[k] for k in ("steps", "batch", "pos_power", "frames", "width", "start")}

    def train(arm: str, params: dict[str, Any], s: int) -> Trained:  # s: the training seed
        net, fit = streaks.train_streak_segnet(arm, data["train"], params["lr"], seed=s, **kw)
        div = fit.diverged and fit.diverged.record()
        return Trained(-streaks.segnet_f1(net, *data["val"]), net, div, fit.losses)

    def test(arm: str, t: Trained) -> dict[str, float]:
        row = {"val_f1": -t.val, "test_f1": streaks.segnet_f1(t.model, *data["test"])}
        return {**row, **streaks.learned_curve(t.model)}

    # trivial reference: marking every pixel a streak (the best constant predictor's F1)
    every = -pixel_f1(torch.ones_like(data["val"][1]), data["val"][1])
    m = run_arms(config, seed, train, test, reference=every)
    m["table"]["data"] = {"streak_pixel_fraction": float(data["test"][1].mean())}
    return m


def _best_fixed(m: Mapping[str, Any]) -> str:
    """The fixed scaling with the best validation F1 (first on ties)."""
    return max(_FIXED, key=lambda arm: cell(m, arm, "val_f1"))


_MARGIN = Margin(
    0.05,
    "normlab's choice: 0.05 F1, above the measured noise floor (two identical arms, asinh "
    "and the learned arm's asinh start frozen, differed by 0.032 F1 at quick with 800 "
    "steps); the paper states no number",
)
#: A diverged arm predicts nothing: F1 0.
_DIV = {"test_f1": 0.0, "val_f1": 0.0}


def _check_asinh_start(config: Mapping[str, Any]) -> CheckOutcome:
    """Started at ``start="asinh"``, the learned scaling equals the fixed asinh arm."""
    err = streaks.asinh_start_gap()
    return CheckOutcome(err < 1e-5, err, f"max |learned(asinh start) - asinh| {err:.1e} <= 1e-5")


def _check_linear_start(config: Mapping[str, Any]) -> CheckOutcome:
    """The neutral start is nearly linear, and all three curve parameters get gradients."""
    bend, grads = streaks.neutral_start_bend()
    detail = f"relative bend {bend:.3f} < 0.15; all 3 get gradients: {grads}"
    return CheckOutcome(bend < 0.15 and grads, bend, detail)


def _vs(name: str, baseline: str, what: str, direction: Any = "no_less", margin=_MARGIN):
    kw = {"direction": direction, "margin": margin, "unit": "F1", "if_diverged": _DIV}
    return difference(name, what, "learned", baseline, "test_f1", **kw)


def _config(seeds: int, lrs: list[float], extend: int, **kw: Any) -> dict[str, Any]:
    base = {"frames": 3, "amplitude": (10.0, 20.0), "batch": 16, "width": 8, "pos_power": 0.5}
    search = {"arms": list(streaks.SCALINGS), "space": {"lr": lrs}, "extend": extend}
    return {"seeds": seeds, **base, "start": "asinh", **kw, "search": search}


_SMOKE = {"stars": 2, "size": 8, "n_train": 16, "n_val": 8, "n_test": 8, "steps": 2}
_QUICK = {"stars": 6, "size": 16, "n_train": 512, "n_val": 128, "n_test": 256, "steps": 600}
_FULL = {"stars": 24, "size": 32, "n_train": 4096, "n_val": 512, "n_test": 1024, "steps": 3000}


CLAIM = register_claim(
    Claim(
        id="adaptive-scaling",
        paper=paper("adaptive-scaling"),
        hypothesis="A scaling whose clip range and curve are learned with the segmentation net "
        "(Adaptive Normalization), started at the asinh stretch, finds faint moving streaks in "
        "high-dynamic-range frames at least as well as the asinh stretch, the strongest fixed "
        "scaling (z-score, min-max and the validation-selected best are secondary).",
        primary=_vs("f1_vs_asinh", "asinh", "test F1: learned minus asinh"),
        secondary=(
            Effect(
                "f1_vs_best_fixed",
                "test streak-pixel F1: learned scaling minus the fixed scaling with the best "
                "validation F1",
                lambda m: cell(m, "learned", "test_f1") - cell(m, _best_fixed(m), "test_f1"),
                direction="no_less",
                margin=_MARGIN,
                method="learned",
                baseline="best fixed scaling (chosen on validation)",
                unit="F1",
                if_diverged=_DIV,
                exchangeable=(("learned", *_FIXED),),
            ),
            beats_every(
                "f1_vs_every_fixed",
                "test F1, no worse than every fixed scaling",
                "learned",
                _FIXED,
                "test_f1",
                direction="no_less",
                margin=_MARGIN,
                unit="F1",
                if_diverged=_DIV,
            ),
            _vs(
                "learning_helps",
                "frozen",
                "test F1: learned minus the same initial scaling frozen (the control)",
                "greater",
                Margin(0.0, "normlab's choice: any gain shows the learning matters"),
            ),
            _vs("f1_vs_zscore", "zscore", "test F1: learned minus z-score (default)", "greater"),
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
            FreeSetting(
                "start",
                "linear",
                "linear",
                "normlab's choice (the abstract gives no start): the asinh stretch, the "
                "standard fixed scaling for such frames; the nearly linear start measured as "
                "min-max (scaled sd 0.05 vs asinh's 1.73) and, like min-max, scored F1 0 and "
                "did not train in 3 of 5 seeds (issue 35)",
            ),
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
        # the start decides what is tested: from the linear start the learned arm did not
        # train (F1 0, -0.580 [-0.757, -0.404] against asinh); from asinh it reached 0.689
        # against asinh's 0.671 (seed 0, issue 35)
        decisive="start",
        headline=(
            "Adaptive Normalization lets the network learn the ideal range and scaling "
            "distribution (abstract; no number given)."
        ),
        quote="We also developed a novel method for learned data scaling that we call Adaptive "
        "Normalization, which allows the neural network to learn the ideal range and scaling "
        "distribution required for optimal data processing.",
        setup="Frames 16x16 (quick), 3 per sample, 6 stars with peak fluxes 10..1e4 noise sigma, "
        "sky 100-120, one streak of peak 10-20 sigma in 80% of samples; TinySegNet width 8; "
        "Adam, batch 16, 600 steps (quick), lr grid {3e-3, 1e-2, 3e-2} for every arm; BCE "
        "with positive weight ((1 - p) / p) ** 0.5 (p the streak-pixel fraction); lr and "
        "best fixed arm chosen on validation; the learned curve starts at the asinh stretch "
        "(softening 1 robust unit), the frozen control stays there.",
        scale_note="No W-Net, no TESS data or 3D U-Nets; stars are static and the noise "
        "additive, so frame differences remove the stars for a linear scaling (not so with shot "
        "noise). The robust sigma is fitted on all training pixels, so the sky's spread between "
        "samples (100-120) sets it (~10 noise sigma). From the nearly linear start (the "
        "robustness neighbour; softening ~1000 robust units, output sd 0.05 like min-max) the "
        "learned softening moved by at most 2.6 of the ~7 needed in 600 steps: that arm does "
        "not train at this scale.",
        configs={
            "smoke": _config(1, [1e-2], 0, **_SMOKE),
            # budget: 600 steps, so the log-softening's travel bound at 3e-2 (18) exceeds ~7
            "quick": _config(5, [3e-3, 1e-2, 3e-2], 1, **_QUICK),
            "full": _config(10, [1e-3, 3e-3, 1e-2, 3e-2], 2, **_FULL),
        },
        run=run,
    )
)
