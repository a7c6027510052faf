"""Claim "numerics": low-precision error of LayerNorm vs RMSNorm with outliers; softmax sinks.

The seed derives condition numbers and forward-error bounds for transformer inference in
mixed precision, compares LayerNorm and RMSNorm in the massive-outlier regime and analyses
the shifted evaluation of softmax with attention sinks. Its bounds are not public, so
normlab derives its own first-order ones (:mod:`normlab.probes.numerics`) and checks that:
the measured errors stay below them and move with them; which norm is more accurate when a
planted outlier channel is large, with every operation in bfloat16; and that the shifted
softmax's error grows with its argument condition number as a sink logit grows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from normlab.claims.common import cell, seed_everything, spearman
from normlab.claims.core import Claim, Effect, register_claim
from normlab.papers import paper
from normlab.probes.numerics import outlier_sweep, sink_sweep

__all__ = ["CLAIM"]

_DTYPES = (torch.float16, torch.bfloat16)


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Norm error sweeps (native and upcast) and the softmax sink sweep for one seed."""
    seed_everything(seed)
    outliers = list(config["outliers"])
    norms = []
    for compute in ("native", "upcast"):
        norms += outlier_sweep(
            outliers,
            d=config["d"],
            rows=config["rows"],
            dtypes=_DTYPES,
            compute=compute,
            seed=seed,
        )
    soft = sink_sweep(
        config["sinks"], n=config["n"], rows=config["rows"], dtypes=_DTYPES, seed=seed
    )
    table: dict[str, dict[str, float]] = {}
    for r in norms:
        row = table.setdefault(f"{r.kind}-{r.dtype}-{r.compute}", {})
        if r.outlier == outliers[0]:
            row["error_small_outlier"] = r.error
        if r.outlier == outliers[-1]:
            row.update(error=r.error, bound=r.bound, kappa=r.kappa)
    for r in soft:
        row = table.setdefault(f"softmax-{r.dtype}-{'shifted' if r.shifted else 'unshifted'}", {})
        if r.sink == config["sinks"][0]:
            row["error_small_sink"] = r.error
        if r.sink == config["sinks"][-1]:
            row.update(error=r.error, kappa=r.kappa, sink_mass=r.sink_mass)
        if r.overflow and "first_overflow_sink" not in row:
            row["first_overflow_sink"] = r.sink
    return {
        "table": table,
        "norm_sweep": [r.to_dict() for r in norms],
        "softmax_sweep": [r.to_dict() for r in soft],
    }


