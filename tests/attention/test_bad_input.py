"""Score normalizers on 0-d input and on rows masked entirely."""

from __future__ import annotations

import pytest
import torch

import normlab
from normlab import functional as NF

RANKED = [NF.sparsemax, NF.entmax15, NF.kappa_softmax, NF.abe_softmax]


@pytest.mark.parametrize("fn", RANKED, ids=lambda f: f.__name__)
def test_zero_dim_scores_are_a_clear_error(fn):
    with pytest.raises(ValueError, match="at least 1 dimensions"):
        fn(torch.tensor(0.5))


def _masked() -> torch.Tensor:
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    x[1] = float("-inf")
    return x


ZERO_ROW = ["softmax", "softmax1", "clipped-softmax", "sparsemax", "entmax15", "kappa-softmax"]


@pytest.mark.parametrize("name", ZERO_ROW)
def test_a_fully_masked_row_gives_zeros(name):
    if name == "entmax15":
        pytest.importorskip("entmax")
    x = _masked()
    p = normlab.create(name)(x)
    assert torch.equal(p[1], torch.zeros(5))
    assert torch.isfinite(p).all() and (p[[0, 2]].sum(-1) > 0).all()


def test_plain_softmax_follows_torch_except_on_a_fully_masked_row():
    x = _masked()
    p = normlab.create("softmax")(x)
    torch.testing.assert_close(p[[0, 2]], torch.softmax(x, -1)[[0, 2]])


def test_clipped_softmax_masked_row_in_half_precision_and_with_gradients():
    x = _masked().requires_grad_()
    p = NF.clipped_softmax(x)
    p.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert torch.equal(NF.clipped_softmax(_masked().half())[1], torch.zeros(5).half())
