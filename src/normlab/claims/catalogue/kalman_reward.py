"""Claim "kalman-reward": Kalman-filtered returns speed up an actor-critic on CartPole-v1.

The seed normalises policy-gradient returns with a 1-D Kalman filter
(:class:`~normlab.rl.KalmanRewardNormalizer`, the paper's per-step eq. 14/16) and reports
faster convergence and lower training variance than standard normalization on CartPole and
LunarLander, with an actor-critic (PPO in the public code).

Here a small PPO actor-critic (:func:`~normlab.training.policy.actor_critic_cartpole`: 4-32-2
policy and 4-32-1 critic, tanh, Adam, gamma 0.99, 5 epochs, clip 0.2, 8 episodes per update)
trains on gymnasium's numpy-vectorised CartPole-v1 with the returns-to-go standardised per
episode ("zscore", standard normalization, the named baseline) or Kalman-filtered in the
paper's per-step form ("kalman"). Both arms get 4 trials, selected per seed on a validation
run (its own environment and initialisation seed), then retrained on the test seed: zscore
over the learning rate, Kalman over the learning rate x R (Q fixed at the public code's
1e-2, so R sets the Q/R ratio and the filter's gain). Metrics of the test run: the area
under the return curve (mean training return, the primary), the episodes until the 8-episode
mean return reaches 475 (the paper's metric; the budget when never reached, so it is read
only when the z-score arm reaches 475: a precondition) and the spread of the late returns.
The old REINFORCE test bed (returns Kalman-filtered against running mean/std, lr tuned the
same way) is kept as a secondary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from normlab.claims.common import seed_everything
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
from normlab.claims.protocol import tune_arms
from normlab.papers import paper

__all__ = ["ARMS", "CLAIM", "run"]

#: Actor-critic arms (normalisation of the returns) and REINFORCE arms (secondary).
AC_ARMS = ("zscore", "kalman")
RF_ARMS = ("reinforce-running", "reinforce-kalman")
ARMS = (*AC_ARMS, *RF_ARMS)
#: A uniformly random CartPole policy's mean return, what a run that learns nothing scores.
RANDOM_RETURN = 22.0
_VAL_SEED = 1_000


def _summarize(returns: Sequence[float], solve: float = 475.0, window: int = 8) -> dict:
    """AUC, episodes to a trailing-mean return of ``solve`` (and whether it was reached),
    final and late-spread returns."""
    arr = np.asarray(returns, dtype=float)
    trailing = np.convolve(arr, np.ones(window) / window, "valid")
    hit = np.flatnonzero(trailing >= solve)
    tail = max(1, len(arr) // 10)
    return {
        "auc": float(arr.mean()),
        "episodes_to_475": float(hit[0] + window if hit.size else len(arr)),
        "solved": float(hit.size > 0),
        "final": float(arr[-tail:].mean()),
        "late_sd": float(arr[len(arr) // 2 :].std()),
    }


def _train(arm: str, params: Mapping[str, Any], config: Mapping[str, Any], seed: int):
    import torch

    from normlab.training.policy import actor_critic_cartpole, reinforce_cartpole

    torch.set_num_threads(1)
    seed_everything(seed)
    q, r = config["q"], params.get("r", config["r"])
    # the filter form (a free setting): the paper's per-step filter or the public code's
    # fresh filter per episode
    kalman = {"per-step": "kalman", "per-episode": "kalman-episode"}[config["filter"]]
    if arm in AC_ARMS:
        return actor_critic_cartpole(
            kalman if arm == "kalman" else arm,
            lr=params["lr"],
            episodes=config["episodes"],
            batch=config["batch"],
            seed=seed,
            q=q,
            r=r,
        )
    return reinforce_cartpole(
        kalman if arm == "reinforce-kalman" else arm.removeprefix("reinforce-"),
        lr=params["lr"],
        episodes=config["rf_episodes"],
        batch=config["batch"],
        seed=seed,
        q=q,
        r=r,
    )


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Each arm tuned on a validation run (seed + 1000), then trained on the test seed."""

    def evaluate(arm: str, params: dict[str, Any]) -> tuple[float, None]:
        return -_summarize(_train(arm, params, config, _VAL_SEED + seed))["auc"], None

    # trivial reference: a uniformly random policy's mean return (minus, lower is better)
    tuned, records = tune_arms(config, evaluate, reference=-RANDOM_RETURN)
    table: dict[str, dict[str, float]] = {}
    curves: dict[str, list[float]] = {}
    for arm, t in tuned.items():
        rets = _train(arm, t.chosen, config, seed)
        table[arm] = {**_summarize(rets), **{k: float(v) for k, v in t.chosen.items()}}
        curves[arm] = np.asarray(rets).reshape(-1, config["batch"]).mean(1).tolist()
    return {"table": table, "curves": curves, "tuning": records}


