"""CDFlow composed from zuko parts: densities, inverse, training signal."""

from __future__ import annotations

import pytest
import torch

zuko = pytest.importorskip("zuko")

from normlab.flows import cdflow, initialize_actnorm, mixing_parameters  # noqa: E402


@pytest.mark.parametrize("mixing", ["circulant", "lu", "none"])
@pytest.mark.parametrize("coupling", ["affine", "spline"])
def test_flow_log_prob_is_change_of_variables(mixing, coupling):
    torch.manual_seed(0)
    flow = cdflow(4, steps=2, mixing=mixing, coupling=coupling, hidden=(16,))
    assert isinstance(flow, zuko.flows.Flow)
    x = torch.randn(64, 4)
    initialize_actnorm(flow, x)
    dist = flow()
    z, ladj = dist.transform.call_and_ladj(x)
    base = torch.distributions.Normal(0.0, 1.0).log_prob(z).sum(-1)
    torch.testing.assert_close(dist.log_prob(x), base + ladj, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dist.transform.inv(z), x, rtol=1e-4, atol=1e-4)
    # the transform composes inside zuko's ComposedTransform
    assert isinstance(dist.transform, zuko.transforms.ComposedTransform)


def test_parameter_counts_and_training_step():
    torch.manual_seed(0)
    cd, lu = (cdflow(8, steps=3, mixing=k, hidden=(16,)) for k in ("circulant", "lu"))
    assert mixing_parameters(cd) == 3 * 3 * 8 and mixing_parameters(lu) == 3 * 64
    x = torch.randn(128, 8) @ torch.randn(8, 8)
    initialize_actnorm(cd, x)
    opt = torch.optim.Adam(cd.parameters(), lr=1e-2)
    first = -cd().log_prob(x).mean()
    for _ in range(30):
        loss = -cd().log_prob(x).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first.item()
    layer = next(t for t in cd.transform.transforms if hasattr(t, "layer")).layer
    assert layer.diagonals.grad is not None and layer.columns.grad.abs().sum() > 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="mixing"):
        cdflow(4, mixing="dense")
    with pytest.raises(ValueError, match="features"):
        cdflow(1)
