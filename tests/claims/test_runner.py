"""The claims runner: tasks (seeds + checks + robustness), caching, cache keys, corruption,
orphans, and the v3 engine (rule errors, null calibration, stale-free keys)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import normlab._sources as sources
import normlab.claims.runner as runner_module
import normlab.claims.tasks as tasks_module
from normlab.claims.runner import ClaimRunner
from normlab.claims.tasks import task_key

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "normlab"


def _same(a, b) -> bool:
    return json.dumps(a) == json.dumps(b)  # NaN != NaN, but their JSON texts are equal


def test_seed_tasks_and_one_checks_task_are_cached(tmp_path, planted, monkeypatch):
    claim = planted["planted-ok"]
    (result,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick")
    assert result.label == "supported", result.verdict.reason
    assert [t.seed for t in result.tasks] == [0, 1, 2]
    assert result.checks is not None and result.checks.status == "ok"
    assert [c.status for c in result.verdict.checks] == ["verified"]
    assert len(list((tmp_path / "tasks").glob("planted-ok.quick.seed*.json"))) == 3
    assert len(list((tmp_path / "tasks").glob("planted-ok.quick.checks.*.json"))) == 1
    assert not any(t.cached for t in result.all_tasks)

    def no_work(*args, **kwargs):
        raise AssertionError("a cached task was recomputed")

    monkeypatch.setattr(runner_module, "run_task", no_work)
    (again,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick")
    assert all(t.cached for t in again.all_tasks)
    assert _same([t.measurement for t in again.tasks], [t.measurement for t in result.tasks])
    assert again.verdict == result.verdict
    with pytest.raises(AssertionError, match="recomputed"):
        ClaimRunner(tmp_path, jobs=1, force=True).run([claim], "quick")


def test_failed_check_is_error_not_contradicted(tmp_path, planted):
    (result,) = ClaimRunner(tmp_path, jobs=1).run([planted["planted-check-fails"]], "quick")
    assert result.label == "error" and "broken" in result.verdict.reason


def test_failing_task_is_recorded_and_retried(tmp_path, planted):
    claim = planted["planted-fails"]
    (result,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick")
    assert result.label == "error"
    assert all(t.status == "error" for t in result.tasks)
    assert "planted failure in seed 2" in result.tasks[2].error
    assert ClaimRunner(tmp_path, jobs=1).cached(claim, "quick", 0) is None


def test_unwritable_output_fails_before_any_work(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(PermissionError, match="Choose another folder"):
        ClaimRunner(blocker / "report")
    with pytest.raises(ValueError, match="positive"):
        ClaimRunner(tmp_path, jobs=0)


@pytest.mark.parametrize("text", ["", '{"claim_id": "planted-ok", "sca', "[1, 2]", '{"x": 1}'])
def test_corrupt_task_file_is_a_miss_with_a_warning(tmp_path, planted, text):
    claim = planted["planted-ok"]
    ClaimRunner(tmp_path, jobs=1).run([claim], "quick")
    (path,) = (tmp_path / "tasks").glob("planted-ok.quick.seed1.*.json")
    path.write_text(text)
    runner = ClaimRunner(tmp_path, jobs=1)
    with pytest.warns(RuntimeWarning, match=str(path.name)):
        (result,) = runner.run([claim], "quick")
    assert result.label == "supported"
    assert json.loads(path.read_text())["status"] == "ok"  # recomputed and rewritten
    assert [t.cached for t in result.tasks] == [True, False, True]


def _edited(monkeypatch, relative: str) -> None:
    """Simulate an edit of one source file under src/normlab (a trailing comment)."""
    target = (SRC / relative).resolve()
    real = sources.read_source

    def read(path):
        data = real(path)
        return data + b"\n# edited\n" if Path(path).resolve() == target else data

    monkeypatch.setattr(sources, "read_source", read)


@pytest.mark.parametrize(
    "relative",
    ["claims/catalogue/__init__.py", "claims/core.py", "probes/rank.py", "_checks.py"],
)
def test_task_key_changes_when_any_imported_module_changes(planted, monkeypatch, relative):
    claim = planted["planted-ok"]
    before = {s: task_key(claim, "quick", s) for s in (0, None)}
    _edited(monkeypatch, relative)
    after = {s: task_key(claim, "quick", s) for s in (0, None)}
    assert all(before[s] != after[s] for s in before), relative


def test_task_key_ignores_unrelated_modules_and_hashes_the_claim_module(planted, monkeypatch):
    claim = planted["planted-ok"]
    before = task_key(claim, "quick", 0)
    _edited(monkeypatch, "series/fan.py")  # nothing the planted claim imports
    assert task_key(claim, "quick", 0) == before
    closure = sources.source_closure(tasks_module.claim_modules(claim))
    assert "tests.claims._planted" in closure  # a claim outside normlab is hashed itself
    assert {"normlab.claims.core", "normlab.probes.rank"} <= set(closure)


def test_closure_follows_function_level_and_relative_imports(tmp_path):
    closure = sources.source_closure(["normlab.training.lm"])
    assert {"normlab.models.gpt", "normlab.data.corpus", "normlab.quant.model"} <= set(closure)
    assert "normlab.claims.core" not in closure


@pytest.mark.parametrize("relative", ["training/lm.py", "models/gpt.py", "layers/norms.py"])
def test_trained_model_key_follows_the_trainer_and_model_code(monkeypatch, relative):
    from normlab.models.gpt import GPTConfig
    from normlab.training import lm

    assert not hasattr(lm, "TRAIN_VERSION")
    config = GPTConfig(d_model=16, n_layers=1, n_heads=2, context=16)
    before = lm.lm_cache_key(config, lm.LMTrainConfig(steps=2), 0)
    _edited(monkeypatch, relative)
    assert lm.lm_cache_key(config, lm.LMTrainConfig(steps=2), 0) != before


def test_corrupt_trained_model_is_retrained(tmp_path, monkeypatch):
    import torch

    from normlab.models.gpt import GPTConfig
    from normlab.training import lm

    torch.set_num_threads(1)
    monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path))
    config = GPTConfig(d_model=16, n_layers=1, n_heads=2, context=16)
    train = lm.LMTrainConfig(steps=3, batch=2, warmup=1, eval_batches=1)
    model, log = lm.train_lm(config, train, seed=0)
    (weights,) = (tmp_path / "lm").glob("*.safetensors")
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated
    with pytest.warns(RuntimeWarning, match="corrupt"):
        again, log2 = lm.train_lm(config, train, seed=0)
    assert log2["key"] == log["key"]
    for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # retrained deterministically
    lm.train_lm(config, train, seed=0)  # and cached again without a warning


@pytest.mark.slow
def test_process_pool_matches_in_process(tmp_path, planted):
    claim = planted["planted-ok"]
    (serial,) = ClaimRunner(tmp_path / "a", jobs=1).run([claim], "quick")
    (pooled,) = ClaimRunner(tmp_path / "b", jobs=2).run([claim], "quick")
    assert _same([t.measurement for t in serial.tasks], [t.measurement for t in pooled.tasks])
    assert serial.verdict == pooled.verdict


def test_in_process_tasks_leave_the_callers_thread_count(tmp_path, planted, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 3)  # tasks would run with 3 threads
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ClaimRunner(tmp_path, jobs=1).run([planted["planted-ok"]], "quick")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_exclusive_claims_run_alone_after_the_others(tmp_path, planted):
    timed, stamped = planted["planted-timed"], planted["planted-stamped"]
    results = ClaimRunner(tmp_path, jobs=2).run([timed, stamped], "quick")
    by_id = {r.claim.id: r for r in results}
    ends = [t.measurement["table"]["method"]["end"] for t in by_id[stamped.id].tasks]
    starts = [t.measurement["table"]["method"]["start"] for t in by_id[timed.id].tasks]
    pids = {t.measurement["table"]["method"]["pid"] for t in by_id[timed.id].tasks}
    assert min(starts) >= max(ends)  # listed first, but run after every shared task
    assert pids == {float(os.getpid())}  # in this process, one at a time
    # its checks time nothing: they share the pool with the other claims' tasks
    assert by_id[timed.id].checks.measurement["where"]["value"] != float(os.getpid())


@pytest.mark.slow
def test_ray_backend(tmp_path, planted):
    pytest.importorskip("ray")
    claim, tuned = planted["planted-ok"], planted["planted-handicap"]
    ok, handicap = ClaimRunner(tmp_path, jobs=2, backend="ray").run([claim, tuned], "quick")
    assert ok.label == "supported"
    first, *others = handicap.tasks  # the tuning seed releases the others on Ray too
    assert first.choices and len(others) == 4 and all(t.fixed == first.choices for t in others)


_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from tests.claims import _planted
from normlab.claims import core
core._CATALOGUE.loaded = True  # the planted claims only
for claim in _planted.ALL:
    core.register_claim(claim)
if __name__ == "__main__":
    from normlab.cli import main
    sys.exit(main(["report", "--scale", "quick", "--jobs", "2", "--no-progress",
                   "--out", {out!r}, "--only", "planted-slow"]))
"""


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid``, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parents.items() if pp == p}
        todo.extend(kids - found)
        found |= kids
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if state[state.rfind(")") + 2] != "Z":
            alive.add(pid)
    return alive


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_report_leaves_no_orphans(tmp_path, sig):
    script = tmp_path / "report.py"
    script.write_text(textwrap.dedent(_SCRIPT.format(root=str(ROOT), out=str(tmp_path / "r"))))
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {**os.environ, "PLANTED_SLOW_SECONDS": "120", "PLANTED_SLOW_MARKERS": str(markers)}
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and len(list(markers.iterdir())) < 2:  # both tasks running
        time.sleep(0.2)
    children = _children(proc.pid)  # 2 workers + the resource tracker
    assert len(list(markers.iterdir())) == 2 and len(children) >= 2, "the pool never started"
    proc.send_signal(sig)
    proc.wait(timeout=30)
    deadline = time.time() + 10
    while time.time() < deadline and _alive(children):
        time.sleep(0.1)
    left = _alive(children)
    for pid in left:  # do not leave them behind even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left, f"orphaned processes {left} outlived the report"


