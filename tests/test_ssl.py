"""Teacher centering (DINO), inverse-cluster-prior normalization and the collapse diagnostic."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.ssl import (
    TeacherNorm,
    center_update,
    centered_teacher,
    cluster_usage,
    nmi,
    prior_normalize,
)


def _logits(n=16, k=5, seed=0):
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_dino_center_formula_and_module_order():
    z1, z2 = _logits(seed=1), _logits(seed=2)
    c = torch.zeros(5, dtype=torch.float64)
    c1 = center_update(c, z1, momentum=0.9)
    torch.testing.assert_close(c1, 0.1 * z1.mean(0))
    norm = TeacherNorm(5, mode="center", temperature=0.04, momentum=0.9, dtype=torch.float64)
    q1 = norm(z1)  # uses the center before the update
    torch.testing.assert_close(q1, torch.softmax(z1 / 0.04, -1))
    q2 = norm(z2)
    torch.testing.assert_close(q2, torch.softmax((z2 - c1) / 0.04, -1))
    torch.testing.assert_close(norm.center, 0.9 * c1 + 0.1 * z2.mean(0))
    torch.testing.assert_close(centered_teacher(z2, c1, temperature=0.04), q2)
    norm.eval()
    before = norm.center.clone()
    norm(z1)
    assert torch.equal(norm.center, before)  # no update in eval mode


def test_prior_normalization_is_exact_and_balances_the_prior():
    p = torch.softmax(_logits() / 0.5, -1)
    q = prior_normalize(p)
    pi = p.mean(0)
    expected = (p / pi) / (p / pi).sum(-1, keepdim=True)
    torch.testing.assert_close(q, expected, rtol=0, atol=1e-15)
    torch.testing.assert_close(q.sum(-1), torch.ones(16, dtype=torch.float64))
    # prior division moves the usage towards uniform
    assert cluster_usage(q).entropy > cluster_usage(p).entropy


def test_centering_is_prior_division_by_the_jensen_bound():
    # softmax((z - mean z)/tau) == normalise(p / exp(E log p)): the seed's Jensen step
    z, tau = _logits(), 0.3
    p = torch.softmax(z / tau, -1)
    geo = p.log().mean(0).exp()
    q = (p / geo) / (p / geo).sum(-1, keepdim=True)
    torch.testing.assert_close(q, centered_teacher(z, z.mean(0), temperature=tau))


def test_cluster_usage_bounds():
    k = 4
    collapsed = torch.zeros(10, k, dtype=torch.float64)
    collapsed[:, 2] = 1
    u = cluster_usage(collapsed)
    assert u.effective_clusters == pytest.approx(1.0) and u.entropy == pytest.approx(0.0)
    uniform = torch.eye(k, dtype=torch.float64).repeat(3, 1)
    assert cluster_usage(uniform).effective_clusters == pytest.approx(k)
    soft = torch.full((6, k), 1 / k, dtype=torch.float64)
    assert cluster_usage(soft).entropy == pytest.approx(math.log(k))
    assert cluster_usage(soft, hard=True).effective_clusters == pytest.approx(1.0)


def test_modes_and_errors():
    z = _logits()
    torch.testing.assert_close(
        TeacherNorm(5, mode="none", temperature=0.1)(z.float()), torch.softmax(z.float() / 0.1, -1)
    )
    with pytest.raises(ValueError, match="mode"):
        TeacherNorm(5, mode="sinkhorn")
    with pytest.raises(ValueError, match="clusters"):
        TeacherNorm(4)(z.float())
    assert "mode='center'" in repr(TeacherNorm(5))


def test_nmi_matches_scikit_learn():
    from sklearn.metrics import normalized_mutual_info_score

    g = torch.Generator().manual_seed(0)
    a, b = torch.randint(4, (200,), generator=g), torch.randint(5, (200,), generator=g)
    assert nmi(a, b) == pytest.approx(normalized_mutual_info_score(a, b), abs=1e-12)
    assert nmi(a, (a + 1) % 4) == pytest.approx(1.0)
