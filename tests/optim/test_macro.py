"""MACRO: weights stay on the manifold, msign against a dense SVD, torch optimizer conventions."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import normlab
from normlab.optim import MACRO, MUON_COEFFICIENTS, msign, tangent


def _svd_sign(x: torch.Tensor) -> torch.Tensor:
    u, _, vh = torch.linalg.svd(x, full_matrices=False)
    return u @ vh


@pytest.mark.parametrize("shape", [(4, 7), (7, 4), (6, 6)])
def test_msign_with_classic_coefficients_converges_to_svd(shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = msign(x, steps=60, coefficients=(1.5, -0.5, 0.0))
    torch.testing.assert_close(got, _svd_sign(x), rtol=0, atol=1e-8)


@pytest.mark.parametrize("shape", [(8, 16), (16, 8), (12, 12)])
def test_msign_with_muon_coefficients_has_svd_vectors_and_unit_ish_singular_values(shape):
    assert MUON_COEFFICIENTS == (3.4445, -4.7750, 2.0315)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    got = msign(x, steps=5)
    u, _, vh = torch.linalg.svd(x, full_matrices=False)
    core = u.mT @ got @ vh.mT  # diagonal when got shares x's singular vectors
    off = core - torch.diag_embed(torch.diagonal(core))
    assert off.abs().max() < 1e-10
    sv = torch.diagonal(core)
    assert sv.min() > 0.6 and sv.max() < 1.25  # Muon's iteration lands near, not at, 1
    # and it is closer to U V^T than the normalised input is
    err = (got - _svd_sign(x)).norm() / (x / x.norm() - _svd_sign(x)).norm()
    assert err < 0.5


@pytest.mark.parametrize("manifold", ["sphere", "oblique"])
def test_weights_stay_on_the_manifold_for_100_steps(manifold):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 32, bias=False), nn.Tanh(), nn.Linear(32, 4, bias=False))
    opt = MACRO(net.parameters(), lr=0.05, manifold=manifold)
    g = torch.Generator().manual_seed(0)
    for _ in range(100):
        x = torch.randn(16, 8, generator=g)
        opt.zero_grad()
        net(x).square().mean().backward()
        opt.step()
    for w in net.parameters():
        if manifold == "sphere":
            assert abs(float(w.detach().norm()) - 1.0) < 1e-5
        else:
            assert (w.detach().norm(dim=1) - 1.0).abs().max() < 1e-5


def test_tangent_projection_is_orthogonal_to_the_point():
    w = torch.randn(5, 6, dtype=torch.float64)
    w = w / w.norm(dim=1, keepdim=True)
    t = tangent(w, torch.randn(5, 6, dtype=torch.float64), manifold="oblique")
    assert (w * t).sum(1).abs().max() < 1e-12
    ws = w / w.norm()
    ts = tangent(ws, torch.randn(5, 6, dtype=torch.float64), manifold="sphere")
    assert abs(float((ws * ts).sum())) < 1e-12


def test_macro_decreases_a_loss_and_round_trips_state():
    torch.manual_seed(0)
    target = torch.randn(6, 10)
    target = target / target.norm(dim=1, keepdim=True)
    w = nn.Parameter(torch.randn(6, 10))
    opt = MACRO([w], lr=0.05, manifold="oblique")
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = (w - target).square().sum()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.05 * losses[0]
    w2 = nn.Parameter(w.detach().clone())
    opt2 = MACRO([w2], lr=0.05, manifold="oblique")
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    for p, o in ((w, opt), (w2, opt2)):
        o.zero_grad()
        (p - target).square().sum().backward()
        o.step()
    assert torch.equal(w, w2)


def test_rejects_vectors_and_bad_manifold_and_is_registered():
    with pytest.raises(ValueError, match="AdamW"):
        MACRO([nn.Parameter(torch.ones(3))], lr=0.1)
    with pytest.raises(ValueError, match="manifold"):
        MACRO([nn.Parameter(torch.ones(3, 3))], lr=0.1, manifold="stiefel")
    assert normlab.get("macro").kind == "optim" and normlab.get("macro").builder is MACRO