# Protocol v3 engine -------------------------------------------------------------------


def test_a_failing_effect_errs_its_claim_and_leaves_the_others(tmp_path, planted):
    results = ClaimRunner(tmp_path, jobs=1).run(
        [planted["planted-broken-effect"], planted["planted-ok"]], "quick"
    )
    assert [r.label for r in results] == ["error", "supported"]
    assert "nobody" in results[0].verdict.reason


def test_robustness_reruns_the_seeds_at_each_neighbour(tmp_path, planted):
    claim = planted["planted-ok"]
    (plain,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick")
    assert plain.robustness == "not run" and not plain.neighbours
    (result,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick", robustness=True)
    offsets = [r for r in result.verdict.robustness if r["setting"] == "offset"]
    assert [r["value"] for r in offsets] == [-2.0, 0.5]
    assert {r["value"]: r["verdict"] for r in offsets} == {-2.0: "contradicted", 0.5: "supported"}
    assert result.robustness.startswith("fragile at offset=-2")
    assert len(result.neighbours) == 6 and all(t.override for t in result.neighbours)
    assert all(t.cached for t in result.tasks)  # the main run was reused


def test_a_neighbour_below_the_measured_floor_is_reported_not_rerun(tmp_path, planted):
    from dataclasses import replace

    from normlab.claims.core import FreeSetting

    why = "planted: the method was measured untestable below 0"
    floor = FreeSetting("offset", -2.0, 0.5, "normlab's choice: planted",
                        testable_from={"quick": 0.0}, below_why=why)  # fmt: skip
    claim = replace(planted["planted-ok"], free_settings=(floor,))
    (result,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick", robustness=True)
    offsets = {r["value"]: r for r in result.verdict.robustness if r["setting"] == "offset"}
    assert offsets[0.5]["verdict"] == "supported" and offsets[0.5]["seeds"] == 3
    assert offsets[-2.0]["verdict"] == "untestable" and offsets[-2.0]["seeds"] == 0
    assert why in offsets[-2.0]["why"] and not offsets[-2.0]["flips"]
    assert {t.override["offset"] for t in result.neighbours} == {0.5}
    assert result.robustness.endswith("untestable at offset=-2")


def test_null_calibration_is_recorded(tmp_path, planted):
    (result,) = ClaimRunner(tmp_path, jobs=1).run([planted["planted-ok"]], "quick")
    null = result.verdict.null
    assert null is not None and null["seeds"] == 3 and 0 <= null["supported_rate"] <= 1


def test_a_cached_null_measurement_is_a_miss(tmp_path, planted):
    claim = planted["planted-ok"]
    runner = ClaimRunner(tmp_path, jobs=1)
    runner.run([claim], "quick")
    path = runner.path(claim.id, "quick", 0, runner.key(claim, "quick", 0))
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "measurement": None}))
    with pytest.warns(RuntimeWarning, match="no usable measurement"):
        assert runner.cached(claim, "quick", 0) is None