def _finite(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [r for r in m["norm_sweep"] if np.isfinite(r["error"]) and r["error"] < 0.5]


def _bound_holds(m: Mapping[str, Any]) -> float:
    cells = _finite(m)
    return sum(r["error"] <= r["bound"] for r in cells) / len(cells) - 0.95


def _tracks(m: Mapping[str, Any]) -> float:
    rhos = []
    for dtype in ("float16", "bfloat16"):
        for compute in ("native", "upcast"):
            cells = [r for r in _finite(m) if r["dtype"] == dtype and r["compute"] == compute]
            rho = spearman([r["bound"] for r in cells], [r["error"] for r in cells])
            if np.isfinite(rho):
                rhos.append(rho)
    return float(np.mean(rhos)) - 0.5 if rhos else float("nan")


def _more_stable(m: Mapping[str, Any]) -> float:
    ln = cell(m, "layernorm-bfloat16-native", "error")
    rms = cell(m, "rmsnorm-bfloat16-native", "error")
    return float(np.log10(ln / rms))


def _shift(m: Mapping[str, Any]) -> float:
    rows = [r for r in m["softmax_sweep"] if r["shifted"] and r["dtype"] == "bfloat16"]
    return spearman([r["kappa"] for r in rows], [r["error"] for r in rows]) - 0.5


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    m = measurements[0]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for k, (kind, dtype, compute) in enumerate(
        (a, b, c)
        for a in ("layernorm", "rmsnorm")
        for b in ("bfloat16",)
        for c in ("native", "upcast")
    ):
        rows = [
            r
            for r in m["norm_sweep"]
            if (r["kind"], r["dtype"], r["compute"]) == (kind, dtype, compute)
        ]
        xs = [r["outlier"] for r in rows]
        ax1.plot(xs, [r["error"] for r in rows], "o-", color=f"C{k}", label=f"{kind} {compute}")
        ax1.plot(xs, [r["bound"] for r in rows], ":", color=f"C{k}")
    ax1.set(
        xscale="log",
        yscale="log",
        xlabel="outlier magnitude",
        ylabel="bulk relative error (bf16); dotted: bound",
    )
    ax1.legend(fontsize=7)
    for k, dtype in enumerate(("float16", "bfloat16")):
        for shifted, style in ((False, "o--"), (True, "s-")):
            rows = [
                r for r in m["softmax_sweep"] if r["dtype"] == dtype and r["shifted"] == shifted
            ]
            ys = [r["error"] if np.isfinite(r["error"]) else np.nan for r in rows]
            name = f"{dtype} {'shifted' if shifted else 'unshifted'}"
            ax2.plot([r["sink"] for r in rows], ys, style, color=f"C{k}", label=name)
    ax2.set(yscale="log", xlabel="sink logit", ylabel="max rel. error, non-sink probs")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    return fig


_OUTLIERS = [1.0, 10.0, 100.0, 1000.0, 10000.0]
_SINKS = [0.0, 2.0, 5.0, 10.0, 20.0, 40.0, 80.0]

CLAIM = register_claim(
    Claim(
        id="numerics",
        paper=paper("numerics"),
        hypothesis=(
            "Low-precision forward errors of LayerNorm/RMSNorm and of shifted softmax follow "
            "their derived condition numbers; with a massive outlier and native bf16 "
            "arithmetic RMSNorm is the more accurate norm."
        ),
        metrics=("error", "bound", "kappa", "error_small_outlier", "error_small_sink"),
        effects=(
            Effect(
                "bound_holds",
                "share of finite norm cells whose error is within the first-order bound, "
                "minus 0.95",
                _bound_holds,
            ),
            Effect(
                "error_tracks_condition",
                "mean within-(dtype, compute) Spearman correlation of bound and measured "
                "error over norms and outlier sizes, minus 0.5",
                _tracks,
            ),
            Effect(
                "rmsnorm_more_stable",
                "log10(LayerNorm error / RMSNorm error) at the largest outlier, native bf16",
                _more_stable,
            ),
            Effect(
                "softmax_shift_sensitivity",
                "Spearman correlation of the shifted softmax's argument condition number "
                "and its bf16 error over sink logits, minus 0.5",
                _shift,
            ),
        ),
        headline="GPT-2 experiments: residual-projection weight scaling preserves relative "
        "rounding-error propagation unless the residual stream's dynamics change.",
        setup=(
            "N(0,1) rows of d channels plus one planted outlier channel of size 1..1e4; "
            "LayerNorm/RMSNorm in fp16/bf16 (every op rounded, or fp32 upcast) vs fp64; "
            "softmax over N(0,1) logits with a sink logit 0..80, shifted vs unshifted."
        ),
        configs={
            "smoke": {
                "seeds": 1,
                "d": 64,
                "rows": 8,
                "n": 32,
                "outliers": _OUTLIERS[::2],
                "sinks": _SINKS[::2],
            },
            "quick": {
                "seeds": 3,
                "d": 256,
                "rows": 32,
                "n": 128,
                "outliers": _OUTLIERS,
                "sinks": _SINKS,
            },
            "full": {
                "seeds": 5,
                "d": 768,
                "rows": 64,
                "n": 512,
                "outliers": [1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 1e4],
                "sinks": [0.0, 1.0, 2.0, 5.0, 8.0, 10.0, 12.0, 20.0, 40.0, 80.0],
            },
        },
        run=run,
        key=("error", "layernorm-bfloat16-native", "rmsnorm-bfloat16-native"),
        figure=_figure,
    )
)
