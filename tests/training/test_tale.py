"""training.tale: TALE's greedy pruning and the validation-selected random control."""

from __future__ import annotations

import math

import torch

from normlab.models.regression import ResidualMLP, polynomial_task
from normlab.training import tale


def _setup():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    task = polynomial_task(0, in_features=1, degree=3, ood_range=(1.0, 1.3))
    model = ResidualMLP(1, 8, 4)
    x, y = task.sample(256, g)
    result = tale.fit_regressor(model, x, y, steps=30, batch=64, lr=1e-2, generator=g)
    data = {
        (d, p): task.sample(64, g, ood=d == "ood") for d in ("id", "ood") for p in ("val", "test")
    }
    return model, data, result, g


def test_pruning_rules_select_on_validation():
    torch.set_num_threads(1)
    model, data, result, g = _setup()
    assert result.diverged is None and len(result.losses) == 30 and not model.training
    kept, path = tale.greedy_prune(model, *data["ood", "val"], 2)
    assert 2 <= len(kept) <= 4 and path["evaluations"] == 1 + 4 + 3
    val = data["ood", "val"]
    chosen = tale.random_prune(model, *val, 2, 7, g)

    def mse(layers):
        return float(torch.nn.functional.mse_loss(model(val[0], layers=layers), val[1]).detach())

    assert mse(chosen) <= mse([0, 1, 2, 3])  # the full model is a candidate: never worse
    assert tale.random_prune(model, *val, 2, 0, g) == [0, 1, 2, 3]
    row = tale.pruned_row(model, kept, data, "ood")
    assert row["removed"] == 4 - len(kept) and math.isfinite(row["log10_gain"])
    assert row["profile_gap"] > 0
    mean = tale.random_row(model, data, "ood", 2, 7, 3, g)
    assert set(mean) == set(row) and 0 <= mean["removed"] <= 2
    curves = tale.profile_curves(model, data, {"id": [0, 1, 2, 3], "ood": kept})
    assert len(curves["ood"]["profile"]["norms"]) == 5
    assert len(curves["id_profile_ood_pruned"]["norms"]) == len(kept) + 1
