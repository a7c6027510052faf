"""Claim "looped": the Fully Looped Transformer trains stably where a plain looped one degrades.

The seed reports that a Looped Transformer (one shared stack run ``k`` times, with input
injection) collapses as ``k`` grows (12 loops), through gradient oscillation and residual
explosion, while the Fully Looped Transformer, with inter-loop signals at every layer and
attention injection (two parameter-free changes), trains stably; at mild loop counts it is
no worse (better downstream).

Here every arm is a TinyGPT whose stack of ``n_layers`` >= 2 shared blocks is looped
(:class:`~normlab.models.gpt.GPTConfig` ``loops``), so "inter-loop signals across all layers"
differs from a signal at the loop's entry. The public material fixes no concrete form, so
both changes are normlab's readings, each also tested alone: ``loop_signal`` (block ``l`` of
loop ``k`` reads the mean of the running stream and the stream that entered block ``l`` in
loop ``k - 1``) and ``attention_injection`` (the standard injection ``h + e`` is kept and the
embedding is also injected through the first block's existing attention, ``+ attn_0(
norm1_0(e))``). Arms at the large loop count: plain (standard input injection only), fully
looped (both changes), loop signal alone, attention injection alone (the two single-change
ablations at full scale only: quick's budget affords four arms); at the mild count: plain and
fully looped. Each arm's learning rate is tuned by the harness over the same grid on the
trainer's validation windows; the chosen model is scored on disjoint held-out windows. A
run that diverges counts as the uniform byte predictor (``log2(vocab)`` bits per byte) and a
1000x residual growth. Residual growth is ``log(rms(h_final) / rms(h_embed))``
on held-out windows.

Premise: the plain looped model degrades at the large loop count (its held-out bpb is worse
than at the mild count; measured before this premise, with one block per loop: 6 loops
scored as well as or better than 2, and nothing diverged at 6 or 12 loops). Where it does
not, the stability effects are untestable at this scale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from normlab.claims.catalogue._lm_settings import HELD_OUT, UNIFORM_BPB, lm_free
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
from normlab.claims.protocol import tune_arms
from normlab.data.corpus import VOCAB, corpus, sample_batch
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.papers import paper
from normlab.training.lm import LMTrainConfig, evaluate_bpb, train_lm

__all__ = ["ARMS", "CLAIM", "QUICK_ARMS", "run"]

#: arm -> (loop count key, loop_signal, attention_injection).
ARMS: dict[str, tuple[str, bool, bool]] = {
    "plain-large": ("loops_large", False, False),
    "fully-large": ("loops_large", True, True),
    "signal-large": ("loops_large", True, False),
    "attn-large": ("loops_large", False, True),
    "plain-mild": ("loops_mild", False, False),
    "fully-mild": ("loops_mild", True, True),
}
#: The arms quick trains: the single-change ablations are full-only (their effects too).
QUICK_ARMS = ["plain-large", "fully-large", "plain-mild", "fully-mild"]


def _gpt(config: Mapping[str, Any], arm: str) -> GPTConfig:
    key, signal, injection = ARMS[arm]
    return GPTConfig(
        d_model=config["d_model"],
        n_layers=config["n_layers"],
        n_heads=config["n_heads"],
        context=config["context"],
        loops=config[key],
        loop_signal=signal,
        attention_injection=injection,
    )


def _train_config(config: Mapping[str, Any], lr: float) -> LMTrainConfig:
    return LMTrainConfig(
        steps=config["steps"],
        batch=config["batch"],
        lr=float(lr),
        warmup=config["warmup"],
        grad_clip=config["grad_clip"],
        eval_batches=config["eval_batches"],
    )


@torch.no_grad()
def _residual_growth(model: TinyGPT, config: Mapping[str, Any], seed: int) -> float:
    gen = torch.Generator().manual_seed(HELD_OUT + seed)
    x, _ = sample_batch(corpus("val"), config["eval_batch"], config["context"], gen)
    states, _ = model.trunk(x)
    rms = [float(s.square().mean().sqrt()) for s in (states[0], states[-1])]
    return math.log(rms[1] / rms[0])


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Every arm with the same lr search (selected on validation), scored on held-out text."""
    seed_everything(seed)

    def evaluate(arm: str, params: dict[str, Any]) -> tuple[float, Any]:
        model, log = train_lm(_gpt(config, arm), _train_config(config, params["lr"]), seed)
        val = math.inf if log.get("diverged") else float(log["val_bpb"][-1])
        return (val if math.isfinite(val) else math.inf), (model, log)

    # reference: the uniform byte predictor's 8 bits per byte (evaluate's unit)
    tuned, records = tune_arms(config, evaluate, reference=UNIFORM_BPB)
    table: dict[str, dict[str, float]] = {}
    diverged: dict[str, Any] = {}
    held = {"batches": config["eval_batches"], "batch": config["eval_batch"]}
    for arm, t in tuned.items():
        model, log = t.result
        score = math.inf
        if not log.get("diverged"):
            score = evaluate_bpb(model, seed=HELD_OUT + seed, **held)
        if not math.isfinite(score):  # diverged in training, or at evaluation
            diverged[arm] = log.get("diverged") or {"step": config["steps"], "last": None}
            table[arm] = {"val_bpb": UNIFORM_BPB, "residual_growth": math.nan}
        else:
            table[arm] = {
                "val_bpb": score,
                "residual_growth": _residual_growth(model, config, seed),
            }
        table[arm]["lr"] = t.chosen["lr"]
    out = {"table": table, "tuning": records}
    return {**out, "diverged": diverged} if diverged else out


