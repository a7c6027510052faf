"""Claim "guaranteed-approx": cheap Softmax/LayerNorm approximations that guarantee sum p = 1
and sigma = 1 degrade a trained language model less than the same approximations without it.

The seed builds hardware Softmax and LayerNorm from shift-and-add approximations that still
guarantee the normalization, argues that score-oriented tasks need the guarantee, and
reports GLUE +0.07% and perplexity -0.09%. Here a trained byte-level TinyGPT (the same run
as the numerics claim's model and, at full scale, a trial of kappa-attention's softmax arm,
shared through the model cache) gets its
softmax and LayerNorms swapped for normlab's approximations without retraining
(:func:`normlab.functional.approx_softmax`: base-2 exponent ``2^q (1 + f)``, a table
reciprocal with ``newton_steps`` Newton steps and the rounding residual added to the largest
entry; :class:`normlab.layers.ApproxLayerNorm`: table ``1/sqrt`` renormalized on the measured
variance), and, as the control, the *same datapaths without the guarantee step*
(``guarantee=False``, ``renormalize=False``; one add and one rescale cheaper). The primary
effect is the bits-per-byte difference between the guaranteed and the unguaranteed copy,
with the cheapest datapath (``table_bits``-bit tables, 5 at quick, no Newton step), where
the guarantee has the most to fix; the 8-bit fixed-point softmax is a secondary pair, and the
default datapath (one Newton step) against the exact model is the paper's "minimal
degradation". The verdict is judged against the paper's own tolerance (0.0013 bits per
byte, its 0.09% perplexity): a precise difference smaller than that reads "contradicted:
smaller than the margin", the precise null it is.

Premise: the unguaranteed cheap softmax does break the normalization (largest ``|sum p -
1|`` above 1e-3), else the guarantee has nothing to fix. Nothing is tuned: one trained model
(numerics' model; at full scale also a trial of kappa-attention's learning-rate search) is
evaluated with swapped operators on windows of the corpus's ``test`` split (disjoint by
file from the ``val`` split its training selects on); if its training diverged every copy
counts as the uniform predictor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from normlab import functional as NF
from normlab.claims.catalogue._lm_settings import UNIFORM_BPB, lm_free, lm_train_config
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
from normlab.surgery.approx import approximate
from normlab.training.lm import evaluate_bpb, train_lm

__all__ = ["CLAIM", "VARIANTS"]

#: The datapaths' names; guaranteed and unguaranteed variants of a datapath differ only in
#: the guarantee step (see :func:`_variants`).
VARIANTS = ("guaranteed", "unguaranteed", "guaranteed-fixed8", "unguaranteed-fixed8", "default")


def _variants(table_bits: int = 5) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """name -> (softmax kwargs, LayerNorm kwargs); the cheap datapath has ``table_bits``-bit
    tables and no Newton step."""
    cheap = {"newton_steps": 0, "table_bits": int(table_bits)}
    return {
        "guaranteed": (dict(cheap), dict(cheap)),
        "unguaranteed": ({**cheap, "guarantee": False}, {**cheap, "renormalize": False}),
        "guaranteed-fixed8": ({"frac_bits": 8}, {}),
        "unguaranteed-fixed8": ({"frac_bits": 8, "guarantee": False}, {"renormalize": False}),
        "default": ({}, {}),
    }


@torch.no_grad()
def _operator_errors(
    model: TinyGPT, x: torch.Tensor, variant: str, table_bits: int = 5
) -> dict[str, float]:
    """``|sum p - 1|`` and ``|std - std_exact|`` of ``variant``'s operators on ``model``'s
    own attention scores and LayerNorm inputs (largest over every row), run on ``x``."""
    softmax_kwargs, ln_kwargs = _variants(table_bits)[variant]
    ln_inputs: list[torch.Tensor] = []
    handles = [
        m.register_forward_pre_hook(lambda _m, args: ln_inputs.append(args[0].detach()))
        for m in model.modules()
        if isinstance(m, torch.nn.LayerNorm) or type(m).__name__ == "LayerNorm"
    ]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    approx = approximate(model, softmax_kwargs=softmax_kwargs, layernorm_kwargs=ln_kwargs)
    _, probs = approx(x, return_probs=True)
    sum_error = max(float((p.double().sum(-1) - 1).abs().max()) for p in probs)
    sigma_error = 0.0
    for h in ln_inputs:
        d = h.shape[-1]
        y = NF.approx_layer_norm(h, (d,), **ln_kwargs).double()
        exact = NF.layer_norm(h.double(), (d,))
        gap = y.std(-1, unbiased=False) - exact.std(-1, unbiased=False)
        sigma_error = max(sigma_error, float(gap.abs().max()))
    return {"max_sum_error": sum_error, "max_sigma_error": sigma_error}


def _trained(config: Mapping[str, Any], seed: int) -> tuple[TinyGPT, dict]:
    arch = {k: config[k] for k in ("d_model", "n_layers", "n_heads", "context")}
    gpt = GPTConfig(norm="layernorm", score="softmax", **arch)
    return train_lm(gpt, lm_train_config(config), seed)


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
    table: dict[str, dict[str, float]] = {"exact": {"test_bpb": evaluate_bpb(model, **evaluate)}}
    for name, (softmax_kwargs, ln_kwargs) in _variants(bits).items():
        approx = approximate(model, softmax_kwargs=softmax_kwargs, layernorm_kwargs=ln_kwargs)
        table[name] = {
            "test_bpb": evaluate_bpb(approx, **evaluate),
            **_operator_errors(model, x, name, bits),
        }
    curves = {"train": {"step": log["eval_step"], "val_bpb": log["val_bpb"]}}
    out: dict[str, Any] = {"table": table, "curves": curves}
    if log.get("diverged"):  # the one shared model diverged: every copy is that model
        out["diverged"] = {name: log["diverged"] for name in table}
    return out


def _check_guarantees(config: Mapping[str, Any]) -> CheckOutcome:
    model, _ = _trained(config, 0)
    x = _probe(config, 0)
    parts, ok, worst = [], True, 0.0
    bits = config["table_bits"]
    for name in ("guaranteed", "guaranteed-fixed8", "default"):
        errors = _operator_errors(model, x, name, bits)
        # One renormalizing Newton step leaves 3 d^2 / 8 of a relative error d = u - 1:
        # d <= 2^-(b+1) with a b-bit table and no Newton step, about 1e-4 at b = 5.
        no_newton = _variants(bits)[name][1].get("newton_steps") == 0
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

    names = list(VARIANTS)
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for k, m in enumerate(measurements):
        values = [cell(m, n, "test_bpb") - cell(m, "exact", "test_bpb") for n in names]
        ax.plot(range(len(names)), values, "o", color="C0", alpha=0.7,
                label="one seed" if k == 0 else None)  # fmt: skip
    ax.axhline(0.0, color="k", lw=0.5)
    ax.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
    ax.set_ylabel("test bits per byte minus the exact model's")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


#: Below this a difference in bits per byte is not a degradation worth the name.
_BPB_MARGIN = Margin(
    0.0013,
    "paper: the approximations' own reported cost, perplexity -0.09%, is ln(1.0009) / ln 2 "
    "= 0.0013 bits per token, the tolerance the paper calls minimal degradation",
)
_IF_DIVERGED = {"test_bpb": UNIFORM_BPB}

CLAIM = register_claim(
    Claim(
        id="guaranteed-approx",
        paper=paper("guaranteed-approx"),
        hypothesis=(
            "Swapped into a trained model without retraining, shift-and-add Softmax and "
            "table LayerNorm approximations that guarantee sum p = 1 and sigma = 1 raise its "
            "bits per byte less than the same datapaths without the guarantee."
        ),
        primary=difference(
            "guarantee_helps",
            "bpb with guaranteed minus with unguaranteed approximations (cheap datapath: "
            "table_bits-bit tables, no Newton step)",
            "guaranteed",
            "unguaranteed",
            "test_bpb",
            direction="less",
            margin=_BPB_MARGIN,
            unit="bpb",
            if_diverged=_IF_DIVERGED,
        ),
        secondary=(
            difference(
                "guarantee_helps_fixed8",
                "bpb with guaranteed minus unguaranteed 8-bit fixed-point softmax (and "
                "LayerNorm with / without renormalization)",
                "guaranteed-fixed8",
                "unguaranteed-fixed8",
                "test_bpb",
                direction="less",
                margin=_BPB_MARGIN,
                unit="bpb",
                if_diverged=_IF_DIVERGED,
            ),
            difference(
                "default_vs_exact",
                "bpb with the default guaranteed approximations (one Newton step) minus "
                "the exact model's",
                "default",
                "exact",
                "test_bpb",
                direction="no_greater",
                margin=_BPB_MARGIN,
                unit="bpb",
                if_diverged=_IF_DIVERGED,
            ),
        ),
        checks=(
            Check(
                "guarantees_hold",
                "guaranteed softmax sums to 1 within 1e-6 and guaranteed LayerNorm's std "
                "equals exact LayerNorm's within 1e-5 (1e-4 for the no-Newton datapath, its "
                "3 d^2 / 8 bound), on a trained model's activations",
                _check_guarantees,
            ),
        ),
        premises=(
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
        untuned="nothing trains per arm: one trained softmax TinyGPT (shared with numerics) "
        "is evaluated with swapped operators",
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
        # the table's precision decides how much the guarantee has to fix (4 and 6 bits
        # stayed contradicted at stop 31)
        decisive="table_bits",
        headline="GLUE +0.07%, SQuAD -0.01%, perplexity -0.09% with the approximations.",
        setup=(
            "Byte-level pre-LN TinyGPT (softmax, LayerNorm) trained once and shared with the "
            "numerics claim; copies with both operators approximated, with and "
            "without the guarantee step (5-bit tables, no Newton step; 8-bit fixed point), "
            "and the default datapath, evaluated on the same test windows; judged "
            "against the paper's 0.0013-bit tolerance."
        ),
        configs={
            "smoke": {
                "seeds": 1,
                "d_model": 32,
                "n_layers": 1,
                "n_heads": 2,
                "context": 32,
                "steps": 6,
                "batch": 4,
                "lr": 3e-3,
                "eval_batches": 1,
                "probe_batch": 2,
                "table_bits": 5,
            },
            "quick": {
                "seeds": 5,
                **QUICK_GPT,
                "steps": 400,
                "batch": 16,
                "lr": 3e-3,
                "eval_batches": 8,
                "probe_batch": 8,
                "table_bits": 5,
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
                "eval_batches": 16,
                "probe_batch": 16,
                "table_bits": 5,
            },
        },
        run=run,
        figure=_figure,
        caption=(
            "Each approximate copy's bits per byte minus the exact model's, one dot per "
            "seed: a guaranteed datapath should sit lower than its unguaranteed twin."
        ),
    )
)
