"""Claim "oasis": the inter-layer null signal tames outliers and sinks of attention residuals.

The seed (OASIS) argues that depth-wise attention residuals (AttnRes) worsen attention
sinks and activation outliers, and that routing each layer's Softmax1 null mass into the
depth softmax fixes it: lower max infinity norm and kurtosis, and far less damage from
W8A8 quantization. Here byte-level TinyGPTs are trained on the same batches: a pre-LN
baseline, AttnRes with softmax / Softmax1 (and, at full scale, clipped softmax and gated
attention), and OASIS (AttnRes + Softmax1 + null coupling; forms in
:mod:`normlab.attention.depth`). The primary effect isolates the null signal: OASIS against
AttnRes+Softmax1, which differ only in the coupling ``beta = softplus(b)``. With the
library's default ``b = -5`` (beta = 0.007) Adam moves ``b`` by about the learning rate per
step and beta stays near 0 (0.0068 after 250 steps), so OASIS *is* AttnRes+Softmax1; a start
at ``b = 0`` alone (beta = 0.69) still left it at 0.705 after 250 steps. Here ``b`` starts
at 0 and trains in its own AdamW group at ``beta_lr_scale`` (30) times the learning rate
(``LMTrainConfig.lr_multipliers``), so beta can move by order 1 (measured at d = 64, 2
layers, 400 steps: 0.69 -> 1.88); beta's trajectory over training is recorded. Each is
measured on fixed test windows (the corpus's ``test`` split, disjoint files): outliers of
the states entering each block and the head
(:func:`~normlab.probes.outliers.outlier_stats`), sinks
(:func:`~normlab.probes.sinks.sink_stats`), and bits per byte in full precision, under
Bondarenko's per-tensor W8A8 (static min-max activation ranges calibrated on training
windows, asymmetric activations, symmetric weights), and under W4A4 (per-channel weights x
per-token activations).

The primary comparison is the one CLAIMS.md names: OASIS against AttnRes with plain softmax
(relative max inf-norm); OASIS against AttnRes+Softmax1 isolates the null coupling
(secondary, full scale). The phenomenon needs a model that has it: the premise is that the
primary's baseline has outliers (AttnRes's average kurtosis above 10, judged by the interval); the
quantization effects each need the baseline to degrade at that precision (premises:
AttnRes's W8A8 / W4A4 degradation above 0.01 bpb; measured before: W8A8 <= 0.001 bpb for
every arm at d = 64), sinks (sink score >= 0.3) gate the sink effect, and a coupling that
moved (beta >= 0.05) gates the Softmax1 comparisons. The paper's own premise, that AttnRes
worsens outliers against pre-LN, is a secondary effect reported ungated (measured at d = 64
before: AttnRes *lowered* max inf-norm by 55%, [-0.74, -0.37], 5 of 5 seeds).

All variants train at a high learning rate without weight decay, the setting in which a
TinyGPT grows outliers fastest (CLAIMS.md), at the size where a pre-LN baseline's outliers
form (d = 128, 2 layers, context 64: measured at 1000 steps, kurtosis crossed 10 at step 600
and reached 14.1, max inf-norm 81 at step 400; the d = 64 arms stay at 5.2). Quick's budget
affords three d = 128 runs of 150 steps of batch 8 per seed (pre-LN, AttnRes, OASIS) over 7
seeds (at 5 seeds the primary's null calibration on real data gave 6.1% supported and 6.1%
opposite, over the 5% limit), short of that regime, so its outlier premise is expected to
fail (measured at 300 steps of batch 16: AttnRes's kurtosis 5.4-6.9; at 200 steps of batch 8
over 5 seeds: 5.6 [4.5, 6.8]); the Softmax1 comparisons and the clipped-softmax and
gated-attention baselines run at full scale only. Nothing is tuned: the one
outlier-favouring lr is the regime under test (a free setting for the robustness rerun).
Seed 0's AttnRes and pre-LN runs are probed on their stored snapshots (the figure's first
panel).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from normlab.attention.depth import AttnResidual, null_signal
from normlab.claims.catalogue._lm_settings import UNIFORM_BPB, lm_free
from normlab.claims.common import seed_everything
from normlab.claims.core import (
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
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.papers import paper
from normlab.probes.hooks import adapt
from normlab.probes.outliers import outlier_stats
from normlab.probes.sinks import sink_stats
from normlab.quant.model import calibrate, quantized
from normlab.training.lm import LMTrainConfig, evaluate_bpb, load_snapshot, train_lm

__all__ = ["CLAIM", "VARIANTS"]

#: Method name -> TinyGPT options (the clipped softmax's gamma is set from the context).
VARIANTS: dict[str, dict[str, Any]] = {
    "pre-ln": {"residual": "pre"},
    "attnres": {"residual": "attnres"},
    "attnres+softmax1": {"residual": "attnres", "score": "softmax1"},
    "attnres+clipped": {"residual": "attnres", "score": "clipped-softmax"},
    "attnres+gated": {"residual": "attnres", "gated_attention": True},
    "oasis": {"residual": "oasis", "score": "softmax1"},
}
#: The primary comparison's baseline (CLAIMS.md): AttnRes with plain softmax.
BASELINE = "attnres"
#: OASIS without the null coupling: the comparison that isolates it.
SOFTMAX1 = "attnres+softmax1"


def _variant_config(name: str, config: Mapping[str, Any]) -> GPTConfig:
    """The TinyGPT of one variant at the scale ``config``."""
    arch = {k: config[k] for k in ("d_model", "n_layers", "n_heads", "context")}
    options = dict(VARIANTS[name])
    if options.get("score") == "clipped-softmax":  # Bondarenko's causal-LM setting
        options["score_kwargs"] = {"gamma": -12.0 / config["context"]}
    if options["residual"] == "oasis":
        options["null_beta_init"] = float(config["beta_init"])
    return GPTConfig(**arch, **options)


def _train_config(config: Mapping[str, Any], name: str = "oasis") -> LMTrainConfig:
    """Training of one variant: the same schedule and batches for all; OASIS's raw coupling
    ``beta_raw`` trains at ``beta_lr_scale`` times the learning rate."""
    steps = config["steps"]
    scale = float(config["beta_lr_scale"])
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


def _trajectory(
    config: Mapping[str, Any], name: str, model: TinyGPT, seed: int
) -> dict[str, list[float]]:
    """Average kurtosis, max inf-norm and sink score of variant ``name`` at each stored
    snapshot and at the end of training."""
    gpt, tc = _variant_config(name, config), _train_config(config, name)
    probe = _windows("test", config["probe_sequences"], gpt.context, 20_000 + seed)
    out: dict[str, list[float]] = {"step": [], "avg_kurtosis": [], "max_inf_norm": [],
                                   "sink_score": []}  # fmt: skip
    for step in (*tc.snapshots, tc.steps):
        snap = model if step == tc.steps else load_snapshot(gpt, tc, seed, step)
        outliers, sinks = outlier_stats(snap, probe.split(8)), sink_stats(snap, probe.split(8))
        out["step"].append(step)
        out["avg_kurtosis"].append(outliers.avg_kurtosis)
        out["max_inf_norm"].append(outliers.max_inf_norm)
        out["sink_score"].append(sinks.sink_score)
    return out


def _windows(split: str, n: int, context: int, seed: int) -> torch.Tensor:
    x, _ = sample_batch(corpus(split), n, context, torch.Generator().manual_seed(seed))
    return x


def _measure(model: TinyGPT, config: Mapping[str, Any], seed: int) -> dict[str, float]:
    """Outliers, sinks and FP / W8A8 / W4A4 bits per byte of one trained model."""
    context = model.config.context
    probe = _windows("test", config["probe_sequences"], context, 20_000 + seed)
    outliers = outlier_stats(model, probe.split(8))
    sinks = sink_stats(model, probe.split(8))
    probs = adapt(model).trace(probe[:8], attention=True).attention
    routers = [m for m in model.modules() if isinstance(m, AttnResidual) and m.null_coupling]
    evaluate = {"split": "test", "batches": config["eval_batches"], "batch": 8, "seed": seed}
    row = {
        "max_inf_norm": outliers.max_inf_norm,
        "avg_kurtosis": outliers.avg_kurtosis,
        "sink_score": sinks.sink_score,
        "first_token_mass": sinks.first_token_mass,
        "null_mass": float(torch.stack([null_signal(p).mean() for p in probs]).mean()),
        "fp_bpb": evaluate_bpb(model, **evaluate),
    }
    if routers:  # the learned coupling strength beta, averaged over the depth routers
        row["beta"] = float(torch.stack([r.beta().detach() for r in routers]).mean())
    calibration = _windows("train", config["calibration_sequences"], context, 30_000 + seed)
    with quantized(model, "w8a8-tensor"):
        calibrate(model, lambda m: [m(x) for x in calibration.split(8)])
        row["w8a8_bpb"] = evaluate_bpb(model, **evaluate)
    with quantized(model, "w4a4"):
        row["w4a4_bpb"] = evaluate_bpb(model, **evaluate)
    row["w8a8_degradation"] = row["w8a8_bpb"] - row["fp_bpb"]
    row["w4a4_degradation"] = row["w4a4_bpb"] - row["fp_bpb"]
    return row


#: What :func:`_measure` reports (NaN for a diverged run, then counted as declared).
_MEASURED = ("max_inf_norm", "avg_kurtosis", "sink_score", "first_token_mass", "null_mass",
             "fp_bpb", "beta", "w8a8_bpb", "w4a4_bpb", "w8a8_degradation",
             "w4a4_degradation")  # fmt: skip


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Train the variants (cached) and measure each; seed 0 also probes the snapshots."""
    seed_everything(seed)
    table: dict[str, dict[str, float]] = {}
    curves: dict[str, Any] = {"trajectory": {}}
    diverged: dict[str, Any] = {}
    for name in config["variants"]:
        gpt, tc = _variant_config(name, config), _train_config(config, name)
        model, log = train_lm(gpt, tc, seed)
        if log.get("diverged"):  # no outliers to measure on NaN weights: counted as declared
            diverged[name] = log["diverged"]
            table[name] = {**dict.fromkeys(_MEASURED, math.nan), "train_seconds": log["seconds"]}
            continue
        table[name] = {**_measure(model, config, seed), "train_seconds": float(log["seconds"])}
        curves[name] = {"step": log["eval_step"], "val_bpb": log["val_bpb"]}
        if name == "oasis":  # beta's trajectory over the stored snapshots
            steps = [0, *tc.snapshots, tc.steps]
            models = [TinyGPT(gpt), *(load_snapshot(gpt, tc, seed, s) for s in tc.snapshots)]
            curves["beta"] = {"step": steps, "beta": [*map(_beta, models), _beta(model)]}
        if seed == 0 and name in ("pre-ln", BASELINE):
            curves["trajectory"][name] = _trajectory(config, name, model, seed)
    out = {"table": table, "curves": curves}
    return {**out, "diverged": diverged} if diverged else out


