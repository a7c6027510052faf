"""A non-finite gradient is named as such, not as a bad reference setting (issue 36)."""

from __future__ import annotations

import pytest
import torch

from normlab.optim.stablegrad import StableGrad


@pytest.mark.parametrize("reference", ["output", "last"])
def test_nan_gradient_blames_the_gradient(reference):
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    opt = StableGrad(torch.optim.SGD(model.parameters(), lr=0.1), reference=reference)
    out = opt.watch(model(torch.randn(4, 3)))
    (out.sum() * float("nan")).backward()
    with pytest.raises(ValueError, match="The gradient is not finite") as info:
        opt.step()
    assert "reference std" not in str(info.value)
