"""``normlab bench``: selected work, output checks before any timing, targets, the model."""

from __future__ import annotations

import json

import pytest
import torch

from normlab.cli import _bench_ops, main
from normlab.cli._bench_model import bench_model
from normlab.cli._bench_report import check_targets
from normlab.cli.bench import run_benchmarks

TINY = ["--shapes", "64x128", "--ops", "rmsnorm", "--dtypes", "float32", "--repeats", "1"]
TINY += ["--no-compile", "--no-regimes", "--allow-load"]


def test_bench_runs_the_selected_ops_and_prints_targets(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", *TINY, "--modes", "fwd", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [(r["op"], r["shape"], r["mode"]) for r in data["ops"]] == [
        ("rmsnorm", [64, 128], "fwd")
    ]
    assert len(data["meta"]["load_avg_1_5_15"]["start"]) == 3
    text = capsys.readouterr().out
    assert "issue" not in text and "RMSNorm fwd float32 >= 0.9x copy" in text
    assert "not measured" in text  # no compiled peer was timed
    assert "x liger" not in text and "Liger-Kernel runs on CUDA only" in text
    assert "load average (1 min):" in text and len(data["ops"][0]["load"]) == 2
    assert "copy GB/s" in text and f"{data['ops'][0]['copy_gbs']:.1f}" in text


def _record(shape, x_copy, loaded=False, **speedup):
    return {"op": "rmsnorm", "dtype": "float32", "mode": "fwd", "shape": shape, "loaded": loaded,
            "x_copy": {"normlab": x_copy}, "speedup": {"eager": 2.0} | speedup}  # fmt: skip


def test_ratios_measured_under_load_are_withheld_unless_allowed(capsys):
    from normlab.cli._bench_report import print_results

    records = [_record([8192, 1024], 0.95, loaded=True, torch=1.5)]
    rows = {r["target"]: r for r in check_targets(records, None)}
    row = rows["RMSNorm fwd float32 >= 0.9x copy"]
    assert not row["measured"] and row["loaded"]
    row = {r["target"]: r for r in check_targets(records, None, allow_load=True)}[row["target"]]
    assert row["met"] and row["loaded"]
    records[0] |= {"gbs": {"normlab": 10.0}, "load": [3.0, 3.5]}
    print_results(records, [], [], None, "t", threads=2)
    text = capsys.readouterr().out
    assert "loaded" in text and "0.95" not in text and "1.50" not in text and "x liger" not in text
    print_results(records, [], [], None, "t", allow_load=True, threads=2)
    assert "0.95" in capsys.readouterr().out


def test_bytes_moved_count_every_tensor_and_the_saved_statistics():
    import torch

    rows, d = 8, 16
    fwd = _bench_ops.traffic("layernorm", (rows, d), torch.float32, False)
    assert fwd == 2 * rows * d * 4 + 2 * d * 4 + 2 * rows * 4  # x, y; w, b; mean, rstd
    both = _bench_ops.traffic("layernorm", (rows, d), torch.float32, True)
    assert both - fwd == 3 * rows * d * 4 + 4 * d * 4 + 2 * rows * 4  # dy, x, dx; w, b, dw, db
    fused = _bench_ops.traffic("add_rmsnorm", (rows, d), torch.bfloat16, True)
    assert fused == 8 * rows * d * 2 + 3 * d * 4 + 2 * rows * 4


