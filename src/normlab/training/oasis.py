"""Train and measure the TinyGPT variants of the OASIS comparison (seed paper "oasis").

OASIS routes each layer's Softmax1 null mass ``1 - sum_k p_k`` into the depth softmax of
attention residuals (AttnRes), with a learned coupling ``beta = softplus(b)``
(:mod:`normlab.attention.depth`). The variants (:data:`VARIANTS`) are byte-level TinyGPTs
trained on the same batches: pre-LN, AttnRes with softmax / Softmax1 / clipped softmax /
gated attention, and OASIS (AttnRes + Softmax1 + the null coupling). With the library's
default ``b = -5`` (beta = 0.007) Adam moves ``b`` by about the learning rate per step and
beta stays near 0, so OASIS would be AttnRes+Softmax1; here ``b`` starts at ``beta_init``
and trains at ``beta_lr_scale`` times the learning rate (:func:`variant_train_config`).

:func:`measure` reports, on fixed test windows: outliers of the states entering each block
and the head (:func:`~normlab.probes.outliers.outlier_stats`: max infinity norm, average
kurtosis), sinks (:func:`~normlab.probes.sinks.sink_stats`), the mean Softmax1 null mass,
beta, and bits per byte in full precision, under Bondarenko et al.'s per-tensor W8A8
(static min-max activation ranges calibrated on training windows) and under W4A4
(per-channel weights x per-token activations).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from normlab.attention.depth import AttnResidual, null_signal
from normlab.data.corpus import corpus, sample_batch
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.probes.hooks import adapt
from normlab.probes.outliers import outlier_stats
from normlab.probes.sinks import sink_stats
from normlab.quant.model import calibrate, quantized
from normlab.training.lm import LMTrainConfig, evaluate_bpb, load_snapshot, train_lm

__all__ = [
    "ATTNRES",
    "MEASURED",
    "SOFTMAX1",
    "VARIANTS",
    "coupling",
    "measure",
    "train_variant",
    "trajectory",
    "variant_config",
    "variant_train_config",
]

#: Method name -> TinyGPT options (the clipped softmax's gamma is set from the context).
VARIANTS: dict[str, dict[str, Any]] = {
    "pre-ln": {"residual": "pre"},
    "attnres": {"residual": "attnres"},
    "attnres+softmax1": {"residual": "attnres", "score": "softmax1"},
    "attnres+clipped": {"residual": "attnres", "score": "clipped-softmax"},
    "attnres+gated": {"residual": "attnres", "gated_attention": True},
    "oasis": {"residual": "oasis", "score": "softmax1"},
}
#: OASIS without the null coupling (the seed claim's primary baseline).
SOFTMAX1 = "attnres+softmax1"
#: AttnRes with plain softmax (CLAIMS.md's named baseline).
ATTNRES = "attnres"
#: What :func:`measure` reports (NaN for a diverged run).
MEASURED = (
    *("max_inf_norm", "avg_kurtosis", "sink_score", "first_token_mass", "null_mass", "fp_bpb"),
    *("beta", "w8a8_bpb", "w4a4_bpb", "w8a8_degradation", "w4a4_degradation"),
)


def variant_config(name: str, config: Mapping[str, Any]) -> GPTConfig:
    """The TinyGPT of variant ``name`` with ``config``'s ``d_model``, ``n_layers``,
    ``n_heads``, ``context`` (and OASIS's ``beta_init``)."""
    arch = {k: config[k] for k in ("d_model", "n_layers", "n_heads", "context")}
    options = dict(VARIANTS[name])
    if options.get("score") == "clipped-softmax":  # Bondarenko's causal-LM setting
        options["score_kwargs"] = {"gamma": -12.0 / config["context"]}
    if options["residual"] == "oasis":
        options["null_beta_init"] = float(config["beta_init"])
    return GPTConfig(**arch, **options)


def variant_train_config(config: Mapping[str, Any], name: str = "oasis") -> LMTrainConfig:
    """The same schedule and batches for every variant (``steps``, ``batch``, ``lr``,
    ``weight_decay``; warm-up over the first tenth; four snapshots); OASIS's raw coupling
    ``beta_raw`` trains at ``beta_lr_scale`` times the learning rate."""
    steps, scale = config["steps"], float(config["beta_lr_scale"])
    return LMTrainConfig(
        steps=steps,
        batch=config["batch"],
        lr=config["lr"],
        weight_decay=config["weight_decay"],
        warmup=max(1, steps // 10),
        eval_every=max(1, steps // 4),
        eval_batches=2,
        snapshots=tuple(range(max(1, steps // 5), steps, max(1, steps // 5))),
        lr_multipliers=(("beta_raw", scale),) if name == "oasis" and scale != 1.0 else (),
    )


def _windows(split: str, n: int, context: int, seed: int) -> torch.Tensor:
    x, _ = sample_batch(corpus(split), n, context, torch.Generator().manual_seed(seed))
    return x


def coupling(model: TinyGPT) -> float:
    """OASIS's learned coupling beta, mean over its depth routers (NaN without any)."""
    routers = [m for m in model.modules() if isinstance(m, AttnResidual) and m.null_coupling]
    if not routers:
        return float("nan")
    return float(torch.stack([r.beta().detach() for r in routers]).mean())


def measure(
    model: TinyGPT, probe_sequences: int, calibration_sequences: int, eval_batches: int, seed: int
) -> dict[str, float]:
    """Outliers, sinks, null mass, beta and FP / W8A8 / W4A4 bits per byte of one model."""
    context = model.config.context
    probe = _windows("test", probe_sequences, context, 20_000 + seed)
    outliers = outlier_stats(model, probe.split(8))
    sinks = sink_stats(model, probe.split(8))
    probs = adapt(model).trace(probe[:8], attention=True).attention
    evaluate = {"split": "test", "batches": eval_batches, "batch": 8, "seed": seed}
    row = {
        "max_inf_norm": outliers.max_inf_norm,
        "avg_kurtosis": outliers.avg_kurtosis,
        "sink_score": sinks.sink_score,
        "first_token_mass": sinks.first_token_mass,
        "null_mass": float(torch.stack([null_signal(p).mean() for p in probs]).mean()),
        "fp_bpb": evaluate_bpb(model, **evaluate),
    }
    beta = coupling(model)
    if beta == beta:  # the learned coupling strength, where the model has one
        row["beta"] = beta
    calibration = _windows("train", calibration_sequences, context, 30_000 + seed)
    with quantized(model, "w8a8-tensor"):
        calibrate(model, lambda m: [m(x) for x in calibration.split(8)])
        row["w8a8_bpb"] = evaluate_bpb(model, **evaluate)
    with quantized(model, "w4a4"):
        row["w4a4_bpb"] = evaluate_bpb(model, **evaluate)
    row["w8a8_degradation"] = row["w8a8_bpb"] - row["fp_bpb"]
    row["w4a4_degradation"] = row["w4a4_bpb"] - row["fp_bpb"]
    return row


def trajectory(
    config: Mapping[str, Any], name: str, model: TinyGPT, seed: int
) -> dict[str, list[float]]:
    """Average kurtosis, max inf-norm and sink score of variant ``name`` (trained by
    :func:`variant_train_config`) at each stored snapshot and at the end of training."""
    gpt, tc = variant_config(name, config), variant_train_config(config, name)
    probe = _windows("test", config["probe_sequences"], gpt.context, 20_000 + seed)
    keys = ("step", "avg_kurtosis", "max_inf_norm", "sink_score")
    out: dict[str, list[float]] = {k: [] for k in keys}
    for step in (*tc.snapshots, tc.steps):
        snap = model if step == tc.steps else load_snapshot(gpt, tc, seed, step)
        outliers, sinks = outlier_stats(snap, probe.split(8)), sink_stats(snap, probe.split(8))
        out["step"].append(step)
        out["avg_kurtosis"].append(outliers.avg_kurtosis)
        out["max_inf_norm"].append(outliers.max_inf_norm)
        out["sink_score"].append(sinks.sink_score)
    return out


def train_variant(
    name: str, config: Mapping[str, Any], seed: int, probe_trajectory: bool = False
) -> dict[str, Any]:
    """Train variant ``name`` (:func:`variant_config`, :func:`variant_train_config`; cached by
    :func:`~normlab.training.lm.train_lm`) and measure it (:func:`measure` with ``config``'s
    ``probe_sequences``, ``calibration_sequences``, ``eval_batches``, plus ``train_seconds``).

    Returns ``row``; where training diverged, ``diverged`` (the log's record) and a row of NaN
    (no outliers to measure on NaN weights); else ``curve`` (validation bits per byte by
    step), for OASIS ``beta`` (the coupling at step 0, at each snapshot and at the end) and,
    with ``probe_trajectory``, ``trajectory`` (:func:`trajectory` over the snapshots).
    """
    gpt, tc = variant_config(name, config), variant_train_config(config, name)
    model, log = train_lm(gpt, tc, seed)
    if log.get("diverged"):
        row = {**dict.fromkeys(MEASURED, math.nan), "train_seconds": log["seconds"]}
        return {"row": row, "diverged": log["diverged"]}
    sizes = ("probe_sequences", "calibration_sequences", "eval_batches")
    row = measure(model, *(config[k] for k in sizes), seed)
    curve = {"step": log["eval_step"], "val_bpb": log["val_bpb"]}
    out: dict[str, Any] = {"row": {**row, "train_seconds": float(log["seconds"])}, "curve": curve}
    if name == "oasis":
        steps = [0, *tc.snapshots, tc.steps]
        models = [TinyGPT(gpt), *(load_snapshot(gpt, tc, seed, s) for s in tc.snapshots)]
        out["beta"] = {"step": steps, "beta": [*map(coupling, models), row["beta"]]}
    if probe_trajectory:
        out["trajectory"] = trajectory(config, name, model, seed)
    return out
