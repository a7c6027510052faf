"""``normlab bench``: selected work, output checks before any timing, targets, the model."""

from __future__ import annotations

import json

import pytest

from normlab.cli import _bench_ops, main
from normlab.cli._bench_model import bench_model
from normlab.cli._bench_report import check_targets

TINY = ["--shapes", "64x128", "--ops", "rmsnorm", "--dtypes", "float32", "--repeats", "1"]
TINY += ["--no-compile", "--no-regimes"]


def test_bench_runs_the_selected_ops_and_prints_targets(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", *TINY, "--modes", "fwd", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [(r["op"], r["shape"], r["mode"]) for r in data["ops"]] == [
        ("rmsnorm", [64, 128], "fwd")
    ]
    assert len(data["meta"]["load_avg_1_5_15"]["start"]) == 3
    text = capsys.readouterr().out
    assert "targets (issue 27)" in text and "RMSNorm fwd float32 >= 0.9x copy" in text
    assert "not measured" in text  # no compiled peer was timed


@pytest.mark.parametrize(
    "argv",
    [["--shapes", "8x"], ["--ops", "nope"], ["--dtypes", "int8"], ["--repeats", "0"]],
)
def test_bench_rejects_bad_options_with_exit_2(argv, capsys):
    assert main(["bench", *argv]) == 2
    assert "error" in capsys.readouterr().err


@pytest.fixture
def no_timing(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the bench timed something before checking its outputs")

    monkeypatch.setattr(_bench_ops, "bench_op", refuse)
    monkeypatch.setattr(_bench_ops, "fresh_output_regime", refuse)


@pytest.mark.parametrize("where", ["folder", "proc"])
def test_bad_out_fails_before_timing(tmp_path, capsys, no_timing, where):
    out = str(tmp_path) if where == "folder" else "/proc/normlab-bench.json"
    assert main(["bench", *TINY, "--out", out]) == 2
    err = capsys.readouterr().err
    assert "error" in err and ("folder" in err or "cannot write" in err), err


def test_huge_shape_is_refused_with_a_clear_error(capsys, no_timing):
    assert main(["bench", "--shapes", "10000000x10000000", "--no-regimes"]) == 2
    err = capsys.readouterr().err
    assert "GiB" in err and "smaller shape" in err


@pytest.mark.slow  # matplotlib's first import
@pytest.mark.parametrize("kind", ["folder", "no-suffix"])
def test_plot_path_printed_is_the_file_written(tmp_path, capsys, kind):
    target = tmp_path / "plots"
    if kind == "folder":
        target.mkdir()
    assert main(["bench", *TINY, "--modes", "fwd", "--plot", str(target)]) == 0
    printed = next(
        line.removeprefix("plot: ") for line in capsys.readouterr().out.splitlines()
        if line.startswith("plot: ")
    )  # fmt: skip
    expected = target / "bench.png" if kind == "folder" else tmp_path / "plots.png"
    assert printed == str(expected) and expected.is_file()


def test_targets_need_every_shape_and_say_when_unmeasured():
    def rec(shape, x_copy, compiled=None):
        speed = {"eager": 2.0} | ({} if compiled is None else {"compiled": compiled})
        return {"op": "rmsnorm", "dtype": "float32", "mode": "fwd", "shape": shape,
                "x_copy": {"normlab": x_copy}, "speedup": speed}  # fmt: skip

    rows = {r["target"]: r for r in check_targets([rec([8, 8], 0.95), rec([4, 16], 0.85)], None)}
    copy = rows["RMSNorm fwd float32 >= 0.9x copy"]
    assert copy["measured"] and not copy["met"] and copy["values"] == {"8x8": 0.95, "4x16": 0.85}
    assert not rows["RMSNorm fwd float32 >= torch.compile"]["measured"]
    rows = check_targets([rec([8, 8], 0.95, 1.1)], {"speedup": {"plain": 1.3}})
    met = {r["target"]: r["met"] for r in rows}
    assert met["RMSNorm fwd float32 >= 0.9x copy"]
    assert met["RMSNorm fwd float32 >= torch.compile"]
    assert met["TinyGPT train step with kernels >= 1.2x without"]
    assert not met["TinyGPT train step with kernels >= torch.compile without"]


@pytest.mark.slow  # the first training steps of a process import most of torch
def test_model_record_has_every_arm_and_a_norm_share():
    record = bench_model(d_model=32, n_layers=1, context=16, batch=2, compile=False, repeats=1)
    assert set(record["seconds"]) == {"kernels", "plain", "no-norm", "no-norm-plain"}
    assert set(record["speedup"]) == {"plain"}
    assert all(-1.0 < v < 1.0 for v in record["norm_share"].values())
