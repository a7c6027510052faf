"""The Ray backend against a real local cluster with token authentication on (issue 36,
items 10-12): the driver finds the token by itself, a worker whose code differs from the
driver's refuses its tasks, and a task whose worker dies is recorded while the report
completes. The cluster is started by the test on 127.0.0.1 and torn down in a finally."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.claims._cli_toys import TIMEOUT, cli_env, run_cli, write_toys

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group_alive(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _stop_group(pgid: int) -> None:
    """End every process the cluster's ``ray start`` left in its own process group."""
    for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.5)


class Cluster:
    """A one-node Ray cluster: its address, the folder of its token and claim module."""

    def __init__(self, address: str, token: Path, modules: Path) -> None:
        self.address, self.token, self.modules = address, token, modules

    def env(self, cache: Path) -> dict[str, str]:
        """A driver's environment: the token's file, no RAY_AUTH_MODE (normlab finds it)."""
        return cli_env(NORMLAB_CACHE=str(cache), RAY_AUTH_TOKEN_PATH=str(self.token))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    pytest.importorskip("ray")
    ray_cli = Path(sys.executable).with_name("ray")
    root = tmp_path_factory.mktemp("ray")
    modules = write_toys(root / "modules")
    token = root / "token"
    token.write_text(secrets.token_hex(32))
    temp = tempfile.mkdtemp(prefix="nlray", dir="/tmp")  # short: Ray's socket paths
    port = _free_port()
    env = cli_env(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(token),
        PYTHONPATH=os.pathsep.join(filter(None, [str(modules), os.environ.get("PYTHONPATH")])),
    )
    command = [
        *(str(ray_cli), "start", "--head", "--node-ip-address", "127.0.0.1"),
        *("--port", str(port), "--num-cpus", "2", "--include-dashboard=false"),
        *("--dashboard-port", str(_free_port())),
        *("--dashboard-agent-listen-port", str(_free_port()), "--disable-usage-stats"),
        *("--temp-dir", temp),
    ]
    start = subprocess.Popen(
        command, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        out, _ = start.communicate(timeout=TIMEOUT)
        assert start.returncode == 0, out.decode()[-3000:]
        yield Cluster(f"127.0.0.1:{port}", token, modules)
    finally:
        _stop_group(start.pid)
        shutil.rmtree(temp, ignore_errors=True)


def _tasks(out: Path, claim_id: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "tasks").glob(f"{claim_id}.*"))]


def test_a_run_completes_and_a_dead_worker_is_that_task_s_error(cluster, tmp_path):
    out = tmp_path / "report"
    done = run_cli(
        *("report", "--backend", "ray", "--address", cluster.address),
        *("--module", "cli_toys", "--only", "toy-ok", "toy-crash", "--scale", "smoke"),
        *("--no-progress", "--out", str(out)),
        cwd=cluster.modules,
        env=cluster.env(tmp_path / "cache"),
    )
    assert done.returncode == 1, done.stderr[-3000:]  # toy-crash ends in error; no abort
    assert "1 claim(s) ended in error: toy-crash" in " ".join(done.stderr.split())
    assert (out / "index.html").exists() and (out / "results.json").exists()
    assert {t["status"] for t in _tasks(out, "toy-ok")} == {"ok"}
    crashed = {t["seed"]: t for t in _tasks(out, "toy-crash")}
    assert crashed[1]["status"] == "error" and "Ray could not finish" in crashed[1]["error"]
    assert crashed[0]["status"] == crashed[2]["status"] == "ok"


DRIVER = """
import json, sys

import normlab.claims.runner as runner

import cli_toys

real = runner.code_identity
runner.code_identity = lambda claim, code=None: {**real(claim, code=code), "torch": "0.0-old"}
ray_runner = runner.ClaimRunner(sys.argv[1], backend="ray", address=sys.argv[2], jobs=2)
(result,) = ray_runner.run([cli_toys.OK], "smoke")
print(json.dumps([[t.status, t.error] for t in result.all_tasks]))
"""


def test_a_worker_whose_code_differs_refuses_the_task(cluster, tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "report"
    env = cluster.env(tmp_path / "cache")
    paths = [str(cluster.modules), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    done = subprocess.run(
        [sys.executable, str(driver), str(out), cluster.address],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    tasks = json.loads(done.stdout.strip().splitlines()[-1])
    assert tasks and all(status == "error" for status, _ in tasks)
    assert all("torch 0.0-old vs" in error and "refused" in error for _, error in tasks)
    assert {t["status"] for t in _tasks(out, "toy-ok")} == {"error"}  # nothing cached as ok


def test_a_driver_with_the_wrong_token_is_refused_with_exit_2(cluster, tmp_path):
    wrong = tmp_path / "wrong-token"
    wrong.write_text(secrets.token_hex(32))
    env = cluster.env(tmp_path / "cache")
    env["RAY_AUTH_TOKEN_PATH"] = str(wrong)
    done = run_cli(
        *("report", "--backend", "ray", "--address", cluster.address),
        *("--module", "cli_toys", "--only", "toy-ok", "--scale", "smoke", "--no-progress"),
        *("--out", str(tmp_path / "report")),
        cwd=cluster.modules,
        env=env,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("normlab report: error: The Ray cluster at") and "token" in last
