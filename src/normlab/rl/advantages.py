"""Group-relative advantages for policy-gradient fine-tuning: the GRPO family.

Every method maps rewards of completions grouped by prompt to advantages with one call,
:func:`advantages`, and is registered as kind ``"advantage"``. The semantics of the methods
TRL 1.16 has (``GRPOTrainer`` with ``scale_rewards="group" | "batch" | "none"`` and
``multi_objective_aggregation="normalize_then_sum"``, ``RLOOTrainer``) are TRL's:

- several reward columns ``(N, K)`` are combined as ``nansum(rewards * weights, dim=1)``: a
  NaN column (a reward function that returned ``None``) counts as 0;
- a sample whose every column is NaN (a NaN in ``(N,)`` rewards) is *unscorable*: it is left
  out of its group's and the batch's mean and std, and its advantage is 0;
- the group mean is subtracted; the std is Bessel-corrected; ``eps = 1e-4`` is added to the
  std, not to the variance, so a constant group gives advantage 0, never NaN; a group with
  fewer than two scorable samples has advantage 0.

Rewards must be finite (+-inf raises a ``ValueError`` naming the index; mark a sample you
cannot score with NaN). Integer rewards are cast to the default float dtype, float16/bfloat16
are computed in float32. Statistics are computed on rewards divided by a power of two near
their magnitude (:mod:`normlab.rl._stats`), so no sum or square overflows: ``A(c r, eps)``
equals ``A(r, eps / c)`` for the scale-free methods up to rounding, at any finite size.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

from normlab._registry import Method, register
from normlab.papers import paper
from normlab.rl._stats import check_rewards, group_index, group_moments, pow2_scale, safe_div
from normlab.rl.preference import PreferenceGroupAdvantage

__all__ = ["METHODS", "PreferenceGroupAdvantage", "advantages", "group_index"]

#: Every method :func:`advantages` accepts.
METHODS: tuple[str, ...] = ("grpo", "batch-std", "dr-grpo", "rloo", "gdpo", "slas", "p-grpo")


def _weights(rewards: torch.Tensor, weights) -> torch.Tensor:
    k = rewards.shape[1]
    if weights is None:
        return torch.ones(k, dtype=rewards.dtype, device=rewards.device)
    w = torch.as_tensor(weights, dtype=rewards.dtype, device=rewards.device)
    if w.shape != (k,):
        raise ValueError(f"weights has shape {tuple(w.shape)}; expected one per column ({k},).")
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"weights must be finite; got {w.tolist()}.")
    return w


def _combine(r: torch.Tensor, weights) -> tuple[torch.Tensor, torch.Tensor]:
    """``(c, scale)`` with the combined reward ``nansum(r * w, 1) = scale * c``, NaN if
    unscorable; ``scale`` is a power of two, so ``c`` never overflows."""
    big = pow2_scale(torch.where(torch.isnan(r), 0, r.abs()).amax())
    if r.ndim == 1:
        return r / big, big
    w = _weights(r, weights)
    wbig = pow2_scale(w.abs().amax())
    c = (r / big * (w / wbig)).nansum(dim=1)
    return torch.where(torch.isnan(r).all(dim=1), torch.nan, c), big * wbig


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
    Bessel std and ``sigma_B`` the std over the whole batch, all over scorable samples:

    - ``"grpo"`` (:func:`paper("grpo")`; TRL ``scale_rewards="group"``):
      :math:`A = (r - \mu_g) / (\sigma_g + \epsilon)`.
    - ``"batch-std"`` (TRL ``"batch"``): :math:`A = (r - \mu_g) / (\sigma_B + \epsilon)`.
    - ``"dr-grpo"`` (Dr. GRPO; TRL ``"none"``): :math:`A = r - \mu_g`.
    - ``"rloo"`` (RLOO; TRL ``RLOOTrainer``): :math:`A_i = r_i - (\sum_g r - r_i) / (n_g - 1)`
      over the ``n_g`` scorable samples; every group needs ``>= 2`` samples.
    - ``"gdpo"`` (GDPO; TRL ``"normalize_then_sum"``): each column ``k`` z-scored in its
      group with NaN-aware mean/std, summed with ``weights`` (NaN as 0), then z-scored over
      the batch's scorable samples (mean and Bessel std).
    - ``"slas"`` (SLAS, "Reward Hacking and Advantage Normalization in GRPO for
      Text-to-Image"): :math:`a = (r - \mu_g) / (\sigma_B + \epsilon)` then
      :math:`A = \mathrm{sign}(a) |a|^{1 + \gamma}`; the paper does not publish gamma, 0.5
      is normlab's default.
    - ``"p-grpo"`` (P-GRPO): ``groups`` are preference-group ids; see
      :class:`PreferenceGroupAdvantage`, passed as ``state``.

    Args:
        rewards: ``(N,)`` or ``(N, K)`` finite rewards (K reward columns); NaN = no score.
        groups: a group id per sample, or a group size (consecutive groups, TRL's layout).
        method: one of :data:`METHODS`.
        eps: added to the std (TRL: 1e-4).
        weights: per-column weights for ``(N, K)`` rewards (default all ones).
        gamma: SLAS's shaping exponent offset, >= 0.
        state: the running statistics for ``"p-grpo"``.

    Returns:
        ``(N,)`` advantages, in the rewards' dtype (the default float dtype for integers).

    Raises:
        ValueError: an infinite reward, a bad group layout, or an advantage (``dr-grpo``,
            ``rloo``) too large for the dtype.
    """
    r = check_rewards(rewards)
    dtype = rewards.dtype if rewards.is_floating_point() else r.dtype
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be finite and >= 0; got {eps}.")
    key = method.lower().replace("_", "-")
    if key not in METHODS:
        raise ValueError(f"Unknown advantage method {method!r}; expected one of {METHODS}.")
    if key == "slas" and not (math.isfinite(gamma) and gamma >= 0):
        raise ValueError(f"SLAS's gamma must be finite and >= 0; got {gamma}.")
    gid = group_index(groups, r.shape[0]).to(r.device)
    if key == "p-grpo":
        if state is None:
            raise ValueError(
                "method='p-grpo' keeps running statistics per preference group: pass "
                "state=PreferenceGroupAdvantage() and reuse it across batches."
            )
        c, scale = _combine(r, weights)
        return state((c * scale).to(dtype), groups)
    if key == "gdpo":
        a = _gdpo(r, gid, eps, weights)
    else:
        a = _grouped(r, gid, key, eps, weights, gamma)
    a = a.to(dtype)
    bad = ~torch.isfinite(a)
    if bool(bad.any()):
        raise ValueError(
            f"The {key} advantage of sample {int(bad.nonzero()[0, 0])} overflows {dtype}: "
            "it is larger than the dtype holds. Pass float64 rewards or rescale them."
        )
    return a


