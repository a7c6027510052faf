"""Small policies and toy RL problems used by the RL claims (kalman-reward, grpo-family).

- :func:`reinforce_cartpole`: REINFORCE with a small MLP on gymnasium's numpy-vectorised
  CartPole-v1, with the returns-to-go left raw, scaled by running moments, or Kalman-filtered.
- :func:`actor_critic_cartpole`: a small PPO actor-critic (clipped policy loss, a critic
  regressed on the normalised returns) on the same CartPole, with the same normalizers plus
  a per-episode z-score.
- :func:`summarize_returns`: a training run's episode returns read as learning-speed metrics
  (area under the curve, episodes to a solving trailing mean, late spread).
- :func:`train_bandit`: a softmax policy over discrete outputs trained by GRPO-family
  advantages on a contextual bandit (user groups or prompts), with exact expected rewards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from normlab.models.mlp import MLPPolicy
from normlab.rl import KalmanRewardNormalizer, RunningRewardNormalizer
from normlab.training.fit import fit

__all__ = [
    "NORMALIZATIONS",
    "actor_critic_cartpole",
    "normalize_returns",
    "reinforce_cartpole",
    "summarize_returns",
    "train_bandit",
]


def _returns_to_go(rewards: np.ndarray, gamma: float) -> np.ndarray:
    out, acc = np.empty_like(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc = rewards[t] + gamma * acc
        out[t] = acc
    return out


#: The return normalizations :func:`actor_critic_cartpole` offers.
NORMALIZATIONS = ("none", "zscore", "running", "kalman", "kalman-episode")


def normalize_returns(
    normalize: str,
    g: np.ndarray,
    running: RunningRewardNormalizer,
    kalman: KalmanRewardNormalizer,
    eps: float = 1e-8,
) -> np.ndarray:
    """One episode's returns-to-go ``g`` normalised by ``normalize`` (see
    :func:`actor_critic_cartpole`); ``running`` and ``kalman`` carry their state over."""
    if normalize == "none":
        return g
    if normalize == "zscore":
        return (g - g.mean()) / (g.std() + eps)
    if normalize == "running":
        running.update(g)
        return running.normalize(g)
    if normalize.startswith("kalman"):
        return kalman(g)
    raise ValueError(f"Unknown normalization {normalize!r}; expected one of {NORMALIZATIONS}.")


def summarize_returns(
    returns: Sequence[float], solve: float = 475.0, window: int = 8
) -> dict[str, float]:
    """A training run's episode returns (in order) as learning-speed metrics.

    Returns:
        ``"auc"`` (the mean return: the area under the return curve per episode),
        ``"episodes_to_475"`` (the episode ending the first ``window``-episode trailing mean
        at or above ``solve``; the number of episodes when never reached), ``"solved"``
        (1.0 if it was reached, else 0.0), ``"final"`` (the mean return of the last 10% of
        episodes) and ``"late_sd"`` (the sd of the returns over the second half).
    """
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


#: The return normalizations :func:`reinforce_cartpole` offers (no per-episode z-score).
_REINFORCE_NORMALIZATIONS = ("none", "running", "kalman", "kalman-episode")


def _check_normalize(normalize: str, allowed: tuple[str, ...]) -> None:
    if normalize not in allowed:
        raise ValueError(f"Unknown normalization {normalize!r}; expected one of {allowed}.")


def _cartpole(
    normalize: str, batch: int, q: float, r: float
) -> tuple[RunningRewardNormalizer, KalmanRewardNormalizer, Any]:
    """The running and Kalman return normalizers and a ``batch``-wide vector CartPole-v1."""
    import gymnasium as gym

    running = RunningRewardNormalizer(center=True)
    kalman = KalmanRewardNormalizer(q=q, r=r, mode="episode" if "episode" in normalize else "step")
    env = gym.make_vec("CartPole-v1", num_envs=batch, vectorization_mode="vector_entry_point")
    return running, kalman, env


def _targets(
    shape: tuple[int, ...],
    lengths: np.ndarray,
    gamma: float,
    normalize: str,
    running: RunningRewardNormalizer,
    kalman: KalmanRewardNormalizer,
    returns: list[float],
) -> np.ndarray:
    """The (T, B) normalised returns-to-go of a rollout; each episode's return is appended
    to ``returns``. A unit reward per step, zero past an episode's end."""
    target = np.zeros(shape)
    for b, length in enumerate(lengths.tolist()):
        returns.append(float(length))
        g = _returns_to_go(np.ones(length), gamma)
        target[:length, b] = normalize_returns(normalize, g, running, kalman)
    return target


