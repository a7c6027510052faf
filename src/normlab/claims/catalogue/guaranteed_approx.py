"""Claim "guaranteed-approx": cheap Softmax/LayerNorm approximations that keep sum p = 1
and sigma = 1 cost a trained language model almost nothing.

The seed builds hardware Softmax and LayerNorm from shift-and-add approximations that still
guarantee the normalization, and reports GLUE +0.07% and perplexity -0.09%. Here a trained
byte-level TinyGPT (the same run as the kappa-attention claim's softmax model, shared
through the model cache) gets its softmax and/or LayerNorms swapped for normlab's
approximations (:func:`normlab.functional.approx_softmax`, base-2 exponent ``2^q (1 + f)``,
a table-plus-Newton reciprocal and the rounding residual on the largest entry; and
:class:`normlab.layers.ApproxLayerNorm`, table-plus-Newton ``1/sqrt`` renormalized on the
measured variance), without retraining. Measured: the guarantees on the model's own
attention scores and LayerNorm inputs, the approximation error there, and validation
bits per byte against the exact model.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from normlab import functional as NF
from normlab.attention.scores import ScoreNorm
from normlab.claims.common import QUICK_GPT, cell, seed_everything
from normlab.claims.core import Claim, Effect, register_claim
from normlab.data.corpus import corpus, sample_batch
from normlab.layers.approx import ApproxLayerNorm
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.models.lm import TrainConfig, evaluate_bpb, train_lm
from normlab.papers import paper
from normlab.surgery.replace import replace_norms

__all__ = ["CLAIM", "approximate_model", "operator_checks"]

#: The swaps evaluated: (approximate softmax?, approximate LayerNorm?, softmax kwargs).
VARIANTS: dict[str, tuple[bool, bool, dict[str, Any]]] = {
    "approx-softmax": (True, False, {}),
    "approx-layernorm": (False, True, {}),
    "approx-both": (True, True, {}),
    "approx-both-fixed12": (True, True, {"frac_bits": 12}),
}


def approximate_model(
    model: TinyGPT, *, softmax: bool, layernorm: bool, softmax_kwargs: dict[str, Any]
) -> TinyGPT:
    """A copy of ``model`` with its attention softmax and/or LayerNorms approximated.

    Norms are replaced by :class:`ApproxLayerNorm` with the trained weight, bias and eps;
    every attention module's score normalizer becomes ``approx_softmax`` (its SDPA fast
    path is switched off by clearing ``score_name``). The original is not changed.
    """
    clone = copy.deepcopy(model)
    if layernorm:
        replace_norms(clone, "approx-layernorm")
    if softmax:
        for module in clone.modules():
            if hasattr(module, "score_name") and isinstance(
                getattr(module, "score", None), torch.nn.Module
            ):
                module.score = ScoreNorm(NF.approx_softmax, **softmax_kwargs)
                module.score_name = None
    return clone.eval()


@torch.no_grad()
def operator_checks(model: TinyGPT, x: torch.Tensor) -> dict[str, float]:
    """The guarantees and errors of the approximations on ``model``'s own activations.

    - ``max_sum_error``: largest ``|sum p - 1|`` over every attention row of the model
      with both approximations swapped in, run on ``x``.
    - ``max_softmax_error``: largest ``|approx_softmax(s) - softmax(s)|`` on the exact
      model's attention scores ``s`` (recovered as ``log p``, equal to ``s`` up to a
      per-row constant, to which the max-shifted approximation is blind).
    - ``max_sigma_error``: largest gap between the std of ``approx_layer_norm``'s
      affine-free output and exact LayerNorm's, over every LayerNorm input of the exact
      model; ``max_sigma_minus_one`` the largest ``|std - 1|`` (exact LayerNorm's own
      std is ``sqrt(var / (var + eps))``, below 1 for small-variance rows).
    - ``max_layernorm_error``: largest ``|approx_layer_norm - layer_norm|`` there.
    """
    ln_inputs: list[torch.Tensor] = []
    handles = [
        m.register_forward_pre_hook(lambda _m, args: ln_inputs.append(args[0].detach()))
        for m in model.modules()
        if isinstance(m, torch.nn.LayerNorm) or type(m).__name__ == "LayerNorm"
    ]
    try:
        _, probs = model(x, return_probs=True)
    finally:
        for h in handles:
            h.remove()
    approx = approximate_model(model, softmax=True, layernorm=True, softmax_kwargs={})
    _, approx_probs = approx(x, return_probs=True)
    out = {
        "max_sum_error": max(float((p.double().sum(-1) - 1).abs().max()) for p in approx_probs),
        "max_softmax_error": 0.0,
        "max_sigma_error": 0.0,
        "max_sigma_minus_one": 0.0,
        "max_layernorm_error": 0.0,
    }
    for p in probs:
        scores = torch.log(p.double()).float()  # -inf where masked or underflowed
        err = float((NF.approx_softmax(scores).double() - p.double()).abs().max())
        out["max_softmax_error"] = max(out["max_softmax_error"], err)
    for h in ln_inputs:
        d = h.shape[-1]
        y = NF.approx_layer_norm(h, (d,)).double()
        exact = NF.layer_norm(h.double(), (d,))
        sd, sd_exact = y.std(-1, unbiased=False), exact.std(-1, unbiased=False)
        out["max_sigma_error"] = max(out["max_sigma_error"], float((sd - sd_exact).abs().max()))
        out["max_sigma_minus_one"] = max(out["max_sigma_minus_one"], float((sd - 1).abs().max()))
        out["max_layernorm_error"] = max(
            out["max_layernorm_error"], float((y - exact).abs().max())
        )
    return out


def _train_config(config: Mapping[str, Any]) -> TrainConfig:
    # Identical to the kappa-attention claim's, so both claims share the cached softmax model.
    steps = config["steps"]
    return TrainConfig(
        steps=steps,
        batch=config["batch"],
        lr=config["lr"],
        warmup=max(1, steps // 10),
        eval_every=max(1, steps // 4),
        eval_batches=2,
    )


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Guarantees on the trained model's activations and bpb of each approximate swap."""
    seed_everything(seed)
    arch = {k: config[k] for k in ("d_model", "n_layers", "n_heads", "context")}
    model, log = train_lm(
        GPTConfig(norm="layernorm", score="softmax", **arch), _train_config(config), seed
    )
    g = torch.Generator().manual_seed(seed)
    x, _ = sample_batch(corpus("val"), config["probe_batch"], config["context"], g)
    table: dict[str, dict[str, float]] = {"operators": operator_checks(model, x)}
    evaluate = {"batches": config["eval_batches"], "batch": 16, "seed": seed}
    exact = evaluate_bpb(model, split="val", **evaluate)
    table["exact"] = {"val_bpb": exact, "relative_change": 0.0}
    for name, (softmax, layernorm, kwargs) in VARIANTS.items():
        approx = approximate_model(
            model, softmax=softmax, layernorm=layernorm, softmax_kwargs=kwargs
        )
        assert layernorm == any(isinstance(m, ApproxLayerNorm) for m in approx.modules())
        bpb = evaluate_bpb(approx, split="val", **evaluate)
        table[name] = {"val_bpb": bpb, "relative_change": (bpb - exact) / exact}
    curves = {"train": {"step": log["eval_step"], "val_bpb": log["val_bpb"]}}
    return {"table": table, "curves": curves}


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    names = list(VARIANTS)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for k, m in enumerate(measurements):
        values = [100 * cell(m, n, "relative_change") for n in names]
        ax.plot(
            range(len(names)),
            values,
            "o",
            color="C0",
            alpha=0.7,
            label="seeds" if k == 0 else None,
        )
    ax.axhline(1.0, color="C3", ls="--", lw=1, label="+1% budget")
    ax.axhline(-1.0, color="C3", ls="--", lw=1)
    ax.axhline(0.0, color="k", lw=0.5)
    ax.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
    ax.set_ylabel("bits-per-byte change vs exact (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


CLAIM = register_claim(
    Claim(
        id="guaranteed-approx",
        paper=paper("guaranteed-approx"),
        hypothesis=(
            "Shift-and-add Softmax and table-plus-Newton LayerNorm approximations keep "
            "sum p = 1 and sigma = 1 to floating-point tolerance and change a trained "
            "model's bits per byte by at most 1% when swapped in without retraining."
        ),
        metrics=(
            "val_bpb",
            "relative_change",
            "max_sum_error",
            "max_softmax_error",
            "max_sigma_error",
            "max_sigma_minus_one",
            "max_layernorm_error",
        ),
        effects=(
            Effect(
                "sum_to_one",
                "1e-6 minus the largest |sum p - 1| of the approximate softmax on the model's "
                "attention scores",
                lambda m: 1e-6 - cell(m, "operators", "max_sum_error"),
            ),
            Effect(
                "unit_sigma",
                "1e-5 minus the largest gap between the approximate and exact LayerNorm "
                "output std on the model's LayerNorm inputs",
                lambda m: 1e-5 - cell(m, "operators", "max_sigma_error"),
            ),
            Effect(
                "bpb_within_1pct",
                "0.01 minus |relative bits-per-byte change| with both approximations swapped in",
                lambda m: 0.01 - abs(cell(m, "approx-both", "relative_change")),
            ),
        ),
        headline="GLUE +0.07%, SQuAD -0.01%, perplexity -0.09% with the approximations.",
        setup=(
            "Byte-level pre-LN TinyGPT (softmax, LayerNorm) trained once and shared with the "
            "kappa-attention claim; copies with approximate softmax, LayerNorm, both, and "
            "both with 12-bit fixed-point softmax, evaluated on the same validation windows."
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
            },
            "quick": {
                "seeds": 3,
                **QUICK_GPT,
                "steps": 400,
                "batch": 16,
                "lr": 3e-3,
                "eval_batches": 8,
                "probe_batch": 8,
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
            },
        },
        run=run,
        key=("relative_change", "approx-both", "exact"),
        figure=_figure,
    )
)