def _beta(model: TinyGPT) -> float:
    routers = [m for m in model.modules() if isinstance(m, AttnResidual) and m.null_coupling]
    return float(torch.stack([r.beta().detach() for r in routers]).mean())


def _relative(metric: str, baseline: str = BASELINE, method: str = "oasis") -> Any:
    return lambda m: cell(m, method, metric) / cell(m, baseline, metric) - 1.0


#: A diverged variant has no outliers to measure: it counts as exploded activations (its
#: max inf-norm and kurtosis 1e6) and as fully broken by quantization (8 bpb degradation).
_IF_DIVERGED = {
    "max_inf_norm": 1e6,
    "avg_kurtosis": 1e6,
    "sink_score": 1.0,
    "w8a8_degradation": UNIFORM_BPB,
    "w4a4_degradation": UNIFORM_BPB,
}


def _outlier_effect(
    name: str,
    metric: str,
    baseline: str,
    margin: Margin,
    what: str,
    description: str = "",
    scales: tuple[str, ...] = (),
) -> Effect:
    return Effect(
        name,
        description or f"OASIS {what} over {baseline}'s, minus 1",
        _relative(metric, baseline),
        direction="less",
        margin=margin,
        method="oasis",
        baseline=baseline,
        if_diverged=_IF_DIVERGED,
        scales=scales,
    )


