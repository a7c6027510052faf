"""Reward normalizers for policy gradients: a 1-D Kalman filter and gymnasium's running scale.

:class:`KalmanRewardNormalizer` follows "Kalman-Filter Reward Normalization for Policy
Gradients": the latent mean of the reward (or return) stream is a random walk tracked by a
scalar Kalman filter, and each value is normalised by the filter's estimate and variance.
:class:`RunningRewardNormalizer` is gymnasium's ``NormalizeReward`` as an object: the running
variance of the discounted return scales the reward. Both work on numpy arrays or torch
tensors, keep their state in float64 and checkpoint with ``state_dict``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import torch

from normlab.papers import paper

__all__ = [
    "KalmanRewardNormalizer",
    "RunningRewardNormalizer",
    "kalman_steady_state",
    "steady_state_error",
]

_PAPER = paper("kalman")


def _array(values: Any) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64)


def _like(out: np.ndarray, values: Any) -> Any:
    if isinstance(values, torch.Tensor):
        return torch.as_tensor(out, dtype=values.dtype, device=values.device)
    if np.ndim(values) == 0 and not isinstance(values, np.ndarray):
        return float(out)
    return out


def kalman_steady_state(q: float, r: float) -> tuple[float, float]:
    r"""The random-walk Kalman filter's steady-state gain and posterior variance.

    The prior variance ``M = P + Q`` solves ``M = M R / (M + R) + Q``, so
    :math:`M = (Q + \sqrt{Q^2 + 4 Q R}) / 2`, :math:`K = M / (M + R)`, :math:`P = (1 - K) M`.

    Returns:
        ``(gain, variance)``.
    """
    _check_qr(q, r)
    m = 0.5 * (q + math.sqrt(q * q + 4.0 * q * r))
    k = m / (m + r)
    return k, (1.0 - k) * m


def steady_state_error(q: float, r: float, n: int = 500) -> float:
    """How far a step-mode :class:`KalmanRewardNormalizer` is from the closed-form steady
    state (:func:`kalman_steady_state`) after ``n`` observations (a ramp 0..50):
    ``max(|K - K*|, |P - P*|)``; the gain and variance do not depend on the values, so this
    is 0 up to rounding once the recursion has settled."""
    f = KalmanRewardNormalizer(q=q, r=r)
    f.update(np.linspace(0.0, 50.0, n))
    k, p = kalman_steady_state(q, r)
    return max(abs(f.gain - k), abs(f.p - p))


def _check_qr(q: float, r: float) -> None:
    if not (q > 0 and math.isfinite(q)):
        raise ValueError(f"The process variance Q must be finite and > 0; got {q}.")
    if not (r > 0 and math.isfinite(r)):
        raise ValueError(f"The observation variance R must be finite and > 0; got {r}.")


class KalmanRewardNormalizer:
    r"""Normalise rewards or returns by a 1-D Kalman filter's estimate of their mean.

    State model ``x_t = x_{t-1} + w`` (``w ~ N(0, Q)``), observation ``G_t = x_t + v``
    (``v ~ N(0, R)``). Per observation: predict ``P- = P + Q``; gain ``K = P- / (P- + R)``;
    update ``x += K (G - x)``, ``P = (1 - K) P-``; output ``(G - x) / (sqrt(P) + eps)``.
    Paper: "Kalman-Filter Reward Normalization for Policy Gradients".

    Modes:
        ``"step"`` (the paper): one filter persists across calls; each value is normalised
        with the state right after observing it, in order (flattened, C order).
        ``"episode"`` (the public CartPole code): each call is one episode; the filter restarts
        from ``(x0, P0)``, runs over all its values, and normalises all with the final state.

    Args:
        q: process variance Q (> 0). The public CartPole code uses 1e-2.
        r: observation variance R (> 0). The public CartPole code uses 1e-1.
        x0: initial estimate.
        p0: initial variance (> 0).
        eps: added to ``sqrt(P)``.
        mode: ``"step"`` or ``"episode"``.
    """

    def __init__(
        self,
        *,
        q: float = 1e-2,
        r: float = 1e-1,
        x0: float = 0.0,
        p0: float = 1.0,
        eps: float = 1e-8,
        mode: Literal["step", "episode"] = "step",
    ) -> None:
        _check_qr(q, r)
        if not (p0 > 0 and math.isfinite(p0)):
            raise ValueError(f"The initial variance P0 must be finite and > 0; got {p0}.")
        if mode not in ("step", "episode"):
            raise ValueError(f"mode must be 'step' or 'episode'; got {mode!r}.")
        if not eps >= 0:
            raise ValueError(f"eps must be >= 0; got {eps}.")
        self.q, self.r, self.x0, self.p0 = float(q), float(r), float(x0), float(p0)
        self.eps, self.mode = float(eps), mode
        self.reset()

    def reset(self) -> None:
        """Restart the filter at ``(x0, P0)``."""
        self.x, self.p, self.gain, self.count = self.x0, self.p0, 0.0, 0

    def _observe(self, g: float) -> None:
        prior = self.p + self.q
        self.gain = prior / (prior + self.r)
        self.x += self.gain * (g - self.x)
        self.p = (1.0 - self.gain) * prior
        self.count += 1

    def update(self, values: Any) -> None:
        """Observe ``values`` in order (flattened); NaN values raise."""
        arr = _array(values).reshape(-1)
        if not np.isfinite(arr).all():
            raise ValueError("KalmanRewardNormalizer got a non-finite reward; drop it first.")
        for g in arr.tolist():
            self._observe(g)

    def normalize(self, values: Any) -> Any:
        """``(values - x) / (sqrt(P) + eps)`` with the current state; the state is unchanged."""
        arr = _array(values)
        return _like((arr - self.x) / (math.sqrt(self.p) + self.eps), values)

    def __call__(self, values: Any) -> Any:
        """Observe and normalise ``values`` by the filter's mode (see the class docstring)."""
        arr = _array(values)
        if self.mode == "episode":
            self.reset()
            self.update(arr)
            return self.normalize(values)
        flat = arr.reshape(-1)
        if not np.isfinite(flat).all():
            raise ValueError("KalmanRewardNormalizer got a non-finite reward; drop it first.")
        out = np.empty_like(flat)
        for i, g in enumerate(flat.tolist()):
            self._observe(g)
            out[i] = (g - self.x) / (math.sqrt(self.p) + self.eps)
        return _like(out.reshape(arr.shape), values)

    def state_dict(self) -> dict[str, float]:
        """The filter's state and settings, for checkpointing."""
        return {"x": self.x, "p": self.p, "gain": self.gain, "count": self.count}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore a state saved by :meth:`state_dict`."""
        self.x, self.p = float(state["x"]), float(state["p"])
        self.gain, self.count = float(state["gain"]), int(state["count"])

    def __repr__(self) -> str:
        return (
            f"KalmanRewardNormalizer(q={self.q}, r={self.r}, x0={self.x0}, p0={self.p0}, "
            f"eps={self.eps}, mode={self.mode!r})"
        )


class RunningRewardNormalizer:
    r"""Scale rewards by the running std of the discounted return, as gymnasium does.

    gymnasium ``NormalizeReward(gamma=0.99, epsilon=1e-8)``: the discounted return
    ``R <- gamma R (1 - terminated) + r`` feeds a running mean/variance (parallel-moments
    update; count starts at 1e-4, mean 0, variance 1), and the reward is returned as
    ``r / sqrt(var + eps)``, without mean subtraction or clipping. :meth:`update` and
    :meth:`normalize` expose the running moments for other streams (e.g. returns-to-go);
    ``center=True`` also subtracts the running mean there.

    Args:
        gamma: discount of the tracked return, in [0, 1].
        eps: added to the variance.
        center: subtract the running mean in :meth:`normalize`.
    """

    def __init__(self, *, gamma: float = 0.99, eps: float = 1e-8, center: bool = False) -> None:
        if not 0 <= gamma <= 1:
            raise ValueError(f"gamma must be in [0, 1]; got {gamma}.")
        if not eps > 0:
            raise ValueError(f"eps must be > 0; got {eps}.")
        self.gamma, self.eps, self.center = float(gamma), float(eps), bool(center)
        self.reset()

    def reset(self) -> None:
        """Forget the statistics and the running return."""
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4
        self.ret = np.zeros(1)

    def update(self, values: Any) -> None:
        """Fold a batch of values into the running mean and variance (population moments)."""
        arr = _array(values).reshape(-1)
        if arr.size == 0:
            return
        b_mean, b_var, b_n = float(arr.mean()), float(arr.var()), arr.size
        delta, total = b_mean - self.mean, self.count + b_n
        m2 = self.var * self.count + b_var * b_n + delta * delta * self.count * b_n / total
        self.mean, self.var, self.count = self.mean + delta * b_n / total, m2 / total, total

    def normalize(self, values: Any) -> Any:
        """``(values [- mean]) / sqrt(var + eps)`` with the current statistics."""
        arr = _array(values)
        shift = self.mean if self.center else 0.0
        return _like((arr - shift) / math.sqrt(self.var + self.eps), values)

    def step(self, reward: Any, terminated: Any, active: Any = None) -> Any:
        """One environment step: track the discounted return, update, scale the reward.

        Args:
            reward: the step's reward (scalar, or one per sub-environment).
            terminated: whether the episode terminated at this step (same shape).
            active: which sub-environments' returns update the statistics (default all;
                vector envs leave out their autoreset steps).
        """
        r = _array(reward).reshape(-1)
        term = _array(terminated).reshape(-1)
        if self.ret.shape != r.shape:
            self.ret = np.zeros_like(r)
        on = np.ones(r.shape, bool) if active is None else np.asarray(active, bool).reshape(-1)
        self.ret[on] = self.ret[on] * self.gamma * (1 - term[on]) + r[on]
        if on.any():
            self.update(self.ret[on])
        out = _array(reward) / math.sqrt(self.var + self.eps)
        return _like(out, reward)

    def state_dict(self) -> dict[str, Any]:
        """The running statistics and return, for checkpointing."""
        return {"mean": self.mean, "var": self.var, "count": self.count, "ret": self.ret.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state saved by :meth:`state_dict`."""
        self.mean, self.var = float(state["mean"]), float(state["var"])
        self.count, self.ret = float(state["count"]), np.asarray(state["ret"], dtype=np.float64)

    def __repr__(self) -> str:
        return f"RunningRewardNormalizer(gamma={self.gamma}, eps={self.eps}, center={self.center})"
