"""Fast Walsh-Hadamard transform: orthonormal, self-inverse, equal to the dense matrix."""

from __future__ import annotations

import pytest
import torch

from normlab.quant import hadamard, hadamard_matrix, random_hadamard


def sylvester(n: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / n**0.5


@pytest.mark.parametrize("n", [1, 2, 8, 64])
def test_matches_dense_sylvester_and_is_self_inverse(n):
    x = torch.randn(3, 5, n, dtype=torch.float64)
    torch.testing.assert_close(hadamard(x), x @ sylvester(n))
    torch.testing.assert_close(hadamard(hadamard(x)), x)
    h = hadamard_matrix(n)
    torch.testing.assert_close(h @ h.T, torch.eye(n, dtype=torch.float64))
    torch.testing.assert_close(x.norm(dim=-1), hadamard(x).norm(dim=-1))


def test_other_dim_random_variant_and_outlier_spreading():
    x = torch.randn(16, 4, dtype=torch.float64)
    torch.testing.assert_close(hadamard(x, dim=0), (x.T @ sylvester(16)).T)
    signs = torch.randint(0, 2, (16,)).double() * 2 - 1
    y = random_hadamard(x, signs, dim=0)
    torch.testing.assert_close(random_hadamard(y, signs, dim=0, inverse=True), x)
    spike = torch.zeros(1, 64, dtype=torch.float64)
    spike[0, 5] = 100.0
    assert hadamard(spike).abs().max() == pytest.approx(100.0 / 8)
    with pytest.raises(ValueError, match="power-of-two"):
        hadamard(torch.randn(2, 12))