def _check_steady_state(config: Mapping[str, Any]) -> CheckOutcome:
    from normlab.rl import KalmanRewardNormalizer, kalman_steady_state

    f = KalmanRewardNormalizer(q=config["q"], r=config["r"])
    f.update(np.linspace(0.0, 50.0, 500))
    k, p = kalman_steady_state(config["q"], config["r"])
    err = max(abs(f.gain - k), abs(f.p - p))
    return CheckOutcome(err < 1e-12, err, f"|K - K*|, |P - P*| = {err:.2g} <= 1e-12")


def _check_gymnasium(config: Mapping[str, Any]) -> CheckOutcome:
    import gymnasium as gym

    from normlab.rl import RunningNormalizeReward

    out = []
    for env in (
        RunningNormalizeReward(gym.make("MountainCarContinuous-v0")),
        gym.wrappers.NormalizeReward(gym.make("MountainCarContinuous-v0")),
    ):
        env.reset(seed=0)
        env.action_space.seed(0)
        out.append([env.step(env.action_space.sample())[1] for _ in range(300)])
    err = float(np.max(np.abs(np.subtract(*out))))
    return CheckOutcome(err < 1e-12, err, f"max |normlab - gymnasium| = {err:.2g} <= 1e-12")


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, arms, title in zip(
        axes, (AC_ARMS, RF_ARMS), ("actor-critic", "REINFORCE"), strict=True
    ):
        for i, arm in enumerate(arms):
            curves = np.array([m["curves"][arm] for m in measurements])
            mean, sd = curves.mean(0), curves.std(0)
            x = np.arange(1, len(mean) + 1)
            ax.plot(x, mean, color=f"C{i}", label=arm)
            ax.fill_between(x, mean - sd, mean + sd, color=f"C{i}", alpha=0.15)
        ax.set(xlabel="update (8 episodes)", ylabel="episode return", ylim=(0, 510), title=title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


_MARGIN = Margin(10.0, "normlab's choice: 10 return points, ~5% of the baseline's AUC at quick")
_DIV = {"auc": RANDOM_RETURN}

CLAIM = register_claim(
    Claim(
        id="kalman-reward",
        paper=paper("kalman"),
        hypothesis=(
            "Kalman-filtered returns (the paper's per-step filter) make a PPO actor-critic on "
            "CartPole-v1 learn faster than per-episode standardised returns."
        ),
        primary=difference(
            "auc_vs_zscore",
            "area under the return curve (mean training return), actor-critic with Kalman "
            "(per-step) minus with per-episode z-scored returns",
            "kalman",
            "zscore",
            "auc",
            direction="greater",
            margin=_MARGIN,
            unit="return",
            if_diverged=_DIV,
        ),
        secondary=(
            difference(
                "episodes_to_475",
                "episodes until the 8-episode mean return reaches 475 (the budget when never "
                "reached), Kalman minus z-score",
                "kalman",
                "zscore",
                "episodes_to_475",
                direction="less",
                margin=Margin(10.0, "normlab's choice: more than one update of 8 episodes"),
                unit="episodes",
            ),
            difference(
                "training_sd",
                "sd of the returns over the second half of training, Kalman minus z-score "
                "(within-seed stand-in for the paper's variance; read only if Kalman learns)",
                "kalman",
                "zscore",
                "late_sd",
                direction="less",
                margin=Margin(5.0, "normlab's choice: 5 return points of spread"),
                unit="return",
            ),
            difference(
                "reinforce_auc",
                "REINFORCE (no critic): AUC with Kalman-filtered minus running mean/std returns",
                "reinforce-kalman",
                "reinforce-running",
                "auc",
                direction="greater",
                margin=_MARGIN,
                unit="return",
                if_diverged=_DIV,
            ),
        ),
        premises=(
            Premise(
                "baseline_learns",
                "the z-score actor-critic's mean return over its last 10% of episodes, minus "
                "a random policy's 22",
                lambda m: cell(m, "zscore", "final") - RANDOM_RETURN,
                direction="greater",
                margin=Margin(50.0, "normlab's choice: 50 points above random is learning"),
            ),
            Premise(
                "baseline_has_room",
                "the z-score actor-critic's AUC",
                lambda m: cell(m, "zscore", "auc"),
                direction="no_greater",
                margin=Margin(450.0, "normlab's choice: near the 500 cap nothing is left"),
            ),
        ),
        preconditions=(
            Precondition(
                "kalman_learns",
                "the Kalman actor-critic's mean return over its last 10% of episodes",
                lambda m: cell(m, "kalman", "final"),
                op=">=",
                threshold=100.0,
                source="normlab's choice: a lower spread of an arm that does not learn is "
                "not lower training variance",
                gates=("training_sd",),
            ),
            Precondition(
                "zscore_solves",
                "whether the z-score actor-critic's 8-episode mean return reaches 475 within "
                "the budget (1 or 0 per seed)",
                lambda m: cell(m, "zscore", "solved"),
                op=">=",
                threshold=0.5,
                source="normlab's choice: when the baseline never reaches 475 both arms "
                "score the budget and episodes-to-475 measures nothing",
                gates=("episodes_to_475",),
            ),
        ),
        checks=(
            Check(
                "kalman_steady_state",
                "the filter's gain and variance reach the closed-form steady state",
                _check_steady_state,
            ),
            Check(
                "gymnasium_equivalence",
                "RunningNormalizeReward equals gymnasium.wrappers.NormalizeReward",
                _check_gymnasium,
            ),
        ),
        free_settings=(
            FreeSetting(
                "filter",
                "per-episode",
                "per-episode",
                "normlab's choice: the paper's per-step filter (eq. 14/16) for both Kalman "
                "arms; the public code runs a fresh filter per episode",
            ),
            FreeSetting.scaled("q", "the public code's Q 1e-2 (R is searched)", 0.3, 3.0),
            FreeSetting.scaled("episodes", "normlab's choice: the budget AUC reads", 0.75, 1.5),
            FreeSetting.scaled("rf_episodes", "normlab's choice: REINFORCE's budget"),
            FreeSetting.scaled("batch", "normlab's choice: episodes per update"),
        ),
        sourced={"r": "paper: CartPole default R = 1e-1 (as its public code; REFERENCE.md)"},
        # the largest measured swing: the per-episode filter moved the quick primary from
        # -51.5 (contradicted) to +48.9 [-2.7, 100.6] (issue 34); q 3e-3 and episodes 120
        # moved it to inconclusive (-41, -27)
        decisive="filter",
        headline="CartPole/LunarLander: Kalman-filtered rewards significantly accelerate "
        "convergence and reduce training variance compared to standard normalization.",
        configs={
            "smoke": {
                "seeds": 1,
                "episodes": 8,
                "rf_episodes": 8,
                "batch": 4,
                "q": 1e-2,
                "r": 1e-1,
                "filter": "per-step",
                "search": {
                    "per_arm": {
                        "zscore": {"lr": [1e-2]},
                        "kalman": {"lr": [1e-2], "r": [1e-1]},
                        "reinforce-running": {"lr": [1e-2]},
                        "reinforce-kalman": {"lr": [1e-2]},
                    },
                    "extend": 0,
                },
            },
            "quick": {
                "seeds": 8,
                "episodes": 160,
                "rf_episodes": 160,
                "batch": 8,
                "q": 1e-2,
                "r": 1e-1,
                "filter": "per-step",
                "search": {
                    "per_arm": {
                        "zscore": {"lr": [3e-3, 1e-2, 3e-2, 1e-1]},
                        "kalman": {"lr": [1e-2, 3e-2], "r": [1e-1, 1.0]},
                        "reinforce-running": {"lr": [1e-2, 3e-2, 1e-1, 3e-1]},
                        "reinforce-kalman": {"lr": [1e-2, 3e-2, 1e-1, 3e-1]},
                    },
                    "extend": 1,
                },
            },
            "full": {
                "seeds": 20,
                "episodes": 1000,
                "rf_episodes": 1000,
                "batch": 8,
                "q": 1e-2,
                "r": 1e-1,
                "filter": "per-step",
                "search": {
                    "per_arm": {
                        "zscore": {"lr": [1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]},
                        "kalman": {"lr": [3e-3, 1e-2, 3e-2], "r": [1e-2, 1e-1]},
                        "reinforce-running": {"lr": [3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0]},
                        "reinforce-kalman": {"lr": [3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0]},
                    },
                    "extend": 1,
                },
            },
        },
        run=run,
        setup=(
            "PPO actor-critic (4-32-2 policy, 4-32-1 critic, tanh, Adam, gamma 0.99, 5 "
            "epochs, clip 0.2, 8 episodes per update) on CartPole-v1, returns z-scored per "
            "episode or Kalman-filtered per step (Q 1e-2); 4 trials per arm (z-score: lr; "
            "Kalman: lr x R, R extended past 1 on the edge) on a validation run, the choice "
            "retrained on the test seed. "
            "Secondary: REINFORCE, Kalman vs running mean/std, lr tuned the same way."
        ),
        scale_note=(
            "quick caps training at 160 episodes (20 updates), so few runs reach 475 and AUC "
            "is the primary; 8 seeds (the baseline's AUC varies 40-190 between seeds); "
            "LunarLander is not run; about 40 s a seed."
        ),
        figure=_figure,
        caption="Mean episode return per update (band: sd over seeds) at each arm's tuned "
        "settings; left the actor-critic, right REINFORCE; faster rise means faster learning.",
    )
)
