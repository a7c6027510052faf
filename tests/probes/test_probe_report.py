"""``normlab probe``: HTML + JSON for normlab checkpoints and Hugging Face folders."""

from __future__ import annotations

import json

import pytest
import torch

from normlab.cli import main
from normlab.models.checkpoint import save_model
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.probes.report import probe_model


def probe_command(argv):
    return main(["probe", "--no-progress", *argv])


def test_probe_tinygpt_checkpoint(tmp_path, capsys):
    torch.manual_seed(0)
    save_model(TinyGPT(GPTConfig(d_model=16, n_layers=3, n_heads=2, context=32)), tmp_path / "m")
    assert (
        probe_command([str(tmp_path / "m"), "--out", str(tmp_path / "r"), "--tokens", "16"]) == 0
    )
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert set(results["probes"]) == {"outliers", "sinks", "depth", "rank", "swap"}
    sites = results["probes"]["outliers"]["sites"]
    assert len([s for s in sites if s["kind"] == "block_output"]) == 3
    assert len(results["probes"]["depth"]["variance"]) == 4
    assert len(results["probes"]["swap"]["interchange"]) == 3
    html = (tmp_path / "r" / "index.html").read_text()
    assert html.count("data:image/png;base64,") == 5
    assert "index.html" in capsys.readouterr().out


def test_probe_model_leaves_the_model_unchanged():
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=32)).train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    probe_model(model, torch.randint(0, 257, (2, 9)))
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


@pytest.mark.slow
def test_probe_hf_encoder_skips_swap(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=32,
        vocab_size=60,
    )
    transformers.BertModel(config).save_pretrained(tmp_path / "bert")
    assert (
        probe_command([str(tmp_path / "bert"), "--out", str(tmp_path / "r"), "--tokens", "8"]) == 0
    )
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert results["family"] == "bert" and "no LM head" in results["skipped"]["swap"]
    assert {"outliers", "sinks", "depth"} <= set(results["probes"])


def test_probe_missing_folder(tmp_path, capsys):
    assert probe_command([str(tmp_path / "nope")]) == 2
    assert "cannot load" in capsys.readouterr().err


def test_nan_model_record_is_strict_json_and_the_headline_never_says_healthy():
    from normlab.probes.report import headline

    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=16)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    x = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(0))
    record = probe_model(model, x, swap=False)
    json.dumps(record, allow_nan=False)  # issue 24: 97 bare NaN tokens before
    assert set(record["nonfinite"]) >= {"outliers", "sinks"}
    assert record["probes"]["sinks"]["sink_score"] is None  # not 0.000
    rows = {metric: (value, ref) for metric, value, ref in headline(record)}
    assert rows["non-finite statistics"][0].startswith("non-finite in ")
    assert rows["sink score"] == ("non-finite", "")
    assert rows["max inf-norm (block outputs)"] == ("non-finite", "")
