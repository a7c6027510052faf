"""Geometry profiles against direct computations, and the TALE greedy rule."""

from __future__ import annotations

import itertools

import pytest
import torch

from normlab.models.regression import ResidualMLP, polynomial_task
from normlab.probes import GeometryProfile, distortion, layer_profile, tale_prune


def test_profiles_match_direct_computation():
    g = torch.Generator().manual_seed(0)
    states = [torch.randn(6, 4, generator=g, dtype=torch.float64) * (i + 1) for i in range(3)]
    profile = layer_profile(states)
    for h, n, d in zip(states, profile.norms, profile.distances, strict=True):
        assert n == pytest.approx(float(h.norm(dim=-1).mean()))
        pairs = [float((h[a] - h[b]).norm()) for a, b in itertools.combinations(range(6), 2)]
        assert d == pytest.approx(sum(pairs) / len(pairs))
    tokens = layer_profile([torch.ones(2, 3, 4)])  # (B, T, d): every token is a point
    assert tokens.norms == (2.0,) and tokens.distances == (0.0,)


def test_distortion():
    a = GeometryProfile((1.0, 2.0), (4.0, 4.0))
    b = GeometryProfile((1.5, 2.0), (2.0, 4.0))
    assert distortion(a, a) == {"norms": [0.0, 0.0], "distances": [0.0, 0.0]}
    assert distortion(a, b) == {"norms": [0.5, 0.0], "distances": [0.5, 0.0]}


def test_tale_greedy_rule():
    # layers 2 and 5 hurt (removing each gains 1 point); every other removal costs 0.05
    def score(kept):
        return -sum(1.0 for i in (2, 5) if i in kept) - 0.05 * sum(
            1 for i in range(8) if i not in kept and i not in (2, 5)
        )

    result = tale_prune(score, 8, tolerance=0.08)
    assert result.baseline == -2.0
    assert [s.removed for s in result.steps[:2]] == [2, 5]
    assert set(result.best_kept) == {0, 1, 3, 4, 6, 7} and result.best_score == 0.0
    assert result.removed == (2, 5)
    # after the gains it keeps removing while within tolerance of the baseline, then stops
    assert all(s.score >= result.baseline - 0.08 for s in result.steps)
    strict = tale_prune(lambda kept: -float(8 - len(kept)), 8, tolerance=0.5)
    assert strict.steps == () and strict.best_kept == tuple(range(8))
    assert strict.evaluations == 9


def test_residual_mlp_layers_and_scales_do_not_change_the_model():
    torch.manual_seed(0)
    model = ResidualMLP(2, 8, 3)
    x = torch.randn(4, 2)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    full = model(x)
    assert torch.allclose(model(x, layers=[0, 1, 2]), full)
    assert torch.allclose(model(x, scales={1: 1.0}), full)
    assert not torch.allclose(model(x, layers=[0, 2]), full)
    assert torch.allclose(model(x, scales={1: 0.0}), model(x, layers=[0, 2]))
    assert len(model.hidden_states(x, layers=[2])) == 2
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_polynomial_task_ranges():
    task = polynomial_task(0, in_features=2, degree=3)
    g = torch.Generator().manual_seed(0)
    x, y = task.sample(100, g)
    xo, _ = task.sample(100, g, ood=True)
    assert x.abs().max() <= 1 and xo.abs().min() >= 1 and xo.abs().max() <= 1.5
    c = task.coefficients
    manual = (c[0] * x + c[1] * x**2 + c[2] * x**3).sum(-1, keepdim=True)
    assert torch.allclose(y, manual)
