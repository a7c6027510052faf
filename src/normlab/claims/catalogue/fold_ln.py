"""Claim "fold-ln": folding foldable LayerNorms into RMSNorm speeds up CPU inference.

The seed folds a LayerNorm's centring into the linear layers that write its input
(column-centred weights), detects foldable LayerNorms on the graph, and reports exact
conversion with a 2-12% end-to-end speedup. Checks (run once): the detection
(:func:`~normlab.surgery.fold_detect.analyze_fold`) against the structural rule on the zoo of
:data:`~normlab.training.fold_timing.FOLD_ZOO`, and the fold's exactness. The primary is the
speedup of a pre-LN TinyGPT with d >= 512 (random weights and norm affines), folded onto
normlab's kernel RMSNorm, over the same model on normlab's kernel LayerNorm:
``log10`` of the median forward-time ratio over interleaved rounds (-0.0086 is the seed's
2%; :mod:`normlab.training.fold_timing`). Premises: the norms' share of the forward time
(a no-norm arm) above 2%, and a quiet machine: no runnable task waiting for a core
(:mod:`normlab._machine`) around every seed's timings, else the timing measures the
scheduler (untestable). Also
timed at the widths ``time_widths`` (figure). ``exclusive``; nothing is tuned.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from normlab import kernels as K
from normlab._machine import QUIET_THRESHOLD
from normlab.claims.common import machine_quiet, seed_everything
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
from normlab.papers import paper
from normlab.training.fold_timing import (
    FOLD_ZOO,
    fold_zoo,
    machine_load,
    time_fold,
    width_sweep,
)

__all__ = ["CLAIM", "run"]


def _check_detection(config: Mapping[str, Any]) -> CheckOutcome:
    rows = fold_zoo(config["archs"])
    wrong = ", ".join(n for n, r in rows.items() if r["match"] != 1.0) or "none"
    found = ", ".join(f"{n} {r['foldable']}/{r['layernorms']}" for n, r in rows.items())
    text = f"foldable/total LayerNorms: {found}; mismatches with the structural rule: {wrong}"
    return CheckOutcome(wrong == "none", float(wrong != "none"), text)


def _check_exact(config: Mapping[str, Any]) -> CheckOutcome:
    changes = [r.get("max_abs_change", 0.0) for r in fold_zoo(config["archs"]).values()]
    text = f"max |logits after - before| over the folded models (fp32) {max(changes):.1e}"
    return CheckOutcome(max(changes) <= 1e-5, max(changes), text + " <= 1e-5")


def _arch(config: Mapping[str, Any], width: int) -> GPTConfig:
    keys = {"n_layers": "time_layers", "n_heads": "time_heads", "context": "time_context"}
    return GPTConfig(d_model=width, **{k: config[v] for k, v in keys.items()})


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Interleaved CPU forward times of the wide TinyGPT (LayerNorm, folded, no norms) at
    the primary's width and at every width of ``time_widths``, with the machine's load."""
    K.available("cpu")  # build or load the kernels before anything is timed
    seed_everything(seed)
    timing = {
        "reps": config["reps"],
        "warmup": config["warmup_reps"],
        "batch": config["time_batch"],
    }
    loads = [machine_load()]
    table, times = time_fold(_arch(config, config["time_d_model"]), seed=seed, **timing)
    archs = {str(width): _arch(config, width) for width in config["time_widths"]}
    widths, width_loads = width_sweep(archs, seed, **timing)
    loads += [*width_loads, machine_load()]
    worst = max(loads, key=lambda r: r["tasks_waiting"])
    table["machine"] = {**worst, "quiet": float(worst["tasks_waiting"] <= QUIET_THRESHOLD)}
    return {"table": table, "times": times, "curves": {"widths": widths}}


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.4))
    for j, key in enumerate(("torch", "normlab")):
        rows = [[100 * cell(m, f"speedup_{key}", s) for s in _QS] for m in measurements]
        (lo, mid, hi), label = np.array(rows).T, f"folded, {key} path"
        ax.errorbar(
            range(len(mid)), mid, [mid - lo, hi - mid], fmt="o", color=f"C{j}", label=label
        )
        for k, m in enumerate(measurements):
            w = m.get("curves", {}).get("widths", {})
            xs, ys = [int(d) for d in w], [100 * r[key] for r in w.values()]
            bx.plot(
                xs, ys, "o-", color=f"C{j}", alpha=0.6, label=f"{key} path" if k == 0 else None
            )
    shares = [100 * cell(m, "norm_share", "normlab") for m in measurements]
    ax.plot(range(len(shares)), shares, "x", color="C3", label="norms' share of forward")
    loaded = [i for i, m in enumerate(measurements) if cell(m, "machine", "quiet") < 1]
    ax.plot(loaded, [0.0] * len(loaded), "v", color="k", label="a task waited for a core")
    ax.set(xlabel="seed", ylabel="CPU forward speedup over LayerNorm (%)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    bx.set(xscale="log", xlabel="width d_model", ylabel="median speedup (%)")
    for a in (ax, bx):
        a.axhline(0.0, color="k", lw=0.8)
        a.axhspan(2, 12, color="C2", alpha=0.15, label="seed's 2-12%")
        a.legend(fontsize=8)
    fig.tight_layout()
    return fig


#: The timed model per scale (d >= 512: a LayerNorm's cost is its arithmetic), other widths.
_WIDE_KEYS = ("time_d_model", "time_layers", "time_heads", "time_context", "time_batch", "reps")
_WIDE_KEYS += ("warmup_reps", "time_widths")
_FULL_WIDTHS = (128, 256, 512, 1024, 2048)
_WIDE = {
    "smoke": dict(zip(_WIDE_KEYS, (64, 1, 2, 16, 1, 5, 1, (32,)), strict=True)),
    "quick": dict(zip(_WIDE_KEYS, (512, 2, 8, 64, 2, 25, 3, (128, 256)), strict=True)),
    "full": dict(zip(_WIDE_KEYS, (768, 4, 12, 128, 4, 100, 10, _FULL_WIDTHS), strict=True)),
}
_ARCH_NAMES = list(FOLD_ZOO)
_ZOO_NEIGHBOURS = tuple([a for a in _ARCH_NAMES if a != b] for b in ("gpt2", "bert"))
_WIDTHS_WHY = "normlab's choice: the widths of the speedup-against-width figure (no effect)"
_RULE = "the detected foldable set equals the structural rule's on every zoo architecture"
_WIDTH_WHY = "normlab's choice: the narrowest width at which the norms' share is visible"
_SIZES = {
    "time_layers": "blocks of the timed model",
    "time_heads": "heads of the timed model",
    "time_context": "tokens per timed sequence",
    "time_batch": "sequences per timed pass",
    "reps": "interleaved timing rounds",
    "warmup_reps": "untimed warm-up rounds",
}
_SEED_MARGIN = Margin(math.log10(1.02), "paper: end-to-end speedup of 2% to 12%, low end")
_RATIO_KW = {"direction": "less", "margin": _SEED_MARGIN, "unit": "log10 time ratio"}
_QS = ("q25", "median", "q75")
_TIMED = ("cpu_time_ratio", "cpu_time_ratio_torch_path")
_SHARE_WHY = "normlab's choice: the centring cannot save more time than the norms take: below "
_SHARE_MARGIN = Margin(0.02, _SHARE_WHY + "the seed's 2% no 2% speedup")
_SHARE_PREMISE = Premise(
    "norms_share_visible",
    "share of the LayerNorm model's forward time spent in its norms, "
    "1 - t(norms replaced by identity) / t(LayerNorm)",
    lambda m: cell(m, "norm_share", "normlab"),
    direction="greater",
    margin=_SHARE_MARGIN,
)


_PRIMARY_WHAT = (
    "log10 of the wide TinyGPT's (d >= 512) median CPU forward time, folded (normlab's kernel "
    "RMSNorm) minus LayerNorm (normlab's kernel), over interleaved rounds; -0.0086 is a 2% "
    "speedup"
)
_TORCH = "as cpu_time_ratio, both models on the plain torch path (backend='torch')"


def _ratio(name: str, method: str, baseline: str, description: str):
    arms = (method, baseline, "forward_ms_median")
    return difference(name, description, *arms, log10=True, **_RATIO_KW)


CLAIM = register_claim(
    Claim(
        id="fold-ln",
        paper=paper("fold-ln"),
        hypothesis=(
            "LayerNorms whose writers are column-centrable linear maps are detected and "
            "converted to RMSNorm without changing the logits (<= 1e-5 in fp32), and the "
            "folded model runs faster on a CPU by at least the seed's 2%."
        ),
        quote=(
            "Our analysis shows that many LNs in widely used architectures are foldable, "
            "enabling exact inference-time conversion and end-to-end acceleration of 2% to "
            "12% without changing model predictions."
        ),
        primary=_ratio("cpu_time_ratio", "folded-normlab", "layernorm", _PRIMARY_WHAT),
        secondary=(
            _ratio("cpu_time_ratio_torch_path", "folded-torch", "layernorm-torch", _TORCH),
        ),
        premises=(_SHARE_PREMISE,),
        untuned="nothing is trained: the timed models have random weights and the fold is exact",
        free_settings=(
            FreeSetting.scaled("time_d_model", _WIDTH_WHY, 0.5, 1.5),
            *(FreeSetting.scaled(key, f"normlab's choice: {why}") for key, why in _SIZES.items()),
            FreeSetting("time_widths", (256,), (128, 256, 1024, 2048), _WIDTHS_WHY),
            FreeSetting("archs", *_ZOO_NEIGHBOURS, "normlab's choice: the checks' architectures"),
        ),
        # 256 gave supported, 768 untestable (stop 31): the width sets the norms' share
        decisive="time_d_model",
        checks=(
            Check("detection_matches_rule", _RULE, _check_detection),
            Check("fold_exact", "folding changes no logit by > 1e-5 (fp32)", _check_exact),
        ),
        preconditions=(
            machine_quiet("before and after the seed's timed models", _TIMED),
            Precondition(
                "timed_fold_exact",
                "max |logit change| of the timed model after folding (fp32)",
                lambda m: cell(m, "fold", "max_abs_change"),
                op="<=",
                threshold=1e-5,
                source="normlab's choice: a speedup only counts for an exact conversion",
            ),
        ),
        headline="Many LayerNorms are foldable: exact conversion, 2-12% end-to-end speedup.",
        setup=(
            "Fold analysis on the zoo (checks); a pre-LN TinyGPT, d >= 512, random weights "
            "and norm gains, folded and timed on the CPU against its LayerNorm original, "
            "interleaved, with a no-norm arm, other widths, and the runnable tasks waiting "
            "for a core."
        ),
        configs={
            "smoke": {"seeds": 1, **_WIDE["smoke"], "archs": _ARCH_NAMES[:5]},
            # 7 seeds: at 5 the primary's real-data null once gave an opposite-direction
            # rate of 6.15% (32 sign patterns of noisy timings), above the 5% limit
            "quick": {"seeds": 7, **_WIDE["quick"], "archs": _ARCH_NAMES},
            "full": {"seeds": 7, **_WIDE["full"], "archs": _ARCH_NAMES},
        },
        run=run,
        figure=_figure,
        caption=(
            "Left: per seed, the CPU speedup of the folded model over the LayerNorm one (median"
            ", bars: interquartile range) on the torch path (blue) and normlab's kernels "
            "(orange, the primary), the norms' share of the forward time (red), seeds timed "
            "while a task waited for a core (black); band: the seed's 2-12%. Right: the "
            "median speedup against width, one line per seed."
        ),
        figure_only={"time_widths": ()},  # the width sweep is the figure's right panel
        exclusive=True,
    )
)
