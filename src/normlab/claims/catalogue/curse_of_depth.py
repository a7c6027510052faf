"""Claim "curse-of-depth": sparsity dampens Pre-LN variance growth and keeps deep layers useful.

The seed links the curse of depth (deep Pre-LN layers contributing little) to the growth of
the residual stream's variance, and reports that sparsity-like mechanisms (weight decay,
grouped-query attention, mixture-of-experts) lower the output variance and improve layer
utilisation (32 layers: 39.5 -> 44.1 downstream accuracy with its recipe).

Here a deep, narrow TinyGPT is trained dense (no weight decay) and in three sparser
variants: weight decay 0.3 (the seed recipe's, at every scale), GQA with one key/value
head, and a 2-of-4 MoE-lite MLP (same active width); at full scale LayerNorm-Scaling is
added for reference. Quick scale trains only the dense and weight-decay arms (the report's
budget affords four runs per seed), so the GQA and MoE effects are declared for full scale
only. Every arm's learning rate is tuned by the harness over the same grid
(:data:`~normlab.claims.catalogue._depth_models.LR_GRID`, shared with "swap-kl" so the
dense trials are trained once), selected on the trainer's validation windows; the probes
read disjoint validation text.
Each trained model is probed with :func:`~normlab.probes.depth.depth_profile`: the per-block
log-variance slope (variance growth) and, as usefulness of the deep layers, the mean
next-token loss increase when one block of the deeper half is dropped. Each variant is its
own effect against the dense model; the primary is the seed's payoff for weight decay (the
first mechanism of its recipe): the deep layers become more useful. Variance damping is a
secondary.

Premises: the dense model shows the curse (dropping one of its deep blocks costs less than
dropping one of its shallow blocks), and, for the variance effects, its residual variance
grows with depth. A diverged arm counts as useless deep layers (drop loss 0) and an
exploding stream (1 ln V per block).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from normlab.claims.catalogue._depth_models import SETTINGS, search, trained, trial
from normlab.claims.catalogue._lm_settings import UNIFORM_BPB, lm_free
from normlab.claims.common import seed_everything
from normlab.claims.core import (
    Claim,
    Effect,
    Margin,
    Precondition,
    Premise,
    cell,
    register_claim,
)
from normlab.claims.protocol import tune_arms
from normlab.data.corpus import corpus, sample_batch
from normlab.papers import paper
from normlab.probes.depth import depth_profile
from normlab.training.lm import evaluate_bpb

__all__ = ["CLAIM"]

SPARSE = ("weight-decay", "gqa", "moe")


@torch.no_grad()
def _weight_rms(model: torch.nn.Module) -> float:
    """Root mean square over every weight matrix's entries (norm gains excluded)."""
    mats = [p for n, p in model.named_parameters() if p.dim() >= 2 and "norm" not in n]
    total = sum(float(p.square().sum()) for p in mats)
    return (total / sum(p.numel() for p in mats)) ** 0.5


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Depth profiles of the dense model and each sparser variant, lr tuned per arm."""
    seed_everything(seed)
    generator = torch.Generator().manual_seed(20_000 + seed)
    x, y = sample_batch(corpus("val"), config["eval_batch"], config["context"], generator)
    table: dict[str, dict[str, float]] = {}
    curves: dict[str, Any] = {}
    diverged: dict[str, Any] = {}
    tuned, records = tune_arms(  # reference: the uniform byte predictor's 8 bits per byte
        config, trial(config, seed), ["dense", *config["variants"]], reference=UNIFORM_BPB
    )
    for variant, t in tuned.items():
        model, log = t.result
        if log.get("diverged"):
            diverged[variant] = log["diverged"]
        profile = depth_profile(model, x, targets=y)
        n = len(profile.drop_loss)
        deep, shallow = profile.drop_loss[n // 2 :], profile.drop_loss[: n // 2]
        table[variant] = {
            "val_bpb": evaluate_bpb(model, batches=2, batch=config["eval_batch"], seed=seed),
            "variance_growth": profile.variance_growth,
            "variance_ratio": profile.variance[-1] / profile.variance[0],
            "deep_drop_loss": sum(deep) / len(deep),
            "shallow_drop_loss": sum(shallow) / len(shallow),
            "deep_influence": sum(profile.influence[n // 2 :]) / len(deep),
            "weight_rms": _weight_rms(model),
            "lr": t.chosen["lr"],
            "train_seconds": float(log.get("seconds", 0.0)),
        }
        curves[variant] = profile.to_dict()
    if "weight-decay" in table:
        # the dense model at the weight-decay arm's lr (a trial of the shared grid, cached):
        # the weight RMS ratio then isolates the decay from the lr choice
        dense_same_lr, _ = trained(config, seed, "dense", table["weight-decay"]["lr"])
        table["weight-decay"]["dense_weight_rms_same_lr"] = _weight_rms(dense_same_lr)
    out = {"table": table, "curves": curves, "tuning": records}
    return {**out, "diverged": diverged} if diverged else out


def _damped(variant: str) -> Any:
    return lambda m: cell(m, "dense", "variance_growth") - cell(m, variant, "variance_growth")


def _useful(variant: str) -> Any:
    return lambda m: cell(m, variant, "deep_drop_loss") - cell(m, "dense", "deep_drop_loss")


_VAR_MARGIN = Margin(
    0.01,
    "normlab's choice: 0.01 per block is 8% of the log variance over 8 blocks, the "
    "smallest damping a depth-scaling study would notice",
)
_USE_MARGIN = Margin(
    0.005,
    "normlab's choice: 0.005 nats (0.007 bpb) per dropped block, about the seed-to-seed "
    "spread of a quick TinyGPT's loss",
)
_NAMES = {"weight-decay": "weight decay", "gqa": "GQA (1 kv head)", "moe": "MoE-lite (2 of 4)"}
_DENSE = "dense pre-LN TinyGPT, no weight decay"
#: A diverged arm: its deep layers are useless and its stream explodes.
_IF_DIVERGED = {"deep_drop_loss": 0.0, "variance_growth": 1.0}


def _scales(variant: str) -> tuple[str, ...]:
    """GQA and MoE arms are trained at smoke (code path) and full, not at quick."""
    return () if variant == "weight-decay" else ("full",)


def _variance_effect(variant: str) -> Effect:
    return Effect(
        f"variance_damped_{variant.replace('-', '_')}",
        f"dense minus {_NAMES[variant]} per-block log-variance slope",
        _damped(variant),
        direction="greater",
        margin=_VAR_MARGIN,
        baseline="dense",
        method=variant,
        unit="ln V / block",
        if_diverged=_IF_DIVERGED,
        scales=_scales(variant),
    )


def _use_effect(variant: str) -> Effect:
    return Effect(
        f"deep_useful_{variant.replace('-', '_')}",
        f"{_NAMES[variant]} minus dense loss increase from dropping one deep-half block",
        _useful(variant),
        direction="greater",
        margin=_USE_MARGIN,
        baseline="dense",
        method=variant,
        unit="nats",
        if_diverged=_IF_DIVERGED,
        scales=_scales(variant),
    )


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    m = measurements[0]["curves"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for k, (name, prof) in enumerate(m.items()):
        ax1.plot(prof["variance"], "o-", color=f"C{k}", label=name, ms=3)
        ax2.plot(prof["drop_loss"], "o-", color=f"C{k}", label=name, ms=3)
    ax1.set(yscale="log", xlabel="residual state", ylabel="output variance (seed 0)")
    ax2.set(xlabel="dropped block", ylabel="loss increase (nats)")
    for ax in (ax1, ax2):
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax1.legend(fontsize=7)
    fig.tight_layout()
    return fig


_EVAL = {"eval_batch": 16}
_VARIANCE_EFFECTS = tuple(f"variance_damped_{v.replace('-', '_')}" for v in SPARSE)
_ARMS = ["dense", *SPARSE]
#: Quick's arms: the report's budget affords two trials of two arms per seed.
_QUICK_ARMS = ["dense", "weight-decay"]

CLAIM = register_claim(
    Claim(
        id="curse-of-depth",
        paper=paper("curse-of-depth"),
        hypothesis=(
            "Sparser Pre-LN TinyGPTs (weight decay 0.3, GQA, MoE) have deep layers whose "
            "removal costs more than the dense model's, and lower residual variance growth "
            "with depth."
        ),
        primary=_use_effect("weight-decay"),
        secondary=(
            _use_effect("gqa"),
            _use_effect("moe"),
            *(_variance_effect(v) for v in SPARSE),
        ),
        premises=(
            Premise(
                "dense_deep_layers_lazy",
                "the curse of depth in the dense model: mean loss increase from dropping one "
                "shallow-half block minus one deep-half block",
                lambda m: (
                    cell(m, "dense", "shallow_drop_loss") - cell(m, "dense", "deep_drop_loss")
                ),
                direction="greater",
                margin=Margin(0.0, "normlab's choice: deep blocks matter less than shallow"),
                unit="nats",
            ),
            Premise(
                "dense_variance_grows",
                "the dense model's per-block log-variance slope",
                lambda m: cell(m, "dense", "variance_growth"),
                direction="greater",
                margin=Margin(
                    0.05,
                    "normlab's choice: the variance mechanism needs a growing residual "
                    "variance in the baseline (5% per block)",
                ),
                unit="ln V / block",
                gates=_VARIANCE_EFFECTS,
            ),
        ),
        free_settings=(
            *lm_free("d_model", "n_layers", "n_heads", "context", "batch", "warmup", "eval_batch"),
            *lm_free(lr="normlab's choice: an untuned trial's rate (every arm's lr is tuned)"),
            *lm_free(steps="normlab's choice: 150 at quick, cut for the report's budget"),
        ),
        sourced={
            "weight_decay": "paper: the recipe's weight decay 0.3 (its code, REFERENCE.md)",
            "variants": "paper: abstract (weight decay, GQA, MoE); quick: weight decay only",
        },
        # the budget: at 250 steps the dense model trains (3.45-3.70 bpb) and the verdict
        # was contradicted, at 150 untestable (issue 34)
        decisive="steps",
        preconditions=(
            Precondition(
                "dense_trained",
                "the dense model's validation bits per byte",
                lambda m: cell(m, "dense", "val_bpb"),
                op="<=",
                threshold=3.8,
                source="normlab's choice: well below the corpus's byte-unigram entropy "
                "(about 5 bpb), so the deep blocks have learned something to lose",
            ),
            Precondition(
                "weight_decay_shrinks",
                "weight RMS of the weight-decay model over the dense model's trained at the "
                "same lr",
                lambda m: (
                    cell(m, "weight-decay", "weight_rms")
                    / cell(m, "weight-decay", "dense_weight_rms_same_lr")
                ),
                op="<=",
                threshold=0.95,
                source="normlab's choice: a weight decay that leaves the weights within 5% "
                "of the dense run's did not act",
                gates=("variance_damped_weight_decay", "deep_useful_weight_decay"),
            ),
        ),
        headline="32-layer LLM recipe (longer context, weight decay 0.3, GQA, MoE): "
        "39.5 -> 44.1 average downstream accuracy.",
        setup=(
            "Pre-LN byte-level TinyGPT (8 layers, d=32 quick; 12 layers, d=64 full) trained "
            "dense (wd 0) vs weight decay 0.3 (quick and full) vs GQA (1 kv head) and "
            "MoE-lite (2 of 4 experts) (full only), each arm's lr tuned on validation over "
            "{3e-3, 1e-2} (quick, no edge step) or {1e-3, 2e-3, 4e-3} (full, +1 edge step); "
            "depth probe on disjoint validation text."
        ),
        scale_note=(
            "Quick trains 8 blocks for 150 steps (cut for the report's budget), dense and "
            "weight decay only; weight decay 0.3 may not act within 150 steps (then the "
            "weight_decay_shrinks precondition fails and its effects are untestable) and the "
            "dense model may miss the 3.8 bpb precondition. The seed's effect is a "
            "depth-scaling one (32 layers, billions of tokens) and should be judged at full "
            "scale, where GQA and MoE are measured too."
        ),
        configs={
            "smoke": {
                "seeds": 1,
                **SETTINGS["smoke"],
                **_EVAL,
                "variants": list(SPARSE),
                "search": search("smoke", _ARMS),
            },
            "quick": {
                "seeds": 5,
                **SETTINGS["quick"],
                **_EVAL,
                "variants": ["weight-decay"],
                "search": search("quick", _QUICK_ARMS),
            },
            "full": {
                "seeds": 5,
                **SETTINGS["full"],
                "eval_batch": 32,
                "variants": [*SPARSE, "ln-scaling"],
                "search": search("full", [*_ARMS, "ln-scaling"]),
            },
        },
        run=run,
        figure=_figure,
        caption=(
            "Seed 0: residual-stream variance after each block (left, log scale; a flatter "
            "line is damping) and the loss increase when each block is dropped (right; "
            "higher on the deep blocks means they are used)."
        ),
    )
)
