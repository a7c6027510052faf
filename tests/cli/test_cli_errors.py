"""Bad input ends in one clear line with exit status 2, and SIGTERM in one line with the
resume hint and exit status 143 (issue 36, items 12, 14, 15, 16)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import normlab
from normlab.cli import build_parser, main
from normlab.cli.fold import _cli_words
from tests.claims._cli_toys import TIMEOUT, cli_env, error_lines, normlab_cmd, run_cli, write_toys


def test_list_with_no_match_is_exit_2_naming_the_closest(capsys):
    assert main(["list", "rmsnrm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rmsnorm" in err
    assert main(["list", "claims", "affinerank"]) == 2
    assert "affine-rank" in capsys.readouterr().err


def test_unknown_claim_names_the_closest_not_all(capsys, tmp_path):
    assert main(["claim", "afine-rank", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "did you mean affine-rank?" in err and "kappa-attention" not in err


def test_list_wide_never_breaks_a_name_or_alias(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["list", "--wide"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    words = {w for line in lines for w in line.replace(",", " ").split()}
    for m in normlab.methods():
        assert m.name in words and set(m.aliases) <= words, m.name


def test_help_states_each_default_once():
    (sub,) = [a for a in build_parser()._actions if hasattr(a, "choices") and a.choices]
    text = " ".join(sub.choices["report"].format_help().split())
    assert "(default: on at --scale full, off otherwise)" in text
    assert "otherwise) (default: None)" not in text


def test_report_out_that_is_a_file_says_so(capsys, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    assert main(["report", "--only", "affine-rank", "--out", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "File exists" not in err


def test_fold_reasons_name_the_cli_option():
    assert _cli_words("pass tied='untie' to untie") == "pass --tied untie to untie"


@pytest.mark.slow
def test_fold_to_an_unwritable_folder_is_exit_2_before_work(tmp_path, capsys):
    from normlab.models.checkpoint import save_model
    from normlab.models.gpt import GPTConfig, TinyGPT

    model = tmp_path / "model"
    save_model(TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=32)), model)
    assert main(["fold", str(model), "/proc/normlab-x", "--tokens", "8"]) == 2
    captured = capsys.readouterr()
    assert "/proc/normlab-x" in captured.err and "Traceback" not in captured.err
    assert "folded" not in captured.out  # refused before loading or folding


@pytest.mark.slow
@pytest.mark.parametrize("address", ["127.0.0.1:1", "notanaddress"])
def test_unreachable_ray_address_is_one_line_exit_2(address, tmp_path):
    write_toys(tmp_path)
    done = run_cli(
        *("report", "--backend", "ray", "--address", address, "--module", "cli_toys"),
        *("--only", "toy-ok", "--scale", "smoke", "--out", str(tmp_path / "r")),
        cwd=tmp_path,
        env=cli_env(NORMLAB_CACHE=str(tmp_path / "cache")),
    )
    assert done.returncode == 2, done.stderr
    (line,) = error_lines(done.stderr)
    assert line.startswith("normlab report: error:") and "ray start --head" in line
    assert "HOST:PORT" in line


def _wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return "Z"


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_sigterm_is_one_line_with_the_resume_hint_and_no_orphans(jobs, tmp_path):
    write_toys(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = cli_env(NORMLAB_CACHE=str(tmp_path / "cache"), NORMLAB_TEST_MARKS=str(marks))
    args = ("report", "--module", "cli_toys", "--only", "toy-slow", "--scale", "smoke")
    process = subprocess.Popen(
        normlab_cmd(*args, "--jobs", jobs, "--no-progress", "--out", str(tmp_path / "r")),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: len(list(marks.iterdir())) >= int(jobs), "the tasks to start")
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, err
    assert "Traceback" not in err
    (line,) = error_lines(err)
    assert "terminated" in line and "resumes" in line
    workers = {int(m.name.split(".")[1]) for m in marks.iterdir()} - {process.pid}
    _wait_for(lambda: not any(_alive(pid) for pid in workers), "the workers to exit")


def test_only_can_be_repeated():
    args = build_parser().parse_args(["report", "--only", "tale", "wne", "--only", "macro"])
    assert args.only == ["tale", "wne", "macro"]
    assert build_parser().parse_args(["report"]).only is None
