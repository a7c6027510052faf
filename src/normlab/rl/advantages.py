"""Group-relative advantages for policy-gradient fine-tuning: the GRPO family.

Every method maps rewards of completions grouped by prompt to advantages with one call,
:func:`advantages`, and is registered as kind ``"advantage"``. The semantics of the methods
TRL's ``GRPOTrainer`` has (``scale_rewards="group" | "batch" | "none"``) are TRL's:

- several reward columns ``(N, K)`` are combined as ``nansum(rewards * weights, dim=1)``, so a
  NaN (a reward function that returned ``None``) counts as 0 and a sample whose every column is
  NaN gets reward 0, exactly as in TRL;
- the group mean is subtracted; the std is Bessel-corrected (``torch.std``); ``eps = 1e-4`` is
  added to the std, not to the variance, so a constant group gives advantage 0, never NaN;
- a single-sample group has advantage 0 (TRL's ``num_generations == 1`` branch sets its std to 0).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

from normlab._registry import Method, register
from normlab.papers import paper

__all__ = ["METHODS", "PreferenceGroupAdvantage", "advantages", "group_index"]

#: Every method :func:`advantages` accepts.
METHODS: tuple[str, ...] = ("grpo", "batch-std", "dr-grpo", "rloo", "gdpo", "slas", "p-grpo")


def group_index(groups: torch.Tensor | Sequence[int] | int, n: int) -> torch.Tensor:
    """Dense group ids ``0..G-1`` (int64, shape ``(n,)``) from ids or a group size.

    Args:
        groups: a group id per sample (any integers), or an int ``g``: consecutive groups of
            ``g`` samples, TRL's ``num_generations`` layout.
        n: the number of samples.
    """
    if n == 0:
        raise ValueError("advantages got no rewards; pass at least one sample per group.")
    if isinstance(groups, int) and not isinstance(groups, bool):
        if groups < 1 or n % groups:
            raise ValueError(
                f"A group size of {groups} does not divide {n} rewards; pass a size that "
                "divides the batch (TRL's num_generations) or a group id per sample."
            )
        return torch.arange(n) // groups
    ids = torch.as_tensor(groups)
    if ids.shape != (n,):
        raise ValueError(
            f"groups has shape {tuple(ids.shape)}; expected one id per reward ({n},)."
        )
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError(f"Group ids must be integers; got dtype {ids.dtype}.")
    return torch.unique(ids.cpu(), return_inverse=True)[1].to(ids.device)


def _group_stats(r: torch.Tensor, gid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample group mean and Bessel std (0 for single-sample groups), NaN-free input."""
    g = int(gid.max()) + 1
    count = torch.zeros(g, dtype=r.dtype, device=r.device).index_add_(0, gid, torch.ones_like(r))
    mean = torch.zeros(g, dtype=r.dtype, device=r.device).index_add_(0, gid, r) / count
    dev = r - mean[gid]
    ss = torch.zeros(g, dtype=r.dtype, device=r.device).index_add_(0, gid, dev * dev)
    std = torch.where(count > 1, ss / (count - 1).clamp_min(1), torch.zeros_like(ss)).sqrt()
    return mean[gid], std[gid]


def _batch_std(r: torch.Tensor) -> torch.Tensor:
    return r.std() if r.numel() > 1 else torch.zeros((), dtype=r.dtype, device=r.device)


def _combine(
    rewards: torch.Tensor, weights: Sequence[float] | torch.Tensor | None
) -> torch.Tensor:
    if rewards.ndim == 1:
        return torch.nan_to_num(rewards, nan=0.0)
    w = _weights(rewards, weights)
    return (rewards * w).nansum(dim=1)


def _weights(rewards: torch.Tensor, weights) -> torch.Tensor:
    k = rewards.shape[1]
    if weights is None:
        return torch.ones(k, dtype=rewards.dtype, device=rewards.device)
    w = torch.as_tensor(weights, dtype=rewards.dtype, device=rewards.device)
    if w.shape != (k,):
        raise ValueError(f"weights has shape {tuple(w.shape)}; expected one per column ({k},).")
    return w


