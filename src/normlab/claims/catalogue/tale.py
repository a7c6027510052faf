"""Claim "tale": task-aware layer pruning helps out-of-distribution inputs, not in-distribution.

The seed shows on controlled polynomial regression (and LLMs) that TALE-style greedy layer
pruning gives no benefit on in-distribution (ID) data but improves out-of-distribution
(OOD) accuracy, and explains it geometrically: OOD inputs distort the layerwise norm and
pairwise-distance profiles, and pruning moves them back toward the ID ones.

Here a pre-LN residual MLP (:mod:`normlab.models.regression`) fits a random degree-5
polynomial on ``x in [-1, 1]``; OOD inputs have ``|x| in [1, 1.3]``. TALE
(:func:`~normlab.probes.geometry.tale_prune`, score ``-log10 MSE``, tolerance 0.08) runs
once with an ID validation set and once with an OOD one; each pruned model is evaluated on
a disjoint test set of the same distribution. The geometry effect compares the final
residual state's OOD norm and pairwise-distance profiles with the full model's ID profile,
before and after pruning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from normlab.claims.common import cell, seed_everything
from normlab.claims.core import Claim, Effect, register_claim
from normlab.models.regression import ResidualMLP, polynomial_task
from normlab.papers import paper
from normlab.probes.geometry import GeometryProfile, layer_profile, tale_prune

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
) -> None:
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    model.train()
    for _ in range(config["steps"]):
        i = torch.randint(0, len(x), (config["batch"],), generator=generator)
        loss = F.mse_loss(model(x[i]), y[i])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()


def _last(profile: GeometryProfile) -> tuple[float, float]:
    return profile.norms[-1], profile.distances[-1]


def _distortion(ref: GeometryProfile, other: GeometryProfile) -> float:
    (n0, d0), (n1, d1) = _last(ref), _last(other)
    return 0.5 * (abs(n1 - n0) / n0 + abs(d1 - d0) / d0)


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """TALE with ID and with OOD validation; test MSE before/after and OOD distortion."""
    generator = seed_everything(seed)
    task = polynomial_task(
        seed, in_features=1, degree=config["degree"], ood_range=tuple(config["ood_range"])
    )
    model = ResidualMLP(1, config["width"], config["depth"])
    x, y = task.sample(config["train"], generator)
    _train(model, x, y, config, generator)
    n, full = config["eval"], list(range(config["depth"]))
    data = {
        (dist, part): task.sample(n, generator, ood=dist == "ood")
        for dist in ("id", "ood")
        for part in ("val", "test")
    }
    table: dict[str, dict[str, float]] = {}
    curves: dict[str, Any] = {}
    id_profile = layer_profile(model.hidden_states(data["id", "test"][0]))
    for dist in ("id", "ood"):
        xv, yv = data[dist, "val"]
        xt, yt = data[dist, "test"]
        result = tale_prune(
            lambda kept, xv=xv, yv=yv: -math.log10(_mse(model, xv, yv, kept)),
            config["depth"],
            tolerance=config["tolerance"],
        )
        kept = list(result.best_kept)
        before, after = _mse(model, xt, yt, full), _mse(model, xt, yt, kept)
        row = {
            "test_mse": before,
            "test_mse_pruned": after,
            "log10_gain": math.log10(before / after),
            "layers_kept": float(len(kept)),
        }
        with torch.no_grad():
            p_full = layer_profile(model.hidden_states(xt))
            p_pruned = layer_profile(model.hidden_states(xt, layers=kept))
        row["distortion"] = _distortion(id_profile, p_full)
        row["distortion_pruned"] = _distortion(id_profile, p_pruned)
        table[f"tale-{dist}"] = row
        curves[dist] = {
            "tale": result.to_dict(),
            "profile": p_full.to_dict(),
            "profile_pruned": p_pruned.to_dict(),
        }
    curves["id_profile"] = id_profile.to_dict()
    return {"table": table, "curves": curves}


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    m = measurements[0]["curves"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, key, label in (
        (ax1, "norms", "mean norm"),
        (ax2, "distances", "mean pairwise distance"),
    ):
        ax.plot(m["id_profile"][key], "k-", label="ID")
        ax.plot(m["ood"]["profile"][key], "C3--", label="OOD, full")
        ax.plot(m["ood"]["profile_pruned"][key], "C2-", label="OOD, TALE-pruned")
        ax.set(xlabel="residual state (0 = embedding)", ylabel=label, yscale="log")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


_COMMON = {"degree": 5, "ood_range": [1.0, 1.3], "lr": 1e-3, "batch": 128, "tolerance": 0.08}

CLAIM = register_claim(
    Claim(
        id="tale",
        paper=paper("tale"),
        hypothesis=(
            "Greedy task-aware layer pruning improves OOD test error but not ID test error, "
            "and moves OOD representation geometry toward the ID geometry."
        ),
        metrics=(
            "test_mse",
            "test_mse_pruned",
            "log10_gain",
            "layers_kept",
            "distortion",
            "distortion_pruned",
        ),
        effects=(
            Effect(
                "ood_improves",
                "log10(OOD test MSE before / after TALE with OOD validation)",
                lambda m: cell(m, "tale-ood", "log10_gain"),
            ),
            Effect(
                "id_no_benefit",
                "0.02 minus log10(ID test MSE before / after TALE with ID validation) "
                "(positive: less than ~5% ID improvement)",
                lambda m: 0.02 - cell(m, "tale-id", "log10_gain"),
            ),
            Effect(
                "geometry_realigns",
                "OOD distortion of the final state's norm/distance profile from the ID "
                "profile, before minus after pruning",
                lambda m: (
                    cell(m, "tale-ood", "distortion") - cell(m, "tale-ood", "distortion_pruned")
                ),
            ),
        ),
        headline="Polynomial regression and LLMs: task-aware pruning yields no ID benefit and "
        "consistently improves OOD accuracy.",
        setup=(
            "Pre-LN residual MLP (width 32, 16 blocks) fit to a random degree-5 polynomial on "
            "[-1, 1]; OOD |x| in [1, 1.3]; TALE greedy pruning (score -log10 MSE, tolerance "
            "0.08) with ID vs OOD validation sets, disjoint test sets."
        ),
        configs={
            "smoke": {
                "seeds": 1,
                **_COMMON,
                "width": 16,
                "depth": 4,
                "steps": 40,
                "train": 512,
                "eval": 64,
            },
            "quick": {
                "seeds": 3,
                **_COMMON,
                "width": 32,
                "depth": 16,
                "steps": 600,
                "train": 4096,
                "eval": 256,
            },
            "full": {
                "seeds": 10,
                **_COMMON,
                "width": 64,
                "depth": 24,
                "steps": 3000,
                "train": 16384,
                "eval": 1024,
            },
        },
        run=run,
        key=("test_mse_pruned", "tale-ood", "tale-id"),
        figure=_figure,
    )
)
