"""``normlab compare MODEL --data DATA --norms ...``: which normalization for my model.

Every arm is tuned over the same learning rates on validation, trained on K seeds, tested
once per seed and judged against the reference by paired differences (the claims rule,
Holm-adjusted across arms). Writes ``OUT/index.html`` and ``OUT/results.json`` and prints a
table. Finished tasks are cached in ``OUT/tasks``: after Ctrl-C the same command resumes.
Exit codes: 0 done; 2 bad input (one line says why); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from normlab.cli._common import Formatter, fail, jobs_type, positive_int

__all__ = ["add_parser", "run"]


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``compare`` on the ``normlab`` argument parser."""
    p = sub.add_parser(
        "compare",
        help="which normalization for my model? tuned, seeded, judged",
        description=__doc__,
        formatter_class=Formatter,
    )
    p.add_argument(
        "model",
        help="a Hugging Face folder (config, optional weights), tinygpt, forecaster, "
        "forecaster-mlp, or module:function returning an nn.Module",
    )
    p.add_argument(
        "--data",
        required=True,
        help="a text file or folder (lm), a CSV (forecast), or module:function returning "
        "(train, val, test)",
    )
    p.add_argument(
        "--norms",
        nargs="+",
        default=["layernorm", "rmsnorm", "dyt"],
        help="arms: registered norms (name:key=value,... passes arguments); for forecasting "
        "series normalizers and none",
    )
    p.add_argument("--reference", default=None, help="the arm to compare with (default: first)")
    p.add_argument(
        "--task",
        choices=("lm", "forecast", "classify"),
        default=None,
        help="(default: from MODEL and DATA)",
    )
    p.add_argument("--steps", type=positive_int, default=300, help="optimizer steps per run")
    p.add_argument("--seeds", type=positive_int, default=5, help="seeds (at least 2)")
    p.add_argument(
        "--lr",
        nargs="+",
        type=_positive_float,
        default=[1e-3, 3e-3, 1e-2],
        help="learning-rate grid, the same for every arm",
    )
    p.add_argument(
        "--margin",
        type=_positive_float,
        default=None,
        help="non-inferiority margin in the metric's units (default: 1%% of the "
        "reference's mean test metric)",
    )
    p.add_argument("--batch", type=positive_int, default=16, help="batch size")
    p.add_argument("--context", type=positive_int, default=64, help="tokens per sequence (lm)")
    p.add_argument("--columns", nargs="+", default=None, help="CSV columns (default: numeric)")
    p.add_argument("--lookback", type=positive_int, default=96, help="input window (forecast)")
    p.add_argument("--horizon", type=positive_int, default=24, help="forecast horizon")
    p.add_argument(
        "--keep",
        nargs="+",
        default=[],
        help="norm sites (module-name globs, e.g. norm_f or '*ln_f') that keep the model's "
        "own norm in every arm",
    )
    p.add_argument("--out", default="compare-out", help="output folder (page, json, cache)")
    p.add_argument("--jobs", type=jobs_type, default=1, help="parallel workers ('auto')")
    p.add_argument("--backend", choices=("local", "ray"), default="local", help="where tasks run")
    p.add_argument("--address", default=None, help="Ray cluster address (with --backend ray)")
    p.add_argument(
        "--no-progress", "--quiet", dest="quiet", action="store_true", help="no progress bar"
    )
    p.set_defaults(func=run)


class _Progress:
    """A rich progress bar over the tasks with an ETA from the tasks run so far."""

    def __init__(self, total: int, jobs: int, quiet: bool) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.total, self.jobs, self.start = total, max(1, jobs), time.perf_counter()
        self.ran: list[float] = []
        self.done = 0
        self.progress = Progress(
            TextColumn("compare"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[eta]}"),
            TextColumn("{task.fields[last]}"),
            disable=quiet,
            transient=False,
        )
        self.task = self.progress.add_task("tasks", total=total, eta="ETA estimating", last="")

    def __call__(self, record: dict[str, Any], cached: bool) -> None:
        self.done += 1
        if not cached:
            self.ran.append(float(record.get("seconds", 0.0)))
        left = self.total - self.done
        if self.ran:
            secs = int(sum(self.ran) / len(self.ran) * left / self.jobs)
            eta = f"ETA {secs // 3600}:{secs // 60 % 60:02d}:{secs % 60:02d}"
        else:
            eta = "ETA estimating" if left else ""
        last = f"{record['arm']} seed {record['seed']}" + (" (cached)" if cached else "")
        self.progress.update(self.task, advance=1, eta=eta, last=last)


def run(args: argparse.Namespace) -> int:
    """Run ``normlab compare``; return the exit status."""
    from rich.console import Console

    from normlab.compare.api import compare, prepare

    try:
        prepare(
            args.model,
            args.data,
            args.norms,
            task=args.task,
            steps=args.steps,
            lrs=args.lr,
            batch=args.batch,
            context=args.context,
            columns=args.columns,
            lookback=args.lookback,
            horizon=args.horizon,
            keep=args.keep,
        )
        if args.seeds < 2:
            raise ValueError("--seeds must be at least 2 (an interval needs two seeds).")
        if (
            args.reference is not None
            and args.reference not in args.norms
            and not any(n.split(":")[0] == args.reference for n in args.norms)
        ):
            raise ValueError(f"--reference {args.reference!r} is not among --norms {args.norms}.")
    except (ValueError, TypeError, OSError, ImportError) as err:
        return fail("compare", str(err).splitlines()[0] if str(err) else type(err).__name__)
    bar = _Progress(len(args.norms) * args.seeds, args.jobs, args.quiet)
    try:
        with bar.progress:
            result = compare(
                args.model,
                args.data,
                args.norms,
                reference=args.reference,
                task=args.task,
                steps=args.steps,
                seeds=args.seeds,
                lrs=args.lr,
                margin=args.margin,
                batch=args.batch,
                context=args.context,
                columns=args.columns,
                lookback=args.lookback,
                horizon=args.horizon,
                keep=args.keep,
                out=args.out,
                jobs=args.jobs,
                backend=args.backend,
                address=args.address,
                on_done=bar,
            )
    except KeyboardInterrupt:
        print(
            f"\nnormlab compare: finished tasks are kept in {args.out}/tasks; run the same "
            "command again to resume",
            file=sys.stderr,
        )
        raise
    except (ValueError, ConnectionError, ImportError) as err:
        return fail("compare", str(err).splitlines()[0])
    page = result.write(args.out)
    console = Console(width=max(Console().width, 120))
    console.print(result.table())
    console.print(result.recommendation())
    console.print(f"page: {page}\nresults: {page.parent / 'results.json'}")
    return 0
