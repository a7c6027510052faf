"""Claim "bn-unlearning": BatchNorm running statistics confound unlearning evaluation.

The seed shows that one forward pass over retain data, which changes no weight, rewrites a
BatchNorm network's running statistics and reverses much of the apparent forgetting
(forget accuracy rises by up to 78 pp across nine methods), that an attacker with as few as
10 unlabelled images recovers most of the masked accuracy, and that a GroupNorm network has
no such artifact.

Here a small BatchNorm CNN (:mod:`normlab.models.bn_cnn`) is trained on scikit-learn's
digits; one class (``seed % 10``) is unlearned by gradient ascent on it ("grad-ascent") or
by ascent on it plus descent on the retain classes ("neggrad+"), until the surface metric
says it worked (eval-mode forget accuracy <= ``stop_acc``, or ``max_steps``). Two modes:
"train" (as unlearning code usually runs, so BatchNorm statistics follow the forget-heavy
batches it sees) and "eval" (running statistics frozen during unlearning). Forget accuracy
(on the forget class's training images) is then measured before and after
:func:`~normlab.surgery.batchnorm.recalibrate_bn` over (a) every retain training image and
(b) the attacker's 10 unlabelled test images (any class, drawn by the seed).

Control: a GroupNorm CNN of the same shape, trained and unlearned the same way (gradient
ascent, train mode, the same stopping rule); GroupNorm keeps no running statistics, so its
recalibration gap is zero by construction, and the primary is the BatchNorm gap minus the
GroupNorm gap. The stopping rule pins the pre-recalibration forget accuracy at
``stop_acc`` in every arm (the paper's setting: unlearning "succeeded" on the surface
metric). The 10-image attacker is also reported as the fraction of the full retain gap it
recovers ("most of it": above one half).

Train versus eval mode: the docstring's earlier mechanism (statistics following the
forget-heavy batches cause the artifact, so train mode should show more) is measured as
``train_mode_causes_artifact`` and came out contradicted (-0.05 [-0.08, -0.02] at the
previous quick run). normlab's reading: in eval mode the weights are optimised against
frozen statistics that no longer describe the changed weights' features, so recalibration
moves the network at least as much; the artifact is a mismatch between weights and
statistics whichever way it arises. The effect stays as measured.

Nothing is tuned: the trained networks are the objects of the test and the unlearning runs
to a stopping rule, with normlab's fixed learning rates as free settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    Precondition,
    Premise,
    cell,
    difference,
    register_claim,
)
from normlab.data.images import load_digits_tensors
from normlab.models.bn_cnn import NormCNN, bn_cnn
from normlab.papers import paper
from normlab.surgery.batchnorm import recalibrate_bn
from normlab.training.fit import Divergence, EpochBatches, fit
from normlab.training.unlearn import UNLEARN_METHODS, UNLEARN_MODES, unlearn

__all__ = ["CLAIM", "MODES"]

METHODS = UNLEARN_METHODS
MODES = UNLEARN_MODES


@torch.no_grad()
def _accuracy(model: NormCNN, x: torch.Tensor, y: torch.Tensor) -> float:
    was = model.training
    model.eval()
    acc = float((model(x).argmax(1) == y).float().mean())
    model.train(was)
    return acc


def _train(
    model: NormCNN,
    x: torch.Tensor,
    y: torch.Tensor,
    config: Mapping[str, Any],
    generator: torch.Generator,
) -> Divergence | None:
    batches = EpochBatches(len(y), config["batch"], generator)
    return fit(
        model,
        lambda m, idx: F.cross_entropy(m(x[idx]), y[idx]),
        batches,
        batches.steps(config["epochs"]),
        torch.optim.Adam(model.parameters(), lr=config["lr"]),
    ).diverged


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Forget accuracy before/after recalibration (full retain set and the 10-image attacker),
    per unlearning method and mode, for a BatchNorm CNN."""
    generator = seed_everything(seed)
    data = load_digits_tensors(seed)
    target = seed % 10
    is_forget = data.train_y == target
    forget = (data.train_x[is_forget], data.train_y[is_forget])
    retain = (data.train_x[~is_forget], data.train_y[~is_forget])
    pick = torch.randperm(len(data.test_y), generator=generator)[: config["attacker_images"]]
    attacker = [(data.test_x[pick],)]
    loader = [
        (retain[0][i : i + config["batch"]],) for i in range(0, len(retain[1]), config["batch"])
    ]
    test_keep = data.test_y != target
    test = (data.test_x[test_keep], data.test_y[test_keep])
    trained, base_div = {}, {}
    for norm in ("batch", "group"):
        base = bn_cnn(config["width"], config["depth"], norm=norm, seed=seed)
        gen = torch.Generator().manual_seed(seed)
        base_div[norm] = _train(base, data.train_x, data.train_y, config, gen)
        trained[norm] = {k: v.clone() for k, v in base.state_dict().items()}
    diverged: dict[str, Any] = {}
    table: dict[str, dict[str, float]] = {}

    def metric(m: NormCNN) -> dict[str, float]:
        return {"forget_acc": _accuracy(m, *forget), "retain_test_acc": _accuracy(m, *test)}

    arms = [("batch", method, mode) for method in METHODS for mode in MODES]
    for norm, method, mode in [*arms, ("group", "grad-ascent", "train")]:
        model = bn_cnn(config["width"], config["depth"], norm=norm, seed=seed)
        model.load_state_dict(trained[norm])
        row = {"forget_acc_trained": _accuracy(model, *forget)}
        steps, div = unlearn(
            model,
            method,
            forget,
            retain,
            lr=config["unlearn_lr"],
            batch=config["batch"],
            stop_acc=config["stop_acc"],
            max_steps=config["max_steps"],
            generator=generator,
            mode=mode,
        )
        unlearned = {k: v.clone() for k, v in model.state_dict().items()}
        full = recalibrate_bn(model, loader, metric=metric)
        model.load_state_dict(unlearned)
        attack = recalibrate_bn(model, attacker, metric=metric)
        row.update(
            forget_acc=full.before["forget_acc"],
            forget_acc_recalibrated=full.after["forget_acc"],
            forget_acc_attacker=attack.after["forget_acc"],
            retain_test_acc=full.before["retain_test_acc"],
            retain_test_acc_recalibrated=full.after["retain_test_acc"],
            bn_mean_shift=full.mean_shift,
            unlearn_steps=float(steps),
        )
        row["recal_gap"] = row["forget_acc_recalibrated"] - row["forget_acc"]
        attack_gap = row["forget_acc_attacker"] - row["forget_acc"]
        row["attacker_fraction"] = attack_gap / max(row["recal_gap"], 0.01)
        table[f"{norm}/{method}/{mode}"] = row
        if (div := base_div[norm] or div) is not None:
            diverged[f"{norm}/{method}/{mode}"] = div.record()
    return {"table": table, "forget_class": target, "diverged": diverged}


