"""Issue 38: fold, refusals, replace -> save -> reload, and probes on 17 Hugging Face families.

Every family is built from a tiny transformers config (``tests/_tiny_hf.py``: hidden 32,
2 layers, random norm gains and biases). The bounds:

- fp32 fold: ``max |delta logit| <= 1e-4 * max |logit|`` (relative), and the fold's own check
  passes (folded fp32 vs float64 within 4x the model's own fp32 rounding; qwen3_moe, whose
  grouped-GEMM experts have no float64 kernel, against fp32 within ``1e-4 * max |logit|``);
- bf16 fold: the folded bf16 model is no further from the float64 logits than 4x the
  unfolded bf16 model's own error (``check.passed``), and ``max |delta logit| <= 2^-5 *
  max |logit|`` (a few bf16 roundings of the largest logit; bf16's unit roundoff is 2^-9).

With ``NORMLAB_COVERAGE_OUT=file.json`` the measurements are written there; ``python
tools/coverage.py`` runs this file that way and renders ``docs/coverage.md``.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from normlab.models.checkpoint import model_inputs
from normlab.surgery import fold_layernorms, fold_rms_gains
from tests._tiny_hf import ISSUE_FAMILIES, build, tokens

transformers = pytest.importorskip("transformers")

#: Per family: (LayerNorms folded, norm gains folded, substrings every refusal must show).
EXPECTED: dict[str, tuple[int, int, tuple[str, ...]]] = {
    "gpt2": (5, 0, ()),
    "bert": (0, 0, ("post-LN",)),
    "llama": (0, 5, ()),
    "mistral": (0, 5, ()),
    "qwen2": (0, 5, ()),
    "qwen3": (0, 5, ("QK-norm",)),
    "qwen3_moe": (0, 5, ("QK-norm",)),
    "gemma": (0, 5, ()),
    "gemma2": (0, 5, ("post-sublayer",)),
    "gemma3_text": (0, 5, ("post-sublayer", "QK-norm")),
    "phi3": (0, 5, ()),
    "olmo2": (0, 1, ("post-sublayer", "QK-norm")),
    "gpt_neox": (5, 0, ()),
    "cohere": (0, 3, ()),
    "opt": (5, 0, ()),
    "falcon": (3, 0, ()),
    "t5": (0, 11, ("returned by the model",)),
}
FP32_RELATIVE = 1e-4
BF16_RELATIVE = 2.0**-5
RESULTS: dict[str, dict] = {}


def _record(family: str, **values) -> None:
    RESULTS.setdefault(family, {}).update(values)
    out = os.environ.get("NORMLAB_COVERAGE_OUT")
    if out:
        with open(out, "w") as f:
            json.dump(RESULTS, f, indent=1)


@torch.no_grad()
def _logits(model, x) -> torch.Tensor:
    return model(**x).logits.double()


def _numel(model, name: str) -> int:
    return model.get_submodule(name).weight.numel()


def _fold(model, x):
    """What ``normlab fold`` does: LayerNorms into RMSNorm, then norm gains."""
    return fold_layernorms(model, x), fold_rms_gains(model, x)


def test_every_issue_family_is_covered():
    assert set(EXPECTED) == set(ISSUE_FAMILIES) and len(ISSUE_FAMILIES) == 17


@pytest.mark.parametrize("family", ISSUE_FAMILIES)
def test_fold_fp32_exact_with_refusals_and_no_second_fold(family):
    model = build(family)
    x = model_inputs(model, tokens())
    before = _logits(model, x)
    ln, gains = _fold(model, x)
    change = float((_logits(model, x) - before).abs().max())
    scale = float(before.abs().max())
    n_ln, n_gain, reasons = EXPECTED[family]
    assert (len(ln.folded), len(gains.folded)) == (n_ln, n_gain)
    assert change <= FP32_RELATIVE * scale
    for check in (ln.check, gains.check):
        assert check is None or check.passed
    refused = {k: "; ".join(v) for k, v in ln.analysis.refused.items()} | dict(gains.refused)
    for word in reasons:
        assert any(word in why for why in refused.values()), (word, refused)
    if family == "qwen3_moe":  # the router reads the normed stream too
        readers = gains.folded["model.layers.0.post_attention_layernorm"]
        assert {"model.layers.0.mlp.gate", "model.layers.0.mlp.experts"} <= set(readers)
        assert gains.check.reference.startswith("float32")
    if family.startswith("gemma"):  # (1 + w) gains became exact zeros: gain 1
        assert torch.equal(model.model.norm.weight, torch.zeros_like(model.model.norm.weight))
    if ln.folded:
        with pytest.raises(ValueError, match="already folded"):
            fold_layernorms(model, x)
    if gains.folded:
        with pytest.raises(ValueError, match="already folded"):
            fold_rms_gains(model, x)
    _record(
        family,
        fp32_change=change,
        fp32_relative=change / scale,
        layernorms_folded=len(ln.folded),
        gains_folded=len(gains.folded),
        refused=refused,
        reference=(gains.check or ln.check).reference if (gains.check or ln.check) else None,
        untied={**dict(gains.untied), **{o: _numel(model, o) for _w, o in ln.untied}},
    )


@pytest.mark.parametrize("family", ISSUE_FAMILIES)
def test_fold_bf16_within_bf16_rounding(family):
    model = build(family).to(torch.bfloat16)
    x = model_inputs(model, tokens())
    before = _logits(model, x)
    ln, gains = _fold(model, x)
    change = float((_logits(model, x) - before).abs().max())
    scale = float(before.abs().max())
    assert (len(ln.folded), len(gains.folded)) == EXPECTED[family][:2]
    for check in (ln.check, gains.check):
        assert check is None or check.passed
    assert change <= BF16_RELATIVE * scale
    _record(family, bf16_change=change, bf16_relative=change / scale)


def _auto_class(model):
    from normlab.surgery.hf_format import auto_class_name

    return getattr(transformers, auto_class_name(type(model).__name__))


@pytest.mark.parametrize("family", ISSUE_FAMILIES)
def test_replace_save_reload_exact_via_auto_and_refused_by_plain_class(family, tmp_path):
    from normlab.models.hf_auto import register_auto_classes
    from normlab.surgery import replace_norms

    model = build(family)
    x = model_inputs(model, tokens())
    replaced = replace_norms(model, "rmsnorm")
    assert replaced
    model.save_pretrained(tmp_path)
    register_auto_classes()
    auto = _auto_class(model)
    loaded = auto.from_pretrained(tmp_path).eval()
    assert torch.equal(_logits(loaded, x), _logits(model, x))
    with pytest.raises((OSError, ValueError)):
        getattr(transformers, type(model).__name__).from_pretrained(tmp_path)
    generates = model.can_generate()
    assert (tmp_path / "generation_config.json").is_file() == generates
    _record(family, reload_exact=True, plain_class_refuses=True, generation_config=generates)


def _site(adapter):
    """The first norm of the first block (the probe site compared with our own hook)."""
    return next(s for s in adapter.norm_sites() if s.layer == 0)


@pytest.mark.parametrize("family", ISSUE_FAMILIES)
def test_probe_matches_an_independent_hook_and_runs_after_fold(family):
    from normlab.probes import adapt
    from normlab.probes.report import probe_model

    model = build(family, attn="eager")
    ids = tokens(2, 13)
    site = _site(adapt(model))
    seen = []
    handle = model.get_submodule(site.name).register_forward_hook(
        lambda _m, args, _o: seen.append(args[0].detach().double())
    )
    try:
        result = probe_model(model, ids, swap=False)
    finally:
        handle.remove()
    assert not result["nonfinite"] and set(result["skipped"]) <= {"swap"}
    outliers = {s["name"]: s for s in result["probes"]["outliers"]["sites"]}
    probe = outliers[f"{site.name}:input"]
    # our own hook: the norm's input on the probe's first pass (causal: tokens[:, :-1])
    x = seen[0]
    own = x.reshape(x.shape[0], -1).abs().amax(1)
    assert probe["inf_norm"] == pytest.approx(float(own.mean()), rel=1e-12)
    assert probe["max_abs"] == pytest.approx(float(own.max()), rel=1e-12)
    example = model_inputs(model, tokens())
    _fold(model, example)
    after = probe_model(model, ids, swap=False)
    assert not after["nonfinite"] and set(after["skipped"]) <= {"swap"}
    _record(
        family,
        probe_site=site.name,
        probe_inf_norm=probe["inf_norm"],
        hook_inf_norm=float(own.mean()),
        probe_after_fold=True,
        probes=sorted(result["probes"]),
    )


VARIANTS = [
    ("opt", {"do_layer_norm_before": False}, "post"),  # OPT-350m's post-LN blocks
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}, "pre"),  # ln_attn/ln_mlp
    ("falcon", {"parallel_attn": False}, "pre"),  # sequential: input + post_attention norms
]


@pytest.mark.parametrize(("family", "overrides", "position"), VARIANTS)
def test_block_variants_fold_or_refuse_and_probe(family, overrides, position):
    from normlab.probes import adapt
    from normlab.probes.report import probe_model

    model = build(family, attn="eager", **overrides)
    x = model_inputs(model, tokens())
    adapter = adapt(model)
    assert adapter.norm_position() == position
    assert len([s for s in adapter.norm_sites() if s.layer == 0]) == 2
    before = _logits(model, x)
    ln, _gains = _fold(model, x)
    change = float((_logits(model, x) - before).abs().max())
    assert change <= FP32_RELATIVE * float(before.abs().max())
    if position == "post":  # post-LN: every block norm refused with the reason
        assert not any(".layers." in name for name in ln.folded)
        assert any("post-LN" in " ".join(v) for v in ln.analysis.refused.values())
    else:
        assert len(ln.folded) == 5 and ln.check.passed
    result = probe_model(model, tokens(2, 13), swap=False)
    assert set(result["skipped"]) <= {"swap"}


def test_tied_keep_leaves_the_head_tied_and_says_why():
    model = build("qwen2")
    assert model.lm_head.weight is model.model.embed_tokens.weight
    gains = fold_rms_gains(model, model_inputs(model, tokens()), tied="keep")
    assert model.lm_head.weight is model.model.embed_tokens.weight and not gains.untied
    assert "tied to the input embedding" in gains.refused["model.norm"]
    assert len(gains.folded) == 4 and gains.check.passed