def test_task_key_hashes_torch_python_and_threads(planted, monkeypatch):
    claim = planted["planted-ok"]
    before = task_key(claim, "quick", 0)
    monkeypatch.setattr(torch, "__version__", "0.0.1")
    assert task_key(claim, "quick", 0) != before
    monkeypatch.undo()
    monkeypatch.setattr(tasks_module, "THREADS", 2)
    assert task_key(claim, "quick", 0) != before


def test_tasks_run_with_the_pinned_thread_count(tmp_path, planted):
    (result,) = ClaimRunner(tmp_path, jobs=2).run([planted["planted-ok"]], "quick")
    assert {t.threads for t in result.tasks} == {tasks_module.THREADS}


def test_closure_hashes_the_kernels_cpp_source(monkeypatch):
    closure = sources.source_closure(["normlab.kernels.cpu"])
    assert any(name.endswith(":norms.cpp") for name in closure)
    before = sources.closure_hash(["normlab.kernels.cpu"])
    _edited(monkeypatch, "kernels/csrc/norms.cpp")
    assert sources.closure_hash(["normlab.kernels.cpu"]) != before


def test_from_package_import_submodule_takes_the_submodule_only():
    from normlab.claims.core import get_claim

    closure = sources.source_closure(tasks_module.claim_modules(get_claim("kappa-attention")))
    assert not any(name.startswith("normlab.rl") for name in closure)
    assert "normlab" not in closure  # the root package's __init__ imports every family


