"""Run about a hundred ``normlab`` command lines, good and bad input across every subcommand,
and count how each ends: ok, a clear error, a traceback, or something else.

Each call runs as its own subprocess (``python -m normlab ...``), as a user would, in a
scratch folder with a private ``NORMLAB_CACHE``. A *clear* error is exit status 1 or 2 with
a ``normlab ...: error`` line on stderr and no traceback; a *traceback* is any
``Traceback`` in the output or an exit status other than 0, 1, 2 and 130.

Usage::

    python tools/cli_matrix.py                 # the package as installed
    python tools/cli_matrix.py --src OTHER/src # another source tree (e.g. an older commit)
    python tools/cli_matrix.py --json out.json --show traceback,other

Run it on a quiet machine: the calls are small (smoke scale, a toy claim, a two-layer
model) but there are many of them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: A claim module for ``--module``: one fast toy claim, so report and claim calls stay small.
TOY_CLAIM = """
from normlab.claims import Claim, Effect, Margin, Premise, register_claim
from normlab.claims.core import SCALES


def _run(config, seed):
    return {"table": {"method": {"x": 1.0 + 0.1 * seed}, "baseline": {"x": 0.5}}}


def _gap(m):
    return m["table"]["method"]["x"] - m["table"]["baseline"]["x"]