def test_sweep_names_the_widths_and_the_qk_norm_shape():
    from normlab.cli.bench import _shapes

    widths = {d for _, d in _shapes("sweep")}
    assert {64, 96, 1000, 5120, 12288, 65536} <= widths and (364800, 128) in _shapes("sweep")


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
    records = [_record([8192, 1024], 0.95), _record([2048, 4096], 0.85), _record([4, 16], 0.5)]
    rows = {r["target"]: r for r in check_targets(records, None)}
    copy = rows["RMSNorm fwd float32 >= 0.9x copy"]  # judged on the two 8M-element shapes
    assert copy["measured"] and not copy["met"]
    assert copy["values"] == {"8192x1024": 0.95, "2048x4096": 0.85}
    assert not rows["RMSNorm fwd float32 >= torch.compile"]["measured"]
    records = [_record([8192, 1024], 0.95, compiled=1.1, torch=0.9)]
    rows = check_targets(records, {"speedup": {"plain": 1.3, "unfused": 1.02}})
    met = {r["target"]: r["met"] for r in rows}
    assert met["RMSNorm fwd float32 >= 0.9x copy"]
    assert met["RMSNorm fwd float32 >= torch.compile"]
    assert not met["RMSNorm fwd float32 >= torch's own op"]
    assert met["TinyGPT train step with kernels >= 1.2x without"]
    assert met["TinyGPT train step, fused add + norm >= unfused kernels"]
    assert not met["TinyGPT train step with kernels >= torch.compile without"]


@pytest.mark.slow  # the first training steps of a process import most of torch
def test_model_record_has_every_arm_and_a_norm_share():
    record = bench_model(d_model=32, n_layers=1, context=16, batch=2, compile=False, repeats=1)
    assert set(record["seconds"]) == {"kernels", "unfused", "plain", "no-norm", "no-norm-plain"}
    assert set(record["speedup"]) == {"unfused", "plain"} and len(record["load"]) == 2
    # 1 - t(no-norm) / t(model): below 1 always; its size is timing noise at this scale
    assert all(v < 1.0 for v in record["norm_share"].values())


def test_gpu_script_is_valid_bash_and_its_bench_commands_parse():
    """benchmarks/gpu.sh runs only where a GPU is lent: check it here without one."""
    import re
    import shlex
    import subprocess
    from pathlib import Path

    from normlab.cli import build_parser

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    text = script.read_text().replace("\\\n", " ")
    commands = re.findall(r"-m normlab (bench [^|\n]*?) 2>&1", text)
    assert len(commands) == 3
    for command in commands:
        for var, value in (("$op", "rmsnorm"), ("$shapes", "8192x1024"), ("$parts", "p")):
            command = command.replace(var, value)
        args = build_parser().parse_args(shlex.split(command))
        assert args.device == "cuda" and args.func is not None
    assert (
        _bench_ops._liger_op("rmsnorm", 64, "cpu", torch.float32) is None
    )  # the Liger peer is CUDA-only


def test_gpu_script_merges_its_runs_into_one_json_and_one_png(tmp_path):
    """The script's last stage (its embedded Python) on two runs made here on the CPU: one
    record per (op, shape, dtype, mode), the later run's where both measured it."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    merge = re.search(
        r"<<'EOF'[^\n]*\n(.*?)\nEOF\n", (root / "benchmarks" / "gpu.sh").read_text(), re.S
    )
    parts, out = tmp_path / "parts", tmp_path / "out"
    out.mkdir()
    for name, ops in (("2-rmsnorm", ("rmsnorm",)), ("3-compiled", ("rmsnorm", "layernorm"))):
        run_benchmarks(
            out=parts / f"{name}.json", shapes=[(8, 64)], dtypes=("float32",), ops=ops,
            modes=("fwd",), compile=False, regimes=False, repeats=1,
        )  # fmt: skip
    done = subprocess.run([sys.executable, "-", str(parts), str(out)], input=merge.group(1),
                          capture_output=True, text=True, cwd=root, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    merged = json.loads((out / "bench_gpu.json").read_text())
    assert sorted(r["op"] for r in merged["ops"]) == ["layernorm", "rmsnorm"]
    assert merged["parts"] == ["2-rmsnorm.json", "3-compiled.json"]
    assert (out / "bench_gpu.png").stat().st_size > 0
    assert "2 records from 2 runs" in done.stdout


def test_fresh_outputs_are_judged_against_torchs_own_op_too():
    """The default allocator's table times F.rms_norm / F.layer_norm beside the kernels, and
    the target "never slower than torch's own op" covers that regime (withheld under load)."""
    import torch

    fresh = _bench_ops.fresh_output_regime(
        ["rmsnorm", "dyt"], [(64, 128)], [torch.float32], repeats=1, min_time=0.001
    )
    by_op = {r["op"]: r for r in fresh}
    assert "torch" in by_op["rmsnorm"]["seconds"] and by_op["rmsnorm"]["speedup"]["torch"] > 0
    assert by_op["dyt"]["speedup"] == {}  # torch has no DyT op
    made = [
        {"op": "rmsnorm", "dtype": "float32", "shape": [8192, 1024], "loaded": False,
         "speedup": {"torch": 1.3}},
        {"op": "rmsnorm", "dtype": "float32", "shape": [2048, 4096], "loaded": False,
         "speedup": {"torch": 0.9}},
    ]  # fmt: skip
    _judged("RMSNorm fwd float32 >= torch's own op, fresh outputs", made, "fresh")


def _judged(name: str, made: list[dict], regime: str) -> None:
    """Target ``name`` over records ``made`` planted in ``regime``: one value per shape, missed
    while a shape is below torch's op, met once none is, withheld when measured under load."""

    def row() -> dict:
        return {r["target"]: r for r in check_targets([], None, **{regime: made})}[name]

    values = {"x".join(map(str, r["shape"])): r["speedup"]["torch"] for r in made}
    assert row()["values"] == values and min(values.values()) < 1 and not row()["met"]
    for r in made:
        r["speedup"]["torch"] = max(r["speedup"]["torch"], 1.0)
    assert row()["met"]
    for r in made:
        r["loaded"] = True
    assert not row()["measured"] and row()["loaded"]


