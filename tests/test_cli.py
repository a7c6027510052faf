"""The command line: one argparse tree, discoverability, and bad input as exit 2."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import normlab
import normlab.claims
from normlab.claims import core as claims_core
from normlab.cli import build_parser, main

README = Path(__file__).resolve().parents[1] / "README.md"


def test_list_shows_every_method(capsys):
    assert main(["list", "--markdown"]) == 0
    out = capsys.readouterr().out
    for method in normlab.methods():
        assert f"| `{method.name}` |" in out


def test_readme_table_matches_the_registry(capsys):
    main(["list", "--markdown"])
    table = capsys.readouterr().out.strip()
    text = README.read_text()
    match = re.search(r"<!-- methods:start -->\n(.*?)\n<!-- methods:end -->", text, re.S)
    assert match, "README lacks the methods table markers"
    assert match.group(1).strip() == table, "README table is stale: run tools/sync_readme.py"


def test_readme_claims_table_matches_the_catalogue():
    sys.path.insert(0, str(README.parent / "tools"))
    try:
        from sync_readme import claims_table
    finally:
        sys.path.pop(0)
    text = README.read_text()
    match = re.search(r"<!-- claims:start -->\n(.*?)\n<!-- claims:end -->", text, re.S)
    assert match, "README lacks the claims table markers"
    assert match.group(1).strip() == claims_table(), "README is stale: run tools/sync_readme.py"


def test_list_filters_by_pattern_kind_and_alias(capsys):
    assert main(["list", "methods", "--markdown", "rms*"]) == 0
    out = capsys.readouterr().out
    assert "`rmsnorm`" in out and "`layernorm`" not in out
    assert main(["list", "--kind", "score", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "`softmax1`" in out and "`rmsnorm`" not in out
    rms = normlab.methods(kind="norm")[0]
    if rms.aliases:  # a method is found by its alias too
        assert main(["list", rms.aliases[0], "--markdown"]) == 0
        assert f"`{rms.name}`" in capsys.readouterr().out
    assert main(["list", "--wide", "rmsnorm"]) == 0
    out = capsys.readouterr().out
    assert "features" in out and "norm" in out  # layout and kind columns


def test_list_is_one_line_a_method_and_never_cuts_a_name(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("│")]
    names = [m.name for m in normlab.methods()]
    assert len(rows) == len(names)
    assert [row.split("│")[1].strip() for row in rows] == names
    assert all(len(line) <= 80 for line in lines)
    assert main(["list", "claims"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == [c.id for c in claims_core.all_claims()]


def test_list_claims_shows_every_claim(capsys):
    assert main(["list", "claims", "--markdown"]) == 0
    out = capsys.readouterr().out
    for claim in claims_core.all_claims():
        assert f"| `{claim.id}` | {claim.paper} |" in out


@pytest.mark.parametrize(
    "argv",
    [["list", "--kind", "NOPE"], ["list", "claims", "--kind", "norm"], ["list", "a", "b"]],
)
def test_list_errors_go_to_stderr_with_exit_2(argv, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "error" in captured.err and not captured.out


def test_unknown_claim_is_exit_2_on_stderr(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(claims_core._CATALOGUE, "loaded", True)  # do not import the catalogue
    assert main(["claim", "NOPE", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "NOPE" in captured.err and not captured.out
    assert main(["report", "--only", "NOPE", "--out", str(tmp_path)]) == 2
    assert "NOPE" in capsys.readouterr().err


@pytest.mark.slow
def test_claim_ids_accept_underscores_like_method_names():
    from normlab.claims.api import resolve_claims

    ids = [c.id for c in claims_core.all_claims()]
    dashed = next(i for i in ids if "-" in i)
    (claim,) = resolve_claims([dashed.replace("-", "_").upper()])
    assert claim.id == dashed
    with pytest.raises(KeyError, match="normlab list claims"):
        resolve_claims(["no_such_claim"])  # no close id: the message says where the list is
    with pytest.raises(KeyError, match=f"did you mean.*{dashed}"):
        resolve_claims([dashed[:-1] + "x"])


def test_report_address_without_ray_is_refused(capsys, tmp_path):
    argv = ["report", "--address", "127.0.0.1:1", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 2
    assert "--backend ray" in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()
    with pytest.raises(ValueError, match="backend='ray'"):
        normlab.claims.run(["x"], address="127.0.0.1:1", out=tmp_path)


def test_cli_and_python_share_the_jobs_default():
    import inspect

    assert inspect.signature(normlab.claims.run).parameters["jobs"].default is None
    args = build_parser().parse_args(["report"])
    assert args.jobs == (os.cpu_count() or 1)  # "auto": one job per core, as jobs=None


@pytest.mark.parametrize("command", ["report", "claim"])
def test_ctrl_c_ends_with_one_line_and_the_resume_hint(command, capsys, monkeypatch, tmp_path):
    from normlab.claims.runner import ClaimRunner

    def interrupted(self, claims, scale, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ClaimRunner, "run", interrupted)
    claim_id = claims_core.all_claims()[0].id
    argv = ["--only", claim_id] if command == "report" else [claim_id]
    assert main([command, *argv, "--out", str(tmp_path), "--no-progress"]) == 130
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "interrupted" in err and "resumes" in err and str(tmp_path) in err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert normlab.__version__ in capsys.readouterr().out
    done = subprocess.run(
        [sys.executable, "-m", "normlab", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and normlab.__version__ in done.stdout


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_one_tree_with_every_subcommand():
    assert set(_subparsers()) == {"report", "claim", "list", "probe", "fold", "bench", "compare"}


@pytest.mark.parametrize("name", ["report", "claim", "list", "probe", "fold", "bench"])
def test_help_documents_every_argument_with_default_and_choices(name):
    sub = _subparsers()[name]
    text = " ".join(sub.format_help().split())
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, (name, action.dest)
        if action.option_strings:
            assert f"{action.option_strings[-1]}" in text
            assert "(default:" in " ".join(sub._get_formatter()._expand_help(action).split())
        for choice in action.choices or ():
            assert str(choice) in text, (name, action.dest, choice)


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5"])
def test_jobs_must_be_positive_or_auto(value, capsys):
    assert main(["report", "--jobs", value, "--only", "x"]) == 2
    assert "--jobs" in capsys.readouterr().err
    args = build_parser().parse_args(["report", "--jobs", "auto"])
    assert args.jobs == (os.cpu_count() or 1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from normlab.models.checkpoint import save_model
    from normlab.models.gpt import GPTConfig, TinyGPT

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("cli") / "model"
    save_model(TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=32)), folder)
    return folder


def _copy(model_dir: Path, to: Path) -> Path:
    to.mkdir()
    for f in model_dir.iterdir():
        (to / f.name).write_bytes(f.read_bytes())
    return to


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err, err


@pytest.mark.parametrize("cmd", ["probe", "fold"])
@pytest.mark.parametrize("flag", ["--tokens", "--batch"])
def test_zero_tokens_or_batch_is_exit_2(cmd, flag, model_dir, tmp_path, capsys):
    argv = [cmd, str(model_dir), str(tmp_path / "o")] if cmd == "fold" else [cmd, str(model_dir)]
    assert main([*argv, flag, "0"]) == 2
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize("cmd", ["probe", "fold"])
@pytest.mark.parametrize(
    "damage, expect",
    [
        ("truncate", "model.safetensors"),
        ("not-json", "config.json is not JSON"),
        ("not-object", "config.json is not a JSON object"),
        ("no-weights", "no weights"),
    ],
)
def test_bad_model_folder_is_exit_2_naming_the_file(
    cmd, damage, expect, model_dir, tmp_path, capsys
):
    folder = _copy(model_dir, tmp_path / "m")
    weights = folder / "model.safetensors"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:-100])
    elif damage == "not-json":
        (folder / "config.json").write_text('{"normlab": ')
    elif damage == "not-object":
        (folder / "config.json").write_text("[1, 2]")
    else:
        weights.unlink()
    out = tmp_path / "out"
    argv = [cmd, str(folder), str(out)] if cmd == "fold" else [cmd, str(folder), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert expect in err
    assert not out.exists()  # checked before any work, nothing written


@pytest.mark.parametrize("cmd", ["probe", "fold"])
@pytest.mark.parametrize("where", ["file", "under-file"])
def test_output_that_is_a_file_or_unwritable_is_exit_2(cmd, where, model_dir, tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    out = blocker if where == "file" else blocker / "sub"
    argv = (
        [cmd, str(model_dir), str(out)]
        if cmd == "fold"
        else [cmd, str(model_dir), "--out", str(out)]
    )
    assert main(argv) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert str(out) in err


def test_fold_refuses_its_input_and_non_empty_folders(model_dir, tmp_path, capsys):
    folder = _copy(model_dir, tmp_path / "m")
    assert main(["fold", str(folder), str(folder)]) == 2
    assert "input" in capsys.readouterr().err
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.safetensors").write_bytes(b"old")
    (out / "notes.txt").write_text("keep me")
    assert main(["fold", str(folder), str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["fold", str(folder), str(out), "--overwrite", "--tokens", "8"]) == 0
    assert not (out / "stale.safetensors").exists() and (out / "notes.txt").exists()
    assert (out / "model.safetensors").exists()


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.slow
@pytest.mark.parametrize("cmd", ["probe", "fold"])
def test_malicious_pickle_is_refused(cmd, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    folder = tmp_path / "bert"
    config = transformers.BertConfig(
        num_hidden_layers=1,
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=32,
        vocab_size=60,
    )
    config.save_pretrained(folder)
    marker = tmp_path / "pwned"
    torch.save(
        {"embeddings.word_embeddings.weight": _Payload(marker)}, folder / "pytorch_model.bin"
    )
    out = tmp_path / "out"
    argv = [cmd, str(folder), str(out)] if cmd == "fold" else [cmd, str(folder), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert "refused" in err or "weights_only" in err, err
    assert not marker.exists(), "the pickle's payload ran"


@pytest.mark.slow
def test_python_dash_m_normlab_lists(capsys):
    done = subprocess.run(
        [sys.executable, "-m", "normlab", "list", "softmax1", "--markdown"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "`softmax1`" in done.stdout
