"""Claim "stablegrad": optimizer-level gradient-scale control makes deep PINNs more accurate.

The seed proposes StableGrad: after backward and before the step, rescale each layer's
weight gradient to a reference std, leaving the forward model (and so the PINN's input
derivatives and physical residual) untouched. It reports better matched-depth accuracy on
deep PINNs and stable training of BatchNorm-free ResNets where they otherwise collapse.
The experiment is the record's ``setup``; its trainers are :mod:`normlab.training.stablegrad`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from normlab.claims.arms import Trained, run_arms
from normlab.claims.common import seed_everything
from normlab.claims.core import (
    Check,
    CheckOutcome,
    Claim,
    FreeSetting,
    Margin,
    Precondition,
    Premise,
    cell,
    difference,
    register_claim,
)
from normlab.data.images import load_digits_tensors
from normlab.models.pinn import relative_l2
from normlab.papers import paper
from normlab.training import stablegrad as sg

__all__ = ["CLAIM", "run"]

#: log10 relative L2 error of a diverged PINN: the zero function's error, 1.
_DIV = {"log10_rel_l2": 0.0, "test_acc": 0.1}
#: Every tuned arm: optimizer and where it trains (the shallow or deep PINN, the CNN).
_TUNED = ("adam-shallow", *(f"{k}-deep" for k in sg.OPTIMIZERS), "adam-cnn", "stablegrad-cnn")


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """PINN relative L2 error (shallow Adam; deep Adam and both StableGrad references) and
    BN-free CNN accuracy, each arm's lr tuned on validation by the engine."""
    seed_everything(seed)
    data = load_digits_tensors(seed)
    depth = {"deep": max(config["depths"]), "shallow": min(config["depths"])}
    cnn = {k: config.get(f"cnn_{k}") for k in ("blocks", "width", "epochs", "batch", "train_size")}

    def pinn(name: str, lr: float, steps: int, s: int):
        kind, where = name.rsplit("-", 1)
        shape = {"depth": depth[where], "width": config["width"], "points": config["points"]}
        return sg.train_pinn(kind, lr, steps=steps, seed=s, **shape)

    def train(name: str, params: dict[str, Any], s: int) -> Trained:  # s: the training seed
        if not name.endswith("-cnn"):
            r = pinn(name, params["lr"], config["steps"], s)
            return Trained(r.val, r, r.diverged and r.diverged.record(), r.curve)
        r = sg.train_digits_cnn(data, name[:-4], params["lr"], seed=s, **cnn)
        return Trained(-r.val, r, r.diverged and r.diverged.record(), r.curve)

    def test(name: str, t: Trained) -> dict[str, Any]:
        if name.endswith("-cnn"):
            acc = sg.accuracy(t.model.model, data.test_x, data.test_y)
            return {"test_acc": acc, "val_acc": t.model.val}
        if t.diverged is not None:  # a diverged PINN counts as the zero function (error 1)
            return {"rel_l2": 1.0, "log10_rel_l2": 0.0, "val_loss": None}
        err = relative_l2(t.model.model)
        return {"rel_l2": err, "log10_rel_l2": math.log10(max(err, 1e-30)), "val_loss": t.val}

    def untrained(name: str) -> float:  # trivial reference on validation
        return -0.1 if name.endswith("-cnn") else pinn(name, 0.0, 0, seed).val  # chance; 0 steps

    measurement = run_arms(config, seed, train, test, reference=untrained)
    return {**measurement, "depths": list(config["depths"])}


