"""Checkpoint round trips of every supported Hugging Face family, plain and transformed.

A transformed checkpoint reloads exactly through load_model and through the Auto classes
once normlab's classes are registered; the original class refuses it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from normlab.models.checkpoint import load_model, save_model
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.surgery import fold_layernorms, replace_norms
from tests._tiny_hf import FAMILIES, build, tokens

transformers = pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]


def _eager(model):
    model.set_attn_implementation("eager")  # the kernel load_model builds with
    return model


@torch.no_grad()
def _logits(model, x):
    return model(input_ids=x).logits


@pytest.mark.parametrize("family", FAMILIES)
def test_plain_round_trip_builds_the_head_model(family, tmp_path):
    model = _eager(build(family))
    x = tokens()
    save_model(model, tmp_path)
    loaded, kind = load_model(tmp_path)
    assert kind == "hf" and type(loaded) is type(model)
    assert torch.equal(_logits(loaded, x), _logits(model, x))


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "stablelm"])
def test_folded_round_trip_is_exact_and_plain_class_refuses(family, tmp_path):
    model = _eager(build(family))
    x = tokens()
    result = fold_layernorms(model, {"input_ids": x})
    assert result.folded and result.check.passed
    save_model(model, tmp_path)
    loaded, _ = load_model(tmp_path)
    assert torch.equal(_logits(loaded, x), _logits(model, x))
    original_class = getattr(transformers, type(model).__name__)
    with pytest.raises(OSError, match=r"model\.safetensors"):
        original_class.from_pretrained(tmp_path)
    from normlab.models.hf_auto import register_auto_classes

    register_auto_classes()
    auto = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager")
    assert torch.equal(_logits(auto.eval(), x), _logits(model, x))


def test_replaced_norms_round_trip(tmp_path):
    model = _eager(build("gpt2"))
    x = tokens()
    replace_norms(model, "dyt", alpha_init=0.7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name:
                p.add_(0.1)
    save_model(model, tmp_path)
    loaded, _ = load_model(tmp_path)
    assert (
        type(loaded.transformer.h[0].ln_1).__name__ == type(model.transformer.h[0].ln_1).__name__
    )
    assert torch.equal(_logits(loaded, x), _logits(model, x))


def test_replacement_by_a_callable_is_refused(tmp_path):
    model = build("gpt2")
    replace_norms(model, lambda d, eps=1e-5: torch.nn.RMSNorm(d, eps=eps))
    with pytest.raises(ValueError, match="registered name"):
        save_model(model, tmp_path)


def test_tinygpt_replaced_norms_round_trip(tmp_path):
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=16)).eval()
    replace_norms(model, "rmsnorm")
    save_model(model, tmp_path)
    loaded, _ = load_model(tmp_path)
    x = torch.randint(0, 257, (2, 16))
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


_FRESH = """
import sys, torch, transformers
path = sys.argv[1]
try:
    transformers.AutoModelForCausalLM.from_pretrained(path)
    print("LOADED")
except (ValueError, OSError) as err:
    print("REFUSED", type(err).__name__)
model = transformers.AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
x = torch.load(sys.argv[2])
with torch.no_grad():
    torch.save(model.eval()(input_ids=x).logits, sys.argv[3])
"""


@pytest.mark.slow
def test_fresh_process_auto_path_refuses_or_reloads_via_auto_map(tmp_path):
    model = build("gpt2")
    x = tokens()
    fold_layernorms(model, {"input_ids": x})
    save_model(model, tmp_path / "m")
    torch.save(x, tmp_path / "x.pt")
    env = {
        "HF_HOME": str(tmp_path / "hf"),
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT / "src"),
    }
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _FRESH,
            str(tmp_path / "m"),
            str(tmp_path / "x.pt"),
            str(tmp_path / "y.pt"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "REFUSED" in out.stdout
    assert torch.equal(torch.load(tmp_path / "y.pt"), _logits(model, x))