def _check_groupnorm(config: Mapping[str, Any]) -> CheckOutcome:
    data = load_digits_tensors(0)
    model = bn_cnn(config["width"], config["depth"], norm="group", seed=0)
    x, y = data.train_x[:256], data.train_y[:256]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    record = recalibrate_bn(model, [(x,)], metric=lambda m: _accuracy(m, x, y))
    same = all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    gap = max((abs(v) for v in record.gap.values()), default=0.0)
    bn = bn_cnn(config["width"], config["depth"], norm="batch", seed=0)
    weights = {k: v.clone() for k, v in bn.named_parameters()}
    recalibrate_bn(bn, [(x,)])
    kept = all(torch.equal(weights[k], v) for k, v in bn.named_parameters())
    ok = same and gap == 0.0 and not record.modules and kept
    return CheckOutcome(
        ok,
        gap,
        "GroupNorm CNN: recalibration finds no running statistics and changes no "
        f"tensor (gap {gap:g}); BatchNorm CNN: recalibration changes no weight ({kept})",
    )


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    arms = [f"batch/{k}/{mode}" for k in METHODS for mode in MODES]
    bars = (
        ("forget_acc", "after unlearning"),
        ("forget_acc_attacker", "after 10-image recalibration"),
        ("forget_acc_recalibrated", "after full retain recalibration"),
    )
    for j, (metric, name) in enumerate(bars):
        means = [sum(cell(m, a, metric) for m in measurements) / len(measurements) for a in arms]
        ax.bar([i + 0.27 * j for i in range(len(arms))], means, width=0.27, label=name)
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
_GN = "group/grad-ascent/train"

