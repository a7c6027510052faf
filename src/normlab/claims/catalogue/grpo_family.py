"""Claim "grpo-family": P-GRPO serves a minority preference group better than GRPO.

Two toy policy-gradient problems over discrete outputs, trained with the GRPO-family
advantages of :mod:`normlab.rl` (softmax policy ``logits = theta_shared + theta_context``,
SGD, :func:`~normlab.training.policy.train_bandit`):

(a) P-GRPO (the primary). Users of a majority (80%) and a minority (20%) preference group
rate 10 outputs; the minority's ratings are compressed (scale 0.3) and every rating has noise
0.1. Each prompt's group of 8 responses is rated by users drawn from the population, so
GRPO's group statistics pool the two preference groups (the exchangeability P-GRPO
criticises). P-GRPO standardises by each preference group's reward history; its control, the
paper's own ablation, assigns the preference groups at random. Metric: the minority's exact
expected true preference (0 worst output, 1 best) at the end of training.

(b) SLAS (secondary). 8 prompts whose true reward spreads differ (log-uniform scale 0.03-1)
and a proxy reward adding an exploitable output bias (0.1 x a "length" feature) plus noise;
GRPO vs Dr. GRPO vs batch-std vs SLAS (gamma 0.5). Metrics: mean true preference, and the
proxy-true gap (the bias term's expected value).

Tuning (the protocol): every arm gets 3 learning rates (a grid per arm, since the advantage
scales differ: Dr. GRPO's raw differences need rates ~30x larger than the standardised
methods'), one edge extension at quick, selected per seed on a validation run (the same
task, its own sampling stream), then retrained on the test stream: (a) on the validation
run's population reward over training, (b) on its final proxy reward (what a trainer sees).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from normlab.claims.common import seed_everything
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
from normlab.claims.protocol import tune_arms
from normlab.papers import paper

__all__ = ["CLAIM"]

PREF_ARMS = ("grpo", "p-grpo", "p-grpo-random")
PROXY_ARMS = ("grpo", "dr-grpo", "batch-std", "slas")
_VAL_STREAM = 50_000


def _unit(u: np.ndarray) -> np.ndarray:
    return (u - u.min(-1, keepdims=True)) / np.ptp(u, axis=-1, keepdims=True)


def _preference(
    arm: str, lr: float, config: Mapping[str, Any], seed: int, stream: int
) -> dict[str, float]:
    from normlab.rl import PreferenceGroupAdvantage, advantages
    from normlab.training.policy import train_bandit

    k, g, n, p_min = config["outputs"], config["group"], config["prompts"], config["p_minority"]
    steps = config["steps"]
    u = _unit(np.random.default_rng(10_000 + seed).random((2, k)))
    scale = np.array([1.0, config["minority_scale"]])
    state = PreferenceGroupAdvantage()
    placebo = np.random.default_rng(20_000 + stream)

    def sample(rng):
        users = (rng.random(n * g) < p_min).astype(np.int64)
        return users, np.repeat(np.arange(n), g)

    def reward(ctx, out, rng):
        return scale[ctx] * u[ctx, out] + config["noise"] * rng.standard_normal(len(ctx))

    def advantage(r, groups, ctx):
        if arm == "grpo":
            return advantages(r, torch.as_tensor(groups))
        if arm == "p-grpo":
            return state(r, ctx)
        return state(r, (placebo.random(len(ctx)) < p_min).astype(np.int64))

    def evaluate(probs):
        t = (probs * u).sum(1)
        return {"majority": float(t[0]), "minority": float(t[1])}

    curve = train_bandit(
        n_contexts=2,
        n_outputs=k,
        steps=steps,
        lr=lr,
        sample=sample,
        reward=reward,
        advantage=advantage,
        evaluate=evaluate,
        seed=stream,
    )["curve"]
    tail = curve[-max(1, len(curve) // 10) :]
    return {
        "minority_true": float(np.mean([c["minority"] for c in tail])),
        "majority_true": float(np.mean([c["majority"] for c in tail])),
        "population_auc": float(
            np.mean([(1 - p_min) * c["majority"] + p_min * c["minority"] for c in curve])
        ),
        "lr": float(lr),
    }


def _proxy(
    arm: str, lr: float, config: Mapping[str, Any], seed: int, stream: int
) -> dict[str, float]:
    from normlab.rl import advantages
    from normlab.training.policy import train_bandit

    k, g, n, beta = config["outputs"], config["group"], config["prompts"], config["bias"]
    steps = config["steps"]
    rng0 = np.random.default_rng(30_000 + seed)
    u = _unit(rng0.random((n, k)))
    s = np.exp(rng0.uniform(np.log(config["min_spread"]), 0.0, n))
    h = _unit(rng0.random(k))
    ids = np.repeat(np.arange(n), g)

    def reward(ctx, out, rng):
        noise = config["noise"] * rng.standard_normal(len(ctx))
        return s[ctx] * u[ctx, out] + beta * h[out] + noise

    def evaluate(probs):
        gap = beta * (probs * h).sum(1)
        true = (probs * u).sum(1)
        return {
            "true": float(true.mean()),
            "gap": float(gap.mean()),
            "proxy": float(((probs * (s[:, None] * u)).sum(1) + gap).mean()),
        }

    curve = train_bandit(
        n_contexts=n,
        n_outputs=k,
        steps=steps,
        lr=lr,
        sample=lambda rng: (ids, ids),
        reward=reward,
        advantage=lambda r, groups, ctx: advantages(
            r, torch.as_tensor(groups), method=arm, gamma=config["gamma"]
        ),
        evaluate=evaluate,
        seed=stream,
    )["curve"]
    tail = curve[-max(1, len(curve) // 10) :]
    out = {key: float(np.mean([c[key] for c in tail])) for key in ("true", "gap", "proxy")}
    out["gap_gain"] = out["gap"] - curve[0]["gap"]
    out["lr"] = float(lr)
    return out


def _experiment(arm: str, lr: float, config: Mapping[str, Any], seed: int, stream: int):
    """One training run of ``arm`` ("a/..." or "b/..."), sampling stream ``stream``."""
    seed_everything(stream)
    part, name = arm.split("/")
    sub = {**config["preference" if part == "a" else "proxy"], "steps": config["steps"]}
    if part == "a":  # the population's shape is top-level: free settings
        sub |= {k: config[k] for k in ("p_minority", "minority_scale")}
        return _preference(name, lr, sub, seed, stream)
    return _proxy(name, lr, sub, seed, stream)


def _diverged(row: Mapping[str, float]) -> bool:
    return not all(np.isfinite(v) for v in row.values())


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Every arm tuned on a validation stream, then trained on the test stream."""
    torch.set_num_threads(1)

    def evaluate(arm: str, params: dict[str, Any]) -> tuple[float, None]:
        row = _experiment(arm, params["lr"], config, seed, _VAL_STREAM + seed)
        score = -row["population_auc"] if arm.startswith("a/") else -row["proxy"]
        return (score if not _diverged(row) else np.inf), None

    def uniform(arm: str) -> float:  # trivial reference: the untrained (uniform) policy
        row = _experiment(arm, 0.0, {**config, "steps": 0}, seed, _VAL_STREAM + seed)
        return -row["population_auc"] if arm.startswith("a/") else -row["proxy"]

    tuned, records = tune_arms(config, evaluate, reference=uniform)
    table: dict[str, dict[str, float]] = {}
    diverged: dict[str, dict[str, Any]] = {}
    for arm, t in tuned.items():
        table[arm] = _experiment(arm, t.chosen["lr"], config, seed, seed)
        if _diverged(table[arm]):
            diverged[arm] = {"step": config["steps"], "last": None}
    return {"table": table, "tuning": records, "diverged": diverged}


