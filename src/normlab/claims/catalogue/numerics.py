"""Claim "numerics": residual-projection scaling preserves relative rounding-error propagation.

Primary: a trained TinyGPT in bf16 against fp64 with its residual projections scaled
(:func:`normlab.probes.numerics.residual_scaling_errors`), error ratio at ``mild_scale``
no greater than 2x; no-worse-than, so its 100% null rate means nothing, and a positive
control (bf16 vs fp16) shows the measurement sees a change. The "transition" secondary (x
``large_scale``) is contradicted at quick. Sweeps: :func:`normlab.probes.numerics.sweep_table`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from normlab.claims.catalogue._lm_settings import lm_free, lm_train_config
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
from normlab.data.corpus import corpus, sample_batch
from normlab.models.gpt import GPTConfig
from normlab.papers import paper
from normlab.probes.numerics import (
    bound_failures,
    norm_sweeps,
    residual_scaling_table,
    sink_sweep,
    sweep_table,
)
from normlab.training.lm import train_lm

__all__ = ["CLAIM", "run"]

_DTYPES = (torch.float16, torch.bfloat16)


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Residual-scaling errors of a trained TinyGPT (shared with guaranteed-approx through
    the model cache), the norm sweeps and the softmax sweep."""
    seed_everything(seed)
    gpt_config = GPTConfig(norm="layernorm", score="softmax", **config["gpt"])
    gpt, log = train_lm(gpt_config, lm_train_config(config), seed)
    gen = torch.Generator().manual_seed(seed)  # the test split: disjoint from selection
    idx, _ = sample_batch(corpus("test"), config["probe_batch"], gpt.config.context, gen)
    named = {"mild": float(config["mild_scale"]), "large": float(config["large_scale"])}
    table, curves = residual_scaling_table(gpt, idx, config["scales"], named)
    sizes = {k: config[k] for k in ("d", "rows", "n")}
    sweeps = sweep_table(config["outliers"], config["sinks"], **sizes, dtypes=_DTYPES, seed=seed)
    out = {"table": {**table, **sweeps.pop("rows")}, "scaling": curves, **sweeps}
    return {**out, "model_diverged": log["diverged"]} if log.get("diverged") else out


def _check_bounds(config: Mapping[str, Any]) -> CheckOutcome:
    sweep = norm_sweeps(config["outliers"], d=config["d"], rows=config["rows"], dtypes=_DTYPES)
    failures, counted, excluded = bound_failures([r.to_dict() for r in sweep])
    return CheckOutcome(
        failures == 0,
        float(failures),
        f"{failures} of {counted} norm cells above normlab's bound or overflowed "
        f"({excluded} documented fp16-native overflow cells excluded)",
    )


def _check_fp16_overflow(config: Mapping[str, Any]) -> CheckOutcome:
    rows = sink_sweep([0.0, 20.0], n=config["n"], rows=4, dtypes=(torch.float16,), seed=0)
    unshifted = {r.sink: r.overflow for r in rows if not r.shifted}
    ok = unshifted[20.0] and not unshifted[0.0] and not any(r.overflow for r in rows if r.shifted)
    return CheckOutcome(
        ok,
        float(unshifted[20.0]),
        "unshifted fp16 softmax overflows at sink logit 20 (exp(20) > 65504), shifted never",
    )


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    scales = sorted(measurements[0]["scaling"], key=float)
    for (k, s), (j, m) in itertools.product(enumerate(scales), enumerate(measurements)):
        errs = m["scaling"][s]["errors"]
        ax1.plot(errs, color=f"C{k % 10}", alpha=0.5, label=f"s = {s}" if j == 0 else None)
    ax1.set(xlabel="residual state (0 = embedding)", ylabel="relative error, bf16 vs fp64")
    ax1.set_yscale("log"), ax1.legend(fontsize=6, ncol=2)
    ax1.xaxis.get_major_locator().set_params(integer=True)
    ax2b, xs = ax2.twinx(), [float(s) for s in scales]
    for m in measurements:
        ax2.loglog(xs, [m["scaling"][s]["growth"] for s in scales], "o-", color="C0", alpha=0.5)
        ax2b.semilogx(
            xs, [m["scaling"][s]["errors"][-1] for s in scales], "s--", color="C3", alpha=0.5
        )
    ax2.set(xlabel="residual-projection scale s", ylabel="stream growth ||h_L|| / ||h_0||")
    ax2b.set_ylabel("final relative error (red)"), fig.tight_layout()
    return fig


