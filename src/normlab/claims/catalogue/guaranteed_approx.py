"""Claim "guaranteed-approx": Softmax/LayerNorm approximations that guarantee sum p = 1 and
sigma = 1 cost a trained language model almost nothing against exact normalization.

A trained byte-level TinyGPT (numerics' model, shared through the model cache) gets its
softmax and LayerNorms swapped without retraining for the datapaths of
:func:`normlab.surgery.approx.datapaths`. Primary (the abstract's "minimal degradation"):
the default datapath's test bits per byte minus the exact model's, no greater than the
paper's 0.09% perplexity (0.0013 bits); a no-worse-than effect, so the null calibration's
100% supported rate is expected and means nothing. Secondaries: the guarantee's benefit
(against the same datapath without the guarantee step), cheap and 8-bit fixed point.
Premises: the exact model learned the text (gates the primary); the unguaranteed cheap
softmax breaks ``sum p = 1`` (gates the guarantee's benefit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from normlab.claims.catalogue._lm_settings import UNIFORM_BPB, lm_curve, lm_free, lm_train_config
from normlab.claims.common import QUICK_GPT, seed_everything
from normlab.claims.core import (
    Check,
    CheckOutcome,
    Claim,
    FreeSetting,
    Margin,
    Premise,
    cell,
    difference,
    register_claim,
)
from normlab.data.corpus import corpus, sample_batch
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.papers import paper
from normlab.surgery.approx import approximate, datapaths, normalization_errors
from normlab.training.fit import late_share
from normlab.training.lm import evaluate_bpb, train_lm

__all__ = ["CLAIM", "run"]


def _trained(config: Mapping[str, Any], seed: int) -> tuple[TinyGPT, dict]:
    arch = {k: config[k] for k in ("d_model", "n_layers", "n_heads", "context")}
    return train_lm(
        GPTConfig(norm="layernorm", score="softmax", **arch), lm_train_config(config), seed
    )


def _probe(config: Mapping[str, Any], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return sample_batch(corpus("test"), config["probe_batch"], config["context"], g)[0]


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Bits per byte of the exact model and of each approximate copy; operator errors."""
    seed_everything(seed)
    model, log = _trained(config, seed)
    x = _probe(config, seed)
    evaluate = {"split": "test", "batches": config["eval_batches"], "batch": 16, "seed": seed}
    bits = config["table_bits"]
    share = late_share(lm_curve(log))  # how far the model trained: reported only
    table = {"exact": {"test_bpb": evaluate_bpb(model, **evaluate), "late_share": share}}
    for name, (softmax_kwargs, ln_kwargs) in datapaths(bits).items():
        kwargs = {"softmax_kwargs": softmax_kwargs, "layernorm_kwargs": ln_kwargs}
        table[name] = {
            "test_bpb": evaluate_bpb(approximate(model, **kwargs), **evaluate),
            **normalization_errors(model, x, **kwargs),
        }
    out: dict[str, Any] = {"table": table}
    out["curves"] = {"train": {"step": log["eval_step"], "val_bpb": log["val_bpb"]}}
    if log.get("diverged"):  # the one shared model diverged: every copy is that model
        out["diverged"] = dict.fromkeys(table, log["diverged"])
    return out


def _check_guarantees(config: Mapping[str, Any]) -> CheckOutcome:
    model, _ = _trained(config, 0)
    x = _probe(config, 0)
    parts, ok, worst = [], True, 0.0
    bits = config["table_bits"]
    for name in ("guaranteed", "guaranteed-fixed8", "default"):
        sm, ln = datapaths(bits)[name]
        errors = normalization_errors(model, x, softmax_kwargs=sm, layernorm_kwargs=ln)
        # One renormalizing Newton step leaves 3 d^2 / 8 of a relative error d = u - 1:
        # d <= 2^-(b+1) with a b-bit table and no Newton step, about 1e-4 at b = 5.
        no_newton = ln.get("newton_steps") == 0
        sigma_tol = 1.1 * 3 * 2.0 ** (-2 * bits - 2) / 8 if no_newton else 1e-5
        ok &= errors["max_sum_error"] <= 1e-6 and errors["max_sigma_error"] <= sigma_tol
        worst = max(worst, errors["max_sum_error"])
        parts.append(
            f"{name}: |sum p - 1| {errors['max_sum_error']:.1e} <= 1e-6, "
            f"|std - std_exact| {errors['max_sigma_error']:.1e} <= {sigma_tol:g}"
        )
    return CheckOutcome(ok, worst, "on the seed-0 model's activations: " + "; ".join(parts))


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    names = list(datapaths())
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for k, m in enumerate(measurements):
        values = [cell(m, n, "test_bpb") - cell(m, "exact", "test_bpb") for n in names]
        ax.plot(values, "o", color="C0", alpha=0.7, label=None if k else "one seed")
    ax.axhline(0.0, color="k", lw=0.5), ax.legend(fontsize=8)
    ax.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
    ax.set_ylabel("test bits per byte minus the exact model's"), fig.tight_layout()
    return fig


_BPB_MARGIN = Margin(
    0.0013,
    "paper: the approximations' own reported cost, perplexity -0.09%, is ln(1.0009) / ln 2 "
    "= 0.0013 bits per token, the tolerance the paper calls minimal degradation",
)
_IF_DIVERGED = {"test_bpb": UNIFORM_BPB}
#: The configs' columns after "seeds"; every scale uses 5-bit tables on the cheap datapath.
_COLUMNS = ("d_model", "n_layers", "n_heads", "context", "steps", "batch", "lr", "eval_batches")