def test_small_inputs_time_both_passes_against_torchs_own_op_and_are_judged():
    """Small inputs in cache: normlab's forward and forward+backward beside F.rms_norm /
    F.layer_norm on the same tensors every call; ops torch has no op for are left out, and the
    target "never slower than torch's own op" covers each pass (withheld under load)."""
    import torch

    small = _bench_ops.small_input_regime(
        ["layernorm", "dyt"], [torch.float32], repeats=1, min_time=0.001, shapes=[(8, 64)]
    )
    modes = [(r["op"], r["mode"]) for r in small]
    assert modes == [("layernorm", "fwd"), ("layernorm", "fwd+bwd")]
    only = _bench_ops.small_input_regime(["rmsnorm"], [torch.float32], repeats=1, min_time=0.001,
                                         shapes=[(8, 64)], modes=["fwd+bwd"])  # fmt: skip
    assert [r["mode"] for r in only] == ["fwd+bwd"]
    for r in small:
        assert set(r["seconds"]) == {"normlab", "torch"} and min(r["seconds"].values()) > 0
        assert r["speedup"]["torch"] == r["seconds"]["torch"] / r["seconds"]["normlab"]
    made = [
        {"op": "layernorm", "dtype": "float32", "mode": "fwd+bwd", "shape": [64, 256],
         "loaded": False, "speedup": {"torch": 0.5}},
        {"op": "layernorm", "dtype": "float32", "mode": "fwd+bwd", "shape": [1024, 1024],
         "loaded": False, "speedup": {"torch": 1.2}},
    ]  # fmt: skip
    _judged("LayerNorm fwd+bwd float32 >= torch's own op, small inputs in cache", made, "small")


def test_the_small_input_table_is_printed_and_withheld_under_load(capsys):
    from normlab.cli._bench_report import print_results

    made = {"op": "rmsnorm", "dtype": "bfloat16", "mode": "fwd", "shape": [64, 256],
            "seconds": {"normlab": 2.2e-5, "torch": 1.1e-5}, "speedup": {"torch": 0.5},
            "loaded": False}  # fmt: skip
    print_results([], [], [], None, "t", small=[made])
    text = capsys.readouterr().out
    assert "small inputs in cache" in text and "0.50" in text and "22" in text
    print_results([], [], [], None, "t", small=[made | {"loaded": True}])
    assert "0.50" not in capsys.readouterr().out
