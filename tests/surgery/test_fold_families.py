"""Folding Hugging Face families built from configs, verified against float64."""

from __future__ import annotations

import re

import pytest
import torch

from normlab.models.checkpoint import load_model, save_model
from normlab.surgery import fold_layernorms
from normlab.surgery.fold_gains import center_unembed, fold_rms_gains
from tests._tiny_hf import build, tokens

pytest.importorskip("transformers")


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "stablelm"])
def test_layernorm_fold_passes_the_float64_check(family):
    model = build(family)
    result = fold_layernorms(model, {"input_ids": tokens()})
    c = result.check
    assert result.folded and c.passed
    assert c.folded_error <= c.tolerance and c.reference_error > 0
    assert c.float64_change < 1e-5 * max(1.0, c.scale)


def test_large_logits_pass_relative_to_own_noise_but_not_a_fixed_1e5():
    model = build("gpt2")
    with torch.no_grad():  # logits of order 100: fp32 noise alone exceeds 1e-5
        model.transformer.wte.weight.mul_(6.0)
    result = fold_layernorms(model, {"input_ids": tokens()})
    c = result.check
    assert c.scale > 50 and c.passed
    assert c.reference_error > 1e-5  # a fixed 1e-5 would reject even the unfolded model


def test_llama_rmsnorm_gains_fold_into_readers():
    model = build("llama")
    x = {"input_ids": tokens()}
    result = fold_rms_gains(model, x)
    assert len(result.folded) == 5 and not result.refused  # 2 per layer + final
    assert result.check.passed
    for name in result.folded:
        assert torch.equal(model.get_submodule(name).weight, torch.ones(32))


def test_tied_head_is_untied_before_gain_folding():
    model = build("llama", tie_word_embeddings=True)
    model.tie_weights()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    result = fold_rms_gains(model, {"input_ids": tokens()})
    assert result.check.passed and model.lm_head.weight is not model.model.embed_tokens.weight


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_center_unembed_keeps_probabilities(family):
    model = build(family)
    x = {"input_ids": tokens()}
    result = center_unembed(model, x)
    assert result.check.passed and result.check.compare == "log_softmax"
    assert model.get_output_embeddings().weight.mean(0).abs().max() < 1e-6


@pytest.mark.slow
def test_fold_command_on_hugging_face_families(tmp_path, capsys):
    from normlab.cli import main

    for family in ("gpt2", "llama"):
        src, out = tmp_path / f"{family}-in", tmp_path / f"{family}-out"
        save_model(build(family), src)
        assert main(["fold", str(src), str(out), "--center-unembed"]) == 0
        text = capsys.readouterr().out
        assert re.search(r"folded fp32 vs float64 = \S+; unfolded fp32 vs float64", text)
        loaded, _ = load_model(out)
        assert loaded is not None
    assert (tmp_path / "gpt2-out" / "normlab.safetensors").exists()
    assert (tmp_path / "llama-out" / "model.safetensors").exists()  # weights only changed