def advantages(
    rewards: torch.Tensor,
    groups: torch.Tensor | Sequence[int] | int,
    *,
    method: str = "grpo",
    eps: float = 1e-4,
    weights: Sequence[float] | torch.Tensor | None = None,
    gamma: float = 0.5,
    state: PreferenceGroupAdvantage | None = None,
) -> torch.Tensor:
    r"""Advantages of grouped rewards by one of the GRPO-family rules.

    With ``r`` the (weighted, NaN-summed) reward, ``mu_g`` / ``sigma_g`` its group mean and
    Bessel std and ``sigma_B`` the std over the whole batch:

    - ``"grpo"`` (:func:`paper("grpo")`; TRL ``scale_rewards="group"``):
      :math:`A = (r - \mu_g) / (\sigma_g + \epsilon)`.
    - ``"batch-std"`` (TRL ``"batch"``): :math:`A = (r - \mu_g) / (\sigma_B + \epsilon)`.
    - ``"dr-grpo"`` (Dr. GRPO; TRL ``"none"``): :math:`A = r - \mu_g`.
    - ``"rloo"`` (RLOO): :math:`A_i = r_i - (\sum_g r - r_i) / (n_g - 1)`; needs ``n_g >= 2``.
    - ``"gdpo"`` (GDPO): each column ``k`` z-scored in its group with NaN-aware mean/std,
      summed with ``weights`` (NaN as 0), then z-scored over the batch (mean and Bessel std).
    - ``"slas"`` (SLAS, "Reward Hacking and Advantage Normalization in GRPO for
      Text-to-Image"): :math:`a = (r - \mu_g) / (\sigma_B + \epsilon)` then
      :math:`A = \mathrm{sign}(a) |a|^{1 + \gamma}`; the paper does not publish gamma, 0.5
      is normlab's default.
    - ``"p-grpo"`` (P-GRPO): ``groups`` are preference groups; see
      :class:`PreferenceGroupAdvantage`, passed as ``state``.

    Args:
        rewards: ``(N,)`` or ``(N, K)`` rewards (K reward columns).
        groups: a group id per sample, or a group size (consecutive groups, TRL's layout).
        method: one of :data:`METHODS`.
        eps: added to the std (TRL: 1e-4).
        weights: per-column weights for ``(N, K)`` rewards (default all ones).
        gamma: SLAS's shaping exponent offset, >= 0.
        state: the running statistics for ``"p-grpo"``.

    Returns:
        ``(N,)`` advantages, in the rewards' dtype.
    """
    if not isinstance(rewards, torch.Tensor) or not rewards.is_floating_point():
        raise TypeError("rewards must be a floating-point tensor of shape (N,) or (N, K).")
    if rewards.ndim not in (1, 2):
        raise ValueError(f"rewards has shape {tuple(rewards.shape)}; expected (N,) or (N, K).")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0; got {eps}.")
    key = method.lower().replace("_", "-")
    if key not in METHODS:
        raise ValueError(f"Unknown advantage method {method!r}; expected one of {METHODS}.")
    gid = group_index(groups, rewards.shape[0])
    if key == "p-grpo":
        if state is None:
            raise ValueError(
                "method='p-grpo' keeps running statistics per preference group: pass "
                "state=PreferenceGroupAdvantage() and reuse it across batches."
            )
        return state(_combine(rewards, weights), groups)
    if key == "gdpo":
        return _gdpo(rewards, gid, eps, weights)
    r = _combine(rewards, weights)
    mean, std = _group_stats(r, gid)
    if key == "grpo":
        return (r - mean) / (std + eps)
    if key == "batch-std":
        return (r - mean) / (_batch_std(r) + eps)
    if key == "dr-grpo":
        return r - mean
    if key == "rloo":
        count = torch.bincount(gid).to(r.dtype)[gid]
        if bool((count < 2).any()):
            raise ValueError("RLOO needs at least 2 samples in every group (leave-one-out).")
        return (r - mean) * count / (count - 1)  # r - (n mean - r)/(n - 1)
    if not gamma >= 0:
        raise ValueError(f"SLAS's gamma must be >= 0; got {gamma}.")
    a = (r - mean) / (_batch_std(r) + eps)
    return torch.sign(a) * a.abs().pow(1.0 + gamma)


def _gdpo(rewards: torch.Tensor, gid: torch.Tensor, eps: float, weights) -> torch.Tensor:
    cols = rewards if rewards.ndim == 2 else rewards[:, None]
    w = _weights(cols, weights)
    out = torch.zeros(cols.shape[0], dtype=cols.dtype, device=cols.device)
    for k in range(cols.shape[1]):
        col = cols[:, k]
        ok = ~torch.isnan(col)
        z = torch.zeros_like(col)
        if bool(ok.any()):
            mean, std = _group_stats(col[ok], torch.unique(gid[ok], return_inverse=True)[1])
            z[ok] = (col[ok] - mean) / (std + eps)
        out = out + w[k] * z
    return (out - out.mean()) / (_batch_std(out) + eps)


