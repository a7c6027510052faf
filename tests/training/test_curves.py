"""accuracy_curves: one validation and test accuracy per epoch; a divergence stops them."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from normlab.training.curves import accuracy_curves, split_accuracy


def _split(n: int, seed: int) -> SimpleNamespace:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return SimpleNamespace(x=x, y=(x[:, 0] > 0).long())


def test_a_separable_problem_is_learned_with_one_point_per_epoch():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    out = accuracy_curves(
        model, _split(200, 0), _split(100, 1), _split(100, 2), lr=0.05, epochs=5, batch=20, seed=0
    )
    assert len(out["val"]) == len(out["test"]) == 5 and out["diverged"] is None
    assert out["test"][-1] > 0.9 and out["test"][-1] == split_accuracy(model, _split(100, 2))


def test_a_diverged_run_stops_its_curves_and_reports_the_divergence():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    with torch.no_grad():
        model.weight.fill_(float("nan"))
    out = accuracy_curves(
        model, _split(40, 0), _split(20, 1), _split(20, 2), lr=0.1, epochs=3, batch=10, seed=0
    )
    assert out["diverged"] is not None and out["diverged"].step == 0
    assert out["val"] == [] and out["test"] == []
