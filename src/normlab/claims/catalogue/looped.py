"""Claim "looped": the Fully Looped Transformer trains stably where a plain looped one degrades.

The seed reports that a Looped Transformer (one shared stack run ``k`` times, with input
injection) collapses as ``k`` grows (12 loops), through gradient oscillation and residual
explosion, while the Fully Looped Transformer, with inter-loop signals at every layer and
attention injection (two parameter-free changes), trains stably; at mild loop counts it is
no worse (better downstream).

Here both arms are TinyGPTs with the same weights' shapes (:class:`~normlab.models.gpt.
GPTConfig` ``loops``; the fully looped arm adds ``loop_signal`` and ``attention_injection``,
normlab's reading of the two changes) trained on the standard-library corpus with
:func:`~normlab.models.lm.train_lm` at a large and at a mild loop count. Each arm gets the
same learning-rate sweep; the lr is picked per arm on the validation windows of the training
log, and the picked model is scored on a separate, held-out set of validation windows. A
run whose loss becomes non-finite counts as diverged and is scored ``log2(vocab)`` bits per
byte (uniform prediction). Residual growth is ``log(rms(h_final) / rms(h_embed))`` on the
held-out windows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from normlab.claims.common import cell, seed_everything
from normlab.claims.core import (
    Check,
    CheckOutcome,
    Claim,
    Effect,
    Margin,
    Precondition,
    register_claim,
)
from normlab.data.corpus import VOCAB, corpus, sample_batch
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.models.lm import LMTrainConfig, evaluate_bpb, train_lm
from normlab.papers import paper

__all__ = ["ARMS", "CLAIM", "run"]

#: arm name -> whether it is fully looped (loop_signal and attention_injection on).
ARMS = {"plain": False, "fully": True}
_HELD_OUT = 50_000  # offset of the held-out validation windows' seed


def _gpt(config: Mapping[str, Any], loops: int, fully: bool) -> GPTConfig:
    return GPTConfig(
        d_model=config["d_model"],
        n_layers=config["n_layers"],
        n_heads=config["n_heads"],
        context=config["context"],
        loops=loops,
        loop_signal=fully,
        attention_injection=fully,
    )


@torch.no_grad()
def _residual_growth(model: TinyGPT, config: Mapping[str, Any], seed: int) -> float:
    gen = torch.Generator().manual_seed(_HELD_OUT + seed)
    x, _ = sample_batch(corpus("val"), config["eval_batch"], config["context"], gen)
    states, _ = model.trunk(x)
    rms = [float(s.square().mean().sqrt()) for s in (states[0], states[-1])]
    return math.log(rms[1] / rms[0])


def _arm(config: Mapping[str, Any], seed: int, loops: int, fully: bool) -> dict[str, float]:
    """Train the arm at every lr; the held-out score of the lr best on the training log."""
    best: tuple[float, float, TinyGPT | None] = (math.inf, math.nan, None)
    diverged = 0
    for lr in config["lrs"]:
        train = LMTrainConfig(
            steps=config["steps"],
            batch=config["batch"],
            lr=lr,
            warmup=config["warmup"],
            grad_clip=config["grad_clip"],
            eval_batches=config["eval_batches"],
        )
        try:
            model, log = train_lm(_gpt(config, loops, fully), train, seed)
        except FloatingPointError:
            diverged += 1
            continue
        val = log["val_bpb"][-1]
        if not math.isfinite(val):
            diverged += 1
            continue
        if val < best[0]:
            best = (val, lr, model)
    uniform = math.log2(VOCAB)
    model = best[2]
    if model is None:  # every lr diverged
        return {
            "val_bpb": uniform,
            "lr": math.nan,
            "diverged": float(diverged),
            "residual_growth": math.nan,
            "selection_bpb": uniform,
        }
    held_out = evaluate_bpb(
        model, batches=config["eval_batches"], batch=config["eval_batch"], seed=_HELD_OUT + seed
    )
    return {
        "val_bpb": held_out if math.isfinite(held_out) else uniform,
        "selection_bpb": best[0],
        "lr": best[1],
        "diverged": float(diverged),
        "residual_growth": _residual_growth(model, config, seed),
    }


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Both arms at the large and the mild loop count, each with the same lr sweep."""
    seed_everything(seed)
    table = {}
    for count in ("large", "mild"):
        loops = config[f"loops_{count}"]
        for arm, fully in ARMS.items():
            table[f"{arm}-{count}"] = _arm(config, seed, loops, fully)
    return {"table": table}


