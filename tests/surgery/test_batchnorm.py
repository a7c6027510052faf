"""BatchNorm recalibration changes running statistics only, and nothing without BatchNorm."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normlab.models.bn_cnn import bn_cnn
from normlab.surgery import recalibrate_bn


def _loader(n: int = 4, size: int = 16, seed: int = 0) -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(size, 1, 8, 8, generator=g) * 2 + 1,) for _ in range(n)]


def _params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_only_running_statistics_change():
    model = bn_cnn(8, 3, norm="batch", seed=0).train()
    params = _params(model)
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    momenta = [m.momentum for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    record = recalibrate_bn(model, _loader())
    assert all(torch.equal(params[k], v) for k, v in _params(model).items())
    changed = {k for k, v in model.named_buffers() if not torch.equal(buffers[k], v)}
    assert changed and all(
        k.endswith(("running_mean", "running_var", "num_batches_tracked")) for k in changed
    )
    assert model.training and all(m.training for m in model.modules())  # modes restored
    assert momenta == [m.momentum for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert record.batches == 4 and record.samples == 64 and len(record.modules) == 3
    assert record.mean_shift > 0


def test_statistics_are_the_cumulative_average_over_batches():
    bn = nn.BatchNorm1d(5)
    model = nn.Sequential(nn.Dropout(0.5), bn)  # dropout must stay off during the pass
    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(8, 5, generator=g) * (i + 1) + i for i in range(3)]
    recalibrate_bn(model, batches)
    assert torch.allclose(bn.running_mean, torch.stack([b.mean(0) for b in batches]).mean(0))
    assert torch.allclose(bn.running_var, torch.stack([b.var(0) for b in batches]).mean(0))


def test_metric_gap_is_reported():
    model = bn_cnn(8, 2, norm="batch", seed=0).eval()
    x = _loader(1)[0][0]

    def metric(m: nn.Module) -> float:
        return float(m(x).mean())

    record = recalibrate_bn(model, _loader())
    again = recalibrate_bn(model, _loader(), metric=metric)
    assert set(again.gap) == {"metric"}
    assert abs(again.gap["metric"]) < 1e-6  # same data twice: the statistics are a fixed point
    assert record.before == {}


def test_groupnorm_has_nothing_to_recalibrate():
    model = bn_cnn(8, 2, norm="group", seed=0)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    record = recalibrate_bn(model, _loader(), metric=lambda m: float(m(_loader(1)[0][0]).sum()))
    assert record.modules == () and record.gap == {"metric": 0.0}
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_empty_loader_raises_and_leaves_statistics():
    model = bn_cnn(8, 2, norm="batch", seed=0)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="empty"):
        recalibrate_bn(model, [])
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_recalibration_footprint_group_and_batch():
    from normlab.surgery.batchnorm import recalibration_footprint

    gn = recalibration_footprint(bn_cnn(8, 2, norm="group", seed=0), _loader())
    assert gn == {"modules": 0.0, "state_changed": 0.0, "weights_changed": 0.0, "gap": 0.0}
    bn = recalibration_footprint(bn_cnn(8, 2, norm="batch", seed=0), _loader())
    assert bn["modules"] > 0 and bn["state_changed"] == 1.0 and bn["weights_changed"] == 0.0