_OUTLIERS = [1.0, 10.0, 100.0, 1000.0, 10000.0]
_SINKS = [0.0, 2.0, 5.0, 10.0, 20.0, 40.0, 80.0]
_SCALES = [0.25, 0.5, 2.0, 4.0, 16.0, 64.0]
MILD, LARGE = 2.0, 64.0
_RATIO = Margin(
    math.log10(2.0),
    "normlab's choice: a factor 2 in relative error is the "
    "smallest change that matters for a precision choice (one bf16 bit is a factor 2)",
)
_SCALED = ("scaling_preserves_error", "scaling_not_reduced", "transition_changes_error")


def _ratio(name: str, what: str, row: str, direction: str) -> Effect:
    """log10 of the final residual state's bf16 relative error at ``row`` over unscaled."""
    return difference(
        name,
        what,
        row,
        "gpt-s1",
        "rel_err_final",
        direction=direction,
        margin=_RATIO,
        unit="log10",
        log10=True,
    )


def _growth(name: str, row: str, op: str, gates: tuple[str, ...]) -> Precondition:
    return Precondition(
        name,
        f"log10 growth ratio of the stream at x {row[4:]}_scale vs unscaled",
        lambda m: math.log10(cell(m, row, "growth") / cell(m, "gpt-s1", "growth")),
        op,
        1.0,
        "normlab's choice: a 10x change in stream growth is a different regime",
        gates=gates,
    )


def _config(seeds, d, rows, n, outliers, sinks, scales, probe_batch, gpt, steps, batch, lr):
    return {
        "seeds": seeds,
        "d": d,
        "rows": rows,
        "n": n,
        "outliers": outliers,
        "sinks": sinks,
        "scales": scales,
        "mild_scale": MILD,
        "large_scale": LARGE,
        "probe_batch": probe_batch,
        "gpt": dict(zip(("d_model", "n_layers", "n_heads", "context"), gpt, strict=True)),
        "steps": steps,
        "batch": batch,
        "lr": lr,
    }


_FREE = (
    FreeSetting(
        "mild_scale",
        1.5,
        4.0,
        "normlab's choice: a mild scaling that leaves the stream's regime in place",
    ),
    FreeSetting.scaled("large_scale", "normlab's choice: a scaling that changes it"),
    FreeSetting(
        "scales",
        [0.5, 2.0, 16.0],
        [*_SCALES, 256.0],
        "normlab's choice: residual-projection scalings of the figure's sweep",
    ),
    FreeSetting(
        "outliers",
        _OUTLIERS[:-1],
        [*_OUTLIERS, 1e5],
        "normlab's choice: planted outlier sizes, decades up to 1e4",
    ),
    FreeSetting("sinks", _SINKS[:-1], [*_SINKS, 160.0], "normlab's choice: sink logits up to 80"),
    FreeSetting.scaled("d", "normlab's choice: row width of the norm probes"),
    FreeSetting.scaled("rows", "normlab's choice: rows per probe"),
    FreeSetting.scaled("n", "normlab's choice: softmax length of the sink probe"),
    FreeSetting.scaled("probe_batch", "normlab's choice: sequences of the stream probe"),
    *lm_free("steps", "batch", "lr"),
)
_FULL_OUTLIERS = [1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1e3, 3e3, 1e4]
_FULL_SINKS = [0.0, 1.0, 2.0, 5.0, 8.0, 10.0, 12.0, 20.0, 40.0, 80.0]
#: seeds, d, rows, n, outliers, sinks, scales, probe_batch, GPT shape, steps, batch, lr
_CONFIGS = {
    "smoke": _config(
        1, 64, 8, 32, _OUTLIERS[::2], _SINKS[::2], [MILD, LARGE], 2, (32, 1, 2, 32), 6, 4, 3e-3
    ),
    "quick": _config(
        5, 256, 32, 128, _OUTLIERS, _SINKS, _SCALES, 8, (64, 2, 4, 64), 400, 16, 3e-3
    ),
    "full": _config(
        10,
        768,
        64,
        512,
        _FULL_OUTLIERS,
        _FULL_SINKS,
        _SCALES,
        16,
        (128, 4, 4, 128),
        1500,
        32,
        2e-3,
    ),
}
_SPEARMAN = Margin(
    0.5,
    "normlab's choice: a rank correlation above 0.5 means the bound "
    "orders most pairs of cells correctly",
)

