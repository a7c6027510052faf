"""BN switching hyperplanes and exact affine-region counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from normlab.probes.bn_geometry import (
    count_regions_2d,
    estimate_regions,
    hyperplane_hits_window,
    piecewise_affine_layers,
    region_density,
    switching_hyperplanes,
)


def mlp(bn: bool, width: int = 6, depth: int = 2, d: int = 2, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    mods: list[nn.Module] = []
    fan = d
    for _ in range(depth):
        mods += [nn.Linear(fan, width), nn.BatchNorm1d(width) if bn else nn.Identity(), nn.ReLU()]
        fan = width
    mods.append(nn.Linear(fan, 1))
    net = nn.Sequential(*mods).double()
    for m in net:
        if isinstance(m, nn.BatchNorm1d):
            nn.init.normal_(m.weight, 1.0, 0.3)
            nn.init.normal_(m.bias, 0.0, 0.5)
    return net


def test_conditioned_affine_pieces_reproduce_the_forward_pass():
    net = mlp(True, depth=3)
    x = torch.randn(32, 2, dtype=torch.float64) + 2
    state = {k: v.clone() for k, v in net.state_dict().items()}
    h = x.numpy()
    for w, b, relu in piecewise_affine_layers(net, x):
        h = h @ w.T + b
        h = np.maximum(h, 0) if relu else h
    for k, v in net.state_dict().items():  # the probe does not touch running stats
        assert torch.equal(v, state[k]), k
    assert np.allclose(h, net(x).detach().numpy(), atol=1e-10)


def test_switching_offsets_are_independent_of_the_raw_bias_and_are_breakpoints():
    net = mlp(True)
    x = torch.randn(64, 2, dtype=torch.float64) * 1.5 + 3
    a = switching_hyperplanes(net, x)
    with torch.no_grad():
        net[0].bias.add_(torch.randn(6, dtype=torch.float64) * 10)
    b = switching_hyperplanes(net, x)
    assert np.allclose(a.thresholds, b.thresholds, atol=1e-12)
    assert np.allclose(
        a.standardized_offsets, -net[1].bias.detach().numpy() / net[1].weight.detach().numpy()
    )
    # points on the hyperplane make the BN output exactly 0
    w, c, _ = piecewise_affine_layers(net[:3], x)[0]
    for j in range(6):
        n = a.normals[j]
        p = n * a.thresholds[j] / (n @ n)  # a point with n.p = t
        assert abs(w[j] @ p + c[j]) < 1e-9
    ref_line = a.reference - a.normals @ a.centroid
    assert np.allclose(ref_line, 0)


def test_window_criterion_matches_brute_force():
    rng = np.random.default_rng(0)
    normals, t = rng.normal(size=(50, 2)), rng.normal(size=50) * 2
    c, r = np.array([0.3, -0.2]), 0.7
    g = np.linspace(-r, r, 401)
    grid = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2) + c
    vals = grid @ normals.T - t
    brute = (vals.min(0) <= 0) & (vals.max(0) >= 0)
    exact = hyperplane_hits_window(normals, t, c, r)
    margin = np.abs(normals @ c - t) - r * np.abs(normals).sum(1)
    clear = np.abs(margin) > 1e-2  # away from tangency the grid decides too
    assert np.array_equal(exact[clear], brute[clear])


def test_one_layer_count_equals_the_line_arrangement_formula():
    # k lines in general position all crossing the window give 1 + k + (crossings inside)
    net = mlp(False, width=5, depth=1)
    x = torch.randn(8, 2, dtype=torch.float64)
    hp = switching_hyperplanes(net, x)
    c, r = np.zeros(2), 3.0
    hits = hyperplane_hits_window(hp.normals, hp.thresholds, c, r)
    n, t = hp.normals[hits], hp.thresholds[hits]
    inside = 0
    for i in range(len(t)):
        for j in range(i + 1, len(t)):
            p = np.linalg.solve(np.stack([n[i], n[j]]), [t[i], t[j]])
            inside += np.abs(p - c).max() < r
    assert count_regions_2d(net, x, c, r) == 1 + len(t) + inside


def test_exact_count_bounds_sampled_estimate_and_density():
    net = mlp(True, depth=2)
    x = torch.randn(64, 2, dtype=torch.float64) + 1
    exact = count_regions_2d(net, x, [1.0, 1.0], 1.0)
    est = estimate_regions(
        net, x, [1.0, 1.0], 1.0, samples=20000, generator=torch.Generator().manual_seed(0)
    )
    assert est <= exact and est >= 0.7 * exact
    rd = region_density(net, x, x[:3], 0.5)
    assert rd.exact and rd.density == pytest.approx(np.mean(rd.counts) / 1.0)
    rd3 = region_density(
        mlp(True, d=3),
        torch.randn(32, 3, dtype=torch.float64),
        torch.zeros(1, 3),
        1.0,
        samples=2000,
    )
    assert not rd3.exact and rd3.mean_count >= 1
