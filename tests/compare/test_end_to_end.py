"""``normlab compare`` end to end at a tiny budget: HF GPT-2 (fine-tuned from its weights)
and Llama (trained from its config) with real tokenizer files and a text file, a series CSV
with RevIN vs NoRIN vs none, a ``module:function`` model; each writes a page and a
results.json that follows its schema. Also: the cache resumes, the null real run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from normlab.cli import main
from normlab.compare.results import validate
from tests.compare.conftest import TINY

pytestmark = pytest.mark.slow


def _outputs(out: Path, arms: list[str]) -> dict:
    data = json.loads((out / "results.json").read_text())
    validate(data)
    assert list(data["arms"]) == arms
    html = (out / "index.html").read_text()
    assert "Recommendation." in html and "<img" in html
    for arm in arms:
        assert arm in html
    assert len(data["tuning"]) == len(arms) * 2
    first = min(t["seed"] for t in data["tuning"])
    tuned = [t for t in data["tuning"] if t["seed"] == first]
    assert len(tuned) == len(arms)
    assert all(len(t["history"]) >= 2 for t in tuned)  # the grid, same for every arm
    for t in data["tuning"]:  # tune once: every other seed trains at its first seed's lr
        if t["seed"] != first:
            (chosen,) = [u["chosen"] for u in tuned if u["arm"] == t["arm"]]
            assert t["tie"] == "fixed" and [h["params"] for h in t["history"]] == [chosen]
    return data


def test_gpt2_folder_with_tokenizer_fine_tunes(gpt2_folder, text_file, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(
        [
            "compare",
            str(gpt2_folder),
            "--data",
            str(text_file),
            "--norms",
            "layernorm",
            "rmsnorm",
            "dyt:alpha_init=0.5",
            "--out",
            str(out),
            *TINY,
        ]
    )
    assert rc == 0, capsys.readouterr().err
    data = _outputs(out, ["layernorm", "rmsnorm", "dyt:alpha_init=0.5"])
    assert "fine-tuned from its weights" in data["model"]
    assert data["unit"] == "bits/token" and "tokenizer" in data["splits"]["how"]
    assert set(data["effects"]) == {"rmsnorm", "dyt:alpha_init=0.5"}
    printed = capsys.readouterr().out
    assert "verdict" in printed and "results.json" in printed


def test_llama_config_trains_from_scratch_and_resumes(llama_folder, text_file, tmp_path):
    from normlab.compare import compare

    out = tmp_path / "out"
    kw = dict(steps=6, seeds=2, lrs=[3e-3, 1e-2], batch=4, context=16, out=out)
    first = compare(str(llama_folder), str(text_file), ["rmsnorm", "layernorm"], **kw)
    first.write(out)
    data = _outputs(out, ["rmsnorm", "layernorm"])
    assert "trained from its config" in data["model"]
    assert first.cached == 0
    again = compare(str(llama_folder), str(text_file), ["rmsnorm", "layernorm"], **kw)
    assert again.cached == 4  # every (arm, seed) task came from the cache
    assert again.arms["layernorm"].tests == first.arms["layernorm"].tests


def test_series_csv_revin_norin_none_in_two_workers(series_csv, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(
        [
            "compare",
            "forecaster",
            "--data",
            str(series_csv),
            "--norms",
            "revin",
            "norin",
            "none",
            "--lookback",
            "24",
            "--horizon",
            "8",
            "--jobs",
            "2",
            "--out",
            str(out),
            *TINY,
        ]
    )
    assert rc == 0, capsys.readouterr().err
    data = _outputs(out, ["revin", "norin", "none"])
    assert data["unit"] == "MSE" and "70/10/20" in data["splits"]["how"]
    assert data["setting"]["task"] == "forecast"


def test_module_function_model_and_the_real_null(text_file, tmp_path):
    """A user's own model; its LayerNorm against itself under another name (two identical
    arms) must not read better or worse: the paired differences are exactly 0."""
    from normlab.compare import compare

    out = tmp_path / "out"
    c = compare(
        "tests.compare._toys:byte_lm",
        str(text_file),
        ["layernorm", "layernorm:eps=1e-05", "rmsnorm"],
        steps=6,
        seeds=2,
        lrs=[3e-3, 1e-2],
        batch=4,
        context=16,
        out=out,
    )
    c.write(out)
    data = _outputs(out, ["layernorm", "layernorm:eps=1e-05", "rmsnorm"])
    assert data["unit"] == "bits/byte"
    null = c.stats["layernorm:eps=1e-05"]
    assert null.verdict == "no worse" and null.mean == 0.0


def test_classify_with_module_function_data(tmp_path):
    from normlab.compare import compare

    c = compare(
        "tests.compare._toys:classifier",
        "tests.compare._toys:two_moons",
        ["layernorm", "rmsnorm"],
        task="classify",
        steps=6,
        seeds=2,
        lrs=[3e-3, 1e-2],
        batch=32,
        out=tmp_path,
    )
    assert c.unit.startswith("cross-entropy")
    assert all(a.premise for a in c.arms.values())


def test_keep_leaves_the_named_sites_alone(text_file):
    """``keep`` globs name norm sites every arm leaves as they are (TinyGPT's final norm)."""
    from normlab.compare.models import build, resolve_model
    from normlab.layers import DyT

    model = build(resolve_model("tinygpt"), "dyt", 0, {}, keep=("norm_f",))
    assert type(model.norm_f).__name__ == "LayerNorm"
    norms = {
        n: type(m) for n, m in model.named_modules() if n.rsplit(".", 1)[-1].startswith("norm")
    }
    assert all(t is DyT for n, t in norms.items() if n != "norm_f") and len(norms) == 5