def _quant_effect(name: str, metric: str, margin: Margin) -> Effect:
    return difference(
        name,
        f"OASIS minus AttnRes {metric.replace('_', ' ')} (bits per byte)",
        "oasis",
        BASELINE,
        metric,
        direction="less",
        margin=margin,
        unit="bpb",
        if_diverged=_IF_DIVERGED,
    )


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    names = list(measurements[0]["table"])
    metrics = ("max_inf_norm", "avg_kurtosis", "w4a4_degradation")
    fig, axes = plt.subplots(1, 5, figsize=(20, 3.6))
    paths = next((m["curves"]["trajectory"] for m in measurements
                  if m["curves"].get("trajectory")), {})  # fmt: skip
    ax = axes[0]
    for k, (name, c) in enumerate(paths.items()):
        ax.plot(c["step"], c["avg_kurtosis"], "o-", color=f"C{k}", label=f"{name} kurtosis")
        ax.plot(c["step"], c["max_inf_norm"], "s--", color=f"C{k}", label=f"{name} inf-norm")
    ax.axhline(10.0, color="k", lw=0.6, ls=":")
    ax.set(yscale="log", xlabel="step", title="seed 0 over training")
    ax.legend(fontsize=7)
    axes = axes[1:]
    for ax, metric in zip(axes, metrics, strict=False):
        for k, m in enumerate(measurements):
            values = [m["table"][n].get(metric, float("nan")) for n in names]
            ax.scatter(range(len(names)), values, color=f"C{k}", alpha=0.8, label=f"seed {k}")
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        ax.set_title(metric.replace("_", " "))
    axes[0].legend(fontsize=8)
    for k, m in enumerate(measurements):
        c = m["curves"].get("beta")
        if c:
            axes[3].plot(c["step"], c["beta"], "o-", color=f"C{k}", ms=3)
    axes[3].set(xlabel="step", ylabel="OASIS beta (mean over routers)", title="beta")
    fig.tight_layout()
    return fig


