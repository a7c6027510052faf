"""Riemannian BN (HPD/SPD, Siegel disk) and the manifold functions behind it, in float64."""

from __future__ import annotations

import pytest
import torch

from normlab.functional import manifolds as MF
from normlab.layers import HPDBatchNorm, SiegelBatchNorm

D = torch.float64


def random_hpd(b: int, n: int, *, complex_: bool, seed: int = 0, spread: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    dtype = torch.complex128 if complex_ else D
    a = torch.randn(b, n, 2 * n, generator=g, dtype=D)
    if complex_:
        a = a + 1j * torch.randn(b, n, 2 * n, generator=g, dtype=D)
    base = torch.randn(n, n, generator=g, dtype=D).to(dtype) * spread
    x = a.to(dtype) @ a.to(dtype).mH / (2 * n) + 0.1 * torch.eye(n, dtype=dtype)
    c = base + torch.eye(n, dtype=dtype) * 2
    return c @ x @ c.mH


def random_siegel(b: int, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(b, n, n, generator=g, dtype=D) + 1j * torch.randn(
        b, n, n, generator=g, dtype=D
    )
    v = 0.5 * (v + v.mT) * 0.6 + 0.4 * (1 + 0.5j)  # off-centre cloud
    return MF.siegel_exp0(v)


def test_matrix_functions_match_closed_forms():
    x = random_hpd(4, 5, complex_=True)
    s = MF.hpd_sqrt(x)
    assert torch.allclose(s @ s, x, atol=1e-10)
    assert torch.allclose(MF.hpd_exp(MF.hpd_log(x)), x, atol=1e-10)
    real = random_hpd(3, 4, complex_=False)
    assert torch.allclose(MF.hpd_exp(real), torch.linalg.matrix_exp(real), rtol=1e-10)
    assert torch.allclose(MF.hpd_power(x, -1.0), torch.linalg.inv(x), atol=1e-10)


def test_frechet_mean_is_a_karcher_point_and_commuting_case_is_geometric():
    x = random_hpd(8, 4, complex_=True, seed=1)
    m = MF.hpd_frechet_mean(x)
    inv = MF.hpd_power(m, -0.5)
    grad = MF.hpd_log(inv @ x @ inv).mean(0)
    assert float(grad.abs().max()) < 1e-10
    d = torch.rand(6, 3, dtype=D) + 0.2  # diagonal: the mean is the geometric mean
    dm = MF.hpd_frechet_mean(torch.diag_embed(d))
    assert torch.allclose(dm, torch.diag(d.log().mean(0).exp()), atol=1e-12)


def test_transport_to_target_is_a_congruence_with_square_t_m_inverse():
    m, t = random_hpd(1, 3, complex_=False, seed=2)[0], random_hpd(1, 3, complex_=False, seed=3)[0]
    assert torch.allclose(MF.hpd_transport(m, m, t), t, atol=1e-10)  # M goes to T
    x = random_hpd(2, 3, complex_=False, seed=4)
    y = MF.hpd_transport(x, m)
    assert torch.allclose(y, MF.hpd_power(m, -0.5) @ x @ MF.hpd_power(m, -0.5), atol=1e-10)


@pytest.mark.parametrize("complex_", [False, True])
def test_hpd_bn_outputs_stay_hpd_and_batch_mean_is_identity(complex_):
    x = random_hpd(16, 4, complex_=complex_, seed=5, spread=2.0)
    bn = HPDBatchNorm(4, complex_input=complex_, dtype=D)
    y = bn(x)
    assert MF.is_hpd(y)
    m = MF.hpd_frechet_mean(y)
    assert float((m - torch.eye(4, dtype=m.dtype)).abs().max()) < 1e-8
    with torch.no_grad():  # a learned bias moves the mean to the bias point
        bn.bias_real.copy_(torch.randn(4, 4, dtype=D) * 0.3)
        if complex_:
            bn.bias_imag.copy_(torch.randn(4, 4, dtype=D) * 0.3)
    y = bn(x)
    assert MF.is_hpd(y)
    assert torch.allclose(MF.hpd_frechet_mean(y), bn.bias_point(), atol=1e-8)


def test_hpd_bn_dispersion_running_stats_and_gradients():
    x = random_hpd(12, 3, complex_=True, seed=6, spread=2.0)
    bn = HPDBatchNorm(3, complex_input=True, dispersion=True, momentum=1.0, dtype=D)
    y = bn(x)
    m = MF.hpd_frechet_mean(y)
    assert float((m - torch.eye(3, dtype=m.dtype)).abs().max()) < 1e-8
    disp = torch.linalg.matrix_norm(MF.hpd_log(y)).square().mean()
    assert float(disp) == pytest.approx(1.0, rel=1e-4)  # scale 1 after normalisation
    # momentum 1 puts the running mean at the batch mean: eval reproduces train output
    bn.eval()
    assert torch.allclose(bn(x), y, atol=1e-8)
    bn.train()
    (bn(x).real.sum() + bn(x).imag.square().sum()).backward()
    assert bn.bias_real.grad is not None and torch.isfinite(bn.bias_real.grad).all()
    assert bn.scale.grad is not None and torch.isfinite(bn.scale.grad)


def test_hpd_bn_rejects_wrong_inputs():
    bn = HPDBatchNorm(3, dtype=D)
    with pytest.raises(ValueError, match="expects"):
        bn(torch.eye(4, dtype=D).expand(2, 4, 4))
    with pytest.raises(TypeError, match="real"):
        bn(torch.eye(3, dtype=torch.complex128).expand(2, 3, 3))


def test_siegel_maps_are_automorphisms():
    z = random_siegel(6, 3, seed=7)
    assert MF.in_siegel_disk(z)
    w = z[0]
    out = MF.siegel_to_origin(z, w)
    assert MF.in_siegel_disk(out) and float(out[0].abs().max()) < 1e-12
    assert torch.allclose(MF.siegel_from_origin(out, w), z, atol=1e-10)
    v = MF.siegel_log0(z)
    assert torch.allclose(MF.siegel_exp0(v), z, atol=1e-10)
    # the isometry preserves geodesic distance from the origin: d(0, phi_W(Z)) = d(W, Z)
    a, b = MF.siegel_to_origin(z[1:2], z[2]), MF.siegel_to_origin(z[2:3], z[1])
    sv_a = torch.linalg.svdvals(a[0])
    sv_b = torch.linalg.svdvals(b[0])
    assert torch.allclose(sv_a, sv_b, atol=1e-10)


def test_siegel_bn_centres_at_origin_and_bias_moves_it():
    z = random_siegel(10, 3, seed=8)
    bn = SiegelBatchNorm(3, dtype=D)
    y = bn(z)
    assert MF.in_siegel_disk(y)
    assert float(MF.siegel_frechet_mean(y).abs().max()) < 1e-8
    with torch.no_grad():
        bn.bias_real.copy_(torch.randn(3, 3, dtype=D) * 0.2)
        bn.bias_imag.copy_(torch.randn(3, 3, dtype=D) * 0.2)
    y = bn(z)
    assert MF.in_siegel_disk(y)
    assert torch.allclose(MF.siegel_frechet_mean(y), bn.bias_point(), atol=1e-8)
    bnd = SiegelBatchNorm(3, dispersion=True, dtype=D)
    yd = bnd(z)
    assert MF.in_siegel_disk(yd)
    assert float(MF.siegel_frechet_mean(yd).abs().max()) < 1e-8
    yd.abs().sum().backward()
    assert torch.isfinite(bnd.bias_real.grad).all() and torch.isfinite(bnd.scale.grad)
