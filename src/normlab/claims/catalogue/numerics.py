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
from normlab.data.tables import domain_windows
from normlab.models.gpt import GPTConfig
from normlab.papers import paper
from normlab.probes import numerics as probe
from normlab.training.lm import train_lm

__all__ = ["CLAIM", "run"]

_DTYPES = (torch.float16, torch.bfloat16)


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Residual-scaling errors of a trained TinyGPT (shared with guaranteed-approx through
    the model cache), the norm sweeps and the softmax sweep."""
    seed_everything(seed)
    gpt_config = GPTConfig(norm="layernorm", score="softmax", **config["gpt"])
    gpt, log = train_lm(gpt_config, lm_train_config(config), seed)
    # the test split: disjoint from selection
    idx, _ = domain_windows("test", config["probe_batch"], gpt.config.context, seed)
    named = {"mild": float(config["mild_scale"]), "large": float(config["large_scale"])}
    table, curves = probe.residual_scaling_table(gpt, idx, config["scales"], named)
    sizes = {"d": config["d"], "rows": config["rows"], "n": config["n"], "dtypes": _DTYPES}
    sweeps = probe.sweep_table(config["outliers"], config["sinks"], **sizes, seed=seed)
    out = {"table": {**table, **sweeps.pop("rows")}, "scaling": curves, **sweeps}
    return {**out, "model_diverged": log["diverged"]} if log.get("diverged") else out


def _check_bounds(config: Mapping[str, Any]) -> CheckOutcome:
    sizes = {"d": config["d"], "rows": config["rows"], "dtypes": _DTYPES}
    sweep = probe.norm_sweeps(config["outliers"], **sizes)
    failures, counted, excluded = probe.bound_failures([r.to_dict() for r in sweep])
    text = f"{failures} of {counted} norm cells above normlab's bound or overflowed "
    text += f"({excluded} documented fp16-native overflow cells excluded)"
    return CheckOutcome(failures == 0, float(failures), text)


def _check_fp16_overflow(config: Mapping[str, Any]) -> CheckOutcome:
    rows = probe.sink_sweep([0.0, 20.0], n=config["n"], rows=4, dtypes=(torch.float16,), seed=0)
    unshifted = {r.sink: r.overflow for r in rows if not r.shifted}
    ok = unshifted[20.0] and not unshifted[0.0] and not any(r.overflow for r in rows if r.shifted)
    text = "unshifted fp16 softmax overflows at sink logit 20 (exp(20) > 65504), shifted never"
    return CheckOutcome(ok, float(unshifted[20.0]), text)


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
        final = [m["scaling"][s]["errors"][-1] for s in scales]
        ax2b.semilogx(xs, final, "s--", color="C3", alpha=0.5)
    ax2.set(xlabel="residual-projection scale s", ylabel="stream growth ||h_L|| / ||h_0||")
    ax2b.set_ylabel("final relative error (red)"), fig.tight_layout()
    return fig


_OUTLIERS = [1.0, 10.0, 100.0, 1000.0, 10000.0]
_SINKS = [0.0, 2.0, 5.0, 10.0, 20.0, 40.0, 80.0]
_SCALES = [0.25, 0.5, 2.0, 4.0, 16.0, 64.0]
MILD, LARGE = 2.0, 64.0
_RATIO = "normlab's choice: a factor 2 in relative error is the smallest change that matters "
_RATIO = Margin(math.log10(2.0), _RATIO + "for a precision choice (one bf16 bit is a factor 2)")
_SCALED = ("scaling_preserves_error", "scaling_not_reduced", "transition_changes_error")
_REGIME = "normlab's choice: a 10x change in stream growth is a different regime"


def _log_ratio(row: str, other: str, metric: str) -> Any:
    """log10 of ``row``'s ``metric`` over ``other``'s."""
    return lambda m: math.log10(cell(m, row, metric) / cell(m, other, metric))


def _ratio(name: str, what: str, row: str, direction: str) -> Effect:
    """log10 of the final residual state's bf16 relative error at ``row`` over unscaled."""
    kw = {"direction": direction, "margin": _RATIO, "unit": "log10", "log10": True}
    return difference(name, what, row, "gpt-s1", "rel_err_final", **kw)


def _growth(name: str, row: str, op: str, gates: tuple[str, ...]) -> Precondition:
    what = f"log10 growth ratio of the stream at x {row[4:]}_scale vs unscaled"
    return Precondition(name, what, _log_ratio(row, "gpt-s1", "growth"), op, 1.0, _REGIME, gates)


