"""Claim "dyt-regime": DyT's benefit over LayerNorm is a regime-dependent regularization.

The seed trains GPT-2-family models with LayerNorm or DyT on 1M to 118M tokens: DyT helps
when data is scarce (many epochs over a small set, 49% of pre-tanh activations saturated)
and hurts when data is plentiful (23% saturated). Here the same TinyGPT is trained for the
same number of steps on a small slice of the corpus (seen for many epochs) and on a slice
``data_ratio`` times larger, with LayerNorm and with DyT (alpha initialised at 2.0 as in
the regime study), and compared on held-out bits per byte. The primary is the crossing as
an intersection-union test of its two parts (DyT/LN held-out loss ratio below 1 - 2% at the
small budget; above 1 + 2% at the large one): supported only when both are. Every arm's
learning rate is tuned by the harness on the trainer's validation windows (quick: the two
rates earlier reports used, {3e-3, 1e-2}, without edge extension, all quick's budget allows;
full: {1e-3, 3e-3, 1e-2} with one extension), and scored on disjoint held-out
windows; the crossing at each of the two fixed rates is reported beside it (measured before
tuning with the earlier min() composite ``min(1 - r_small, r_large - 1)``: +0.0134 [0.0083,
0.0185] at 3e-3 with saturation 0.000, -0.0066 at 1e-2). Premise: scarce data hurts the
baseline (LayerNorm's held-out bpb is worse at the small budget), else there is no regime
to cross. The mechanism needs DyT to saturate (the pre-tanh ``|alpha x| > 2`` in a
measurable fraction of activations), a precondition of the saturation effect only; the lr
is never chosen to make it hold. A diverged run counts as the uniform byte predictor.

normlab's choice: the DyT arm replaces the norms inside the blocks and keeps LayerNorm
before the LM head. With a DyT there as well, TinyGPT at this width never gets past
unigram statistics (measured: 4.48 validation bits per byte after 300 steps against 3.36
for LayerNorm, at learning rates 6e-4 to 3e-3, alpha 0.05 to 2, tied or untied head): the
residual stream grows into the tanh's saturation within about 20 steps, as the cheapest way
to sharpen the logits, and every gradient upstream of the head vanishes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from normlab.claims.catalogue._lm_settings import HELD_OUT, UNIFORM_BPB, lm_free
from normlab.claims.common import QUICK_GPT, seed_everything
from normlab.claims.core import (
    Claim,
    Effect,
    FreeSetting,
    Margin,
    Precondition,
    Premise,
    cell,
    register_claim,
)
from normlab.claims.protocol import tune_arms
from normlab.data.corpus import corpus, sample_batch
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.papers import paper
from normlab.probes.dyt import dyt_saturation
from normlab.training.lm import LMTrainConfig, evaluate_bpb, train_lm

__all__ = ["CLAIM"]


def _train_config(config: Mapping[str, Any], nbytes: int, lr: float) -> LMTrainConfig:
    return LMTrainConfig(
        steps=config["steps"],
        batch=config["batch"],
        lr=float(lr),
        weight_decay=0.0,
        warmup=config["steps"] // 10,
        train_bytes=nbytes,
        eval_every=max(1, config["steps"] // 5),
        eval_batches=2,
    )


def _row(model: TinyGPT, log: dict, arm: str, config: Mapping[str, Any], seed: int) -> dict:
    """Held-out bits per byte (windows disjoint from the selection's), and DyT statistics."""
    held = {"batches": config["eval_batches"], "seed": HELD_OUT + seed}
    row = {"val_bpb": UNIFORM_BPB if log.get("diverged") else evaluate_bpb(model, **held)}
    row["train_bpb"] = log["train_bpb"][-1] if log["train_bpb"] else UNIFORM_BPB
    if arm.startswith("dyt") and not log.get("diverged"):  # on fixed validation windows
        x, _ = sample_batch(
            corpus("val"), 8, model.config.context, torch.Generator().manual_seed(0)
        )
        dyt = dyt_saturation(model, x)
        row.update(saturation=dyt.saturation, mean_abs_alpha_x=dyt.mean_abs_alpha_x)
    return row


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """LN and DyT at a small and a large data budget, each arm's lr tuned on validation;
    held-out bpb at the tuned lr and at every grid lr, and DyT saturation."""
    seed_everything(seed)
    arch = {k: config[k] for k in ("d_model", "n_layers", "n_heads", "context")}
    small = config["small_bytes"]
    budgets = {"small": small, "large": small * config["data_ratio"]}
    trials: dict[tuple[str, float], tuple[TinyGPT, dict]] = {}

    def evaluate(arm: str, params: dict[str, Any]) -> tuple[float, Any]:
        norm, budget = arm.split("-")
        gpt = GPTConfig(norm="layernorm" if norm == "ln" else "dyt-regime",
                        final_norm="layernorm", **arch)  # fmt: skip
        model, log = train_lm(gpt, _train_config(config, budgets[budget], params["lr"]), seed)
        trials[(arm, float(params["lr"]))] = (model, log)
        return (math.inf if log.get("diverged") else float(log["val_bpb"][-1])), (model, log)

    # reference: the uniform byte predictor's 8 bits per byte (evaluate's unit)
    tuned, records = tune_arms(config, evaluate, reference=UNIFORM_BPB)
    table: dict[str, dict[str, float]] = {}
    curves: dict[str, Any] = {}
    diverged: dict[str, Any] = {}
    for arm, t in tuned.items():
        model, log = t.result
        table[arm] = {**_row(model, log, arm, config, seed), "lr": t.chosen["lr"]}
        curves[arm] = {"step": log["eval_step"], "val_bpb": log["val_bpb"]}
        if log.get("diverged"):
            diverged[arm] = log["diverged"]
    for lr in config["report_lrs"]:  # every arm at each reported lr (a grid trial)
        for arm in tuned:
            if (arm, float(lr)) not in trials:
                evaluate(arm, {"lr": lr})
            model, log = trials[(arm, float(lr))]
            table[f"{arm}@{lr:g}"] = _row(model, log, arm, config, seed)
            if log.get("diverged"):
                diverged[f"{arm}@{lr:g}"] = log["diverged"]
    out = {"table": table, "curves": curves, "tuning": records}
    return {**out, "diverged": diverged} if diverged else out


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name in measurements[0]["curves"]:
        style = "-" if name.startswith("ln") else "--"
        colour = "C0" if name.endswith("small") else "C1"
        for k, m in enumerate(measurements):
            c = m["curves"][name]
            ax.plot(c["step"], c["val_bpb"], style, color=colour, alpha=0.7,
                    label=name if k == 0 else None)  # fmt: skip
    ax.set_xlabel("step")
    ax.set_ylabel("validation bits per byte")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _ratio(budget: str, lr: str = "") -> Any:
    at = f"@{lr}" if lr else ""
    return lambda m: (
        cell(m, f"dyt-{budget}{at}", "val_bpb") / cell(m, f"ln-{budget}{at}", "val_bpb")
    )


_RATIO_MARGIN = Margin(
    0.02,
    "normlab's choice: a 2% loss difference, an order of magnitude below the seed's "
    "-27.3% / +18.8% and above a quick TinyGPT's seed-to-seed spread",
)
_IF_DIVERGED = {"val_bpb": UNIFORM_BPB}


def _parts(lr: str = "") -> tuple[Effect, Effect]:
    """The crossing's two parts: DyT wins at the small budget, loses at the large one."""
    at = f"@{lr}" if lr else ""
    where = f" at lr {lr}" if lr else " (each arm at its tuned lr)"
    small = _ratio("small", lr)
    large = _ratio("large", lr)
    return (
        Effect(
            "small_budget_benefit" + (f"_lr{lr}" if lr else ""),
            "1 - DyT/LN held-out loss ratio at the small budget" + where,
            lambda m: 1.0 - small(m),
            direction="greater",
            margin=_RATIO_MARGIN,
            method=f"dyt-small{at}",
            baseline=f"ln-small{at}",
            if_diverged=_IF_DIVERGED,
        ),
        Effect(
            "large_budget_penalty" + (f"_lr{lr}" if lr else ""),
            "DyT/LN held-out loss ratio at the large budget - 1" + where,
            lambda m: large(m) - 1.0,
            direction="greater",
            margin=_RATIO_MARGIN,
            method=f"dyt-large{at}",
            baseline=f"ln-large{at}",
            if_diverged=_IF_DIVERGED,
        ),
    )


def _crossing(name: str, lr: str = "") -> Effect:
    where = f" at the fixed lr {lr}" if lr else ", each arm at its tuned lr"
    return Effect(
        name,
        "DyT beats LayerNorm at the small budget and loses to it at the large one"
        + where
        + " (intersection-union test of the two parts)",
        None,
        direction="greater",
        margin=_RATIO_MARGIN,
        parts=_parts(lr),
    )


_REPORT_LRS = (3e-3, 1e-2)
_ARMS = ["ln-small", "dyt-small", "ln-large", "dyt-large"]
#: Both learning rates the earlier reports used, for every arm (a two-point grid: the
#: choice is always on an edge, so quick extends it one step along the edge it chose).
_SEARCH = {"arms": _ARMS, "space": {"lr": list(_REPORT_LRS)}, "extend": 0}

CLAIM = register_claim(
    Claim(
        id="dyt-regime",
        paper=paper("dyt"),
        hypothesis=(
            "DyT beats LayerNorm in validation loss when data is scarce and loses to it when "
            "data is plentiful, and fewer DyT activations saturate with more data."
        ),
        primary=_crossing("crossing"),
        secondary=(
            *(_crossing(f"crossing_lr{lr:g}", f"{lr:g}") for lr in _REPORT_LRS),
            Effect(
                "saturation_falls",
                "DyT saturated fraction (|alpha x| > 2) at the small minus the large budget",
                lambda m: cell(m, "dyt-small", "saturation") - cell(m, "dyt-large", "saturation"),
                direction="greater",
                margin=Margin(
                    0.02,
                    "normlab's choice: 2 points of saturated fraction, a tenth of the seed's "
                    "49% vs 23%",
                ),
                method="dyt-small",
                baseline="dyt-large",
            ),
        ),
        premises=(
            Premise(
                "scarce_data_hurts_ln",
                "the regime exists in the baseline: LayerNorm's held-out bpb at the small "
                "budget minus at the large one (few bytes seen many times overfit)",
                lambda m: cell(m, "ln-small", "val_bpb") - cell(m, "ln-large", "val_bpb"),
                direction="greater",
                margin=Margin(0.05, "normlab's choice: 0.05 bpb, several seed-to-seed spreads"),
                unit="bpb",
                if_diverged=_IF_DIVERGED,
            ),
        ),
        preconditions=(
            Precondition(
                "dyt_saturates",
                "DyT saturated fraction (|alpha x| > 2) at the small budget, tuned lr",
                lambda m: cell(m, "dyt-small", "saturation"),
                op=">=",
                threshold=0.01,
                source="normlab's choice: the bounding mechanism needs saturation at all "
                "(the seed measures 23-49%); below 1% the tanh is linear",
                gates=("saturation_falls",),
            ),
        ),
        free_settings=(
            *lm_free("d_model", "n_layers", "n_heads", "context", "batch", "eval_batches"),
            *lm_free(steps="normlab's choice: 200 at quick (12 epochs of the small slice)"),
            FreeSetting.scaled("data_ratio", "normlab's choice: large over small budget"),
            FreeSetting.scaled("small_bytes", "normlab's choice: the scarce slice's size"),
            FreeSetting(
                "report_lrs",
                [1e-3, *_REPORT_LRS],
                [*_REPORT_LRS, 3e-2],
                "normlab's choice: the fixed rates earlier reports used, reported beside the "
                "tuned crossing (the primary never reads them)",
            ),
        ),
        # the epochs over the small slice decide whether DyT's regularisation can pay (at
        # 600 quick steps one seed crossed); data_ratio 32 and 128 left it contradicted
        decisive="steps",
        headline=(
            "GPT-2 64M: DyT -27.3% val loss at 1M tokens, +18.8% at 118M; saturation 49% vs 23%."
        ),
        setup=(
            "Byte-level TinyGPT (pre-norm) with LayerNorm or DyT (alpha init 2.0) in every "
            "block (LayerNorm before the head in both: a DyT there stalls TinyGPT at unigram "
            "statistics), same steps, each arm's lr tuned on validation over {3e-3, 1e-2} "
            "(no edge extension at quick), trained on the first `small_bytes` of the stdlib "
            "corpus or `data_ratio` times more; held-out bits per byte."
        ),
        scale_note=(
            "The seed's budgets are 1M-118M tokens on 64M+ parameter models; quick uses "
            "8 KB vs 512 KB on a 0.1M-parameter TinyGPT for 200 steps of batch 8 (12 "
            "epochs of the small slice), so only the sign pattern carries over (at 600 "
            "steps one seed crossed, 0.885 / 1.093). Quick's budget (7 seeds, which the "
            "intersection-union primary's null calibration needs) allows 8 runs of 200 "
            "steps per seed: the two grid rates, no edge extension (an edge choice is "
            "flagged); full tunes over three rates with one extension, 1500 steps."
        ),
        configs={
            "smoke": {
                "seeds": 1,
                **QUICK_GPT,
                "d_model": 32,
                "steps": 8,
                "batch": 4,
                "search": _SEARCH,
                "report_lrs": list(_REPORT_LRS),
                "small_bytes": 4096,
                "data_ratio": 16,
                "eval_batches": 1,
            },
            "quick": {
                "seeds": 7,
                **QUICK_GPT,
                "steps": 200,
                "batch": 8,
                "search": {**_SEARCH, "extend": 1},
                "report_lrs": list(_REPORT_LRS),
                "small_bytes": 8192,
                "data_ratio": 64,
                "eval_batches": 8,
            },
            "full": {
                "seeds": 5,
                "d_model": 128,
                "n_layers": 4,
                "n_heads": 4,
                "context": 128,
                "steps": 1500,
                "batch": 32,
                "search": {"arms": _ARMS, "space": {"lr": [1e-3, 3e-3, 1e-2]}},
                "report_lrs": list(_REPORT_LRS),
                "small_bytes": 65_536,
                "data_ratio": 128,
                "eval_batches": 16,
            },
        },
        run=run,
        figure=_figure,
        caption=(
            "Validation bits per byte during training: solid LayerNorm, dashed DyT; blue the "
            "small data budget, orange the large. DyT should end below LayerNorm in blue and "
            "above it in orange."
        ),
    )
)
