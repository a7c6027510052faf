"""``normlab probe`` and ``normlab fold`` as a user runs them: subprocesses on model folders
with real tokenizer files (issue 24) and on bad arguments (issue 25, items 6 and 7)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")


def normlab(*argv: str | Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``normlab ARGV`` in a fresh interpreter, single-threaded."""
    return subprocess.run(
        [sys.executable, "-m", "normlab", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _strict_json(path: Path) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"{path} holds a bare {name}")

    return json.loads(path.read_text(), parse_constant=refuse)


def _clean(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    from tests._tiny_hf import save_with_tokenizer

    root = tmp_path_factory.mktemp("hf")
    out = {}
    for family in ("bert", "gpt2", "llama"):
        save_with_tokenizer(family, root / family)
        out[family] = root / family
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A TinyGPT checkpoint with 128 positions (cheap to load)."""
    from normlab.models.checkpoint import save_model
    from normlab.models.gpt import GPTConfig, TinyGPT

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny") / "model"
    save_model(TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=128)), folder)
    return folder


QUICK = ("--tokens", "8", "--batch", "2")


@pytest.mark.slow
@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_probe_and_fold_on_folders_with_real_tokenizers(family, folders, tmp_path):
    done = normlab("probe", folders[family], "--out", tmp_path / "p", *QUICK, "--no-swap")
    text = _clean(done)
    assert done.returncode == 0, text
    record = _strict_json(tmp_path / "p" / "results.json")
    assert record["tokens_from"] == "tokenizer" and record["nonfinite"] == {}
    assert record["family"] == family and "kurtosis per token" in text
    fold = normlab("fold", folders[family], tmp_path / "f", *QUICK)
    text = _clean(fold)
    if family == "bert":  # post-LN: nothing is foldable, and the reasons are printed
        assert fold.returncode == 2 and "none foldable" in text and "post-LN" in text
        return
    assert fold.returncode == 0, text
    assert (tmp_path / "f" / "tokenizer.json").exists()  # the tokenizer travels with it
    if family == "llama":  # RMSNorm gains only: plain Hugging Face files
        assert (tmp_path / "f" / "model.safetensors").exists()
        return
    assert "tied embeddings untied" in text and "MB ->" in text
    again = normlab("probe", tmp_path / "f", "--out", tmp_path / "pf", *QUICK, "--no-swap")
    assert again.returncode == 0, _clean(again)  # fold -> probe on a normlab_gpt2 folder
    record = _strict_json(tmp_path / "pf" / "results.json")
    assert record["family"] == "gpt2" and record["tokens_from"] == "tokenizer"


@pytest.mark.slow
def test_nan_model_probe_exits_non_zero_and_fold_names_the_cause(folders, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "nan"
    folder.mkdir()
    for f in folders["gpt2"].iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    weights = load_file(folder / "model.safetensors")
    nan = {k: torch.full_like(v, float("nan")) for k, v in weights.items()}
    save_file(nan, folder / "model.safetensors")
    done = normlab("probe", folder, "--out", tmp_path / "p", *QUICK, "--no-swap")
    text = _clean(done)
    assert done.returncode == 1, text
    assert "non-finite in" in text and "non-finite weights" in text
    assert "sink score: non-finite\n" in text  # no "[healthy: ...]" beside it
    record = _strict_json(tmp_path / "p" / "results.json")
    assert record["probes"]["outliers"]["max_inf_norm"] is None
    assert record["nonfinite"]["outliers"]
    fold = normlab("fold", folder, tmp_path / "f", *QUICK)
    assert fold.returncode == 2 and "non-finite weights" in _clean(fold)
    assert not (tmp_path / "f").exists()


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["--out", "/proc/normlab-x"], "cannot write to /proc/normlab-x"),
        (["--device", "bogus"], "--device 'bogus' is not a torch device"),
        (["--tokens", "500"], "--tokens 500 is more than the 128 positions"),
    ],
)
def test_probe_refuses_bad_arguments_before_any_work(argv, expect, tiny, tmp_path):
    out = [] if "--out" in argv else ["--out", tmp_path / "o"]
    done = normlab("probe", tiny, *argv, *out)
    text = _clean(done)
    assert done.returncode == 2 and expect in text, text
    assert "wrote" not in text and not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without a GPU")
def test_probe_on_cuda_without_a_gpu_is_a_clear_error(tiny, tmp_path):
    done = normlab("probe", tiny, "--device", "cuda", "--out", tmp_path / "o")
    assert done.returncode == 2 and "no CUDA GPU is available" in _clean(done)


def test_probe_refuses_to_write_into_the_model_folder(tiny, capsys):
    from normlab.cli import main

    before = sorted(p.name for p in tiny.iterdir())
    done = normlab("probe", tiny, "--out", tiny)
    assert done.returncode == 2 and "inside the model folder" in _clean(done)
    assert main(["probe", str(tiny), "--out", str(tiny / "probe")]) == 2
    assert "inside the model folder" in capsys.readouterr().err
    assert sorted(p.name for p in tiny.iterdir()) == before


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_fold_refuses_a_negative_or_nan_tolerance(value, tiny, tmp_path):
    done = normlab("fold", tiny, tmp_path / "o", f"--tolerance={value}")
    text = _clean(done)
    assert done.returncode == 2 and "--tolerance" in text and "finite number >= 0" in text
    assert not (tmp_path / "o").exists()


def test_tolerance_type_accepts_finite_non_negative_numbers_only():
    import argparse

    from normlab.cli.fold import tolerance_type

    assert tolerance_type("0") == 0.0 and tolerance_type("1e-3") == 1e-3
    for bad in ("inf", "-inf", "x", "-0.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            tolerance_type(bad)


def test_fold_refuses_tokens_above_the_positions(tiny, tmp_path):
    done = normlab("fold", tiny, tmp_path / "o", "--tokens", "129")
    assert done.returncode == 2 and "--tokens 129 is more than the 128" in _clean(done)
    assert not (tmp_path / "o").exists()