def _config(seeds: int, *values: float) -> dict[str, Any]:
    columns = (*_COLUMNS, "probe_batch")
    return {"seeds": seeds, **dict(zip(columns, values, strict=True)), "table_bits": 5}


CLAIM = register_claim(
    Claim(
        id="guaranteed-approx",
        paper=paper("guaranteed-approx"),
        hypothesis=(
            "Swapped into a trained language model without retraining, the default "
            "shift-and-add Softmax and table LayerNorm approximations that guarantee sum p = 1 "
            "and sigma = 1 raise its bits per byte by no more than the paper's own 0.09% "
            "perplexity change."
        ),
        quote=(
            "In accuracy evaluation, we achieve high accuracy with minimal degradation: GLUE "
            "+0.07%, SQuAD -0.01%, perplexity -0.09%."
        ),
        primary=difference(
            "default_vs_exact",
            "bpb with the default guaranteed approximations (one Newton step) minus the exact "
            "model's (no-worse-than: a null of no difference is supported by design)",
            "default",
            "exact",
            "test_bpb",
            direction="no_greater",
            margin=_BPB_MARGIN,
            unit="bpb",
            if_diverged=_IF_DIVERGED,
        ),
        secondary=tuple(
            difference(
                f"guarantee_helps{tag}",
                f"bpb with guaranteed minus unguaranteed {what} (the benefit of the "
                "guarantee step that motivates the design)",
                f"guaranteed{tag}",
                f"unguaranteed{tag}",
                "test_bpb",
                direction="less",
                margin=_BPB_MARGIN,
                unit="bpb",
                if_diverged=_IF_DIVERGED,
            )
            for tag, what in (
                ("", "cheap datapaths (table_bits-bit tables, no Newton step)"),
                ("-fixed8", "8-bit fixed-point softmax (LayerNorm with / without renormalizing)"),
            )
        ),
        checks=(
            Check(
                "guarantees_hold",
                "on a trained model's activations, guaranteed softmax sums to 1 within 1e-6, "
                "LayerNorm's std is exact within 1e-5 (no Newton step: its 3 d^2 / 8 bound)",
                _check_guarantees,
            ),
        ),
        premises=(
            Premise(
                "exact_model_learned",
                "uniform predictor's bits per byte minus the exact model's test bits per byte",
                lambda m: UNIFORM_BPB - cell(m, "exact", "test_bpb"),
                direction="greater",
                margin=Margin(
                    1.0,
                    "normlab's choice: a model within a bit of the uniform predictor has not "
                    "learned the text, and a small degradation of it says nothing",
                ),
                gates=("default_vs_exact",),
            ),
            Premise(
                "unguaranteed_breaks_sum",
                "largest |sum p - 1| of the unguaranteed cheap softmax on the model's own "
                "attention scores",
                lambda m: cell(m, "unguaranteed", "max_sum_error"),
                direction="greater",
                margin=Margin(
                    1e-3, "normlab's choice: below 0.1% the guarantee has nothing to fix"
                ),
                gates=("guarantee_helps",),
            ),
        ),
        untuned="nothing trains per arm: one trained softmax TinyGPT per seed (shared with "
        "numerics) is evaluated with swapped operators, so every copy has the same training",
        free_settings=(
            FreeSetting(
                "table_bits",
                4,
                6,
                "normlab's choice: the cheapest table the datapath "
                "still trains through, where the guarantee has the most to fix",
            ),
            *lm_free("d_model", "n_layers", "n_heads", "context", "steps", "batch", "lr"),
            *lm_free("eval_batches"),
            FreeSetting.scaled("probe_batch", "normlab's choice: sequences of the error probe"),
        ),
        # how far the shared model trained sets how peaked its attention and how large its
        # activations are, which is what the approximations' error acts on
        decisive="steps",
        headline="GLUE +0.07%, SQuAD -0.01%, perplexity -0.09% with the approximations.",
        setup=(
            "Byte-level pre-LN TinyGPT trained once per seed (shared with numerics); the "
            "default guaranteed datapath against the exact model (primary, no-worse-than: "
            "its interval must lie below the paper's 0.0013 bits; a 100% null rate is "
            "expected), and the cheap (5-bit tables, no Newton step) and 8-bit fixed-point "
            "datapaths with and without the guarantee step, on the same test windows."
        ),
        scale_note=(
            "A 2-block TinyGPT trained 400 steps (the paper: pretrained BERT and GPT-2); its "
            "training curve's late share is about 0.07 (seeds 0.00-0.12). Even the cheap "
            "unguaranteed datapath costs less than the margin here (3e-4 to 1.5e-3 bpb), so "
            "the guarantee's benefit has little to show: both secondaries are contradicted."
        ),
        configs={
            "smoke": _config(1, 32, 1, 2, 32, 6, 4, 3e-3, 1, 2),
            "quick": _config(5, *QUICK_GPT.values(), 400, 16, 3e-3, 8, 8),
            "full": _config(5, 128, 4, 4, 128, 1500, 32, 2e-3, 16, 16),
        },
        run=run,
        figure=_figure,
        caption=(
            "Each approximate copy's bits per byte minus the exact model's, one dot per "
            "seed: a guaranteed datapath should sit lower than its unguaranteed twin."
        ),
    )
)