def _rollout(env, policy: nn.Module, batch: int, seed: int, rng: np.random.Generator):
    """``batch`` CartPole episodes: observations, actions, alive masks (T, B) and lengths."""
    obs, _ = env.reset(seed=seed)
    alive = np.ones(batch, bool)
    traj_obs, traj_act, traj_alive = [], [], []
    while alive.any():
        with torch.no_grad():
            p1 = torch.softmax(policy(torch.as_tensor(obs)), -1)[:, 1].numpy()
        act = (rng.random(batch) < p1).astype(np.int64)
        traj_obs.append(obs), traj_act.append(act), traj_alive.append(alive.copy())
        obs, _, term, trunc, _ = env.step(act)
        alive &= ~(term | trunc)
    m = np.stack(traj_alive)
    return np.stack(traj_obs), np.stack(traj_act), m, m.sum(0).astype(int)


def actor_critic_cartpole(
    normalize: str,
    *,
    lr: float,
    episodes: int,
    batch: int,
    seed: int,
    gamma: float = 0.99,
    hidden: int = 32,
    q: float = 1e-2,
    r: float = 1e-1,
    epochs: int = 5,
    clip: float = 0.2,
) -> list[float]:
    r"""Train a PPO actor-critic on CartPole-v1; every training episode's return, in order.

    Each update runs ``batch`` episodes in a numpy-vectorised CartPole (500-step limit),
    computes the discounted returns-to-go ``G_t``, normalises them, ``\hat G_t = f(G_t)``,
    and takes ``epochs`` full-batch Adam steps on the clipped PPO objective with advantage
    ``A_t = \hat G_t - V(s_t)`` (``V`` from before the update) plus the critic's squared
    error ``(V(s_t) - \hat G_t)^2``: the setting of the Kalman paper's public code (PPO,
    gamma 0.99, 5 epochs, clip 0.2). ``normalize`` picks ``f``: ``"none"``, ``"zscore"``
    (each episode's returns standardised by their own mean and std: "standard
    normalization"), ``"running"`` (running mean/std, gymnasium's estimator),
    ``"kalman"`` (the paper's per-step filter, Q and R as given) or ``"kalman-episode"``
    (a fresh filter per episode, as the public code).
    """
    _check_normalize(normalize, NORMALIZATIONS)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    policy, critic = MLPPolicy(4, 2, hidden=hidden), MLPPolicy(4, 1, hidden=hidden)
    opt = torch.optim.Adam([*policy.parameters(), *critic.parameters()], lr=lr)
    running, kalman, env = _cartpole(normalize, batch, q, r)
    returns: list[float] = []
    both = nn.ModuleList([policy, critic])

    def loss_fn(_: nn.Module, data: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Clipped PPO objective plus the critic's squared error."""
        obs, act, ret, old, adv = data
        logp = torch.log_softmax(policy(obs), -1).gather(1, act)[:, 0]
        ratio = (logp - old).exp()
        pg = -torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
        return pg + (critic(obs)[:, 0] - ret).square().mean()

    for update in range(episodes // batch):
        o, a, m, lengths = _rollout(env, policy, batch, int(seed * 100_003 + update), rng)
        target = _targets(m.shape, lengths, gamma, normalize, running, kalman, returns)
        keep = torch.as_tensor(m.reshape(-1))
        obs = torch.as_tensor(o.reshape(-1, 4))[keep]
        act = torch.as_tensor(a.reshape(-1, 1))[keep]
        ret = torch.as_tensor(target.reshape(-1), dtype=torch.float32)[keep]
        with torch.no_grad():
            old = torch.log_softmax(policy(obs), -1).gather(1, act)[:, 0]
            adv = ret - critic(obs)[:, 0]
        # full-batch epochs on this update's episodes; a non-finite loss ends the training
        data = [(obs, act, ret, old, adv)] * epochs
        if fit(both, loss_fn, data, epochs, opt).diverged is not None:
            break
    env.close()
    return returns


def _reinforce_loss(net: nn.Module, rollout: tuple[np.ndarray, ...]) -> torch.Tensor:
    """``-sum_t log pi(a_t | s_t) A_t / batch`` over one rollout's (T, B) steps."""
    o, a, adv, batch = rollout
    logits = net(torch.as_tensor(o.reshape(-1, 4)))
    logp = torch.log_softmax(logits, -1).gather(1, torch.as_tensor(a.reshape(-1, 1)))[:, 0]
    return -(logp * torch.as_tensor(adv.reshape(-1), dtype=logp.dtype)).sum() / batch


def reinforce_cartpole(
    normalize: str,
    *,
    lr: float,
    episodes: int,
    batch: int,
    seed: int,
    gamma: float = 0.99,
    hidden: int = 32,
    q: float = 1e-2,
    r: float = 1e-1,
) -> list[float]:
    """Train REINFORCE on CartPole-v1 and return every training episode's return, in order.

    Each update runs ``batch`` episodes in a numpy-vectorised CartPole (500-step limit),
    computes discounted returns-to-go ``G_t`` and the advantage ``A_t = f(G_t)``, and takes one
    Adam step on ``-sum_t log pi(a_t | s_t) A_t / batch``. ``normalize`` picks ``f``:
    ``"none"`` (``A = G``), ``"running"`` (``(G - mu) / sqrt(var + 1e-8)``, running moments
    updated by the batch first, gymnasium's estimator), ``"kalman"`` (the paper's per-step
    filter over the returns in time order, Q and R as given) or ``"kalman-episode"`` (a fresh
    filter per episode, as the public CartPole code).
    """
    _check_normalize(normalize, _REINFORCE_NORMALIZATIONS)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    policy = MLPPolicy(4, 2, hidden=hidden)
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    running, kalman, env = _cartpole(normalize, batch, q, r)
    returns: list[float] = []
    for update in range(episodes // batch):
        o, a, m, lengths = _rollout(env, policy, batch, int(seed * 100_003 + update), rng)
        adv = _targets(m.shape, lengths, gamma, normalize, running, kalman, returns)
        # one step per update; a non-finite loss ends the training
        if fit(policy, _reinforce_loss, [(o, a, adv, batch)], 1, opt).diverged is not None:
            break
    env.close()
    return returns


def train_bandit(
    *,
    n_contexts: int,
    n_outputs: int,
    steps: int,
    lr: float,
    sample: Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]],
    reward: Callable[[np.ndarray, np.ndarray, np.random.Generator], np.ndarray],
    advantage: Callable[[torch.Tensor, np.ndarray, np.ndarray], torch.Tensor],
    evaluate: Callable[[np.ndarray], dict[str, float]],
    seed: int,
    log_every: int = 10,
) -> dict[str, Any]:
    """Train a softmax policy ``logits(c) = theta_shared + theta_c`` by policy gradient.

    Each step ``sample(rng)`` gives the batch's contexts and group ids, outputs are drawn from
    the policy, ``reward(contexts, outputs, rng)`` scores them, ``advantage(rewards, groups,
    contexts)`` turns scores into advantages, and one SGD step is taken on
    ``-mean(A log pi(a | c))``. ``evaluate(probs)`` maps the ``(n_contexts, n_outputs)``
    policy to exact expected metrics; its values are logged every ``log_every`` steps.
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    shared = nn.Parameter(torch.zeros(n_outputs, dtype=torch.float64))
    own = nn.Parameter(torch.zeros(n_contexts, n_outputs, dtype=torch.float64))
    curve: list[dict[str, float]] = []

    @torch.no_grad()
    def log() -> None:
        curve.append(evaluate(torch.softmax(shared + own, -1).numpy()))

    def draw(step: int) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
        """Log the policy every ``log_every`` steps, then draw the step's batch and score it."""
        if step % log_every == 0:
            log()
        ctx, groups = sample(rng)
        with torch.no_grad():
            probs = torch.softmax((shared + own)[ctx], -1).numpy()
        out = (probs.cumsum(-1) < rng.random((len(ctx), 1))).sum(-1).clip(max=n_outputs - 1)
        return ctx, out, advantage(torch.as_tensor(reward(ctx, out, rng)), groups, ctx)

    def loss_fn(_: nn.Module, batch: tuple[np.ndarray, np.ndarray, torch.Tensor]) -> torch.Tensor:
        ctx, out, adv = batch
        logp = torch.log_softmax((shared + own)[ctx], -1)[torch.arange(len(ctx)), out]
        return -(adv.detach() * logp).mean()

    opt = torch.optim.SGD([shared, own], lr=lr)
    result = fit(nn.ParameterList([shared, own]), loss_fn, draw, steps, opt)
    log()  # the policy after the last step (or where a non-finite loss ended the run)
    diverged = None if result.diverged is None else result.diverged.record()
    return {"curve": curve, "diverged": diverged}