TOY = register_claim(Claim(
    id="matrix-toy",
    paper="none",
    hypothesis="the method cell exceeds the baseline cell",
    primary=Effect("gap", "method minus baseline", _gap, direction="greater",
                   margin=Margin(0.0, "normlab's choice: a test"), baseline="baseline"),
    headline="none",
    configs={s: {"seeds": 3} for s in SCALES},
    run=_run,
    untuned="a toy",
))
"""


def _fixtures(root: Path) -> dict[str, str]:
    """Build the folders and files the calls read; return their paths by name."""
    import torch

    from normlab.models.checkpoint import save_model
    from normlab.models.gpt import GPTConfig, TinyGPT

    torch.manual_seed(0)
    model = root / "model"
    save_model(TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=32)), model)
    paths = {"model": model}
    for damage in ("badjson", "notobject", "trunc", "noweights"):
        folder = root / damage
        folder.mkdir()
        for f in model.iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
        weights = folder / "model.safetensors"
        if damage == "badjson":
            (folder / "config.json").write_text('{"normlab": ')
        elif damage == "notobject":
            (folder / "config.json").write_text("[1, 2]")
        elif damage == "trunc":
            weights.write_bytes(weights.read_bytes()[:-100])
        else:
            weights.unlink()
        paths[damage] = folder
    (root / "afile").write_text("a regular file\n")
    (root / "emptydir").mkdir()
    (root / "nonempty").mkdir()
    (root / "nonempty" / "stale.txt").write_text("old")
    (root / "matrix_toy.py").write_text(TOY_CLAIM)
    paths.update(
        file=root / "afile", empty=root / "emptydir", nonempty=root / "nonempty", root=root
    )
    return {k: str(v) for k, v in paths.items()}


def calls(p: dict[str, str]) -> list[list[str]]:
    """The command lines (without ``normlab``), with fixture paths filled in."""
    m, f, r = p["model"], p["file"], p["root"]
    toy = ["--module", "matrix_toy", "--only", "matrix-toy", "--scale", "smoke"]
    quiet = ["--no-progress", "--jobs", "1"]
    return [
        # top level
        [],
        ["--version"],
        ["--help"],
        ["bogus"],
        ["--bogus"],
        # list
        ["list"],
        ["list", "methods"],
        ["list", "claims"],
        ["list", "rms"],
        ["list", "rms*"],
        ["list", "RMS_norm"],
        ["list", "foo"],
        ["list", "claims", "foo"],
        ["list", "claims", "affine"],
        ["list", "--kind", "norm"],
        ["list", "--kind", "bogus"],
        ["list", "--kind", "norm", "rms"],
        ["list", "--wide"],
        ["list", "--markdown"],
        ["list", "claims", "--wide"],
        ["list", "claims", "--markdown"],
        ["list", "claims", "--kind", "norm"],
        ["list", "a", "b", "c"],
        ["list", "--bogus"],
        ["list", "--help"],
        # report: argument errors
        ["report", "--help"],
        ["report", "--scale", "bogus"],
        ["report", "--jobs", "0"],
        ["report", "--jobs", "-3"],
        ["report", "--jobs", "x"],
        ["report", "--only", "nosuch", "--out", f"{r}/r0"],
        ["report", "--only", "affin-rank", "--out", f"{r}/r0"],
        ["report", "--only", "affine-rank", "--address", "127.0.0.1:1"],
        ["report", "--backend", "bogus"],
        ["report", "--backend", "ray", "--address", "127.0.0.1:1", *toy, "--out", f"{r}/r1"],
        ["report", "--backend", "ray", "--address", "nohost.invalid:6379", *toy],
        ["report", "--backend", "ray", "--address", "notanaddress", *toy, "--out", f"{r}/r1"],
        ["report", "--module", "no_such_module", "--out", f"{r}/r0"],
        ["report", "--module", "matrix_toy", "--only", "nosuch", "--out", f"{r}/r0"],
        ["report", *toy, *quiet, "--out", f],
        ["report", *toy, *quiet, "--out", f"{f}/sub"],
        ["report", *toy, *quiet, "--out", "/proc/x"],
        ["report", *toy, "--robustness", "--no-robustness", *quiet, "--out", f"{r}/r2"],
        # report: runs (a toy claim; one small catalogue claim)
        ["report", *toy, *quiet, "--out", f"{r}/r3"],
        ["report", *toy, *quiet, "--out", f"{r}/r3"],
        ["report", *toy, *quiet, "--out", f"{r}/r3", "--force"],
        ["report", *toy, "--no-progress", "--jobs", "2", "--out", f"{r}/r4"],
        ["report", *toy, *quiet, "--robustness", "--out", f"{r}/r5"],
        ["report", "--only", "affine-rank", "--scale", "smoke", *quiet, "--out", f"{r}/r6"],
        # claim
        ["claim"],
        ["claim", "--help"],
        ["claim", "nosuch"],
        ["claim", "affin-rank"],
        ["claim", "affine-rank", "--scale", "bogus"],
        ["claim", "matrix-toy", "--module", "matrix_toy", "--scale", "smoke", "--out", f],
        ["claim", "matrix-toy", "--module", "matrix_toy", "--scale", "smoke", "--out", "/proc/x"],
        ["claim", "matrix-toy", "--module", "no_such_module"],
        ["claim", "matrix-toy", "--module", "matrix_toy", "--scale", "smoke", "--no-progress",
         "--out", f"{r}/c1"],
        ["claim", "matrix_toy", "--module", "matrix_toy", "--scale", "smoke", "--no-progress",
         "--out", f"{r}/c1"],
        ["claim", "affine-rank", "--scale", "smoke", "--no-progress", "--out", f"{r}/c2"],
        # probe
        ["probe", "--help"],
        ["probe"],
        ["probe", m, "--out", f"{r}/p1", "--no-progress"],
        ["probe", m, "--out", f"{r}/p2", "--no-progress", "--no-swap", "--tokens", "8"],
        ["probe", f"{r}/nosuch"],
        ["probe", f],
        ["probe", p["empty"]],
        ["probe", p["badjson"]],
        ["probe", p["notobject"]],
        ["probe", p["trunc"]],
        ["probe", p["noweights"]],
        ["probe", m, "--tokens", "0"],
        ["probe", m, "--tokens", "-1"],
        ["probe", m, "--tokens", "abc"],
        ["probe", m, "--tokens", "100000"],
        ["probe", m, "--batch", "0"],
        ["probe", m, "--out", f],
        ["probe", m, "--out", f"{f}/sub"],
        ["probe", m, "--out", "/proc/x"],
        ["probe", m, "--device", "bogus"],
        ["probe", m, "--device", "cuda:7"],
        # fold
        ["fold", "--help"],
        ["fold"],
        ["fold", m],
        ["fold", m, f"{r}/f1", "--tokens", "8"],
        ["fold", m, f"{r}/f2", "--tokens", "8", "--tied", "refuse"],
        ["fold", m, f"{r}/f3", "--tied", "bogus"],
        ["fold", m, f"{r}/f4", "--tokens", "8", "--center-unembed"],
        ["fold", m, f"{r}/f5", "--tolerance", "-1"],
        ["fold", m, f"{r}/f5", "--tolerance", "abc"],
        ["fold", m, f"{r}/f5", "--tokens", "0"],
        ["fold", m, f"{r}/f5", "--batch", "0"],
        ["fold", m, "/proc/x", "--tokens", "8"],
        ["fold", m, f],
        ["fold", m, f"{f}/sub"],
        ["fold", m, m],
        ["fold", m, p["nonempty"]],
        ["fold", f"{r}/nosuch", f"{r}/f6"],
        ["fold", f, f"{r}/f6"],
        ["fold", p["badjson"], f"{r}/f6"],
        ["fold", p["trunc"], f"{r}/f6"],
        ["fold", p["noweights"], f"{r}/f6"],
        # bench (argument errors and one tiny run)
        ["bench", "--help"],
        ["bench", "--shapes", "bogus"],
        ["bench", "--shapes", "0x8"],
        ["bench", "--dtypes", "float9"],
        ["bench", "--ops", "nosuch"],
        ["bench", "--modes", "sideways"],
        ["bench", "--device", "tpu"],
        ["bench", "--repeats", "0"],
        ["bench", "--threads", "0"],
        ["bench", "--out", "/proc/x/b.json", "--shapes", "8x16", "--ops", "rmsnorm"],
        ["bench", "--plot", "/proc/x", "--shapes", "8x16", "--ops", "rmsnorm"],
        ["bench", "--shapes", "8x16", "--ops", "rmsnorm", "--dtypes", "float32",
         "--modes", "fwd", "--repeats", "1", "--no-regimes"],
    ]  # fmt: skip


def classify(rc: int, out: str, err: str) -> str:
    """ok, clear, traceback or other (see the module docstring)."""
    if "Traceback (most recent call last)" in out + err or rc not in (0, 1, 2, 130):
        return "traceback"
    if rc == 0:
        return "ok"
    lines = [line for line in err.splitlines() if line.strip()]
    if lines and lines[-1].startswith("normlab") and "error" in lines[-1]:
        return "clear"
    return "other"


def run_one(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> dict:
    """Run ``normlab argv``; return the call with its exit status, outputs and class."""
    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "normlab", *argv],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = -9, str(exc.stdout or ""), f"timed out after {timeout:g} s"
    seconds = time.monotonic() - start
    return {
        "argv": argv,
        "rc": rc,
        "class": classify(rc, out, err),
        "seconds": round(seconds, 1),
        "stderr_tail": err.strip().splitlines()[-3:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default=None, help="a source tree to run instead (its src/)")
    parser.add_argument("--json", default=None, help="write every call's record here")
    parser.add_argument("--show", default="traceback,other", help="classes to print in full")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per call")
    args = parser.parse_args()
    env = dict(os.environ, COLUMNS="80", PYTHONWARNINGS="ignore")
    if args.src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.src, env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="normlab-matrix-") as tmp:
        root = Path(tmp)
        env["NORMLAB_CACHE"] = str(root / "cache")
        records = [run_one(a, root, env, args.timeout) for a in calls(_fixtures(root))]
    counts = {k: sum(r["class"] == k for r in records) for k in ("ok", "clear", "traceback")}
    counts["other"] = len(records) - sum(counts.values())
    show = set(args.show.split(","))
    for r in records:
        if r["class"] in show:
            print(f"[{r['class']}] rc={r['rc']} normlab {' '.join(r['argv'])}")
            for line in r["stderr_tail"]:
                print(f"    {line}")
    print(
        f"calls {len(records)}, ok {counts['ok']}, clear {counts['clear']}, "
        f"traceback {counts['traceback']}, other {counts['other']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": counts, "calls": records}, indent=1))
    return 1 if counts["traceback"] else 0


if __name__ == "__main__":
    sys.exit(main())