def _check_parameter_free(config: Mapping[str, Any]) -> CheckOutcome:
    """Same parameter count in both arms, and one loop of the fully looped model is exactly
    the ordinary (unlooped) model on the same weights."""
    torch.manual_seed(0)
    plain = TinyGPT(_gpt(config, config["loops_large"], False))
    fully = TinyGPT(_gpt(config, config["loops_large"], True))
    one = TinyGPT(_gpt(config, 1, True))
    base = TinyGPT(_gpt(config, 1, False))
    one.load_state_dict(base.state_dict())
    x = torch.randint(0, VOCAB, (2, config["context"]), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        err = float((one(x) - base(x)).abs().max())
    gap = abs(plain.num_parameters() - fully.num_parameters())
    ok = gap == 0 and err == 0.0
    return CheckOutcome(ok, float(gap) + err, f"parameter gap {gap}, one-loop max diff {err:.1e}")


def _gap(count: str, first: str, second: str, metric: str = "val_bpb") -> Any:
    return lambda m: cell(m, f"{first}-{count}", metric) - cell(m, f"{second}-{count}", metric)


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = list(measurements[0]["table"])
    for i, name in enumerate(names):
        vals = [m["table"][name]["val_bpb"] for m in measurements]
        ax.scatter([i] * len(vals), vals, color="C0" if name.startswith("plain") else "C1")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("held-out val bits/byte")
    fig.tight_layout()
    return fig


_BASE = {
    "d_model": 32,
    "n_layers": 1,
    "n_heads": 2,
    "context": 32,
    "batch": 16,
    "warmup": 10,
    "grad_clip": 1.0,
    "eval_batches": 2,
    "eval_batch": 16,
    "lrs": [3e-3, 1e-2],
    "loops_mild": 2,
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
        primary=Effect(
            "stability_gap",
            "plain looped minus fully looped held-out val bits/byte at the large loop count "
            "(each at its best lr of the same sweep)",
            _gap("large", "plain", "fully"),
            direction="greater",
            margin=Margin(
                0.05,
                "normlab's choice: 0.05 bpb is several seed-to-seed standard deviations of "
                "a quick TinyGPT and far below the gap of a collapsed run",
            ),
            baseline="plain looped",
            unit="bpb",
        ),
        secondary=(
            Effect(
                "mild_no_worse",
                "fully looped minus plain looped held-out val bits/byte at the mild loop count",
                _gap("mild", "fully", "plain"),
                direction="no_greater",
                margin=Margin(
                    0.05,
                    "normlab's choice: a loss of at most 0.05 bpb is within the noise of a "
                    "quick TinyGPT run",
                ),
                baseline="plain looped",
                unit="bpb",
            ),
            Effect(
                "residual_explosion",
                "plain minus fully looped log(rms of the final hidden state / rms of the "
                "embedding) at the large loop count",
                _gap("large", "plain", "fully", "residual_growth"),
                direction="greater",
                margin=Margin(
                    math.log(1.5),
                    "normlab's choice: a 1.5x larger final residual stream is a clear growth",
                ),
                baseline="plain looped",
            ),
        ),
        checks=(
            Check(
                "parameter_free",
                "both arms have the same parameters, and one loop of the fully looped model "
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
        headline="Fully Looped trains stably to 12 loops where baselines collapse; up to "
        "13.2% better average downstream accuracy at mild loop counts.",
        setup=(
            "One-block TinyGPT (d=32, 2 heads, context 32) looped 6 times (large) and 2 times "
            "(mild), plain (input injection at each loop) vs fully looped; AdamW, lr in "
            "{3e-3, 1e-2} for each arm, 10 warm-up steps, clip 1, batch 16."
        ),
        scale_note="quick runs 6 loops of a 1-block d=32 model for 150 steps (the paper: 12 "
        "loops of a multi-block LM, long pretraining); full runs 12 loops of 2 blocks, d=64.",
        configs={
            "smoke": {
                **_BASE,
                "seeds": 1,
                "steps": 8,
                "loops_large": 3,
                "lrs": [1e-2],
                "context": 16,
                "d_model": 16,
            },
            "quick": {**_BASE, "seeds": 5, "steps": 150, "loops_large": 6},
            "full": {
                **_BASE,
                "seeds": 8,
                "steps": 1500,
                "loops_large": 12,
                "n_layers": 2,
                "d_model": 64,
                "context": 64,
                "batch": 32,
                "lrs": [1e-3, 3e-3, 1e-2],
            },
        },
        run=run,
        figure=_figure,
        caption="Held-out bits per byte per arm and loop count, one dot per seed "
        "(blue: plain looped, orange: fully looped).",
    )
)
