"""P-GRPO: advantages standardised by running reward statistics of each preference group."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from normlab.rl._stats import check_rewards, group_index, group_moments, pow2_scale, safe_div

__all__ = ["PreferenceGroupAdvantage"]


class PreferenceGroupAdvantage:
    r"""P-GRPO: advantages standardised by running reward statistics of each preference group.

    ``A = (r - mu_p) / (sigma_p + eps)`` with ``mu_p`` and ``sigma_p`` (Bessel) the Welford
    running mean and std of every reward seen for preference group ``p`` in *earlier* batches
    (the estimator normlab documents: the current batch is scored against its history, then
    folded into it). A group with fewer than ``min_history`` earlier rewards is scored against
    its own rewards in the current batch (GRPO-like cold start; a single one gives 0).
    Paper: :func:`paper("p-grpo")`. The paper's control assigns preference groups at random.

    A NaN reward marks an unscorable sample: its advantage is 0 and it enters no statistic.
    Integer rewards are cast to the default float dtype; +-inf raises ``ValueError``. The
    running mean and std are kept in natural units and updated in a power-of-two scaled
    form, so rewards of any finite size give finite statistics.

    Args:
        eps: added to the std.
        min_history: earlier rewards a group needs before its history is used.
    """

    def __init__(self, *, eps: float = 1e-4, min_history: int = 2) -> None:
        if not (math.isfinite(eps) and eps >= 0) or min_history < 2:
            raise ValueError(
                f"P-GRPO needs a finite eps >= 0 and min_history >= 2; got eps={eps}, "
                f"min_history={min_history}."
            )
        self.eps, self.min_history = float(eps), int(min_history)
        self.count: dict[int, int] = {}
        self.mean: dict[int, float] = {}
        self.std: dict[int, float] = {}

    def __call__(
        self, rewards: torch.Tensor, groups: torch.Tensor | Sequence[int]
    ) -> torch.Tensor:
        """Advantages of ``rewards`` (``(N,)``) for preference-group ids ``groups``."""
        r = check_rewards(rewards, max_dim=1)
        dtype = rewards.dtype if rewards.is_floating_point() else r.dtype
        if isinstance(groups, int):
            raise TypeError(
                "P-GRPO needs a preference-group id per reward (ids persist across batches), "
                "not a group size."
            )
        ids = torch.as_tensor(groups)
        if ids.shape != r.shape or ids.is_floating_point() or ids.dtype == torch.bool:
            raise ValueError(
                f"P-GRPO needs one integer preference id per reward: got ids of shape "
                f"{tuple(ids.shape)} and dtype {ids.dtype} for {r.shape[0]} rewards."
            )
        keys = ids.tolist()
        m = group_moments(r, group_index(ids, r.shape[0]).to(r.device))
        cold = safe_div(m.x - m.mu, m.sd + self.eps / m.s)
        f64 = dict(dtype=torch.float64, device=r.device)
        n = torch.tensor([self.count.get(p, 0) for p in keys], device=r.device)
        mu = torch.tensor([self.mean.get(p, 0.0) for p in keys], **f64)
        sd = torch.tensor([self.std.get(p, 0.0) for p in keys], **f64)
        r64 = r.to(torch.float64)
        s = pow2_scale(torch.stack([r64.nan_to_num(0).abs(), mu.abs(), sd]).amax(0))
        warm = safe_div((r64 / s - mu / s), sd / s + self.eps / s)
        out = torch.where(n >= self.min_history, warm.to(r.dtype), cold)
        out = torch.where(torch.isnan(r), 0, out)
        if not bool(torch.isfinite(out).all()):
            i = int((~torch.isfinite(out)).nonzero()[0, 0])
            raise ValueError(
                f"The P-GRPO advantage of reward {i} overflows {r.dtype}: its reward is far "
                "outside its group's history. Pass float64 rewards or rescale them."
            )
        for p, value in zip(keys, r64.tolist(), strict=True):
            if not math.isnan(value):
                self._fold(p, value)
        return out.to(dtype)

    def _fold(self, p: int, value: float) -> None:
        """Welford's update of group ``p`` with ``value``, in units of a power of two."""
        n, mean, std = self.count.get(p, 0), self.mean.get(p, 0.0), self.std.get(p, 0.0)
        c = math.ldexp(1.0, math.frexp(max(abs(value), abs(mean), std))[1] - 1)
        x, mu = value / c, mean / c
        m2 = (n - 1) * (std / c) ** 2 if n > 1 else 0.0
        delta = x - mu
        mu += delta / (n + 1)
        m2 += delta * (x - mu)
        self.count[p], self.mean[p] = n + 1, mu * c
        self.std[p] = math.sqrt(m2 / n) * c if n >= 1 else 0.0

    def reset(self) -> None:
        """Forget every group's history."""
        self.count.clear(), self.mean.clear(), self.std.clear()

    def state_dict(self) -> dict[str, dict[int, float]]:
        """The running statistics (count, mean, Bessel std per group), for checkpointing."""
        return {"count": dict(self.count), "mean": dict(self.mean), "std": dict(self.std)}

    def load_state_dict(self, state: Mapping[str, Mapping[int, float]]) -> None:
        """Restore statistics saved by :meth:`state_dict`."""
        missing = {"count", "mean", "std"} - set(state)
        if missing:
            raise ValueError(
                f"P-GRPO state is missing {sorted(missing)}; pass the dict that "
                "PreferenceGroupAdvantage.state_dict() returned."
            )
        self.count = {int(k): int(v) for k, v in state["count"].items()}
        self.mean = {int(k): float(v) for k, v in state["mean"].items()}
        self.std = {int(k): float(v) for k, v in state["std"].items()}

    def __repr__(self) -> str:
        return f"PreferenceGroupAdvantage(eps={self.eps}, min_history={self.min_history})"
