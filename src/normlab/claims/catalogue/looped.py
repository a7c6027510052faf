"""Claim "looped": the Fully Looped Transformer trains stably where a plain looped one degrades.

The seed: a Looped Transformer (one shared stack run ``k`` times, with input injection)
collapses as ``k`` grows (12 loops) through gradient oscillation and residual explosion; the
Fully Looped Transformer (inter-loop signals at every layer, attention injection: two
parameter-free changes) trains stably, and is no worse (better downstream) at mild counts.

Here each arm loops a stack of ``n_layers`` >= 2 shared TinyGPT blocks, plain or with the
changes of :mod:`normlab.models.looped` (normlab's readings: the public material fixes no
form), both and, at full, each alone; lr tuned per arm on "val", scored on "test" (bits per
byte, :func:`~normlab.probes.depth.residual_growth`). A diverged run counts as the uniform
predictor and a 1000x growth. Premise (the catalogue's): plain degrades at the large count.
Quick runs the paper's 12 loops for 240 steps; at this scale plain did not collapse (seed
0, lr 1e-2: 3.53 validation bpb at 12 loops, 3.75 at 2), and each arm's own tuned lr can
step around an instability that a shared recipe would hit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from normlab.claims.arms import Trained, run_arms
from normlab.claims.catalogue._lm_settings import UNIFORM_BPB, lm_free, lm_trial, test_windows
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
from normlab.models.gpt import GPTConfig
from normlab.models.looped import loop_parity, looped_config
from normlab.papers import paper
from normlab.probes.depth import residual_growth
from normlab.training.lm import LMTrainConfig, evaluate_bpb

__all__ = ["CLAIM"]

#: The arms: ``<variant>-<large|mild>`` (:data:`~normlab.models.looped.VARIANTS`) at the
#: config's ``loops_large`` or ``loops_mild``.
_ARMS = ["plain-large", "fully-large", "signal-large", "attn-large", "plain-mild", "fully-mild"]
#: The arms quick trains: the single-change ablations are full-only (their effects too).
_QUICK_ARMS = ["plain-large", "fully-large", "plain-mild", "fully-mild"]


def _gpt(config: Mapping[str, Any], arm: str) -> GPTConfig:
    variant, count = arm.split("-")
    return looped_config(config, config[f"loops_{count}"], variant)


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Every arm with the same lr search (selected on validation), scored on test text."""
    seed_everything(seed)
    x, _ = test_windows(config["eval_batch"], config["context"], seed)
    held = {"batches": config["eval_batches"], "batch": config["eval_batch"], "seed": seed}

    def train(arm: str, params: dict[str, Any], seed: int) -> Trained:
        keys = ("steps", "batch", "warmup", "grad_clip", "eval_batches")
        tc = LMTrainConfig(lr=float(params["lr"]), **{k: config[k] for k in keys})
        return lm_trial(_gpt(config, arm), tc, seed)

    def test(arm: str, t: Trained) -> dict[str, float]:
        model, _ = t.model
        score = math.inf if t.diverged else evaluate_bpb(model, "test", **held)
        if not math.isfinite(score):  # diverged in training, or at evaluation
            return {"test_bpb": UNIFORM_BPB, "residual_growth": _IF_DIVERGED["residual_growth"]}
        return {"test_bpb": score, "residual_growth": residual_growth(model, x)}

    return run_arms(config, seed, train, test, reference=UNIFORM_BPB)  # the uniform predictor


def _check_parameter_free(config: Mapping[str, Any]) -> CheckOutcome:
    """Same parameter count in every arm, and one loop of the fully looped model is exactly
    the ordinary (unlooped) model on the same weights."""
    gap, err = loop_parity(_gpt(config, "fully-large"))
    ok = gap == 0 and err == 0.0
    return CheckOutcome(ok, float(gap) + err, f"parameter gap {gap}, one-loop max diff {err:.1e}")


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [arm for arm in _ARMS if arm in measurements[0]["table"]]
    for i, name in enumerate(names):
        vals = [m["table"][name]["test_bpb"] for m in measurements]
        ax.scatter([i] * len(vals), vals, color="C0" if name.startswith("plain") else "C1")
    ax.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
    ax.set_ylabel("test bits/byte")
    fig.tight_layout()
    return fig


_BPB_MARGIN = Margin(
    0.05,
    "normlab's choice: 0.05 bpb is several seed-to-seed standard deviations of a quick "
    "TinyGPT and far below the gap of a collapsed run",
)
_IF_DIVERGED = {"test_bpb": UNIFORM_BPB, "residual_growth": math.log(1e3)}


def _vs_plain(name: str, arm: str, what: str) -> Any:
    """``arm`` against plain at the large count (the single changes: full scale only)."""
    return difference(
        name,
        f"{what} minus plain looped test bits/byte at the large loop count (each at its tuned lr)",
        arm,
        "plain-large",
        "test_bpb",
        direction="less",
        margin=_BPB_MARGIN,
        unit="bpb",
        if_diverged=_IF_DIVERGED,
        scales=() if arm in _QUICK_ARMS else ("full",),
    )