class PreferenceGroupAdvantage:
    r"""P-GRPO: advantages standardised by running reward statistics of each preference group.

    ``A = (r - mu_p) / (sigma_p + eps)`` with ``mu_p`` and ``sigma_p`` (Bessel) the Welford
    running mean and std of every reward seen for preference group ``p`` in *earlier* batches
    (the estimator normlab documents: the current batch is scored against its history, then
    folded into it). A group with fewer than ``min_history`` earlier rewards is scored against
    its own rewards in the current batch (GRPO-like cold start; a single one gives 0).
    Paper: :func:`paper("p-grpo")`. The paper's control assigns preference groups at random.

    Args:
        eps: added to the std.
        min_history: earlier rewards a group needs before its history is used.
    """

    def __init__(self, *, eps: float = 1e-4, min_history: int = 2) -> None:
        if not eps >= 0 or min_history < 2:
            raise ValueError("P-GRPO needs eps >= 0 and min_history >= 2.")
        self.eps, self.min_history = float(eps), int(min_history)
        self.count: dict[int, int] = {}
        self.mean: dict[int, float] = {}
        self.m2: dict[int, float] = {}

    def __call__(
        self, rewards: torch.Tensor, groups: torch.Tensor | Sequence[int]
    ) -> torch.Tensor:
        """Advantages of ``rewards`` (``(N,)``) for preference-group ids ``groups``."""
        if rewards.ndim != 1:
            raise ValueError("P-GRPO takes (N,) rewards; combine columns first.")
        r = torch.nan_to_num(rewards, nan=0.0)
        ids = torch.as_tensor(groups).tolist()
        if len(ids) != r.shape[0]:
            raise ValueError(f"{len(ids)} preference ids for {r.shape[0]} rewards.")
        out = torch.empty_like(r)
        gid = group_index(torch.as_tensor(ids), r.shape[0])
        cold_mean, cold_std = _group_stats(r, gid)
        for i, p in enumerate(ids):
            n = self.count.get(p, 0)
            if n >= self.min_history:
                std = math.sqrt(self.m2[p] / (n - 1))
                out[i] = (r[i] - self.mean[p]) / (std + self.eps)
            else:
                out[i] = (r[i] - cold_mean[i]) / (cold_std[i] + self.eps)
        for p, value in zip(ids, r.tolist(), strict=True):  # Welford, after scoring
            n = self.count.get(p, 0) + 1
            mean = self.mean.get(p, 0.0)
            delta = value - mean
            mean += delta / n
            self.m2[p] = self.m2.get(p, 0.0) + delta * (value - mean)
            self.count[p], self.mean[p] = n, mean
        return out

    def reset(self) -> None:
        """Forget every group's history."""
        self.count.clear(), self.mean.clear(), self.m2.clear()

    def state_dict(self) -> dict[str, dict[int, float]]:
        """The running statistics, for checkpointing."""
        return {"count": dict(self.count), "mean": dict(self.mean), "m2": dict(self.m2)}

    def load_state_dict(self, state: dict[str, dict[int, float]]) -> None:
        """Restore statistics saved by :meth:`state_dict`."""
        self.count = {int(k): int(v) for k, v in state["count"].items()}
        self.mean = {int(k): float(v) for k, v in state["mean"].items()}
        self.m2 = {int(k): float(v) for k, v in state["m2"].items()}

    def __repr__(self) -> str:
        return f"PreferenceGroupAdvantage(eps={self.eps}, min_history={self.min_history})"


_SUMMARIES = {
    "grpo": ("grpo", "group z-score (r - group mean) / (group std + 1e-4), TRL's default"),
    "batch-std": ("grpo", "group mean removed, divided by the batch std (TRL 'batch')"),
    "dr-grpo": ("dr-grpo", "group mean removed, no std division (TRL 'none')"),
    "rloo": ("rloo", "leave-one-out baseline: r_i minus the mean of the others in its group"),
    "gdpo": ("gdpo", "each reward column z-scored in its group, summed, then batch z-scored"),
    "slas": ("slas", "batch-std advantage shaped super-linearly: sign(a)|a|^(1 + gamma)"),
}
_ALIASES = {"batch-std": ("grpo-batch",), "slas": ("super-linear",)}

for _name, (_key, _summary) in _SUMMARIES.items():
    register(
        Method(
            _name,
            "advantage",
            functools.partial(advantages, method=_name),
            paper(_key),
            _summary,
            aliases=_ALIASES.get(_name, ()),
            layout="other",
        )
    )
register(
    Method(
        "p-grpo",
        "advantage",
        PreferenceGroupAdvantage,
        paper("p-grpo"),
        "rewards standardised by Welford running statistics of each preference group",
        aliases=("pgrpo-advantage",),
        layout="other",
    )
)
