"""Claim "bn-unlearning": BatchNorm running statistics confound unlearning evaluation.

A BatchNorm CNN (:mod:`normlab.models.bn_cnn`) trained on sklearn's digits unlearns one
class (``seed % 10``) by gradient ascent or NegGrad+, in train mode (statistics follow the
forget-heavy batches) or eval mode (frozen), until eval forget accuracy <= ``stop_acc``;
forget accuracy is read before and after :func:`~normlab.surgery.batchnorm.recalibrate_bn`
over the retain images and over 10 unlabelled test images
(:func:`~normlab.training.unlearn.recalibration_gap`). Primary: the BatchNorm gap itself
(gradient ascent, train mode). No GroupNorm arm: the paper's "strict GroupNorm control
reduces the artifact to zero" holds by construction (no running statistics: the pass
changes no tensor, the gap is exactly 0, so the previous primary, BN gap minus that 0, could
not fail); it is the check ``groupnorm_no_artifact``. ``train_mode_causes_artifact`` came
out contradicted (-0.044 [-0.070, -0.018] at quick): in eval mode the weights are optimised
against frozen statistics that no longer describe their features, so recalibration moves
the network at least as much. Nothing is tuned: the trained networks are the objects of the
test and unlearning runs to a stopping rule; the fixed lrs are free settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from normlab.claims.common import seed_everything
from normlab.claims.core import (
    Check,
    CheckOutcome,
    Claim,
    Effect,
    FreeSetting,
    Margin,
    Precondition,
    Premise,
    cell,
    difference,
    register_claim,
)
from normlab.data.images import forget_retain_split, load_digits_tensors
from normlab.models.bn_cnn import bn_cnn
from normlab.papers import paper
from normlab.surgery.batchnorm import recalibration_footprint
from normlab.training.classifier import accuracy, train_classifier
from normlab.training.unlearn import UNLEARN_METHODS, UNLEARN_MODES, recalibration_gap

_RECAL = ("forget_acc", "retain_test_acc")
_ARMS = [(method, mode) for method in UNLEARN_METHODS for mode in UNLEARN_MODES]

__all__ = ["CLAIM", "run"]


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Forget accuracy before/after recalibration (full retain set and the 10-image attacker),
    per unlearning method and mode, for a BatchNorm CNN."""
    generator = seed_everything(seed)
    data = load_digits_tensors(seed)
    kw = {"batch": config["batch"], "attacker_images": config["attacker_images"]}
    sets, loaders = forget_retain_split(data, seed % 10, generator=generator, **kw)
    base = bn_cnn(config["width"], config["depth"], norm="batch", seed=seed)
    gen = torch.Generator().manual_seed(seed)
    kw = {k: config[k] for k in ("epochs", "batch", "lr")}
    trained = train_classifier(base, data.train_x, data.train_y, generator=gen, **kw)
    state = {k: v.clone() for k, v in base.state_dict().items()}
    table, diverged = {}, {}
    kw = {k: config[k] for k in ("batch", "stop_acc", "max_steps")}
    kw |= {"lr": config["unlearn_lr"], "generator": generator}
    for method, mode in _ARMS:
        model = bn_cnn(config["width"], config["depth"], norm="batch", seed=seed)
        model.load_state_dict(state)
        arm = f"batch/{method}/{mode}"
        table[arm], div = recalibration_gap(model, method, mode, sets, loaders, **kw)
        row = table[arm]  # the same network after the weight-free pass: an arm of its own
        table[f"{arm}/recalibrated"] = {k: row[f"{k}_recalibrated"] for k in _RECAL}
        if (div := trained.fit.diverged or div) is not None:
            diverged[arm] = diverged[f"{arm}/recalibrated"] = div.record()
    return {"table": table, "forget_class": seed % 10, "diverged": diverged}


