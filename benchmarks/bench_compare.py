"""Benchmark of ``normlab compare`` (not a test): the engine's overhead and its parallelism.

Runs the issue's comparison (LayerNorm / RMSNorm / DyT x 5 seeds x 3 learning rates on
TinyGPT's quick shape, claims/common.py QUICK_GPT, 300 steps) from an empty cache in each
mode asked for, and prints one JSON line per mode:

- ``wall``: seconds from call to result (resolving, tasks, statistics);
- ``train``: the sum of the trainings' own time (build + steps + validation of every
  trial, measured inside the workers);
- ``overhead``: ``wall * jobs / train`` (target <= 1.1 at ``--jobs 1``);
- ``speedup``: the ``jobs 1`` wall over this mode's (target >= 1.8 at ``--jobs 2``);
- ``load``: the load average before and after (the machine is shared: say so).

    python benchmarks/bench_compare.py --modes jobs1 jobs2 ray
    python benchmarks/bench_compare.py --steps 100 --seeds 2   # a smaller run

``--summarize OUT`` reads an existing comparison's ``results.json`` instead of running.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path


def _text(folder: Path) -> Path:
    from normlab.data.corpus import corpus

    path = folder / "text.txt"
    path.write_bytes(bytes(corpus("train")[:2_000_000].tolist()))
    return path


def summarize(results: Path, jobs: int) -> dict:
    """The overhead figures of a finished comparison's ``results.json``."""
    data = json.loads(Path(results).read_text())
    train = sum(a["train_seconds"] for a in data["arms"].values())
    return {
        "wall": round(data["seconds"], 1),
        "train": round(train, 1),
        "overhead": round(data["seconds"] * jobs / train, 3) if train else None,
        "cached": data["cached"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--modes", nargs="+", default=["jobs1", "jobs2", "ray"], choices=("jobs1", "jobs2", "ray")
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--lr", nargs="+", type=float, default=[1e-3, 3e-3, 1e-2])
    parser.add_argument("--norms", nargs="+", default=["layernorm", "rmsnorm", "dyt"])
    parser.add_argument("--summarize", default=None, help="a finished comparison's folder")
    parser.add_argument("--jobs", type=int, default=1, help="its jobs (with --summarize)")
    args = parser.parse_args()
    if args.summarize:
        print(json.dumps(summarize(Path(args.summarize) / "results.json", args.jobs)))
        return
    from normlab._machine import load_average
    from normlab.compare import compare

    work = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    text = _text(work)
    walls: dict[str, float] = {}
    try:
        for mode in args.modes:
            jobs = 1 if mode == "jobs1" else 2
            out = work / mode
            load = load_average()
            start = time.perf_counter()
            result = compare(
                "tinygpt",
                str(text),
                args.norms,
                steps=args.steps,
                seeds=args.seeds,
                lrs=args.lr,
                out=out,
                jobs=jobs,
                backend="ray" if mode == "ray" else "local",
            )
            result.write(out)
            wall = time.perf_counter() - start
            walls[mode] = wall
            train = sum(a.train_seconds for a in result.arms.values())
            line = {
                "mode": mode,
                "tasks": len(result.tasks),
                "steps": args.steps,
                "wall": round(wall, 1),
                "train": round(train, 1),
                "overhead": round(wall * jobs / train, 3),
                "speedup": round(walls["jobs1"] / wall, 2) if "jobs1" in walls else None,
                "load": [round(load, 2), round(load_average(), 2)],
                "cores": os.cpu_count(),
            }
            print(json.dumps(line), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
