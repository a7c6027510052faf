"""Claim "kalman-reward": Kalman-filtered returns speed up an actor-critic on CartPole-v1.

A small PPO actor-critic (:func:`~normlab.training.policy.actor_critic_cartpole`) gets its
returns z-scored per episode (the baseline) or Kalman-filtered
(:class:`~normlab.rl.KalmanRewardNormalizer`): per episode as the authors' code (the
primary) or per step as the paper's eq. 14/16 (a secondary); REINFORCE is a secondary.
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
from normlab.rl.kalman import steady_state_error
from normlab.training.policy import actor_critic_cartpole, reinforce_cartpole, summarize_returns

__all__ = ["CLAIM", "run"]

#: arm -> (trainer, the normalization it passes); "kalman" is the authors' per-episode filter.
_ARMS = {
    "zscore": (actor_critic_cartpole, "zscore"),
    "kalman": (actor_critic_cartpole, "kalman-episode"),
    "kalman-step": (actor_critic_cartpole, "kalman"),
    "reinforce-running": (reinforce_cartpole, "running"),
    "reinforce-kalman": (reinforce_cartpole, "kalman-episode"),
}
_AC_ARMS, _RF_ARMS = tuple(_ARMS)[:3], tuple(_ARMS)[3:]
#: A uniformly random CartPole policy's mean return, what a run that learns nothing scores.
_RANDOM_RETURN = 22.0
_VAL_SEED = 1_000


def _train(arm: str, params: Mapping[str, Any], config: Mapping[str, Any], seed: int):
    torch.set_num_threads(1)
    seed_everything(seed)
    trainer, normalize = _ARMS[arm]
    episodes = config["episodes" if arm in _AC_ARMS else "rf_episodes"]
    qr = {k: params[k] for k in ("q", "r") if k in params}  # searched by the Kalman arms
    return trainer(
        normalize, lr=params["lr"], episodes=episodes, batch=config["batch"], seed=seed, **qr
    )


def _per_update(rets: Sequence[float], batch: int) -> list[float]:
    return np.asarray(rets).reshape(-1, batch).mean(1).tolist()


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Each arm tuned on a validation run (its training seed + 1000), then trained on the
    training seed for the test metrics."""
    curves: list[list[float]] = []

    def train(arm: str, params: dict[str, Any], training_seed: int) -> Trained:
        rets = _train(arm, params, config, _VAL_SEED + training_seed)
        # no curve: the AUC is learning speed over a fixed budget, which needs no converged
        # run, and per-update returns are too noisy for a late share (0.04 [-0.08, 0.16])
        return Trained(-summarize_returns(rets)["auc"], (params, training_seed))

    def test(arm: str, trained: Trained) -> dict[str, float]:
        params, training_seed = trained.model
        rets = _train(arm, params, config, training_seed)
        curves.append(_per_update(rets, config["batch"]))
        return summarize_returns(rets)

    m = run_arms(config, seed, train, test, reference=-_RANDOM_RETURN)  # a random policy
    m["curves"] = dict(zip(m["table"], curves, strict=True))  # tested in the table's order
    return m


def _below(err: float, what: str) -> CheckOutcome:
    return CheckOutcome(err < 1e-12, err, f"{what} = {err:.2g} <= 1e-12")


def _check_gymnasium(config: Mapping[str, Any]) -> CheckOutcome:
    from normlab.rl.wrappers import gymnasium_reward_gap  # gymnasium is optional

    return _below(gymnasium_reward_gap(), "max |normlab - gymnasium|")


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    panels = ((_AC_ARMS, "actor-critic"), (_RF_ARMS, "REINFORCE"))
    for ax, (arms, title) in zip(axes, panels, strict=True):
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


def _config(seeds: int, episodes: int, extend: int, lrs: list, kalman: dict) -> dict[str, Any]:
    space = {arm: ({"lr": lrs} if "kalman" not in arm else kalman) for arm in _ARMS}
    counts = {"seeds": seeds, "episodes": episodes, "rf_episodes": episodes, "batch": 8}
    return {**counts, "search": {"per_arm": space, "extend": extend}}


#: 8 trials an arm: the Kalman arms lr x Q x R around the public code's Q 1e-2, R 1e-1 (Q
#: 3e-3 made the per-step primary fragile, issue 35), the others 8 lrs spanning them.
_LRS = [2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2, 6.4e-2, 1.28e-1, 2.56e-1]
_KALMAN = {"lr": [1e-2, 3e-2], "q": [3e-3, 1e-2], "r": [1e-1, 1.0]}
_MARGIN = Margin(10.0, "normlab's choice: 10 return points, ~5% of the baseline's AUC at quick")
_DIV = {"auc": _RANDOM_RETURN}

#: metric -> (unit, margin) of the effects that read it.
_READS = {
    "auc": ("return", _MARGIN),
    "episodes_to_475": ("episodes", Margin(10.0, "normlab's choice: one update of 8 episodes")),
    "late_sd": ("return", Margin(5.0, "normlab's choice: 5 return points of spread")),
}


