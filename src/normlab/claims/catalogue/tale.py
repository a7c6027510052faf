"""Claim "tale": task-aware layer pruning helps out-of-distribution inputs, not in-distribution.

The seed shows on controlled polynomial regression (and LLMs) that TALE-style greedy layer
pruning gives no benefit on in-distribution (ID) data but improves out-of-distribution
(OOD) accuracy, and explains it geometrically: OOD inputs distort the layerwise norm and
pairwise-distance profiles, and pruning moves them back toward the ID ones.

Here a pre-LN residual MLP (:mod:`normlab.models.regression`) fits a random degree-5
polynomial on ``x in [-1, 1]``; OOD inputs have ``|x| in [1, 1.3]``. TALE's
greedy path (:func:`~normlab.probes.geometry.tale_prune`, score ``-log10`` validation MSE)
is taken up to ``max_remove`` removals, once with an ID validation set and once with an OOD
one, and each arm keeps the point of its path (``k`` in ``{0, ..., max_remove}``, 0 = the
full model) with the best validation score, as the paper's procedure selects on
validation; so the ID arm can show a benefit, or none (k = 0). Control: the same number of
layers removed at random. Each pruned model is evaluated on a disjoint test set of the same
distribution; the rows ``full-id`` / ``full-ood`` hold the unpruned model's test MSE.
Geometry: the whole layerwise norm and pairwise-distance profiles of OOD inputs against ID
inputs through the same network (mean relative deviation over layers), for the full and the
pruned network. Premises: the shift hurts the full model (OOD MSE >= 3x ID), and distorts
its profiles. One network is trained per seed at a fixed lr (the arms are pruning choices
on it), so nothing is tuned but the pruning itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from normlab.claims.common import seed_everything
from normlab.claims.core import Claim, Effect, FreeSetting, Margin, Premise, cell, register_claim
from normlab.models.regression import ResidualMLP, polynomial_task
from normlab.papers import paper
from normlab.probes.geometry import GeometryProfile, distortion, layer_profile, tale_prune
from normlab.training.fit import Divergence, fit

__all__ = ["CLAIM"]


@torch.no_grad()
def _mse(model: ResidualMLP, x: torch.Tensor, y: torch.Tensor, layers: Sequence[int]) -> float:
    return float(F.mse_loss(model(x, layers=list(layers)), y))


def _train(
    model: ResidualMLP,
    x: torch.Tensor,
    y: torch.Tensor,
    config: Mapping[str, Any],
    generator: torch.Generator,
) -> Divergence | None:
    result = fit(
        model,
        lambda m, i: F.mse_loss(m(x[i]), y[i]),
        lambda step: torch.randint(0, len(x), (config["batch"],), generator=generator),
        config["steps"],
        torch.optim.Adam(model.parameters(), lr=config["lr"]),
    )
    model.eval()
    return result.diverged


def _profile_gap(id_profile: GeometryProfile, ood_profile: GeometryProfile) -> float:
    """Mean over layers and over the two profiles of ``|P_OOD - P_ID| / P_ID``."""
    gaps = distortion(id_profile, ood_profile)
    values = gaps["norms"] + gaps["distances"]
    return float(sum(values) / len(values))


def _greedy(
    model: ResidualMLP, x: torch.Tensor, y: torch.Tensor, depth: int, remove: int
) -> tuple[list[int], dict[str, Any]]:
    """TALE's greedy path (score ``-log10 MSE`` on ``(x, y)``) taken for up to ``remove``
    steps; the kept layers of its best-scoring point (the full model included)."""
    result = tale_prune(
        lambda kept: -math.log10(_mse(model, x, y, kept)),
        depth,
        tolerance=math.inf,
        min_layers=depth - remove,
    )
    return list(result.best_kept), result.to_dict()


@torch.no_grad()
def _arm(
    model: ResidualMLP,
    kept: Sequence[int],
    data: Mapping[tuple[str, str], tuple[torch.Tensor, torch.Tensor]],
    dist: str,
    full: Sequence[int],
) -> dict[str, float]:
    xt, yt = data[dist, "test"]
    xi = data["id", "test"][0]
    before, after = _mse(model, xt, yt, full), _mse(model, xt, yt, kept)
    profile = {
        layers: (
            layer_profile(model.hidden_states(xi, layers=list(layers))),
            layer_profile(model.hidden_states(xt, layers=list(layers))),
        )
        for layers in (tuple(full), tuple(kept))
    }
    return {
        "test_mse": before,
        "test_mse_pruned": after,
        "log10_gain": math.log10(before / after),
        "profile_gap": _profile_gap(*profile[tuple(full)]),
        "profile_gap_pruned": _profile_gap(*profile[tuple(kept)]),
    }


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """TALE (ID and OOD validation) and random removal of the same number of layers: test
    MSE before/after and the OOD-vs-ID profile gap before/after."""
    generator = seed_everything(seed)
    task = polynomial_task(
        seed, in_features=1, degree=config["degree"], ood_range=tuple(config["ood_range"])
    )
    depth, remove = config["depth"], config["max_remove"]
    model = ResidualMLP(1, config["width"], depth)
    x, y = task.sample(config["train"], generator)
    div = _train(model, x, y, config, generator)
    n, full = config["eval"], list(range(depth))
    data = {
        (dist, part): task.sample(n, generator, ood=dist == "ood")
        for dist in ("id", "ood")
        for part in ("val", "test")
    }
    table: dict[str, dict[str, float]] = {}
    curves: dict[str, Any] = {}
    for dist in ("id", "ood"):
        kept, path = _greedy(model, *data[dist, "val"], depth, remove)
        row = _arm(model, kept, data, dist, full)
        table[f"tale-{dist}"] = {**row, "removed": float(depth - len(kept))}
        table[f"full-{dist}"] = {"test_mse_pruned": row["test_mse"]}
        rows = []
        removed = depth - len(kept)
        for _ in range(config["random_draws"]):
            drop = set(torch.randperm(depth, generator=generator)[:removed].tolist())
            rows.append(_arm(model, [i for i in full if i not in drop], data, dist, full))
        table[f"random-{dist}"] = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
        with torch.no_grad():
            curves[dist] = {
                "tale": path,
                "profile": layer_profile(model.hidden_states(data[dist, "test"][0])).to_dict(),
                "profile_pruned": layer_profile(
                    model.hidden_states(data[dist, "test"][0], layers=kept)
                ).to_dict(),
            }
    with torch.no_grad():
        curves["id_profile_ood_pruned"] = layer_profile(
            model.hidden_states(data["id", "test"][0], layers=curves["ood"]["tale"]["best_kept"])
        ).to_dict()
    # every arm is a pruning of the one trained network: if it diverged, so did they all
    diverged = {} if div is None else {arm: div.record() for arm in table}
    return {"table": table, "curves": curves, "diverged": diverged}


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    m = measurements[0]["curves"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, key, label in (
        (ax1, "norms", "mean norm"),
        (ax2, "distances", "mean pairwise distance"),
    ):
        ax.plot(m["id"]["profile"][key], "k-", label="ID, full")
        ax.plot(m["ood"]["profile"][key], "C3--", label="OOD, full")
        ax.plot(m["id_profile_ood_pruned"][key], "k:", label="ID, OOD-TALE-pruned")
        ax.plot(m["ood"]["profile_pruned"][key], "C2-", label="OOD, OOD-TALE-pruned")
        ax.set(xlabel="residual state (0 = embedding)", ylabel=label, yscale="log")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


_COMMON = {"degree": 5, "ood_range": [1.0, 1.3], "lr": 1e-3, "batch": 128}


def _gain(m: Mapping[str, Any], arm: str) -> float:
    return cell(m, arm, "log10_gain")


def _pruning_gain(dist: str) -> Any:
    def fn(m: Mapping[str, Any]) -> float:
        full = cell(m, f"full-{dist}", "test_mse_pruned")
        return math.log10(full / cell(m, f"tale-{dist}", "test_mse_pruned"))

    return fn


def _realign(m: Mapping[str, Any], arm: str) -> float:
    return cell(m, arm, "profile_gap") - cell(m, arm, "profile_gap_pruned")


_GAIN = Margin(
    0.02,
    "normlab's choice: log10 0.02 is a 5% change in test MSE, below which "
    "a pruning benefit is not worth a claim",
)

CLAIM = register_claim(
    Claim(
        id="tale",
        paper=paper("tale"),
        hypothesis=(
            "Greedy task-aware layer pruning improves OOD test error but not ID test error, "
            "and moves OOD representation geometry toward the ID geometry."
        ),
        primary=Effect(
            "ood_improves",
            "log10(OOD test MSE of the full model / after TALE removes k layers chosen on "
            "OOD validation data)",
            _pruning_gain("ood"),
            direction="greater",
            margin=_GAIN,
            baseline="full-ood",
            method="tale-ood",
            unit="log10 MSE",
        ),
        secondary=(
            Effect(
                "ood_beats_random_removal",
                "log10 OOD test-MSE gain of TALE minus of removing k random layers (mean of "
                "random draws)",
                lambda m: _gain(m, "tale-ood") - _gain(m, "random-ood"),
                direction="greater",
                margin=_GAIN,
                baseline="random-ood",
                method="tale-ood",
                unit="log10 MSE",
            ),
            Effect(
                "id_no_benefit",
                "log10(ID test MSE of the full model / after TALE removes k layers chosen "
                "on ID validation data)",
                _pruning_gain("id"),
                direction="no_greater",
                margin=_GAIN,
                baseline="full-id",
                method="tale-id",
                unit="log10 MSE",
            ),
            Effect(
                "geometry_realigns",
                "OOD-vs-ID gap of the full norm and pairwise-distance profiles (mean relative "
                "deviation over layers), full model minus TALE-pruned (OOD validation)",
                lambda m: _realign(m, "tale-ood"),
                direction="greater",
                margin=Margin(
                    0.02, "normlab's choice: a 2-point drop of the mean relative profile deviation"
                ),
                method="tale-ood",
            ),
            Effect(
                "geometry_beats_random_removal",
                "profile-gap reduction of TALE minus of random removal of k layers",
                lambda m: _realign(m, "tale-ood") - _realign(m, "random-ood"),
                direction="greater",
                margin=Margin(0.02, "normlab's choice: as above"),
                baseline="random-ood",
                method="tale-ood",
            ),
        ),
        premises=(
            Premise(
                "ood_is_harder",
                "log10(OOD / ID test MSE) of the full model",
                lambda m: math.log10(
                    cell(m, "tale-ood", "test_mse") / cell(m, "tale-id", "test_mse")
                ),
                direction="greater",
                margin=Margin(
                    0.5,
                    "normlab's choice: the shift must hurt (3x MSE) for pruning to have "
                    "something to repair",
                ),
                gates=("ood_improves", "ood_beats_random_removal"),
            ),
            Premise(
                "ood_is_distorted",
                "OOD-vs-ID profile gap of the full model",
                lambda m: cell(m, "tale-ood", "profile_gap"),
                direction="greater",
                margin=Margin(
                    0.05,
                    "normlab's choice: OOD inputs must distort the profiles at all (the "
                    "paper's premise) for realignment to mean anything",
                ),
                gates=("geometry_realigns", "geometry_beats_random_removal"),
            ),
        ),
        free_settings=(
            FreeSetting.scaled("lr", "normlab's choice: the fixed training lr", 0.3, 3.0),
            FreeSetting.scaled("max_remove", "normlab's choice: the path's length", 0.5, 1.5),
            FreeSetting.scaled("degree", "normlab's choice: the polynomial's degree"),
            FreeSetting("ood_range", [1.0, 1.15], [1.0, 1.6], "normlab's choice: the OOD |x|"),
            FreeSetting.scaled("steps", "normlab's choice: the training budget"),
            FreeSetting.scaled("batch", "normlab's choice: points per Adam step"),
            FreeSetting.scaled("width", "normlab's choice: the residual MLP's width"),
            FreeSetting.scaled("depth", "normlab's choice: blocks (layers TALE can remove)"),
            FreeSetting.scaled("train", "normlab's choice: training points"),
            FreeSetting.scaled("eval", "normlab's choice: validation and test points"),
            FreeSetting.scaled("random_draws", "normlab's choice: the random control's draws"),
        ),
        # max_remove 1 and lr 3e-4 each turned the quick verdict inconclusive; the path's
        # length bounds the OOD arm's choice directly (k in {0, 1})
        decisive="max_remove",
        untuned="one network is trained per seed at a fixed lr (a free setting); the arms are "
        "pruning choices on it, each selected on its own validation set",
        headline="Polynomial regression and LLMs: task-aware pruning yields no ID benefit and "
        "consistently improves OOD accuracy (no number in the abstract).",
        setup=(
            "Pre-LN residual MLP (width 32, 16 blocks) fit to a random degree-5 polynomial on "
            "[-1, 1]; OOD x in [1, 1.3]; TALE's greedy path (score -log10 validation MSE) "
            "up to 2 removals with ID or OOD validation data, k in {0, 1, 2} chosen on that "
            "validation set; the same number of random layers removed as the control; "
            "disjoint test sets; 400 Adam steps of batch 128 and 14 seeds at quick."
        ),
        scale_note="the path's best validation point up to max_remove removals instead of "
        "TALE's tolerance stop; no LLM experiment; quick trains 400 steps on 14 seeds "
        "(budget; previously 600 on 20).",
        configs={
            "smoke": {
                "seeds": 1,
                **_COMMON,
                "width": 16,
                "depth": 4,
                "max_remove": 1,
                "steps": 40,
                "train": 512,
                "eval": 64,
                "random_draws": 2,
            },
            "quick": {
                "seeds": 14,  # >= 12: the per-seed gains are bimodal (k = 0 or not)
                **_COMMON,
                "width": 32,
                "depth": 16,
                "max_remove": 2,
                "steps": 400,
                "train": 4096,
                "eval": 256,
                "random_draws": 8,
            },
            "full": {
                "seeds": 10,
                **_COMMON,
                "width": 64,
                "depth": 24,
                "max_remove": 6,
                "steps": 3000,
                "train": 16384,
                "eval": 1024,
                "random_draws": 32,
            },
        },
        run=run,
        figure=_figure,
        caption=(
            "Norm (left) and pairwise-distance (right) profiles along the residual stream for "
            "seed 0: OOD (red dashed) departs from ID (black); after OOD-guided TALE the OOD "
            "profile (green) should lie closer to the pruned model's ID profile (dotted)."
        ),
    )
)