def _grouped(r, gid, key: str, eps: float, weights, gamma: float) -> torch.Tensor:
    c, scale = _combine(r, weights)
    m = group_moments(c, gid)
    e = eps / scale  # eps in the units of c
    if key == "grpo":
        a = safe_div(m.x - m.mu, m.sd + e / m.s)
    elif key in ("batch-std", "slas"):
        b = group_moments(c, torch.zeros_like(gid))
        a = safe_div((m.x - m.mu) * (m.s / b.s), b.sd + e / b.s)
        if key == "slas":
            a = torch.sign(a) * a.abs().pow(1.0 + gamma)
    elif key == "dr-grpo":
        a = (m.x - m.mu) * m.s * scale
    else:
        if bool((torch.bincount(gid) < 2).any()):
            raise ValueError("RLOO needs at least 2 samples in every group (leave-one-out).")
        ratio = torch.where(m.count > 1, m.count / (m.count - 1).clamp_min(1), 0)
        a = (m.x - m.mu) * ratio * m.s * scale  # r - (n mean - r)/(n - 1)
    return torch.where(torch.isnan(c), 0, a)


def _gdpo(rewards: torch.Tensor, gid: torch.Tensor, eps: float, weights) -> torch.Tensor:
    cols = rewards if rewards.ndim == 2 else rewards[:, None]
    w = _weights(cols, weights)
    wbig = pow2_scale(w.abs().amax())
    out = torch.zeros(cols.shape[0], dtype=cols.dtype, device=cols.device)
    for k in range(cols.shape[1]):
        m = group_moments(cols[:, k], gid)
        z = safe_div(m.x - m.mu, m.sd + eps / m.s)
        out = out + (w[k] / wbig) * torch.where(torch.isnan(cols[:, k]), 0, z)
    out = torch.where(torch.isnan(cols).all(dim=1), torch.nan, out)
    b = group_moments(out, torch.zeros_like(gid))
    return torch.where(torch.isnan(out), 0, safe_div(b.x - b.mu, b.sd + eps / wbig / b.s))


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