CLAIM = register_claim(
    Claim(
        id="bn-unlearning",
        paper=paper("bn-unlearning"),
        hypothesis=(
            "After unlearning a class from a BatchNorm CNN, one weight-free recalibration "
            "pass over retain data raises forget accuracy more than in a GroupNorm CNN "
            "unlearned the same way, and 10 unlabelled images recover most of that rise."
        ),
        primary=difference(
            "bn_artifact_vs_groupnorm",
            "rise of forget accuracy under recalibration on the retain set (after minus "
            "before), BatchNorm CNN minus GroupNorm CNN, both unlearned by gradient ascent in "
            "train mode to the same stopping rule",
            _ARM,
            _GN,
            "recal_gap",
            direction="greater",
            margin=_PP5,
            unit="accuracy",
        ),
        secondary=(
            Effect(
                "bn_artifact_neggrad",
                "the recalibration gap for NegGrad+ (train mode, BatchNorm)",
                lambda m: cell(m, "batch/neggrad+/train", "recal_gap"),
                direction="greater",
                margin=_PP5,
                method="batch/neggrad+/train",
                unit="accuracy",
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
                direction="greater",
                margin=_PP5,
                unit="accuracy",
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
            Precondition(
                "control_forgot",
                "forget accuracy right after the same unlearning of the GroupNorm CNN",
                lambda m: cell(m, _GN, "forget_acc"),
                "<=",
                0.2,
                "normlab's choice: the control must have 'forgotten' the same way",
                gates=("bn_artifact_vs_groupnorm",),
            ),
        ),
        free_settings=(
            FreeSetting.scaled("stop_acc", "normlab's choice: the surface stopping rule", 0.4),
            FreeSetting.scaled("unlearn_lr", "normlab's choice: SGD lr of unlearning", 0.3, 3.0),
            FreeSetting.scaled("lr", "normlab's choice: Adam lr of training", 1 / 3, 3.0),
            FreeSetting.scaled("epochs", "normlab's choice: the training budget"),
            FreeSetting.scaled("batch", "normlab's choice: images per step"),
            FreeSetting.scaled("max_steps", "normlab's choice: unlearning's step cap"),
            FreeSetting.scaled("width", "normlab's choice: a small CNN"),
            FreeSetting.scaled("depth", "normlab's choice: conv layers"),
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
        headline="Recalibration reverses forget accuracy by up to 78 pp across nine methods; "
        "10 unlabelled images recover most of it; GroupNorm control: 0.",
        setup=(
            "3-layer BatchNorm CNN on sklearn digits; forget class = seed mod 10; unlearning by "
            "gradient ascent or NegGrad+ (SGD, stopped once eval forget accuracy <= 5%) in "
            "train or eval mode; forget accuracy before/after recalibration on the retain set "
            "or on 10 unlabelled test images; control: a GroupNorm CNN of the same shape "
            "through the same gradient-ascent unlearning."
        ),
        scale_note="two unlearning methods of the paper's nine; digits instead of CIFAR.",
        configs={
            "smoke": {
                "seeds": 1,
                "lr": 3e-3,
                "batch": 64,
                "unlearn_lr": 1e-3,
                "stop_acc": 0.05,
                "max_steps": 5,
                "width": 8,
                "depth": 2,
                "epochs": 1,
                "attacker_images": 10,
            },
            "quick": {
                "seeds": 6,
                "lr": 3e-3,
                "batch": 64,
                "unlearn_lr": 1e-3,
                "stop_acc": 0.05,
                "max_steps": 200,
                "width": 32,
                "depth": 3,
                "epochs": 6,
                "attacker_images": 10,
            },
            "full": {
                "seeds": 10,
                "lr": 3e-3,
                "batch": 64,
                "unlearn_lr": 1e-3,
                "stop_acc": 0.05,
                "max_steps": 200,
                "width": 64,
                "depth": 4,
                "epochs": 30,
                "attacker_images": 10,
            },
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
