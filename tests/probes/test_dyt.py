"""dyt_saturation: the pooled regime of a model's DyT layers, read without changing it."""

from __future__ import annotations

import pytest
import torch

from normlab.layers.dyt import DyT
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.probes.dyt import dyt_saturation


def _model(norm: str = "dyt") -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=8, norm=norm))


@pytest.mark.parametrize("threshold", [0.1, 2.0])
def test_pooled_over_every_dyt_input(threshold):
    model, x = _model(), torch.randint(0, 256, (3, 8))
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, DyT):
                m.alpha.fill_(1.5)
    inputs = []
    handles = [
        m.register_forward_pre_hook(lambda _, args: inputs.append(args[0]))
        for m in model.modules()
        if isinstance(m, DyT)
    ]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    ax = torch.cat([1.5 * t.flatten() for t in inputs])
    stats = dyt_saturation(model, x, threshold=threshold)
    assert len(stats.layers) == len(inputs) == 5  # two per block and the final norm
    assert stats.saturation == pytest.approx(float((ax.abs() > threshold).double().mean()))
    assert stats.mean_abs_alpha_x == pytest.approx(float(ax.abs().double().mean()), rel=1e-5)
    assert stats.to_dict()["threshold"] == threshold
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_a_model_without_dyt_is_refused():
    with pytest.raises(ValueError, match="no DyT"):
        dyt_saturation(_model("layernorm"), torch.randint(0, 256, (1, 8)))