_SHAPE = {"d_model": 32, "n_layers": 2, "n_heads": 2, "context": 32, "loops_mild": 2}
_TRAINING = {"batch": 16, "warmup": 10, "grad_clip": 1.0, "eval_batches": 2, "eval_batch": 16}
_SEARCH = {"arms": _QUICK_ARMS, "space": {"lr": [3e-3, 1e-2]}, "extend": 1}
_BASE = {**_SHAPE, **_TRAINING, "search": _SEARCH}
#: Smoke: every arm (the code paths) on a smaller model; full: a larger one, 12 loops.
_SMOKE = {"steps": 8, "loops_large": 3, "context": 16, "d_model": 16}
_FULL = {"steps": 1500, "loops_large": 12, "n_layers": 4, "d_model": 64, "context": 64}
_SMOKE["search"] = {"arms": list(_ARMS), "space": {"lr": [1e-2]}}
_FULL.update(batch=32, search={"arms": list(_ARMS), "space": {"lr": [1e-3, 3e-3, 1e-2]}})

CLAIM = register_claim(
    Claim(
        id="looped",
        paper=paper("looped"),
        quote="enabling the Fully Looped Transformer to be trained stably up to 12 loop "
        "iterations, whereas other baseline looped models collapse in this regime",
        hypothesis=(
            "At many loop iterations a plain Looped Transformer degrades or diverges while the "
            "Fully Looped Transformer (inter-loop signals at every layer, attention injection) "
            "trains stably; at a mild loop count the Fully Looped model is no worse."
        ),
        primary=_vs_plain("stability_gap", "fully-large", "fully looped"),
        secondary=(
            _vs_plain("signal_alone", "signal-large", "loop signal alone (normlab's reading)"),
            _vs_plain(
                "attention_alone",
                "attn-large",
                "attention injection alone (normlab's reading, input injection kept)",
            ),
            difference(
                "mild_no_worse",
                "fully looped minus plain looped test bits/byte at the mild loop count",
                "fully-mild",
                "plain-mild",
                "test_bpb",
                direction="no_greater",
                margin=Margin(
                    0.05,
                    "normlab's choice: a loss of at most 0.05 bpb is within the noise of a "
                    "quick TinyGPT run",
                ),
                unit="bpb",
                if_diverged=_IF_DIVERGED,
            ),
            difference(
                "residual_explosion",
                "fully minus plain looped log(rms of the final hidden state / rms of the "
                "embedding) at the large loop count",
                "fully-large",
                "plain-large",
                "residual_growth",
                direction="less",
                margin=Margin(
                    math.log(1.5),
                    "normlab's choice: a 1.5x larger final residual stream is a clear growth",
                ),
                if_diverged=_IF_DIVERGED,
            ),
        ),
        premises=(
            Premise(
                "plain_degrades",
                "plain looped test bits/byte at the large minus at the mild loop count (a "
                "diverged run counts as the uniform predictor)",
                lambda m: cell(m, "plain-large", "test_bpb") - cell(m, "plain-mild", "test_bpb"),
                direction="greater",
                margin=Margin(
                    0.05, "normlab's choice: as the primary's margin, a degradation that counts"
                ),
                unit="bpb",
                gates=("stability_gap", "signal_alone", "attention_alone", "residual_explosion"),
                if_diverged=_IF_DIVERGED,
            ),
        ),
        checks=(
            Check(
                "parameter_free",
                "every arm has the same parameters, and one loop of the fully looped model "
                "equals the ordinary model exactly",
                _check_parameter_free,
            ),
        ),
        preconditions=(
            Precondition(
                "mild_trained",
                "plain looped test bits/byte at the mild loop count",
                lambda m: cell(m, "plain-mild", "test_bpb"),
                "<=",
                4.2,
                "normlab's choice: half a bit below the corpus's byte-unigram entropy "
                "(4.68 bits), so the model has learned context",
            ),
        ),
        free_settings=(
            FreeSetting("loops_mild", 1, 3, "normlab's choice: the mild loop count"),
            FreeSetting.scaled("grad_clip", "normlab's choice: gradient-norm clipping"),
            *lm_free("d_model", "n_layers", "n_heads", "context", "steps", "batch", "warmup"),
            *lm_free("eval_batches", "eval_batch"),
        ),
        sourced={"loops_large": "paper: abstract, stable up to 12 loop iterations"},
        decisive="loops_mild",  # loops_mild 1 turned untestable into inconclusive (stop 31)
        headline="Fully Looped trains stably to 12 loops where baselines collapse; up to "
        "13.2% better average downstream accuracy at mild loop counts.",
        setup=(
            "A stack of 2 TinyGPT blocks (d=32, 2 heads, context 32) looped 12 times (large) "
            "and 2 times (mild): plain (input injection at each loop), fully looped (loop "
            "signal + attention injection, normlab's readings), and each change alone "
            "(full scale); AdamW, lr tuned per arm on validation (quick: {3e-3, 1e-2}), 10 "
            "warm-up steps, clip 1, batch 16; test bits per byte."
        ),
        scale_note="quick runs the paper's 12 loops of a 2-block d=32 model for 240 steps, four "
        "arms (plain and fully looped at 12 and 2 loops), lr over {3e-3, 1e-2}: about 90 "
        "CPU-s a seed; the paper pretrains a multi-block LM. Full runs 4 blocks, d=64, 1500 "
        "steps, all six arms, lr over {1e-3, 3e-3, 1e-2}.",
        configs={
            "smoke": {**_BASE, **_SMOKE, "seeds": 1},
            "quick": {**_BASE, "seeds": 5, "steps": 240, "loops_large": 12},
            "full": {**_BASE, **_FULL, "seeds": 8},
        },
        run=run,
        figure=_figure,
        caption="Test bits per byte per arm, one dot per seed (blue: plain looped, "
        "orange: fully looped and its single-change ablations).",
    )
)