CLAIM = register_claim(
    Claim(
        id="numerics",
        paper=paper("numerics"),
        hypothesis="Scaling the residual-projection weights of a GPT-2-style model preserves the "
        "relative rounding error of the residual stream (unless it changes the stream's "
        "dynamics); "
        "normlab's first-order norm bounds hold and order the errors.",
        quote="Crucially, and as validated by experiments with GPT-2, our analysis establishes "
        "that "
        "the scaling of residual-projection weights preserves the propagation of the relative "
        "rounding error unless it forces a qualitative transition in the dynamics of the residual "
        "stream.",
        primary=_ratio(
            "scaling_preserves_error",
            "log10(bf16 relative error of the final residual state with residual "
            "projections x mild_scale / unscaled), trained model (no-worse-than: a null "
            "of no change is supported by design)",
            "gpt-mild",
            "no_greater",
        ),
        secondary=(
            _ratio(
                "scaling_not_reduced",
                "the same log10 ratio at x mild_scale, judged from below (no smaller than 1/2)",
                "gpt-mild",
                "no_less",
            ),
            _ratio(
                "transition_changes_error",
                "log10 error ratio at x large_scale, where the "
                "stream's growth regime changes (the paper's 'unless': the error should then "
                "change by more than 2x)",
                "gpt-large",
                "greater",
            ),
            Effect(
                "rmsnorm_more_stable",
                "log10(LayerNorm / RMSNorm bulk error) at the largest outlier, native bf16",
                lambda m: math.log10(
                    cell(m, "layernorm-bfloat16-native", "error")
                    / cell(m, "rmsnorm-bfloat16-native", "error")
                ),
                direction="greater",
                baseline="RMSNorm",
                unit="log10",
                margin=Margin(
                    0.1,
                    "normlab's choice: a 25% error difference is the smallest "
                    "that would decide between the norms",
                ),
            ),
            Effect(
                "bound_orders_errors",
                "Spearman correlation of normlab's bound and the "
                "measured norm error over norms and outlier sizes (mean over dtype x compute)",
                lambda m: cell(m, "bounds", "bound_error_spearman"),
                direction="greater",
                margin=_SPEARMAN,
            ),
            Effect(
                "softmax_shift_sensitivity",
                "Spearman correlation of the shifted softmax's "
                "argument condition number and its bf16 error over sink logits",
                lambda m: cell(m, "bounds", "softmax_kappa_error_spearman"),
                direction="greater",
                margin=_SPEARMAN,
            ),
        ),
        premises=(
            Premise(
                "control_detects_precision",
                "positive control: log10(bf16 / fp16 relative error of the final residual "
                "state), unscaled trained model (the measurement must see a known change)",
                lambda m: math.log10(
                    cell(m, "gpt-s1", "rel_err_final") / cell(m, "gpt-s1-fp16", "rel_err_final")
                ),
                direction="greater",
                margin=_RATIO,
                unit="log10",
                gates=_SCALED,
            ),
        ),
        preconditions=(
            _growth("mild_scaling_keeps_dynamics", "gpt-mild", "<=", _SCALED[:2]),
            _growth("large_scaling_changes_dynamics", "gpt-large", ">=", _SCALED[2:]),
        ),
        untuned="nothing is compared across training runs: one trained model per seed is probed "
        "in "
        "two precisions",
        free_settings=_FREE,
        decisive="mild_scale",  # the primary compares the model at x mild_scale with x 1
        checks=(
            Check(
                "norm_bound_holds",
                "every LayerNorm/RMSNorm bulk error (fp16/bf16, "
                "native/upcast, outliers 1..1e4, fixed inputs) is at most normlab's first-order "
                "bound; overflow counts as a failure except the documented fp16-native x^2 "
                "overflow",
                _check_bounds,
            ),
            Check(
                "fp16_softmax_overflow",
                "unshifted fp16 softmax overflows at sink logit 20, the shifted one never",
                _check_fp16_overflow,
            ),
        ),
        headline="GPT-2 experiments: residual-projection weight scaling preserves relative "
        "rounding-error propagation unless the residual stream's dynamics change (no number in "
        "the abstract).",
        setup="Trained byte-level pre-LN TinyGPT (the guaranteed-approx model), test windows in "
        "bf16 "
        "vs fp64 with residual projections x s (0.25..64), fp16 at s = 1 (positive control); "
        "norms "
        "on N(0,1) rows with an outlier 1..1e4; softmax with a sink logit 0..80. The primary is "
        "no-worse-than: a 100% null supported rate is expected for it and means nothing.",
        scale_note="A 2-block byte-level TinyGPT trained 400 steps (quick); the paper uses "
        "pretrained GPT-2. The paper's 'unless' does not reproduce here: x64 changes the stream's "
        "growth by 1.7 decades, yet the final error grows only 0.14 log10 (1.4x), below the "
        "factor "
        "2 (transition_changes_error is contradicted at quick).",
        configs=_CONFIGS,
        run=run,
        figure=_figure,
        caption="Left: relative bf16 error along the residual stream, one colour per scale s; the "
        "curves nearly coincide if scaling preserves error propagation. Right: stream growth "
        "(blue, left axis) rises with s while the final error (red) stays flat.",
    )
)
