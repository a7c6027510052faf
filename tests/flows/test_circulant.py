"""The circulant-diagonal layer against dense linear algebra in float64."""

from __future__ import annotations

import pytest
import torch

from normlab.flows import (
    CirculantDiagonalLinear,
    CirculantDiagonalTransform,
    LazyCirculantDiagonal,
    cd_logabsdet,
    cd_matrix,
)


def _layer(n: int, m: int = 2, seed: int = 0) -> CirculantDiagonalLinear:
    torch.manual_seed(seed)
    return CirculantDiagonalLinear(n, m=m, init_std=0.3, dtype=torch.float64)


@pytest.mark.parametrize("n", [7, 64, 256])
@pytest.mark.parametrize("m", [2, 3])
def test_logdet_matches_slogdet_and_autograd_jacobian(n, m):
    layer = _layer(n, m)
    with torch.no_grad():
        ladj = layer.log_abs_det()
        dense = layer.matrix()
        assert abs(float(torch.linalg.slogdet(dense)[1] - ladj)) < 1e-10
        x = torch.randn(3, n, dtype=torch.float64)
        torch.testing.assert_close(layer(x), x @ dense.T, rtol=0, atol=1e-12)
    jac = torch.autograd.functional.jacobian(layer, torch.randn(n, dtype=torch.float64))
    assert abs(float(torch.linalg.slogdet(jac)[1] - ladj)) < 1e-10
    torch.testing.assert_close(jac, dense, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [7, 64, 256])
def test_inverse_round_trip(n):
    layer = _layer(n, 3)
    x = torch.randn(4, 5, n, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(layer.inverse(layer(x)), x, rtol=0, atol=1e-10)
        torch.testing.assert_close(layer(layer.inverse(x)), x, rtol=0, atol=1e-10)
        dense = torch.linalg.solve(layer.matrix(), x[0].T).T
        torch.testing.assert_close(layer.inverse(x[0]), dense, rtol=0, atol=1e-10)


def test_matrix_is_real_and_circulant_factor_has_its_column():
    # one circulant factor between identity diagonals: the dense matrix is C itself
    c = torch.randn(1, 9, dtype=torch.float64)
    d = torch.ones(2, 9, dtype=torch.float64)
    dense = cd_matrix(d, c)
    assert dense.dtype == torch.float64
    torch.testing.assert_close(dense[:, 0], c[0])  # first column is c
    torch.testing.assert_close(dense[1:, 1:], dense[:-1, :-1])  # Toeplitz and cyclic
    # log|det C| from the real column's spectrum
    assert abs(float(torch.linalg.slogdet(dense)[1] - cd_logabsdet(d, c))) < 1e-10


def test_gradients_through_logdet_match_dense():
    layer = _layer(16)
    layer.log_abs_det().backward()
    ours = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    torch.linalg.slogdet(layer.matrix())[1].backward()
    for a, b in zip(ours, (p.grad for p in layer.parameters()), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)
    assert torch.autograd.gradcheck(
        lambda d, c: cd_logabsdet(d, c),
        (layer.diagonals.detach().requires_grad_(), layer.columns.detach().requires_grad_()),
    )


def test_transform_follows_torch_and_zuko_conventions():
    pytest.importorskip("zuko")
    layer = _layer(6)
    t = layer.transform()
    assert isinstance(t, torch.distributions.Transform) and t.bijective
    assert t.domain.event_dim == 1 and t.codomain.event_dim == 1
    x = torch.randn(4, 3, 6, dtype=torch.float64)
    y, ladj = t.call_and_ladj(x)
    assert ladj.shape == x.shape[:-1]
    torch.testing.assert_close(y, layer(x))
    torch.testing.assert_close(t.inv(y), x)
    # the inverse's log-det is the negative; inv.call_and_ladj works through torch's wrapper
    torch.testing.assert_close(t.inv.log_abs_det_jacobian(y, x), -ladj)
    torch.testing.assert_close(t.log_abs_det_jacobian(x, y), ladj)
    lazy = LazyCirculantDiagonal(6)
    assert isinstance(lazy(), CirculantDiagonalTransform)
    assert sum(p.numel() for p in lazy.parameters()) == 3 * 6


def test_bad_inputs_are_clear_errors():
    layer = CirculantDiagonalLinear(8)
    with pytest.raises(ValueError, match="8"):
        layer(torch.randn(2, 7))
    with pytest.raises(ValueError, match="m - 1"):
        CirculantDiagonalTransform(torch.ones(2, 4), torch.ones(2, 4))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_input_is_computed_in_float32(dtype):
    # raw FFT errors before: bf16 has no FFT, fp16 only powers of two on CUDA
    layer = CirculantDiagonalLinear(6, init_std=0.3)
    x = torch.randn(4, 6).to(dtype)
    y = layer(x)
    assert y.dtype == dtype
    torch.testing.assert_close(y.float(), layer(x.float()), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(layer.inverse(y).float(), x.float(), rtol=3e-2, atol=3e-2)


def test_an_empty_batch_comes_back_empty():
    layer = CirculantDiagonalLinear(6)
    assert layer(torch.zeros(0, 6)).shape == (0, 6)
    assert layer.inverse(torch.zeros(0, 3, 6)).shape == (0, 3, 6)