_SAYS = {
    "auc_vs_zscore": "area under the return curve (mean training return), actor-critic with "
    "per-episode Kalman-filtered minus per-episode z-scored returns",
    "auc_per_step_vs_zscore": "AUC, the paper's per-step filter minus z-score",
    "episodes_to_475": "episodes until the 8-episode mean return reaches 475 (the budget if "
    "never), Kalman minus z-score",
    "training_sd": "sd of the returns over the second half of training, Kalman minus z-score "
    "(the paper's training variance, within seed)",
    "reinforce_auc": "REINFORCE: AUC, per-episode Kalman minus running mean/std",
}


def _vs(name: str, metric: str, method: str = "kalman", baseline: str = "zscore") -> Any:
    """``method`` minus ``baseline`` on ``metric``: AUC higher is better, else lower."""
    unit, margin = _READS[metric]
    kw = {"direction": "greater" if metric == "auc" else "less", "if_diverged": _DIV}
    return difference(name, _SAYS[name], method, baseline, metric, margin=margin, unit=unit, **kw)


def _learns(name: str, arm: str, gates: tuple[str, ...] = ()) -> Premise:
    return Premise(
        name,
        f"the {arm} actor-critic's mean return over its last 10% of episodes, minus 22 (random)",
        lambda m: cell(m, arm, "final") - _RANDOM_RETURN,
        direction="greater",
        margin=Margin(50.0, "normlab's choice: 50 points above random is learning"),
        gates=gates,
    )


CLAIM = register_claim(
    Claim(
        id="kalman-reward",
        paper=paper("kalman"),
        hypothesis="Kalman-filtered returns (a fresh filter per episode, as the authors' code "
        "runs it) make a PPO actor-critic on CartPole-v1 learn faster than per-episode "
        "standardised returns.",
        quote="Kalman-filtered rewards significantly accelerate convergence and reduce "
        "training variance compared to standard normalization techniques",
        primary=_vs("auc_vs_zscore", "auc"),
        secondary=(
            _vs("auc_per_step_vs_zscore", "auc", "kalman-step"),
            _vs("episodes_to_475", "episodes_to_475"),
            _vs("training_sd", "late_sd"),
            _vs("reinforce_auc", "auc", "reinforce-kalman", "reinforce-running"),
        ),
        premises=(
            _learns("baseline_learns", "zscore"),
            Premise(
                "baseline_has_room",
                "the z-score actor-critic's AUC",
                lambda m: cell(m, "zscore", "auc"),
                direction="no_greater",
                margin=Margin(450.0, "normlab's choice: near the 500 cap nothing is left"),
            ),
            # a lower spread of an arm that does not learn is not lower training variance:
            # the same bound as the baseline's
            _learns("kalman_learns", "kalman", gates=("training_sd",)),
        ),
        preconditions=(
            Precondition(
                "zscore_solves",
                "the z-score actor-critic's 8-episode mean return reaches 475 (1 or 0 a seed)",
                lambda m: cell(m, "zscore", "solved"),
                ">=",
                0.5,
                "normlab's choice: else both arms score the budget and the count says nothing",
                gates=("episodes_to_475",),
            ),
        ),
        checks=(
            Check(
                "kalman_steady_state",
                "the filter's gain and variance reach the closed-form steady state",
                lambda _: _below(steady_state_error(1e-2, 1e-1), "|K - K*|, |P - P*|"),
            ),
            Check(
                "gymnasium_equivalence",
                "RunningNormalizeReward equals gymnasium.wrappers.NormalizeReward",
                _check_gymnasium,
            ),
        ),
        free_settings=(
            FreeSetting.scaled("episodes", "normlab's choice: the budget AUC reads", 0.75, 1.5),
            FreeSetting.scaled("rf_episodes", "normlab's choice: REINFORCE's budget"),
            FreeSetting.scaled("batch", "normlab's choice: episodes per update"),
        ),
        # the budget AUC reads: episodes 120 moved the per-step primary to inconclusive
        decisive="episodes",
        headline="CartPole/LunarLander: Kalman-filtered rewards significantly accelerate "
        "convergence and reduce training variance compared to standard normalization.",
        configs={
            "smoke": _config(1, 8, 0, [1e-2], {"lr": [1e-2], "q": [1e-2], "r": [1e-1]}),
            "quick": _config(8, 160, 2, _LRS, _KALMAN),
            "full": _config(20, 1000, 2, _LRS, _KALMAN),
        },
        run=run,
        setup=(
            "PPO actor-critic (4-32-2 policy, 4-32-1 critic, tanh, Adam, gamma 0.99, 5 "
            "epochs, clip 0.2, 8 episodes per update) on CartPole-v1, returns z-scored per "
            "episode or Kalman-filtered (x0 0, P0 1) per episode (primary) or per step "
            "(secondary); 8 trials per arm on a validation run, an edge choice extended up to "
            "two steps per axis (z-score: 8 lrs; Kalman: lr x Q x R, 2 x 2 x 2), the choice "
            "retrained on the test seed. Secondary: REINFORCE, per-episode Kalman vs running "
            "mean/std, tuned the same way."
        ),
        scale_note="quick caps training at 160 episodes (20 updates), so few runs reach 475 "
        "and AUC is the primary; 8 seeds (the baseline's AUC varies 40-190 between seeds); "
        "no LunarLander.",
        figure=_figure,
        caption="Mean episode return per update (band: sd over seeds) at each arm's tuned "
        "settings; left the actor-critic, right REINFORCE; faster rise means faster learning.",
    )
)