_BASE = {
    "d_model": 128,
    "n_layers": 2,
    "n_heads": 4,
    "context": 64,
    "batch": 16,
    "lr": 6e-3,
    "weight_decay": 0.0,
    "beta_init": 0.0,
    "beta_lr_scale": 30.0,
}
_SMOKE_VARIANTS = ["pre-ln", BASELINE, SOFTMAX1, "oasis"]
#: Quick's budget: the primary's two arms and pre-LN (the paper's premise effect).
_QUICK_VARIANTS = ["pre-ln", BASELINE, "oasis"]
_FULL = ("full",)
_OUTLIER_GATED = ("inf_norm_lower", "kurtosis_lower", "inf_norm_lower_vs_softmax1",
                  "kurtosis_lower_vs_softmax1")  # fmt: skip
_INF_MARGIN = Margin(0.02, "normlab's choice: 2%, a quarter of the seed's average 9.26% reduction")
_KURT_MARGIN = Margin(0.01, "normlab's choice: 1%, below the seed's average 2.60% reduction")
_QUANT_MARGIN = Margin(
    0.01, "normlab's choice: 0.01 bpb, about the seed-to-seed spread of a quick TinyGPT's loss"
)


def _degrades(scheme: str) -> Premise:
    return Premise(
        f"baseline_degrades_{scheme}",
        f"AttnRes's {scheme.upper()} minus full-precision bits per byte",
        lambda m: cell(m, BASELINE, f"{scheme}_degradation"),
        direction="greater",
        margin=_QUANT_MARGIN,
        unit="bpb",
        gates=(f"{scheme}_smaller",),
        if_diverged=_IF_DIVERGED,
    )


