"""Toy claims for tests that run ``normlab`` (or a Ray worker) in another process.

:func:`write_toys` writes them as an importable module, so ``--module`` and worker
processes find them; each claim is tiny (three seeds, no training) and its ``mode``
decides what a seed does: return at once, kill its worker process, or sleep until ended.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: The module's source: claims ``toy-ok``, ``toy-crash`` (seed 1 kills its worker) and
#: ``toy-slow`` (each seed marks ``$NORMLAB_TEST_MARKS/seed<N>.<pid>`` and sleeps).
SOURCE = """
import os
import time

from normlab.claims import Claim, Effect, Margin, register_claim
from normlab.claims.core import SCALES


def _run(config, seed):
    if config["mode"] == "crash" and seed == 1:
        os._exit(3)
    if config["mode"] == "slow":
        marks = os.environ["NORMLAB_TEST_MARKS"]
        open(os.path.join(marks, f"seed{seed}.{os.getpid()}"), "w").close()
        time.sleep(900)
    return {"table": {"method": {"x": 1.0 + 0.1 * seed}, "baseline": {"x": 0.5}}}


def _gap(m):
    return m["table"]["method"]["x"] - m["table"]["baseline"]["x"]


def _claim(mode):
    return register_claim(Claim(
        id=f"toy-{mode}",
        paper="none",
        hypothesis="the method cell exceeds the baseline cell",
        primary=Effect("gap", "method minus baseline", _gap, direction="greater",
                       margin=Margin(0.0, "normlab's choice: a test"), baseline="baseline"),
        headline="none",
        configs={s: {"seeds": 3, "mode": mode} for s in SCALES},
        run=_run,
        untuned="a toy",
    ))


OK, CRASH, SLOW = _claim("ok"), _claim("crash"), _claim("slow")
"""

#: Seconds any subprocess of these tests may take: generous, for a loaded CI machine.
TIMEOUT = 600


def write_toys(folder: Path, name: str = "cli_toys") -> Path:
    """Write the toy claims as ``folder/name.py``; return ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(SOURCE)
    return folder


def cli_env(**extra: str) -> dict[str, str]:
    """This environment, with ``extra`` set and without a Ray auth mode of its own."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    env.update(extra)
    return env


def normlab_cmd(*args: str) -> list[str]:
    """The command line of ``normlab args`` in this interpreter."""
    return [sys.executable, "-m", "normlab", *args]


def run_cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``normlab args`` to the end (at most :data:`TIMEOUT` s)."""
    return subprocess.run(
        normlab_cmd(*args), cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )


def error_lines(stderr: str) -> list[str]:
    """The non-empty lines of ``stderr``."""
    return [line for line in stderr.splitlines() if line.strip()]
