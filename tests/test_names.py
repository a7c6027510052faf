"""Each public name says what it is (issue 9): no two classes share a name, no capitalised
function duplicates a registered preset, predicates are named for what they test."""

from __future__ import annotations

import torch
from torch import nn

import normlab
from normlab import layers, probes, surgery
from normlab.training import forecast, lm


def test_train_configs_are_named_for_their_trainer():
    assert not hasattr(lm, "TrainConfig") and not hasattr(forecast, "TrainConfig")
    assert lm.LMTrainConfig is not forecast.ForecastTrainConfig


def test_probe_runner_is_named_for_what_it_runs():
    from normlab.probes import _runner

    assert not hasattr(_runner, "Runner") and hasattr(_runner, "BlockSubsetRunner")
    assert "ModelAdapter" in probes.__all__


def test_norm_predicates():
    assert not hasattr(surgery, "is_layer_norm") and not hasattr(surgery, "is_centring_norm")
    rms, ln = nn.RMSNorm(4), nn.LayerNorm(4)
    assert surgery.is_norm_layer(rms) and surgery.is_norm_layer(ln)
    assert surgery.is_centering_norm(ln) and not surgery.is_centering_norm(rms)
    assert not surgery.is_norm_layer(nn.Linear(4, 4))


def test_blend_quad_norm_is_only_the_registered_preset():
    assert not hasattr(layers, "BlendQuadNorm")
    blend = normlab.create("blendquadnorm", 3)
    assert isinstance(blend, layers.QuadNorm) and blend.alpha == 0.3
    assert blend(torch.randn(2, 3, 5, 5)).shape == (2, 3, 5, 5)


def test_series_methods_cite_through_papers():
    from normlab import papers, series

    keys = {"revin": "revin", "dish-ts": "dish-ts", "san": "san", "fan": "fan"}
    for name, key in keys.items():
        assert normlab.get(name).paper == papers.paper(key)
    for module in (series.revin, series.dishts, series.san, series.fan):
        assert not [n for n in vars(module) if n.endswith("_PAPER")], module.__name__