def _check_forward(config: Mapping[str, Any]) -> CheckOutcome:
    """Outputs and loss bit-identical with and without StableGrad; weight-grad std equalised."""
    same, worst = sg.stablegrad_invariance()
    detail = f"forward bit-identical: {same}; max |std(G_l)/s - 1| {worst:.2g} <= 1e-6"
    return CheckOutcome(same and worst < 1e-6, worst, detail)


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    deep = max(measurements[0]["depths"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    panels = (
        ("deep", "rel_l2", sg.OPTIMIZERS, f"relative L2 error, depth-{deep} PINN"),
        ("cnn", "test_acc", ("adam", "stablegrad"), "BN-free residual CNN test accuracy"),
    )
    for ax, (where, metric, kinds, label) in zip(axes, panels, strict=True):
        for k, kind in enumerate(kinds):
            arm = f"{kind}-{where}"
            ys = [cell(m, arm, metric) for m in measurements if arm in m["table"]]
            ax.scatter([k] * len(ys), ys, color=f"C{k}")
        ax.set_xticks(range(len(kinds)), kinds)
        ax.set_ylabel(label)
    axes[0].set_yscale("log")
    fig.tight_layout()
    return fig


def _config(seeds: int, lrs: list, extend: int, **kw: Any) -> dict:
    search = {"arms": list(_TUNED), "space": {"lr": lrs}, "extend": extend}
    shapes = {"width": 16, "points": 64, "cnn_width": 16, "cnn_batch": 128}
    return {"seeds": seeds, **shapes, **kw, "search": search}


_LRS = [3e-4, 1e-3, 3e-3]
_SMOKE = {"depths": [2, 4], "steps": 20, "cnn_blocks": 2, "cnn_epochs": 1, "cnn_train_size": 256}
_QUICK = {"depths": [8, 24], "steps": 400, "points": 32, "cnn_blocks": 8, "cnn_epochs": 6}
_FULL = {"depths": [8, 32], "steps": 5000, "width": 50, "points": 256}
_FULL |= {"cnn_blocks": 16, "cnn_epochs": 20}
_ERR_MARGIN = Margin(
    0.1,
    "normlab's choice: a tenth of a decade (about 20% lower error); the abstract gives no number",
)


def _pinn_gap(name: str, method: str, reference: str, **kw: Any):
    return difference(
        name,
        f"log10 relative L2 error, Adam+StableGrad ({reference}) minus Adam, deepest PINN",
        method,
        "adam-deep",
        "log10_rel_l2",
        direction="less",
        margin=_ERR_MARGIN,
        unit="decades",
        if_diverged=_DIV,
        **kw,
    )


CLAIM = register_claim(
    Claim(
        id="stablegrad",
        paper=paper("stablegrad"),
        hypothesis=(
            "At the deepest depth, a PINN trained with Adam + StableGrad (the paper's output "
            "reference) reaches a lower relative L2 error than with plain Adam, each with its "
            "learning rate tuned on validation."
        ),
        quote="On PINN benchmarks, StableGrad improves matched-depth solution accuracy and "
        "makes deeper models more reliable under standard optimization.",
        primary=_pinn_gap("pinn_error_at_depth", "stablegrad-deep", "output reference"),
        secondary=(
            _pinn_gap(
                "pinn_error_last_reference",
                "stablegrad-last-deep",
                "the last layer's gradient, normlab's PINN reference",
            ),
            difference(
                "bnfree_cnn_accuracy",
                "test accuracy of the BN-free residual CNN, Adam+StableGrad minus Adam",
                "stablegrad-cnn",
                "adam-cnn",
                "test_acc",
                direction="greater",
                margin=Margin(
                    0.02, "normlab's choice: 2 points on 450 digits, beyond split noise"
                ),
                if_diverged=_DIV,
            ),
        ),
        checks=(
            Check(
                "forward_untouched",
                "StableGrad leaves the PINN's output and loss "
                "bit-identical and sets every weight-gradient std to the reference (1e-6)",
                _check_forward,
            ),
        ),
        premises=(
            Premise(
                "adam_degrades_with_depth",
                "log10 error of plain Adam at the deepest minus the shallowest depth",
                lambda m: (
                    cell(m, "adam-deep", "log10_rel_l2") - cell(m, "adam-shallow", "log10_rel_l2")
                ),
                direction="greater",
                margin=Margin(0.1, "normlab's choice: without a depth problem nothing to fix"),
                unit="decades",
                gates=("pinn_error_at_depth", "pinn_error_last_reference"),
                if_diverged=_DIV,
            ),
        ),
        preconditions=(
            Precondition(
                "shallow_adam_learns",
                "relative L2 error of the plain-Adam PINN at the shallowest depth",
                lambda m: cell(m, "adam-shallow", "rel_l2"),
                op="<=",
                threshold=0.5,
                source="normlab's choice: at half the solution's norm or less the shallow "
                "PINN has learned the problem, so a deep failure is a depth effect and the "
                "primary does not compare two failures",
                gates=("pinn_error_at_depth", "pinn_error_last_reference"),
            ),
        ),
        free_settings=(
            FreeSetting.scaled("steps", "normlab's choice: the PINN training budget", 0.625, 1.5),
            FreeSetting.scaled("width", "normlab's choice: the PINN's width"),
            FreeSetting("depths", [8, 16], [8, 40], "normlab's choice: shallow and deepest PINN"),
            FreeSetting.scaled("points", "normlab's choice: collocation points per step"),
            FreeSetting.scaled("cnn_blocks", "normlab's choice: the CNN's depth"),
            FreeSetting.scaled("cnn_epochs", "normlab's choice: the CNN's budget"),
            FreeSetting.scaled("cnn_width", "normlab's choice: the CNN's width"),
            FreeSetting.scaled("cnn_batch", "normlab's choice: digits per Adam step"),
        ),
        # steps 250 made the quick verdict untestable (a premise failed), 600 kept it
        decisive="steps",
        headline=(
            "StableGrad improves matched-depth PINN solution accuracy and stabilises "
            "BN-free ResNet/EfficientNet training (no number in the abstract)."
        ),
        setup=(
            "Tanh PINN (width 16, Xavier) on -u'' = f over [0, 1], u* = sin(pi x) + 0.3 "
            "sin(4 pi x), 32-64 random collocation points per step; deep: Adam vs "
            "Adam+StableGrad (output reference, the paper's; last-layer reference, normlab's); "
            "shallow: Adam. BN-free residual CNN (He init) on sklearn digits, Adam vs "
            "Adam+StableGrad (std of dL/dlogits). Same lr grid for every arm, selected on "
            "held-out collocation loss / held-out training digits."
        ),
        scale_note=(
            "quick: depths 8/24, 400 steps, 5 seeds, 8 CNN blocks for 6 epochs; full: depths "
            "8/32. In a PINN the output reference sees only the gradient reaching the output "
            "(the boundary term; the residual acts through input derivatives), so the "
            "last-layer reference runs at every scale."
        ),
        configs={
            "smoke": _config(1, [3e-3], 0, **_SMOKE),
            # Budget: 400 steps, 6 CNN epochs, 5 seeds (8 cost 313 CPU-s; under-trained anyway).
            # The grid reaches 3e-4: with {1e-3, 3e-3} both deep arms chose 1e-3 in every seed
            # (3e-3: val loss 260-1200 vs 27-715); an edge choice extends one step.
            "quick": _config(5, _LRS, 1, **_QUICK),
            "full": _config(10, _LRS, 2, **_FULL),
        },
        run=run,
        figure=_figure,
        caption=(
            "Left: deepest PINN's relative L2 error per arm, one dot per seed; StableGrad "
            "should sit lower. Right: BN-free residual CNN test accuracy."
        ),
    )
)