CLAIM = register_claim(
    Claim(
        id="oasis",
        paper=paper("oasis"),
        hypothesis=(
            "Against depth-wise attention residuals (AttnRes), OASIS (Softmax1 plus the "
            "inter-layer null signal in the depth routing) lowers the max infinity norm of "
            "the hidden states, their kurtosis, the sink score and the W8A8 / W4A4 "
            "degradation."
        ),
        primary=_outlier_effect(
            "inf_norm_lower", "max_inf_norm", BASELINE, _INF_MARGIN, "max inf-norm"
        ),
        secondary=(
            _outlier_effect(
                "kurtosis_lower", "avg_kurtosis", BASELINE, _KURT_MARGIN, "average kurtosis"
            ),
            _outlier_effect(
                "inf_norm_lower_vs_softmax1",
                "max_inf_norm",
                SOFTMAX1,
                _INF_MARGIN,
                "max inf-norm",
                "the null coupling alone: OASIS max inf-norm over AttnRes+Softmax1's, minus 1",
                _FULL,
            ),
            _outlier_effect(
                "kurtosis_lower_vs_softmax1",
                "avg_kurtosis",
                SOFTMAX1,
                _KURT_MARGIN,
                "average kurtosis",
                scales=_FULL,
            ),
            _quant_effect("w8a8_smaller", "w8a8_degradation", _QUANT_MARGIN),
            _quant_effect("w4a4_smaller", "w4a4_degradation", _QUANT_MARGIN),
            difference(
                "sink_lower",
                "OASIS minus AttnRes sink score",
                "oasis",
                BASELINE,
                "sink_score",
                direction="less",
                margin=Margin(0.02, "normlab's choice: 2 points of the sink score (0-1)"),
                if_diverged=_IF_DIVERGED,
            ),
            Effect(
                "attnres_worsens_outliers",
                "the paper's premise, reported ungated: AttnRes (softmax) max inf-norm over "
                "pre-LN's, minus 1",
                _relative("max_inf_norm", "pre-ln", BASELINE),
                direction="greater",
                margin=_INF_MARGIN,
                method=BASELINE,
                baseline="pre-ln",
                if_diverged=_IF_DIVERGED,
            ),
        ),
        premises=(
            Premise(
                "outliers_present",
                "AttnRes's (the primary's baseline) average kurtosis of the hidden states",
                lambda m: cell(m, BASELINE, "avg_kurtosis"),
                direction="greater",
                margin=Margin(
                    10.0,
                    "normlab's choice: a Gaussian has kurtosis 3; LLM outlier features reach "
                    "hundreds (Bondarenko et al.); below 10 there are no outliers to tame",
                ),
                gates=_OUTLIER_GATED,
                if_diverged=_IF_DIVERGED,
            ),
            _degrades("w8a8"),
            _degrades("w4a4"),
        ),
        preconditions=(
            Precondition(
                "sinks_present",
                "AttnRes's sink score",
                lambda m: cell(m, BASELINE, "sink_score"),
                op=">=",
                threshold=0.3,
                source="normlab's choice: at least 30% of heads sink (Gu et al.'s score)",
                gates=("sink_lower",),
            ),
            Precondition(
                "coupling_on",
                "OASIS's learned null coupling beta, mean over its depth routers",
                lambda m: cell(m, "oasis", "beta"),
                op=">=",
                threshold=0.05,
                source="normlab's choice: below 0.05 the null term moves the depth logits "
                "by < 0.05 and OASIS is AttnRes+Softmax1",
                gates=("inf_norm_lower_vs_softmax1", "kurtosis_lower_vs_softmax1"),
                scales=_FULL,
            ),
        ),
        untuned="every variant trains at the one outlier-favouring lr 6e-3 without weight "
        "decay, the regime under test (rerun at 3e-3 and 1.2e-2 by --robustness)",
        free_settings=(
            FreeSetting("lr", 3e-3, 1.2e-2, "normlab's choice: the outlier-favouring rate"),
            FreeSetting("beta_lr_scale", 10.0, 100.0, "normlab's choice: lets beta move"),
            FreeSetting(
                "beta_init", -5.0, 2.0, "normlab's choice: raw coupling 0 (the code's is -5)"
            ),
            FreeSetting("weight_decay", 0.01, 0.1, "normlab's choice: none, favours outliers"),
            FreeSetting(
                "variants",
                [*_QUICK_VARIANTS, "attnres+clipped"],
                [*_QUICK_VARIANTS, "attnres+gated"],
                "normlab's choice: quick trains the primary's pair and pre-LN (its budget)",
            ),
            *lm_free("d_model", "n_layers", "n_heads", "context", "batch", "eval_batches"),
            *lm_free(steps="normlab's choice: 150 at quick, short of the outliers' 600"),
            FreeSetting.scaled("probe_sequences", "normlab's choice: sequences of the probes"),
            FreeSetting.scaled("calibration_sequences", "normlab's choice: W8A8 calibration"),
        ),
        # the outlier premise fails at 150 steps (a pre-LN kurtosis crosses 10 near 600);
        # lr and beta_lr_scale left the claim untestable (stop 31)
        decisive="steps",
        headline=(
            "OASIS vs five baselines, three datasets: max inf-norm -9.26%, avg kurtosis "
            "-2.60%, W8A8 perplexity -75.85%, W4A4 GSM8K Pass@1 +12.42%."
        ),
        setup=(
            "Byte-level TinyGPT (d = 128, 2 layers, context 64; stdlib corpus, BOS token, "
            "AdamW at lr 6e-3 without weight decay, the outlier-favouring setting) in each "
            "variant trained on identical batches; OASIS's raw coupling starts at 0 and trains "
            "at 30x the learning rate; outliers on the states entering each block and the "
            "head, sinks (Gu et al., eps = 0.3) and bits per byte on fixed test "
            "windows; W8A8 per-tensor with calibrated static ranges, W4A4 per channel x per "
            "token."
        ),
        scale_note=(
            "Quick runs pre-LN, AttnRes and OASIS at d = 128 (the width at which a pre-LN "
            "baseline's outliers form), 2 layers, 150 steps of batch 8, 7 seeds (the "
            "primary's null calibration needs more than 5): its budget, well "
            "short of the 600 steps at which a pre-LN baseline's kurtosis crosses 10, so the "
            "outlier premise is expected to fail at quick. AttnRes+Softmax1 (the null "
            "coupling's comparison), clipped-softmax and gated-attention baselines run at "
            "full scale only (d = 128, 4 layers, context 128, batch 32, 2000 steps). "
            "Outliers and sinks need long training at width (full scale or an LLM)."
        ),
        configs={
            "smoke": {
                "seeds": 1,
                **_BASE,
                "d_model": 32,
                "n_layers": 1,
                "n_heads": 2,
                "context": 32,
                "batch": 4,
                "steps": 5,
                "probe_sequences": 8,
                "calibration_sequences": 8,
                "eval_batches": 1,
                "variants": _SMOKE_VARIANTS,
            },
            "quick": {
                "seeds": 7,
                **_BASE,
                # quick's budget; outliers may not form by then, which the outlier premise
                # then reports (full scale is the paper's regime).
                "batch": 8,
                "steps": 150,
                "probe_sequences": 32,
                "calibration_sequences": 16,
                "eval_batches": 4,
                "variants": _QUICK_VARIANTS,
            },
            "full": {
                "seeds": 5,
                **_BASE,
                "n_layers": 4,
                "context": 128,
                "batch": 32,
                "steps": 2000,
                "probe_sequences": 128,
                "calibration_sequences": 64,
                "eval_batches": 16,
                "variants": list(VARIANTS),
            },
        },
        run=run,
        figure=_figure,
        caption=(
            "Left: seed 0's pre-LN (blue) and AttnRes (orange) over training: average "
            "kurtosis (solid; dotted: the premise's 10) and max inf-norm (dashed, log axis). "
            "Then max inf-norm, average kurtosis and W4A4 degradation per variant (one colour "
            "per seed; OASIS should sit below attnres), and OASIS's coupling beta over "
            "training (right; a flat line at its initial 0.69 means the coupling never moved)."
        ),
    )
)
