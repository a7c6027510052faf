"""Task-aware layer pruning of a trained residual regressor, and the random-removal control.

"Task-Aware Layer Pruning Helps Out-of-Distribution, Not In-Distribution" fits a pre-LN
residual MLP (:class:`~normlab.models.regression.ResidualMLP`) to a polynomial and prunes
blocks with TALE's greedy path (:func:`~normlab.probes.geometry.tale_prune`, score
``-log10`` validation MSE). Both pruning rules here select on validation data, with the full
model as one candidate: :func:`greedy_prune` keeps the best point of TALE's path up to
``remove`` removals; :func:`random_prune` draws as many random removal sets (of 1 to
``remove`` blocks) as that path evaluated and keeps the best on the same validation set, so
the control differs from TALE only in how the candidates are proposed.
:func:`pruned_row` measures a choice on test data: MSE before and after, the log10 gain, and
the OOD-vs-ID gap of the layerwise norm and pairwise-distance profiles
(:func:`~normlab.probes.geometry.distortion`) before and after.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F

from normlab.models.regression import ResidualMLP
from normlab.probes.geometry import GeometryProfile, distortion, layer_profile, tale_prune
from normlab.training.fit import FitResult, fit

__all__ = [
    "fit_regressor",
    "greedy_prune",
    "profile_curves",
    "profile_gap",
    "pruned_row",
    "random_prune",
    "random_row",
]

Data = Mapping[tuple[str, str], tuple[torch.Tensor, torch.Tensor]]


@torch.no_grad()
def _mse(model: ResidualMLP, x: torch.Tensor, y: torch.Tensor, layers: Sequence[int]) -> float:
    return float(F.mse_loss(model(x, layers=list(layers)), y))


def fit_regressor(
    model: ResidualMLP,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    steps: int,
    batch: int,
    lr: float,
    generator: torch.Generator,
) -> FitResult:
    """Adam on the MSE of ``batch`` points drawn with replacement per step; the model is
    left in eval mode. ``FitResult.losses`` is the training curve (minibatch MSE per step).

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> model, x = ResidualMLP(1, width=8, depth=2), torch.linspace(-1, 1, 32)[:, None]
        >>> g = torch.Generator().manual_seed(0)
        >>> result = fit_regressor(model, x, x**2, steps=30, batch=16, lr=1e-2, generator=g)
        >>> len(result.losses), result.losses[-1] < result.losses[0], model.training
        (30, True, False)
    """
    result = fit(
        model,
        lambda m, i: F.mse_loss(m(x[i]), y[i]),
        lambda step: torch.randint(0, len(x), (batch,), generator=generator),
        steps,
        torch.optim.Adam(model.parameters(), lr=lr),
    )
    model.eval()
    return result


def greedy_prune(
    model: ResidualMLP, x: torch.Tensor, y: torch.Tensor, remove: int
) -> tuple[list[int], dict]:
    """TALE's greedy path on ``(x, y)`` taken for up to ``remove`` removals: the kept blocks
    of its best-scoring point (the full model included) and the path as a dict (its
    ``evaluations`` count the validation scores it computed).

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> model, x = ResidualMLP(1, width=8, depth=3), torch.linspace(-1, 1, 32)[:, None]
        >>> kept, path = greedy_prune(model, x, x**2, remove=2)  # full, then 3 + 2 candidates
        >>> len(kept) >= 1, path["best_score"] >= path["baseline"], path["evaluations"]
        (True, True, 6)
    """
    depth = len(model.blocks)
    result = tale_prune(
        lambda kept: -math.log10(_mse(model, x, y, kept)),
        depth,
        tolerance=math.inf,
        min_layers=depth - remove,
    )
    return list(result.best_kept), result.to_dict()


def random_prune(
    model: ResidualMLP,
    x: torch.Tensor,
    y: torch.Tensor,
    remove: int,
    candidates: int,
    generator: torch.Generator,
) -> list[int]:
    """The random-removal control with validation selection: ``candidates`` random removal
    sets (the number of blocks removed uniform in ``1..remove``), each scored on ``(x, y)``
    like TALE's candidates, and the full model; the kept blocks of the best (lowest MSE; a
    tie keeps the earlier, so the full model wins ties).

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> model, x = ResidualMLP(1, width=8, depth=3), torch.linspace(-1, 1, 32)[:, None]
        >>> kept = random_prune(model, x, x**2, 2, 4, torch.Generator().manual_seed(0))
        >>> 1 <= len(kept) <= 3, bool(F.mse_loss(model(x, layers=kept), x**2) <= F.mse_loss(
        ...     model(x), x**2))  # the full model is a candidate
        (True, True)
    """
    depth = len(model.blocks)
    best, best_mse = list(range(depth)), _mse(model, x, y, range(depth))
    for _ in range(candidates):
        k = 1 + int(torch.randint(0, remove, (1,), generator=generator))
        drop = set(torch.randperm(depth, generator=generator)[:k].tolist())
        kept = [i for i in range(depth) if i not in drop]
        mse = _mse(model, x, y, kept)
        if mse < best_mse:
            best, best_mse = kept, mse
    return best


def profile_gap(id_profile: GeometryProfile, ood_profile: GeometryProfile) -> float:
    """Mean over layers and over the two profiles of ``|P_OOD - P_ID| / P_ID``.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> model, x = ResidualMLP(1, width=8, depth=2), torch.linspace(-1, 1, 32)[:, None]
        >>> id_profile = layer_profile(model.hidden_states(x))
        >>> profile_gap(id_profile, id_profile), profile_gap(
        ...     id_profile, layer_profile(model.hidden_states(2 * x))) > 0
        (0.0, True)
    """
    gaps = distortion(id_profile, ood_profile)
    values = gaps["norms"] + gaps["distances"]
    return float(sum(values) / len(values))


@torch.no_grad()
def pruned_row(model: ResidualMLP, kept: Sequence[int], data: Data, dist: str) -> dict:
    """Test MSE of the full and the pruned model on ``data[dist, "test"]``, the log10 gain,
    the number of blocks removed, and the OOD-vs-ID profile gap of the full and the pruned
    network (``data[dist, "test"]`` inputs against ``data["id", "test"]`` inputs).

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> model, x = ResidualMLP(1, width=8, depth=3), torch.linspace(-1, 1, 32)[:, None]
        >>> data = {("id", "test"): (x, x**2), ("ood", "test"): (2 * x, 4 * x**2)}
        >>> row = pruned_row(model, [0, 2], data, "ood")
        >>> gain = math.log10(row["test_mse"] / row["test_mse_pruned"])
        >>> row["removed"], row["log10_gain"] == gain
        (1.0, True)
        >>> pruned_row(model, [0], data, "id")["profile_gap"]  # ID against itself
        0.0
    """
    full = list(range(len(model.blocks)))
    xt, yt = data[dist, "test"]
    xi = data["id", "test"][0]
    before, after = _mse(model, xt, yt, full), _mse(model, xt, yt, kept)
    gaps = [
        profile_gap(
            layer_profile(model.hidden_states(xi, layers=list(layers))),
            layer_profile(model.hidden_states(xt, layers=list(layers))),
        )
        for layers in (full, kept)
    ]
    return {
        "test_mse": before,
        "test_mse_pruned": after,
        "log10_gain": math.log10(before / after),
        "removed": float(len(full) - len(kept)),
        "profile_gap": gaps[0],
        "profile_gap_pruned": gaps[1],
    }


@torch.no_grad()
def profile_curves(model: ResidualMLP, data: Data, kept: Mapping[str, Sequence[int]]) -> dict:
    """The layerwise profiles (:func:`~normlab.probes.geometry.layer_profile`, as dicts) the
    claim's figure draws: per distribution ``dist`` of ``kept``, its test inputs through the
    full network (``profile``) and through ``kept[dist]`` (``profile_pruned``), and the ID
    test inputs through ``kept["ood"]`` (``id_profile_ood_pruned``).

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> model, x = ResidualMLP(1, width=8, depth=3), torch.linspace(-1, 1, 32)[:, None]
        >>> data = {("id", "test"): (x, x**2), ("ood", "test"): (2 * x, 4 * x**2)}
        >>> out = profile_curves(model, data, {"ood": [0]})
        >>> curves = out["ood"]  # embedding + 3 blocks, embedding + block 0
        >>> sorted(out), len(curves["profile"]["norms"]), len(curves["profile_pruned"]["norms"])
        (['id_profile_ood_pruned', 'ood'], 4, 2)
    """

    def profile(x: torch.Tensor, layers: Sequence[int] | None = None) -> dict:
        states = model.hidden_states(x, layers=None if layers is None else list(layers))
        return layer_profile(states).to_dict()

    out: dict = {
        dist: {
            "profile": profile(data[dist, "test"][0]),
            "profile_pruned": profile(data[dist, "test"][0], layers),
        }
        for dist, layers in kept.items()
    }
    out["id_profile_ood_pruned"] = profile(data["id", "test"][0], kept["ood"])
    return out


def random_row(
    model: ResidualMLP,
    data: Data,
    dist: str,
    remove: int,
    candidates: int,
    draws: int,
    generator: torch.Generator,
) -> dict[str, float]:
    """:func:`pruned_row` of the random-removal control (:func:`random_prune` on
    ``data[dist, "val"]``), averaged key by key over ``draws`` independent draws.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> model, x = ResidualMLP(1, width=8, depth=3), torch.linspace(-1, 1, 32)[:, None]
        >>> data = {("id", "test"): (x, x**2), ("ood", "val"): (2 * x, 4 * x**2),
        ...         ("ood", "test"): (2 * x, 4 * x**2)}
        >>> row = random_row(model, data, "ood", 2, 3, 4, torch.Generator().manual_seed(0))
        >>> row["removed"] <= 2, row["test_mse_pruned"] <= row["test_mse"]  # val == test here
        (True, True)
    """
    val = data[dist, "val"]
    rows = [
        pruned_row(model, random_prune(model, *val, remove, candidates, generator), data, dist)
        for _ in range(draws)
    ]
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