def test_unreachable_ray_address_is_refused_quickly(tmp_path, planted):
    pytest.importorskip("ray")
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match="No Ray cluster answers"):
        ClaimRunner(tmp_path, jobs=1, backend="ray", address="127.0.0.1:1").run(
            [planted["planted-ok"]], "quick"
        )
    assert time.perf_counter() - start < 30


def test_the_task_key_changes_with_a_numeric_librarys_version(monkeypatch):
    from normlab.claims import tasks
    from normlab.claims.core import get_claim

    claim = get_claim("affine-rank")
    before = tasks.task_key(claim, "smoke", 0)
    versions = {**tasks.library_versions(), "numpy": "0.0.1"}
    monkeypatch.setattr(tasks, "library_versions", lambda: versions)
    assert tasks.task_key(claim, "smoke", 0) != before
    assert set(tasks.NUMERIC_LIBRARIES) <= set(versions)


def test_the_placebo_flags_a_handicapped_baseline_through_the_runner(tmp_path, planted):
    from normlab.claims.report import write_report
    from normlab.claims.schema import validate

    claim = planted["planted-handicap"]
    runner = ClaimRunner(tmp_path, jobs=1)
    (result,) = runner.run([claim], "quick", placebo=True, robustness="decisive")
    placebo = result.verdict.placebo
    assert placebo["status"] == "run" and placebo["flagged"] and placebo["seeds"] == 5
    assert result.verdict.verdict == "supported"  # the handicapped comparison itself
    assert {r["setting"] for r in result.verdict.robustness} == {"scale_lr"}
    assert {r["value"] for r in result.verdict.robustness} == {0.5, 2.0}
    write_report([result], tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    validate(data)  # the packaged schema knows the placebo and its tasks
    record = data["claims"][0]
    assert record["placebo"]["flagged"] is True
    kinds = [t["kind"] for t in record["tasks"]]
    assert kinds.count("placebo") == 5 and kinds.count("neighbour") == 10


def test_robustness_also_rejudges_a_margin_of_normlabs_choice(tmp_path, planted):
    claim = planted["planted-ok"]  # margin 0.5, normlab's choice; scores 1.0, 1.1, 1.2
    (result,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick", robustness="all")
    margins = {
        r["value"]: r["verdict"] for r in result.verdict.robustness if r["setting"] == "margin"
    }
    assert margins == {0.25: "supported", 1.0: "inconclusive"}
    (plain,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick")
    assert plain.verdict.robustness == ()  # not asked for: nothing, not even the margin


def test_a_workers_code_identity_includes_the_numeric_libraries(monkeypatch):
    from normlab.claims import runner, tasks
    from normlab.claims.core import get_claim

    claim = get_claim("affine-rank")
    before = runner.code_identity(claim)
    assert before["library numpy"] == tasks.library_versions()["numpy"]
    monkeypatch.setattr(runner, "library_versions", lambda: {"numpy": "0.0.1"})
    assert runner.code_identity(claim)["library numpy"] != before["library numpy"]