def _check_parameter_free(config: Mapping[str, Any]) -> CheckOutcome:
    """Same parameter count in every arm, and one loop of the fully looped model is exactly
    the ordinary (unlooped) model on the same weights."""
    torch.manual_seed(0)
    counts = {TinyGPT(_gpt(config, arm)).num_parameters() for arm in ARMS}
    fully = _gpt(config, "fully-large")
    one = TinyGPT(GPTConfig(**{**fully.to_dict(), "loops": 1}))
    base = TinyGPT(GPTConfig(**{**fully.to_dict(), "loops": 1, "loop_signal": False,
                                "attention_injection": False}))  # fmt: skip
    one.load_state_dict(base.state_dict())
    x = torch.randint(0, VOCAB, (2, config["context"]), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        err = float((one(x) - base(x)).abs().max())
    gap = max(counts) - min(counts)
    ok = gap == 0 and err == 0.0
    return CheckOutcome(ok, float(gap) + err, f"parameter gap {gap}, one-loop max diff {err:.1e}")


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [arm for arm in ARMS if arm in measurements[0]["table"]]
    for i, name in enumerate(names):
        vals = [m["table"][name]["val_bpb"] for m in measurements]
        ax.scatter([i] * len(vals), vals, color="C0" if name.startswith("plain") else "C1")
    ax.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
    ax.set_ylabel("held-out val bits/byte")
    fig.tight_layout()
    return fig


_BPB_MARGIN = Margin(
    0.05,
    "normlab's choice: 0.05 bpb is several seed-to-seed standard deviations of a quick "
    "TinyGPT and far below the gap of a collapsed run",
)
_IF_DIVERGED = {"val_bpb": UNIFORM_BPB, "residual_growth": math.log(1e3)}
_LARGE_GATED = ("stability_gap", "signal_alone", "attention_alone", "residual_explosion")


def _vs_plain(name: str, arm: str, what: str, scales: tuple[str, ...] = ()) -> Any:
    return difference(
        name,
        f"{what} minus plain looped held-out val bits/byte at the large loop count (each at "
        "its tuned lr)",
        arm,
        "plain-large",
        "val_bpb",
        direction="less",
        margin=_BPB_MARGIN,
        unit="bpb",
        if_diverged=_IF_DIVERGED,
        scales=scales,
    )


_FULL = ("full",)
_BASE = {
    "d_model": 32,
    "n_layers": 2,
    "n_heads": 2,
    "context": 32,
    "batch": 16,
    "warmup": 10,
    "grad_clip": 1.0,
    "eval_batches": 2,
    "eval_batch": 16,
    "loops_mild": 2,
    "search": {"arms": QUICK_ARMS, "space": {"lr": [3e-3, 1e-2]}, "extend": 1},
}

CLAIM = register_claim(
    Claim(
        id="looped",
        paper=paper("looped"),
        hypothesis=(
            "At many loop iterations a plain Looped Transformer degrades or diverges while the "
            "Fully Looped Transformer (inter-loop signals at every layer, attention injection) "
            "trains stably; at a mild loop count the Fully Looped model is no worse."
        ),
        primary=_vs_plain("stability_gap", "fully-large", "fully looped"),
        secondary=(
            _vs_plain(
                "signal_alone", "signal-large", "loop signal alone (normlab's reading)", _FULL
            ),
            _vs_plain(
                "attention_alone",
                "attn-large",
                "attention injection alone (normlab's reading, input injection kept)",
                _FULL,
            ),
            difference(
                "mild_no_worse",
                "fully looped minus plain looped held-out val bits/byte at the mild loop count",
                "fully-mild",
                "plain-mild",
                "val_bpb",
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
                "plain looped held-out bits/byte at the large minus at the mild loop count (a "
                "diverged run counts as the uniform predictor)",
                lambda m: cell(m, "plain-large", "val_bpb") - cell(m, "plain-mild", "val_bpb"),
                direction="greater",
                margin=Margin(
                    0.05, "normlab's choice: as the primary's margin, a degradation that counts"
                ),
                unit="bpb",
                gates=_LARGE_GATED,
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
                "plain looped held-out val bits/byte at the mild loop count",
                lambda m: cell(m, "plain-mild", "val_bpb"),
                "<=",
                4.2,
                "normlab's choice: half a bit below the corpus's byte-unigram entropy "
                "(4.68 bits), so the model has learned context",
            ),
        ),
        free_settings=(
            FreeSetting("loops_mild", 1, 3, "normlab's choice: the mild loop count"),
            FreeSetting.scaled(
                "loops_large", "normlab's choice: quick loops 6, half the paper's 12 (full: 12)"
            ),
            FreeSetting.scaled("grad_clip", "normlab's choice: gradient-norm clipping"),
            *lm_free("d_model", "n_layers", "n_heads", "context", "steps", "batch", "warmup"),
            *lm_free("eval_batches", "eval_batch"),
        ),
        decisive="loops_mild",  # loops_mild 1 turned untestable into inconclusive (stop 31)
        headline="Fully Looped trains stably to 12 loops where baselines collapse; up to "
        "13.2% better average downstream accuracy at mild loop counts.",
        setup=(
            "A stack of 2 TinyGPT blocks (d=32, 2 heads, context 32) looped 6 times (large) "
            "and 2 times (mild): plain (input injection at each loop), fully looped (loop "
            "signal + attention injection, normlab's readings), and each change alone "
            "(full scale); AdamW, lr tuned per arm on validation (quick: {3e-3, 1e-2}), 10 "
            "warm-up steps, clip 1, batch 16; held-out bits per byte."
        ),
        scale_note="quick runs 6 loops of a 2-block d=32 model for 120 steps, four arms (plain "
        "and fully looped at 6 and 2 loops), lr over {3e-3, 1e-2}: its budget; the paper runs "
        "12 loops of a multi-block LM with long pretraining. Full runs 12 loops of 4 blocks, "
        "d=64, 1500 steps, all six arms (with the single-change ablations), lr over "
        "{1e-3, 3e-3, 1e-2}.",
        configs={
            "smoke": {
                **_BASE,
                "seeds": 1,
                "steps": 8,
                "loops_large": 3,
                "context": 16,
                "d_model": 16,
                "search": {"arms": list(ARMS), "space": {"lr": [1e-2]}},
            },
            "quick": {**_BASE, "seeds": 5, "steps": 120, "loops_large": 6},
            "full": {
                **_BASE,
                "seeds": 8,
                "steps": 1500,
                "loops_large": 12,
                "n_layers": 4,
                "d_model": 64,
                "context": 64,
                "batch": 32,
                "search": {"arms": list(ARMS), "space": {"lr": [1e-3, 3e-3, 1e-2]}},
            },
        },
        run=run,
        figure=_figure,
        caption="Held-out bits per byte per arm, one dot per seed (blue: plain looped, "
        "orange: fully looped and its single-change ablations).",
    )
)