def _check_groupnorm(config: Mapping[str, Any]) -> CheckOutcome:
    data = load_digits_tensors(0)
    x, y = data.train_x[:256], data.train_y[:256]
    shape = (config["width"], config["depth"])
    gn = recalibration_footprint(
        bn_cnn(*shape, norm="group", seed=0), [(x,)], metric=lambda m: accuracy(m, x, y)
    )
    bn = recalibration_footprint(bn_cnn(*shape, norm="batch", seed=0), [(x,)])
    ok = gn["modules"] == gn["state_changed"] == gn["gap"] == 0.0 == bn["weights_changed"]
    return CheckOutcome(
        ok,
        gn["gap"],
        "GroupNorm CNN: recalibration finds no running statistics and changes no "
        f"tensor (gap {gn['gap']:g}); BatchNorm CNN: recalibration changes no weight "
        f"({not bn['weights_changed']})",
    )


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    arms = [f"batch/{k}/{mode}" for k, mode in _ARMS]
    after = ("unlearning", "10-image recalibration", "full retain recalibration")
    metrics = ("forget_acc", "forget_acc_attacker", "forget_acc_recalibrated")
    for j, (metric, name) in enumerate(zip(metrics, after, strict=True)):
        means = [sum(cell(m, a, metric) for m in measurements) / len(measurements) for a in arms]
        ax.bar([i + 0.27 * j for i in range(len(arms))], means, width=0.27, label=f"after {name}")
    ax.set_xticks([i + 0.27 for i in range(len(arms))], arms, rotation=20, fontsize=8)
    ax.set_ylabel("forget-class accuracy (mean over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


_PP5 = Margin(
    0.05,
    "normlab's choice: 5 pp is well above the 1/n_forget ~ 0.7 pp accuracy resolution "
    "and far below the paper's 78 pp",
)
_ARM = "batch/grad-ascent/train"


_KW = {"direction": "greater", "margin": _PP5, "unit": "accuracy"}


def _gap(name: str, description: str, arm: str) -> Effect:
    return difference(name, description, f"{arm}/recalibrated", arm, "forget_acc", **_KW)


_COMMON = {"lr": 3e-3, "batch": 64, "unlearn_lr": 1e-3, "stop_acc": 0.05, "attacker_images": 10}

CLAIM = register_claim(
    Claim(
        id="bn-unlearning",
        paper=paper("bn-unlearning"),
        hypothesis=(
            "After unlearning a class from a BatchNorm CNN, one weight-free recalibration "
            "pass over retain data raises the forget accuracy the surface metric showed as "
            "forgotten, and 10 unlabelled images recover most of that rise."
        ),
        primary=_gap(
            "bn_artifact",
            "rise of forget accuracy under a weight-free recalibration of the BatchNorm "
            "statistics on the retain set (after minus before), BatchNorm CNN unlearned by "
            "gradient ascent in train mode to the surface stopping rule",
            _ARM,
        ),
        secondary=(
            _gap(
                "bn_artifact_neggrad",
                "the recalibration gap for NegGrad+ (train mode, BatchNorm)",
                "batch/neggrad+/train",
            ),
            Effect(
                "attacker_recovers_most",
                "forget-accuracy rise from recalibration on 10 unlabelled test images as a "
                "fraction of the rise from the full retain set (gradient ascent, train mode)",
                lambda m: cell(m, _ARM, "attacker_fraction"),
                direction="greater",
                margin=Margin(0.5, "the abstract's 'most of it': more than half"),
                method=_ARM,
            ),
            difference(
                "train_mode_causes_artifact",
                "recalibration gap of train-mode minus eval-mode unlearning (gradient ascent, "
                "BatchNorm); see the module docstring for why it came out negative",
                _ARM,
                "batch/grad-ascent/eval",
                "recal_gap",
                **_KW,
            ),
        ),
        premises=(
            Premise(
                "learned_before",
                "forget-class accuracy of the trained BatchNorm model",
                lambda m: cell(m, _ARM, "forget_acc_trained"),
                direction="greater",
                margin=Margin(0.8, "normlab's choice: there must be something to forget"),
            ),
        ),
        preconditions=(
            Precondition(
                "surface_forgetting",
                "forget accuracy right after train-mode gradient-ascent unlearning (BatchNorm)",
                lambda m: cell(m, _ARM, "forget_acc"),
                "<=",
                0.2,
                "normlab's choice: the surface metric must say the class was forgotten",
            ),
        ),
        free_settings=(
            FreeSetting.scaled("stop_acc", "normlab's choice: the surface stopping rule", 0.4),
            FreeSetting.scaled("unlearn_lr", "normlab's choice: SGD lr of unlearning", 0.3, 3.0),
            FreeSetting.scaled("lr", "normlab's choice: Adam lr of training", 1 / 3, 3.0),
            *(
                FreeSetting.scaled(key, f"normlab's choice: {why}")
                for key, why in (
                    ("epochs", "the training budget"),
                    ("batch", "images per step"),
                    ("max_steps", "unlearning's step cap"),
                    ("width", "a small CNN"),
                    ("depth", "conv layers"),
                )
            ),
        ),
        sourced={"attacker_images": "paper: abstract (an attacker with as few as 10 images)"},
        # at 3e-4 unlearning may reach neither the stopping rule nor the surface forgetting
        # the premises need within max_steps (both lrs' neighbours were robust at quick)
        decisive="unlearn_lr",
        untuned="the trained networks are the objects of the test and unlearning runs to a "
        "stopping rule; normlab's fixed lrs are free settings",
        checks=(
            Check(
                "groupnorm_no_artifact",
                "recalibration of a GroupNorm CNN changes nothing (no running statistics), and "
                "of a BatchNorm CNN changes no weight",
                _check_groupnorm,
            ),
        ),
        quote="the artifact reverses headline forget accuracy by up to 78 pp across nine "
        "evaluated methods on standard benchmarks",
        headline="Recalibration reverses forget accuracy by up to 78 pp across nine methods; "
        "10 unlabelled images recover most of it; GroupNorm control: 0.",
        setup=(
            "3-layer BatchNorm CNN on sklearn digits; forget class = seed mod 10; unlearning by "
            "gradient ascent or NegGrad+ (SGD, stopped once eval forget accuracy <= 5%) in "
            "train or eval mode; forget accuracy before/after recalibration on the retain set "
            "or on 10 unlabelled test images; the GroupNorm control (no running statistics, "
            "gap 0 by construction) is a check."
        ),
        scale_note="two unlearning methods of the paper's nine; digits instead of CIFAR.",
        configs={
            scale: {**_COMMON, "seeds": n, "max_steps": steps, "width": w, "depth": d, "epochs": e}
            for scale, n, steps, w, d, e in (
                ("smoke", 1, 5, 8, 2, 1),
                ("quick", 6, 200, 32, 3, 6),
                ("full", 10, 200, 64, 4, 30),
            )
        },
        run=run,
        figure=_figure,
        caption=(
            "Forget-class accuracy per unlearning arm: right after unlearning (blue), after "
            "the 10-image attacker's recalibration (orange) and after a full retain pass "
            "(green). Taller orange/green bars than blue are the BatchNorm artifact."
        ),
    )
)
