"""Two toy bandit tasks for GRPO-family advantages, trained by
:func:`~normlab.training.policy.train_bandit` and scored by exact expected rewards.

- :func:`preference_bandit`: users of a majority and a minority preference group rate the
  same outputs; GRPO pools both groups' ratings in each prompt's group statistics, P-GRPO
  (:class:`~normlab.rl.PreferenceGroupAdvantage`) standardises by each preference group's
  history, its control by randomly assigned groups.
- :func:`proxy_bandit`: prompts whose true reward spreads differ, trained on a proxy reward
  that adds an exploitable output bias (reward hacking), with any method of
  :func:`~normlab.rl.advantages` (GRPO, Dr. GRPO, batch-std, SLAS).

``task_seed`` draws the task (utilities, spreads, bias); ``seed`` the training run's sampling
stream, so that runs of one task differ by sampling alone. Given a list as ``curve``, either
function appends its training curve to it, lower is better, one point per logged policy (the
untrained one first): minus the population's expected true preference, or minus the expected
proxy reward (what the trainer optimises), for a convergence reading
(:func:`~normlab.training.fit.late_share`).
"""

from __future__ import annotations

import numpy as np
import torch

from normlab.rl import PreferenceGroupAdvantage, advantages
from normlab.training.policy import train_bandit

__all__ = ["PREFERENCE_METHODS", "preference_bandit", "proxy_bandit"]

#: The advantage rules :func:`preference_bandit` offers.
PREFERENCE_METHODS = ("grpo", "p-grpo", "p-grpo-random")


def _unit(u: np.ndarray) -> np.ndarray:
    """Rescale the last axis to the range [0, 1]."""
    return (u - u.min(-1, keepdims=True)) / np.ptp(u, axis=-1, keepdims=True)


def _tail_mean(log: list[dict[str, float]], key: str) -> float:
    """The mean of ``key`` over the last 10% of the logged policies."""
    return float(np.mean([c[key] for c in log[-max(1, len(log) // 10) :]]))


def preference_bandit(
    method: str,
    *,
    lr: float,
    steps: int,
    outputs: int,
    group: int,
    prompts: int,
    noise: float,
    p_minority: float,
    minority_scale: float,
    task_seed: int,
    seed: int,
    curve: list[float] | None = None,
) -> dict[str, float]:
    """Train a policy on a two-group preference population; its exact true preferences.

    Each step ``prompts`` prompts get ``group`` responses each, every one rated by a user
    drawn from the population (minority with probability ``p_minority``): the user's group's
    utility (a random vector rescaled to [0, 1]; the minority's ratings times
    ``minority_scale``) plus Gaussian noise of sd ``noise``. ``method``: ``"grpo"`` (group
    statistics over each prompt's responses), ``"p-grpo"`` (each preference group's reward
    history) or ``"p-grpo-random"`` (P-GRPO with groups assigned at random, the paper's
    ablation).

    Returns:
        ``"minority_true"`` / ``"majority_true"``: each group's expected utility (0 worst
        output, 1 best) over the last 10% of training; ``"population_auc"``: the
        population-weighted expected utility averaged over training.
    """
    if method not in PREFERENCE_METHODS:
        raise ValueError(f"Unknown method {method!r}; expected one of {PREFERENCE_METHODS}.")
    u = _unit(np.random.default_rng(10_000 + task_seed).random((2, outputs)))
    scale = np.array([1.0, minority_scale])
    state = PreferenceGroupAdvantage()
    placebo = np.random.default_rng(20_000 + seed)

    def sample(rng):
        users = (rng.random(prompts * group) < p_minority).astype(np.int64)
        return users, np.repeat(np.arange(prompts), group)

    def reward(ctx, out, rng):
        return scale[ctx] * u[ctx, out] + noise * rng.standard_normal(len(ctx))

    def advantage(r, groups, ctx):
        if method == "grpo":
            return advantages(r, torch.as_tensor(groups))
        if method == "p-grpo":
            return state(r, ctx)
        return state(r, (placebo.random(len(ctx)) < p_minority).astype(np.int64))

    def evaluate(probs):
        t = (probs * u).sum(1)
        return {"majority": float(t[0]), "minority": float(t[1])}

    log = train_bandit(
        n_contexts=2,
        n_outputs=outputs,
        steps=steps,
        lr=lr,
        sample=sample,
        reward=reward,
        advantage=advantage,
        evaluate=evaluate,
        seed=seed,
    )["curve"]
    weighted = [(1 - p_minority) * c["majority"] + p_minority * c["minority"] for c in log]
    if curve is not None:
        curve.extend(-w for w in weighted)
    return {
        "minority_true": _tail_mean(log, "minority"),
        "majority_true": _tail_mean(log, "majority"),
        "population_auc": float(np.mean(weighted)),
    }


def proxy_bandit(
    method: str,
    *,
    lr: float,
    steps: int,
    outputs: int,
    group: int,
    prompts: int,
    bias: float,
    noise: float,
    min_spread: float,
    gamma: float,
    task_seed: int,
    seed: int,
    curve: list[float] | None = None,
) -> dict[str, float]:
    """Train a policy on a biased proxy reward; its exact true reward and hacking gap.

    Prompt ``c`` has a true utility ``u_c`` (rescaled to [0, 1]) and a spread ``s_c``
    (log-uniform in ``[min_spread, 1]``); the proxy reward is ``s_c u_c(o) + bias h(o)`` plus
    Gaussian noise of sd ``noise``, with ``h`` an output feature in [0, 1] (a "length") the
    policy can exploit. Every step each prompt gets ``group`` responses; advantages by
    :func:`~normlab.rl.advantages` with ``method`` (and ``gamma`` for SLAS).

    Returns:
        Over the last 10% of training: ``"true"`` (mean expected ``u``), ``"gap"`` (the
        expected bias term, proxy minus true reward) and ``"proxy"`` (the expected proxy
        reward); ``"gap_gain"``: the final gap minus the untrained policy's.
    """
    rng0 = np.random.default_rng(30_000 + task_seed)
    u = _unit(rng0.random((prompts, outputs)))
    s = np.exp(rng0.uniform(np.log(min_spread), 0.0, prompts))
    h = _unit(rng0.random(outputs))
    ids = np.repeat(np.arange(prompts), group)

    def reward(ctx, out, rng):
        return s[ctx] * u[ctx, out] + bias * h[out] + noise * rng.standard_normal(len(ctx))

    def evaluate(probs):
        gap = bias * (probs * h).sum(1)
        true = (probs * u).sum(1)
        return {
            "true": float(true.mean()),
            "gap": float(gap.mean()),
            "proxy": float(((probs * (s[:, None] * u)).sum(1) + gap).mean()),
        }

    log = train_bandit(
        n_contexts=prompts,
        n_outputs=outputs,
        steps=steps,
        lr=lr,
        sample=lambda rng: (ids, ids),
        reward=reward,
        advantage=lambda r, groups, ctx: advantages(
            r, torch.as_tensor(groups), method=method, gamma=gamma
        ),
        evaluate=evaluate,
        seed=seed,
    )["curve"]
    if curve is not None:
        curve.extend(-c["proxy"] for c in log)
    out = {key: _tail_mean(log, key) for key in ("true", "gap", "proxy")}
    out["gap_gain"] = out["gap"] - log[0]["gap"]
    return out