def _check_trl(config: Mapping[str, Any]) -> CheckOutcome:
    from normlab.rl import advantages

    r = torch.randn(32, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    r[5, 0] = float("nan")
    total = r.nansum(1)
    mean = total.view(-1, 8).mean(1).repeat_interleave(8)
    std = total.view(-1, 8).std(1).repeat_interleave(8)
    errs = [
        (advantages(r, 8, method="grpo") - (total - mean) / (std + 1e-4)).abs().max(),
        (advantages(r, 8, method="batch-std") - (total - mean) / (total.std() + 1e-4)).abs().max(),
        (advantages(r, 8, method="dr-grpo") - (total - mean)).abs().max(),
    ]
    err = float(max(errs))
    return CheckOutcome(err <= 1e-7, err, f"max |normlab - TRL formula| = {err:.2g} <= 1e-7")


_M = Margin(0.02, "normlab's choice: 2% of the true-preference range [0, 1]")
#: A diverged policy counts as the uniform policy: mean preference of a unit-range vector.
_DIV = {"minority_true": 0.5, "majority_true": 0.5, "true": 0.5, "gap": 0.05}
_STANDARD = [3.0, 10.0, 30.0]
_RAW = [30.0, 100.0, 300.0]


def _search(standard: list[float], raw: list[float], extend: int) -> dict[str, Any]:
    arms = {f"a/{arm}": standard for arm in PREF_ARMS}
    arms |= {f"b/{arm}": raw if arm == "dr-grpo" else standard for arm in PROXY_ARMS}
    return {"per_arm": {arm: {"lr": list(v)} for arm, v in arms.items()}, "extend": extend}


def _pref(name: str, description: str, method: str, baseline: str, metric: str, **kw):
    return difference(
        name, description, f"a/{method}", f"a/{baseline}", metric, if_diverged=_DIV, **kw
    )


def _prox(name: str, description: str, method: str, metric: str, **kw):
    return difference(name, description, f"b/{method}", "b/grpo", metric, if_diverged=_DIV, **kw)


_PREFERENCE = {
    "outputs": 10,
    "group": 8,
    "prompts": 8,
    "noise": 0.1,
}
#: The preference population: the minority's share of users and rating scale.
_POPULATION = {"p_minority": 0.2, "minority_scale": 0.3}
_PROXY = {
    "outputs": 10,
    "group": 8,
    "prompts": 8,
    "bias": 0.1,
    "noise": 0.02,
    "min_spread": 0.03,
    "gamma": 0.5,
}

CLAIM = register_claim(
    Claim(
        id="grpo-family",
        paper=paper("p-grpo"),
        hypothesis=(
            "Normalising advantages by preference-group reward histories (P-GRPO) gives a "
            "minority preference group higher true reward than GRPO's pooled group statistics."
        ),
        primary=_pref(
            "minority_reward",
            "(a) minority's final true preference, P-GRPO minus GRPO",
            "p-grpo",
            "grpo",
            "minority_true",
            direction="greater",
            margin=_M,
        ),
        secondary=(
            _pref(
                "vs_random_groups",
                "(a) minority's true preference, P-GRPO minus P-GRPO with random groups "
                "(the paper's ablation as placebo)",
                "p-grpo",
                "p-grpo-random",
                "minority_true",
                direction="greater",
                margin=_M,
            ),
            _pref(
                "majority_kept",
                "(a) majority's true preference, P-GRPO minus GRPO (no worse than)",
                "p-grpo",
                "grpo",
                "majority_true",
                direction="no_less",
                margin=_M,
            ),
            _prox(
                "slas_true_reward",
                "(b) mean true preference, SLAS minus GRPO",
                "slas",
                "true",
                direction="greater",
                margin=_M,
            ),
            _prox(
                "slas_hacking_gap",
                "(b) proxy-true gap (expected bias term), SLAS minus GRPO",
                "slas",
                "gap",
                direction="less",
                margin=Margin(0.005, "normlab's choice: 5% of the bias term's full range 0.1"),
                unit="reward",
            ),
            _prox(
                "batch_std_true_reward",
                "(b) mean true preference, batch-std minus GRPO",
                "batch-std",
                "true",
                direction="greater",
                margin=_M,
            ),
            _prox(
                "dr_grpo_true_reward",
                "(b) mean true preference, Dr. GRPO minus GRPO",
                "dr-grpo",
                "true",
                direction="greater",
                margin=_M,
            ),
        ),
        checks=(
            Check(
                "trl_equivalence",
                "grpo / batch-std / dr-grpo equal TRL's formulas (NaN column included)",
                _check_trl,
            ),
        ),
        premises=(
            Premise(
                "minority_underserved",
                "(a) under GRPO, majority minus minority final true preference",
                lambda m: cell(m, "a/grpo", "majority_true") - cell(m, "a/grpo", "minority_true"),
                direction="greater",
                margin=Margin(
                    0.05,
                    "normlab's choice: GRPO must leave the minority behind for a gain to be "
                    "possible",
                ),
                gates=("minority_reward", "vs_random_groups"),
                if_diverged=_DIV,
            ),
            Premise(
                "grpo_hacks",
                "(b) GRPO's increase of the expected bias term over training",
                lambda m: cell(m, "b/grpo", "gap_gain"),
                direction="greater",
                margin=Margin(0.005, "normlab's choice: without hacking there is no gap"),
                gates=("slas_hacking_gap", "slas_true_reward"),
            ),
        ),
        free_settings=(
            FreeSetting.scaled("steps", "normlab's choice: the training budget of the toys"),
            FreeSetting.scaled("minority_scale", "normlab's choice: the minority's rating scale"),
            FreeSetting.scaled("p_minority", "normlab's choice: the minority's share of users"),
        ),
        # the compression is the mechanism the primary needs (GRPO's pooled std suppresses
        # the minority's smaller rewards); the steps' neighbours kept the verdict
        decisive="minority_scale",
        headline="P-GRPO: faster convergence and higher rewards than GRPO across tasks; SLAS "
        "surpasses DanceGRPO while mitigating reward hacking.",
        configs={
            "smoke": {
                "seeds": 1,
                "steps": 20,
                **_POPULATION,
                "search": _search([1.0], [30.0], 0),
                "preference": {**_PREFERENCE, "prompts": 4},
                "proxy": _PROXY,
            },
            "quick": {
                "seeds": 16,
                "steps": 150,
                **_POPULATION,
                "search": _search(_STANDARD, _RAW, 1),
                "preference": _PREFERENCE,
                "proxy": _PROXY,
            },
            "full": {
                "seeds": 20,
                "steps": 1000,
                **_POPULATION,
                "search": _search([1.0, *_STANDARD], [10.0, *_RAW], 2),
                "preference": {**_PREFERENCE, "outputs": 32, "group": 16, "prompts": 16},
                "proxy": {**_PROXY, "outputs": 32, "group": 16, "prompts": 32},
            },
        },
        run=run,
        setup=(
            "(a) 10-output preference bandit, 80/20 majority/minority users rating each "
            "prompt's 8 responses; GRPO vs P-GRPO vs P-GRPO with random groups. (b) 8 prompts "
            "with heterogeneous true-reward spread and a biased proxy; GRPO, Dr. GRPO, "
            "batch-std, SLAS. Tabular softmax policy with a shared logit term, SGD; 3 "
            "learning rates per arm (Dr. GRPO 30-300, the others 3-30, +1 edge step) "
            "selected on a validation stream, retrained on the test stream."
        ),
        scale_note=(
            "Toy bandits stand in for LLM and text-to-image fine-tuning; SLAS's gamma is not "
            "public (0.5 here); SLAS's own headline is a secondary effect of this claim; 16 "
            "seeds at quick because the primary's per-seed values are bimodal."
        ),
    )
)