def _spearman(name: str, what: str, key: str) -> Effect:
    return Effect(name, what, lambda m: cell(m, "bounds", key), "greater", _SPEARMAN)


#: A config's keys in the order the table below gives them (the GPT shape: d_model,
#: n_layers, n_heads, context).
_KEYS = ("seeds", "d", "rows", "n", "outliers", "sinks", "scales", "probe_batch", "gpt")
_KEYS += ("steps", "batch", "lr")
_GPT_KEYS = ("d_model", "n_layers", "n_heads", "context")


def _config(*values: Any) -> dict[str, Any]:
    config = {**dict(zip(_KEYS, values, strict=True)), "mild_scale": MILD, "large_scale": LARGE}
    config["gpt"] = dict(zip(_GPT_KEYS, config["gpt"], strict=True))
    return config


_SCALED_WHY = {"d": "row width of the norm probes", "rows": "rows per probe"}
_SCALED_WHY["n"] = "softmax length of the sink probe"
_SCALED_WHY["probe_batch"] = "sequences of the stream probe"
_MILD_WHY = "normlab's choice: a mild scaling that leaves the stream's regime in place"
_SWEEP_WHY = "normlab's choice: residual-projection scalings of the figure's sweep"
_OUTLIERS_WHY = "normlab's choice: planted outlier sizes, decades up to 1e4"
_FREE = (
    FreeSetting("mild_scale", 1.5, 4.0, _MILD_WHY),
    FreeSetting.scaled("large_scale", "normlab's choice: a scaling that changes it"),
    FreeSetting("scales", [0.5, 2.0, 16.0], [*_SCALES, 256.0], _SWEEP_WHY),
    FreeSetting("outliers", _OUTLIERS[:-1], [*_OUTLIERS, 1e5], _OUTLIERS_WHY),
    FreeSetting("sinks", _SINKS[:-1], [*_SINKS, 160.0], "normlab's choice: sink logits up to 80"),
    *(FreeSetting.scaled(k, f"normlab's choice: {why}") for k, why in _SCALED_WHY.items()),
    *lm_free("steps", "batch", "lr"),
)
_FULL_OUTLIERS = [1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1e3, 3e3, 1e4]
_FULL_SINKS = [0.0, 1.0, 2.0, 5.0, 8.0, 10.0, 12.0, 20.0, 40.0, 80.0]
_SMOKE_GPT, _QUICK_GPT, _FULL_GPT = (32, 1, 2, 32), (64, 2, 4, 64), (128, 4, 4, 128)
_SMOKE_SWEEPS = (_OUTLIERS[::2], _SINKS[::2], [MILD, LARGE])
_FULL_SWEEPS = (_FULL_OUTLIERS, _FULL_SINKS, _SCALES)
_CONFIGS = {
    "smoke": _config(1, 64, 8, 32, *_SMOKE_SWEEPS, 2, _SMOKE_GPT, 6, 4, 3e-3),
    "quick": _config(5, 256, 32, 128, _OUTLIERS, _SINKS, _SCALES, 8, _QUICK_GPT, 400, 16, 3e-3),
    "full": _config(10, 768, 64, 512, *_FULL_SWEEPS, 16, _FULL_GPT, 1500, 32, 2e-3),
}
_SPEARMAN = "normlab's choice: a rank correlation above 0.5 means the bound orders most pairs "
_SPEARMAN = Margin(0.5, _SPEARMAN + "of cells correctly")
_PRESERVES = (
    "log10(bf16 relative error of the final residual state with residual projections x "
    "mild_scale / unscaled), trained model (no-worse-than: a null of no change is supported "
    "by design)"
)
_NOT_REDUCED = "the same log10 ratio at x mild_scale, judged from below (no smaller than 1/2)"
_TRANSITION = "log10 error ratio at x large_scale, where the stream's growth regime changes (the "
_TRANSITION += "paper's 'unless': the error should then change by more than 2x)"
_RMS = "log10(LayerNorm / RMSNorm bulk error) at the largest outlier, native bf16"
_NORMS = "normlab's choice: a 25% error difference is the smallest that would decide between "
_RMS_KW = {"direction": "greater", "baseline": "RMSNorm", "unit": "log10"}
_RMS_KW["margin"] = Margin(0.1, _NORMS + "the norms")
_NATIVE = ("layernorm-bfloat16-native", "rmsnorm-bfloat16-native", "error")
_BOUND = "Spearman correlation of normlab's bound and the measured norm error over norms and "
_BOUND += "outlier sizes (mean over dtype x compute)"
_KAPPA = "Spearman correlation of the shifted softmax's argument condition number and its bf16 "
_KAPPA += "error over sink logits"
_CONTROL = "positive control: log10(bf16 / fp16 relative error of the final residual state), "
_CONTROL += "unscaled trained model (the measurement must see a known change)"
_CONTROL_KW = {"direction": "greater", "margin": _RATIO, "unit": "log10", "gates": _SCALED}
_S1 = ("gpt-s1", "gpt-s1-fp16", "rel_err_final")
_CONTROL_PREMISE = Premise("control_detects_precision", _CONTROL, _log_ratio(*_S1), **_CONTROL_KW)
_BOUNDS_CHECK = (
    "every LayerNorm/RMSNorm bulk error (fp16/bf16, native/upcast, outliers 1..1e4, fixed "
    "inputs) is at most normlab's first-order bound; overflow counts as a failure except the "
    "documented fp16-native x^2 overflow"
)
_OVERFLOW = "unshifted fp16 softmax overflows at sink logit 20, the shifted one never"

