"""training.macro: the norm-free TinyGPT, the arms' optimizers, msign, the probed trainer."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normlab.training.macro import (
    ARMS,
    arm_optimizers,
    manifold_drift,
    msign_error,
    norm_free_gpt,
    residual_scale,
    train_probed,
)

_SHAPE = {"d_model": 16, "n_layers": 1, "n_heads": 2, "context": 8}


def _norms(model: nn.Module) -> list[nn.Module]:
    return [x for x in model.modules() if type(x).__name__ in ("RMSNorm", "LayerNorm")]


def test_the_norm_free_model_has_no_norm_and_unit_rms_embeddings():
    model = norm_free_gpt(_SHAPE, 0)
    assert isinstance(model.norm_f, nn.Identity) and not _norms(model)
    assert 0.8 < float(model.embed.weight.detach().square().mean().sqrt()) < 1.2
    plain = norm_free_gpt(_SHAPE, 0, norm_free=False)
    assert len(_norms(plain)) == 3 and float(plain.embed.weight.detach().std()) < 0.05


def test_each_arm_gets_its_optimizers_and_decay():
    model = norm_free_gpt(_SHAPE, 0)
    macro = arm_optimizers(model, "nonorm-macro", {"lr": 1e-3, "macro_lr": 0.05}, 0.1)
    assert [type(o).__name__ for o in macro] == ["MACRO", "AdamW"]
    n = sum(len(g["params"]) for o in macro for g in o.param_groups)
    assert n == len(list(model.parameters()))
    (base,) = arm_optimizers(model, "rmsnorm-adamw", {"lr": 1e-3}, 0.1)
    assert base.param_groups[0]["weight_decay"] == 0.1 and base.param_groups[0]["params"]
    (ctrl,) = arm_optimizers(model, "nonorm-adamw", {"lr": 1e-3}, 0.1)
    assert not ctrl.param_groups[0]["params"] and len(ARMS) == 4
    kept = arm_optimizers(model, "rmsnorm-macro", {"lr": 1e-3, "macro_lr": 0.05}, 0.1)
    assert [type(o).__name__ for o in kept] == ["MACRO", "AdamW"]
    with pytest.raises(ValueError, match="arm"):
        arm_optimizers(model, "other", {"lr": 1e-3}, 0.1)


def test_one_embedding_init_gives_both_models_the_same_weights():
    free = norm_free_gpt(_SHAPE, 3, embed_std=1.0)
    kept = norm_free_gpt(_SHAPE, 3, norm_free=False, embed_std=1.0)
    shared = dict(kept.named_parameters())
    for name, p in free.named_parameters():
        assert torch.equal(p, shared[name]), name
    assert float(norm_free_gpt(_SHAPE, 3, embed_std=0.02).embed.weight.detach().std()) < 0.05


def test_the_retraction_keeps_the_rows_on_the_manifold():
    assert manifold_drift(20) < 1e-5


def test_msign_keeps_the_singular_vectors():
    assert msign_error() < 1e-10


def test_the_probed_run_records_scales_and_keeps_macro_rows_on_the_sphere():
    model = norm_free_gpt(_SHAPE, 0)
    opts = arm_optimizers(model, "nonorm-macro", {"lr": 1e-3, "macro_lr": 0.05}, 0.0)
    probe = torch.zeros(2, 8, dtype=torch.long)
    out = train_probed(model, opts, steps=6, batch=2, warmup=2, probe=probe, probe_every=3, seed=0)
    assert out.at == [0, 3, 6] and len(out.scales) == 3 and out.fit.steps == 6
    fresh = norm_free_gpt(_SHAPE, 0)
    arm_optimizers(fresh, "nonorm-macro", {"lr": 1e-3, "macro_lr": 0.05}, 0.0)  # projects rows
    assert out.scales[0] == pytest.approx(residual_scale(fresh, probe))
    assert math.isfinite(out.tail_bpb) and out.tail_bpb > 0
    rows = opts[0].param_groups[0]["params"]
    assert max(float((p.detach().norm(dim=1) - 1).abs().max()) for p in rows) < 1e-5
