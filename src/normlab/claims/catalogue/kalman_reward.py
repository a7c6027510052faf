"""Claim "kalman-reward": Kalman-filtered returns speed up an actor-critic on CartPole-v1.

The seed normalises policy-gradient returns with a 1-D Kalman filter
(:class:`~normlab.rl.KalmanRewardNormalizer`, the paper's per-step eq. 14/16) and reports
faster convergence and lower training variance than standard normalization on CartPole and
LunarLander. Here a small PPO actor-critic
(:func:`~normlab.training.policy.actor_critic_cartpole`) on CartPole-v1 gets its returns
z-scored per episode (the baseline) or Kalman-filtered; each arm is tuned on a validation run
(its own seed) and retrained on the test seed (``setup`` below). The test run's metrics
(:func:`~normlab.training.policy.summarize_returns`): the area under the return curve (the
primary), episodes to a mean return of 475 (read only when the z-score arm gets there) and
the late spread; REINFORCE (Kalman vs running mean/std) is a secondary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from normlab.claims.arms import Trained, run_arms
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
from normlab.papers import paper
from normlab.rl import KalmanRewardNormalizer, RunningNormalizeReward, kalman_steady_state
from normlab.training.policy import actor_critic_cartpole, reinforce_cartpole, summarize_returns

__all__ = ["CLAIM", "run"]

#: Actor-critic arms (normalisation of the returns) and REINFORCE arms (secondary).
_AC_ARMS = ("zscore", "kalman")
_RF_ARMS = ("reinforce-running", "reinforce-kalman")
#: A uniformly random CartPole policy's mean return, what a run that learns nothing scores.
_RANDOM_RETURN = 22.0
_VAL_SEED = 1_000


def _train(arm: str, params: Mapping[str, Any], config: Mapping[str, Any], seed: int):
    torch.set_num_threads(1)
    seed_everything(seed)
    # the filter form (a free setting): the paper's per-step filter or the public code's
    # fresh filter per episode
    kalman = {"per-step": "kalman", "per-episode": "kalman-episode"}[config["filter"]]
    ac = arm in _AC_ARMS
    trainer = actor_critic_cartpole if ac else reinforce_cartpole
    normalize = arm.removeprefix("reinforce-")
    return trainer(
        kalman if normalize == "kalman" else normalize,
        lr=params["lr"],
        episodes=config["episodes" if ac else "rf_episodes"],
        batch=config["batch"],
        seed=seed,
        q=config["q"],
        r=params.get("r", config["r"]),
    )


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Each arm tuned on a validation run (its training seed + 1000), then trained on the
    training seed for the test metrics."""
    curves: list[list[float]] = []

    def train(arm: str, params: dict[str, Any], training_seed: int) -> Trained:
        rets = _train(arm, params, config, _VAL_SEED + training_seed)
        return Trained(-summarize_returns(rets)["auc"], (params, training_seed))

    def test(arm: str, trained: Trained) -> dict[str, float]:
        params, training_seed = trained.model
        rets = _train(arm, params, config, training_seed)
        curves.append(np.asarray(rets).reshape(-1, config["batch"]).mean(1).tolist())
        return summarize_returns(rets)

    # trivial reference: a uniformly random policy's mean return (minus, lower is better)
    m = run_arms(config, seed, train, test, reference=-_RANDOM_RETURN)
    # the engine tests the arms in the table's order
    m["curves"] = dict(zip(m["table"], curves, strict=True))
    return m


def _check_steady_state(config: Mapping[str, Any]) -> CheckOutcome:
    f = KalmanRewardNormalizer(q=config["q"], r=config["r"])
    f.update(np.linspace(0.0, 50.0, 500))
    k, p = kalman_steady_state(config["q"], config["r"])
    err = max(abs(f.gain - k), abs(f.p - p))
    return CheckOutcome(err < 1e-12, err, f"|K - K*|, |P - P*| = {err:.2g} <= 1e-12")


def _check_gymnasium(config: Mapping[str, Any]) -> CheckOutcome:
    import gymnasium as gym

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
        axes, (_AC_ARMS, _RF_ARMS), ("actor-critic", "REINFORCE"), strict=True
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


def _config(seeds, episodes, batch, extend, zscore, kalman, reinforce_lrs) -> dict[str, Any]:
    """One scale's config: both test beds train ``episodes`` episodes, Q, R and the filter
    form are shared, the two REINFORCE arms search the same learning rates."""
    rf = {"lr": reinforce_lrs}
    arms = {"zscore": zscore, "kalman": kalman, "reinforce-running": rf, "reinforce-kalman": rf}
    return {
        **{"seeds": seeds, "episodes": episodes, "rf_episodes": episodes, "batch": batch},
        **{"q": 1e-2, "r": 1e-1, "filter": "per-step"},
        "search": {"per_arm": arms, "extend": extend},
    }


_MARGIN = Margin(10.0, "normlab's choice: 10 return points, ~5% of the baseline's AUC at quick")
_DIV = {"auc": _RANDOM_RETURN}

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
                lambda m: cell(m, "zscore", "final") - _RANDOM_RETURN,
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
            "smoke": _config(1, 8, 4, 0, {"lr": [1e-2]}, {"lr": [1e-2], "r": [1e-1]}, [1e-2]),
            "quick": _config(
                8,
                160,
                8,
                1,
                {"lr": [3e-3, 1e-2, 3e-2, 1e-1]},
                {"lr": [1e-2, 3e-2], "r": [1e-1, 1.0]},
                [1e-2, 3e-2, 1e-1, 3e-1],
            ),
            "full": _config(
                20,
                1000,
                8,
                1,
                {"lr": [1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]},
                {"lr": [3e-3, 1e-2, 3e-2], "r": [1e-2, 1e-1]},
                [3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0],
            ),
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