CLAIM = register_claim(
    Claim(
        id="numerics",
        paper=paper("numerics"),
        hypothesis="Scaling the residual-projection weights of a GPT-2-style model preserves the "
        "relative rounding error of the residual stream (unless it changes the stream's "
        "dynamics); normlab's first-order norm bounds hold and order the errors.",
        quote="Crucially, and as validated by experiments with GPT-2, our analysis establishes "
        "that the scaling of residual-projection weights preserves the propagation of the "
        "relative rounding error unless it forces a qualitative transition in the dynamics of "
        "the residual stream.",
        primary=_ratio("scaling_preserves_error", _PRESERVES, "gpt-mild", "no_greater"),
        secondary=(
            _ratio("scaling_not_reduced", _NOT_REDUCED, "gpt-mild", "no_less"),
            _ratio("transition_changes_error", _TRANSITION, "gpt-large", "greater"),
            Effect("rmsnorm_more_stable", _RMS, _log_ratio(*_NATIVE), **_RMS_KW),
            _spearman("bound_orders_errors", _BOUND, "bound_error_spearman"),
            _spearman("softmax_shift_sensitivity", _KAPPA, "softmax_kappa_error_spearman"),
        ),
        premises=(_CONTROL_PREMISE,),
        preconditions=(
            _growth("mild_scaling_keeps_dynamics", "gpt-mild", "<=", _SCALED[:2]),
            _growth("large_scaling_changes_dynamics", "gpt-large", ">=", _SCALED[2:]),
        ),
        untuned="nothing is compared across training runs: one trained model per seed is probed "
        "in two precisions",
        free_settings=_FREE,
        decisive="mild_scale",  # the primary compares the model at x mild_scale with x 1
        checks=(
            Check("norm_bound_holds", _BOUNDS_CHECK, _check_bounds),
            Check("fp16_softmax_overflow", _OVERFLOW, _check_fp16_overflow),
        ),
        headline="GPT-2 experiments: residual-projection weight scaling preserves relative "
        "rounding-error propagation unless the residual stream's dynamics change (no number in "
        "the abstract).",
        setup="Trained byte-level pre-LN TinyGPT (the guaranteed-approx model), test windows in "
        "bf16 vs fp64 with residual projections x s (0.25..64), fp16 at s = 1 (positive "
        "control); norms on N(0,1) rows with an outlier 1..1e4; softmax with a sink logit 0..80. "
        "The primary is no-worse-than: a 100% null supported rate is expected for it and means "
        "nothing.",
        scale_note="A 2-block byte-level TinyGPT trained 400 steps (quick); the paper uses "
        "pretrained GPT-2. The paper's 'unless' does not reproduce here: x64 changes the "
        "stream's growth by 1.7 decades, yet the final error grows only 0.14 log10 (1.4x), below "
        "the factor 2 (transition_changes_error is contradicted at quick).",
        configs=_CONFIGS,
        run=run,
        figure=_figure,
        caption="Left: relative bf16 error along the residual stream, one colour per scale s; the "
        "curves nearly coincide if scaling preserves error propagation. Right: stream growth "
        "(blue, left axis) rises with s while the final error (red) stays flat.",
    )
)
