"""Depth metrics against direct computations; a no-op block is useless; no side effects."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.probes import DepthProfile, adapt, depth_profile


def _model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(d_model=16, n_layers=3, n_heads=2, context=16))


def test_metrics_match_direct_computation():
    model = _model()
    x = torch.randint(0, 257, (2, 16))
    profile = depth_profile(model, x, targets=x)
    states = adapt(model).trace(x).residual
    assert len(profile.variance) == 4 and len(profile.influence) == 3
    assert profile.variance[2] == pytest.approx(float(states[2].var(-1, unbiased=False).mean()))
    cos = F.cosine_similarity(states[0], states[1], dim=-1)
    assert profile.influence[0] == pytest.approx(float((1 - cos).mean()), rel=1e-5)
    assert profile.angular[0] == pytest.approx(float(torch.arccos(cos).mean() / math.pi), rel=1e-4)
    with torch.no_grad():
        full = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
        dropped = F.cross_entropy(model(x, layers=[0, 2]).flatten(0, 1), x.flatten())
    assert profile.base_loss == pytest.approx(float(full), rel=1e-5)
    assert profile.drop_loss[1] == pytest.approx(float(dropped - full), abs=1e-5)


def test_a_block_that_writes_nothing_is_useless():
    model = _model()
    with torch.no_grad():
        for linear in (model.blocks[1].attn.out, model.blocks[1].mlp.down):
            linear.weight.zero_()
            linear.bias.zero_()
    x = torch.randint(0, 257, (2, 16))
    profile = depth_profile(model, x, targets=x)
    assert profile.drop_effect[1] < 1e-10 and abs(profile.drop_loss[1]) < 1e-6
    assert profile.influence[1] < 1e-6
    assert min(profile.drop_effect[0], profile.drop_effect[2]) > 1e-8


def test_probe_leaves_the_model_unchanged():
    model = _model().train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    depth_profile(model, torch.randint(0, 257, (2, 8)))
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_variance_growth_is_the_log_slope():
    profile = DepthProfile(tuple(2.0 * 3.0**i for i in range(5)), (), (), ())
    assert profile.variance_growth == pytest.approx(math.log(3.0))


def test_weight_rms_reads_weight_matrices_only():
    from normlab.probes.depth import weight_rms

    model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=8))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(2.0 if p.dim() >= 2 and "norm" not in name else 100.0)
    assert weight_rms(model) == pytest.approx(2.0)


def test_summary_splits_the_profile_into_depth_halves():
    p = DepthProfile(
        variance=(1.0, 2.0, 4.0, 8.0, 16.0),
        influence=(0.1, 0.2, 0.3, 0.5),
        angular=(0.0,) * 4,
        drop_effect=(0.0,) * 4,
        drop_loss=(0.4, 0.2, 0.1, 0.3),
    )
    s = p.summary()
    assert s["variance_ratio"] == 16.0 and s["variance_growth"] == pytest.approx(math.log(2))
    assert s["deep_drop_loss"] == pytest.approx(0.2) and s["shallow_drop_loss"] == pytest.approx(
        0.3
    )
    assert s["deep_influence"] == pytest.approx(0.4)


def test_residual_growth_compares_the_final_state_with_the_embedding():
    from normlab.probes.depth import residual_growth

    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=8))
    x = torch.randint(0, 257, (2, 8))
    with torch.no_grad():
        states, _ = model.trunk(x)
    ratio = states[-1].square().mean().sqrt() / states[0].square().mean().sqrt()
    assert residual_growth(model, x) == pytest.approx(math.log(float(ratio)), rel=1e-5)
