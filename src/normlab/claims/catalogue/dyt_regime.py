"""Claim "dyt-regime": DyT's benefit over LayerNorm is a regime-dependent regularization.

The seed trains GPT-2-family models with LayerNorm or DyT on 1M to 118M tokens: DyT helps
when data is scarce (many epochs over a small set, 49% of pre-tanh activations saturated)
and hurts when data is plentiful (23% saturated). Here the same TinyGPT is trained for the
same number of steps on a small slice of the corpus (seen for many epochs) and on a slice
``data_ratio`` times larger, with LayerNorm and with DyT (alpha initialised at 2.0 as in the
regime study), and compared on held-out bits per byte. The primary effect is the crossing
itself: the DyT/LN validation-loss ratio below 1 at the small budget *and* above 1 at the
large one, scored as ``min(1 - r_small, r_large - 1)`` (positive only when both hold).
The mechanism needs DyT to saturate: the pre-tanh ``|alpha x| > 2`` in a measurable
fraction of activations, a precondition. At the learning rate of the other quick TinyGPTs
(3e-3) it never does (measured: 0.0 at either budget, mean ``|alpha x|`` 0.15, though the
ratios already cross, 0.84 and 1.09); at 1e-2 the residual stream grows into the tanh's
saturation (27% at the small budget), so quick uses 1e-2 for both norms. The crossing
needs training time: seed 0 at 600 steps gave ratios 0.885 / 1.093 (crossing +0.09), at the
quick budget's 400 steps 0.986 / 0.997 (no crossing; saturation 32%).

normlab's choice: the DyT arm replaces the norms inside the blocks and keeps LayerNorm
before the LM head. With a DyT there as well, TinyGPT at this width never gets past
unigram statistics (measured: 4.48 validation bits per byte after 300 steps against 3.36
for LayerNorm, at learning rates 6e-4 to 3e-3, alpha 0.05 to 2, tied or untied head): the
residual stream grows into the tanh's saturation within about 20 steps, as the cheapest way
to sharpen the logits, and every gradient upstream of the head vanishes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from normlab.claims.common import QUICK_GPT, cell, seed_everything
from normlab.claims.core import Claim, Effect, Margin, Precondition, register_claim
from normlab.data.corpus import corpus, sample_batch
from normlab.layers.dyt import DyT
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.models.lm import LMTrainConfig, evaluate_bpb, train_lm
from normlab.papers import paper
from normlab.probes.hooks import adapt

__all__ = ["CLAIM", "dyt_statistics"]


@torch.no_grad()
def dyt_statistics(model: TinyGPT, *, batch: int = 8, threshold: float = 2.0) -> dict[str, float]:
    """Saturation and scale of the pre-tanh values ``alpha x``, pooled over DyT layers.

    ``saturation`` is the fraction with ``|alpha x| > threshold`` (the regime study's
    statistic); ``mean_abs_alpha_x`` their mean magnitude. Measured on fixed validation
    windows through the model adapter, which leaves the model unchanged.
    """
    generator = torch.Generator().manual_seed(0)
    x, _ = sample_batch(corpus("val"), batch, model.config.context, generator)
    adapter = adapt(model)
    trace = adapter.trace(x, norms=True)
    sites = [s for s in adapter.norm_sites() if isinstance(s.module, DyT)]
    if not sites:
        raise ValueError("The model has no DyT layers to measure saturation on.")
    saturated = magnitude = total = 0.0
    for site in sites:
        inputs = trace.norm_inputs[site.name]
        saturated += site.module.saturation(inputs, threshold) * inputs.numel()
        magnitude += float((site.module.alpha * inputs).abs().sum())
        total += inputs.numel()
    return {"saturation": saturated / total, "mean_abs_alpha_x": magnitude / total}


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Validation bpb of LN and DyT at a small and a large data budget, and DyT saturation."""
    seed_everything(seed)
    arch = {k: config[k] for k in ("d_model", "n_layers", "n_heads", "context")}
    table: dict[str, dict[str, float]] = {}
    curves: dict[str, Any] = {}
    for budget, nbytes in (
        ("small", config["small_bytes"]),
        ("large", config["small_bytes"] * config["data_ratio"]),
    ):
        train = LMTrainConfig(
            steps=config["steps"],
            batch=config["batch"],
            lr=config["lr"],
            weight_decay=0.0,
            warmup=config["steps"] // 10,
            train_bytes=nbytes,
            eval_every=max(1, config["steps"] // 5),
            eval_batches=2,
        )
        for norm in ("layernorm", "dyt-regime"):
            model, log = train_lm(
                GPTConfig(norm=norm, final_norm="layernorm", **arch), train, seed
            )
            name = f"{'dyt' if norm != 'layernorm' else 'ln'}-{budget}"
            row = {"val_bpb": evaluate_bpb(model, batches=config["eval_batches"], seed=seed)}
            row["train_bpb"] = log["train_bpb"][-1]
            if norm != "layernorm":
                row.update(dyt_statistics(model))
            table[name] = row
            curves[name] = {"step": log["eval_step"], "val_bpb": log["val_bpb"]}
    return {"table": table, "curves": curves}


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


def _ratio(budget: str) -> Any:
    return lambda m: cell(m, f"dyt-{budget}", "val_bpb") / cell(m, f"ln-{budget}", "val_bpb")


def _crossing(m: Mapping[str, Any]) -> float:
    return min(1.0 - _ratio("small")(m), _ratio("large")(m) - 1.0)


_RATIO_MARGIN = Margin(
    0.02,
    "normlab's choice: a 2% loss difference, an order of magnitude below the seed's "
    "-27.3% / +18.8% and above a quick TinyGPT's seed-to-seed spread",
)
_BASELINE = "LayerNorm at the same budget"

CLAIM = register_claim(
    Claim(
        id="dyt-regime",
        paper=paper("dyt"),
        hypothesis=(
            "DyT beats LayerNorm in validation loss when data is scarce and loses to it when "
            "data is plentiful, and fewer DyT activations saturate with more data."
        ),
        primary=Effect(
            "crossing",
            "min(1 - DyT/LN loss ratio at the small budget, DyT/LN ratio at the large "
            "budget - 1): positive when DyT wins small and loses large",
            _crossing,
            direction="greater",
            margin=_RATIO_MARGIN,
            baseline=_BASELINE,
        ),
        secondary=(
            Effect(
                "small_budget_benefit",
                "1 - DyT/LN validation-loss ratio at the small budget",
                lambda m: 1.0 - _ratio("small")(m),
                direction="greater",
                margin=_RATIO_MARGIN,
                baseline=_BASELINE,
            ),
            Effect(
                "large_budget_penalty",
                "DyT/LN validation-loss ratio at the large budget - 1",
                lambda m: _ratio("large")(m) - 1.0,
                direction="greater",
                margin=_RATIO_MARGIN,
                baseline=_BASELINE,
            ),
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
                baseline="DyT at the large budget",
            ),
        ),
        preconditions=(
            Precondition(
                "dyt_saturates",
                "DyT saturated fraction (|alpha x| > 2) at the small budget",
                lambda m: cell(m, "dyt-small", "saturation"),
                op=">=",
                threshold=0.01,
                source="normlab's choice: the bounding mechanism needs saturation at all "
                "(the seed measures 23-49%); below 1% the tanh is linear",
            ),
        ),
        headline=(
            "GPT-2 64M: DyT -27.3% val loss at 1M tokens, +18.8% at 118M; saturation 49% vs 23%."
        ),
        setup=(
            "Byte-level TinyGPT (pre-norm) with LayerNorm or DyT (alpha init 2.0) in every "
            "block (LayerNorm before the head in both: a DyT there stalls TinyGPT at unigram "
            "statistics), same steps and learning rate, trained on the first `small_bytes` "
            "of the stdlib corpus or `data_ratio` times more; held-out bits per byte."
        ),
        scale_note=(
            "The seed's budgets are 1M-118M tokens on 64M+ parameter models; quick uses "
            "8 KB vs 512 KB on a 0.1M-parameter TinyGPT for 400 steps, so only the sign "
            "pattern carries over; at 600 steps one seed crossed (0.885 / 1.093), which "
            "quick's budget cannot afford for five seeds (quick also uses batch 8, not 16, to "
            "fit the catalogue's time budget)."
        ),
        configs={
            "smoke": {
                "seeds": 1,
                **QUICK_GPT,
                "d_model": 32,
                "steps": 8,
                "batch": 4,
                "lr": 1e-2,
                "small_bytes": 4096,
                "data_ratio": 16,
                "eval_batches": 1,
            },
            "quick": {
                "seeds": 5,
                **QUICK_GPT,
                "steps": 400,
                "batch": 8,
                "lr": 1e-2,
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
                "lr": 2e-3,
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
        version=2,
    )
)
