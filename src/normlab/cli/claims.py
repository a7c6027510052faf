"""``normlab report``, ``normlab claim`` and ``normlab list``."""

from __future__ import annotations

import argparse
import fnmatch
import json
from typing import Any

from normlab.cli._common import Formatter, fail, jobs_type

__all__ = ["add_claim", "add_list", "add_report"]

_SCALES = ("smoke", "quick", "full")


def _select(ids: list[str] | None) -> list[Any]:
    from normlab.claims import all_claims, get_claim

    if not ids:
        return all_claims()
    return [get_claim(i) for i in dict.fromkeys(ids)]


def _message(err: BaseException) -> str:
    return str(err.args[0]) if err.args else str(err)


def _report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from normlab.claims.progress import ClaimProgress, summary_table
    from normlab.claims.report import write_report
    from normlab.claims.runner import ClaimRunner

    console = Console(stderr=True)
    try:
        claims = _select(args.only)
        runner = ClaimRunner(
            args.out,
            jobs=args.jobs,
            backend=args.backend,
            address=args.address,
            force=args.force,
        )
    except (KeyError, PermissionError, ValueError) as err:
        return fail("report", _message(err))
    with ClaimProgress(claims, args.scale, console=console, enabled=not args.no_progress) as bar:
        runner.on_result = bar.update
        results = runner.run(claims, args.scale)
    index = write_report(results, args.out, merge=bool(args.only))
    Console().print(summary_table(results))
    if args.only:
        print(f"merged {len(results)} claim(s) into the report")
    print(f"report: {index}")
    print(f"results: {index.parent / 'results.json'}")
    failed = [r.claim.id for r in results if r.label == "error"]
    if failed:
        console.print(f"[red]{len(failed)} claim(s) ended in error:[/red] {', '.join(failed)}")
        return 1
    return 0


def add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="reproduce the seed papers' claims and write report/index.html",
        description="Run every claim (or those of --only) at a scale, cache each finished "
        "task under OUT/tasks (an interrupted run resumes), and write OUT/index.html and "
        "OUT/results.json. With --only, the claims are merged into an existing report.",
        formatter_class=Formatter,
    )
    p.add_argument(
        "--scale",
        choices=_SCALES,
        default="quick",
        help="smoke proves the pipeline; quick is the report; full is paper-like",
    )
    p.add_argument(
        "--only",
        nargs="+",
        metavar="ID",
        default=None,
        help="run only these claims and merge them into the existing report",
    )
    p.add_argument(
        "--jobs",
        type=jobs_type,
        default="auto",
        help="parallel tasks: a positive integer or 'auto' (one per CPU core)",
    )
    p.add_argument("--out", default="report", help="output folder")
    p.add_argument("--force", action="store_true", help="recompute cached tasks")
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="local process pool or a Ray cluster",
    )
    p.add_argument("--address", default=None, help="Ray cluster address (with --backend ray)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_report)


def _fmt_effect(e: Any) -> str:
    from normlab.claims.report import fmt_interval, fmt_value

    values = ", ".join(fmt_value(v, signed=True) for v in e.values)
    return (
        f"{e.role} {e.name}: [{values}] mean {fmt_value(e.mean, signed=True)} "
        f"{fmt_interval(e.low, e.high)} -> {e.verdict} ({e.reason})"
    )


def _claim(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from normlab._progress import progress_callback
    from normlab.claims.report import claim_record
    from normlab.claims.runner import ClaimRunner

    console = Console()
    try:
        (claim,) = _select([args.id])
        runner = ClaimRunner(args.out, jobs=1, force=args.force)
    except (KeyError, PermissionError) as err:
        return fail("claim", _message(err))
    console.print(f"[bold]{claim.id}[/bold]: {claim.hypothesis}")
    console.print(f"caching tasks in {runner.tasks_dir} (change with --out)")
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=args.no_progress,
        transient=True,
    )
    bars: dict[str, Any] = {}

    def on_step(what: str, done: int, total: int) -> None:
        if what not in bars:
            bars[what] = progress.add_task(what, total=total)
        progress.update(bars[what], completed=done, total=total)

    n_tasks = len(claim.seeds(args.scale)) + (1 if claim.checks else 0)
    overall = progress.add_task(f"{claim.id} ({args.scale}) tasks", total=n_tasks)
    runner.on_result = lambda result: progress.advance(overall)
    with progress, progress_callback(on_step):
        (result,) = runner.run([claim], args.scale)
    for task in result.all_tasks:
        which = "checks" if task.is_checks else f"seed {task.seed}"
        cached = ", cached" if task.cached else ""
        console.print(f"{which} ({task.status}, {task.seconds:.1f} s{cached})")
        if task.error:
            console.print(task.error, markup=False, highlight=False)
        elif not task.is_checks and task.measurement:
            console.print_json(json.dumps(task.measurement.get("table", {})))
    for effect in result.verdict.effects:
        console.print(_fmt_effect(effect), markup=False, highlight=False)
    for check in result.verdict.checks:
        console.print(f"check {check.name}: {check.status} ({check.detail})", markup=False)
    for pre in result.verdict.preconditions:
        state = "held" if pre.held else "FAILED"
        console.print(
            f"precondition {pre.name}: {pre.value:.4g} {pre.op} {pre.threshold:g}: {state}",
            markup=False,
        )
    console.print(claim_record(result)["why"], markup=False, highlight=False)
    console.print(f"verdict: {result.label}")
    return 1 if result.label == "error" else 0


def add_claim(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "claim",
        help="run one claim and print its numbers",
        description="Run one claim verbosely: each seed's table, each effect with its "
        "interval, the checks, preconditions and the verdict. Finished tasks are cached in "
        "OUT/tasks, the same cache `normlab report --out OUT` reads.",
        formatter_class=Formatter,
    )
    p.add_argument("id", help="the claim id (see `normlab list claims`)")
    p.add_argument("--scale", choices=_SCALES, default="quick", help="the scale to run at")
    p.add_argument(
        "--out",
        default="report",
        help="report folder whose tasks/ subfolder caches the claim's tasks",
    )
    p.add_argument("--force", action="store_true", help="recompute cached tasks")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_claim)


def _matches(pattern: str | None, *names: str) -> bool:
    if not pattern:
        return True
    pattern = pattern.lower()
    glob = any(ch in pattern for ch in "*?[")
    return any(
        fnmatch.fnmatch(n.lower(), pattern) if glob else pattern in n.lower() for n in names
    )


def _list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    import normlab

    terms = [t for t in args.terms if t is not None]
    what = terms.pop(0) if terms and terms[0] in ("methods", "claims") else "methods"
    if len(terms) > 1:
        return fail("list", f"expected [methods|claims] [PATTERN], got {' '.join(args.terms)!r}")
    pattern = terms[0] if terms else None
    if what == "claims":
        if args.kind is not None:
            return fail("list", "--kind applies to methods, not claims")
        chosen = [c for c in _select(None) if _matches(pattern, c.id)]
        if args.markdown:
            print("| claim | seed paper |\n|---|---|")
            for c in chosen:
                print(f"| `{c.id}` | {c.paper} |")
            return 0
        table = Table("claim", "seed paper", "hypothesis", title=f"{len(chosen)} claims")
        for c in chosen:
            table.add_row(c.id, c.paper, c.hypothesis)
        Console().print(table)
        return 0
    try:
        methods = normlab.methods(kind=args.kind)
    except ValueError as err:
        return fail("list", _message(err))
    methods = [m for m in methods if _matches(pattern, m.name, *m.aliases)]
    if args.markdown:
        print("| name | kind | what it does | paper |")
        print("|---|---|---|---|")
        for m in methods:
            summary = m.summary.replace("|", "\\|")
            print(f"| `{m.name}` | {m.kind} | {summary} | {m.paper} |")
        return 0
    table = Table(
        "name",
        "kind",
        "aliases",
        "layout",
        "what it does",
        "paper",
        title=f"{len(methods)} methods",
    )
    for m in methods:
        table.add_row(m.name, m.kind, ", ".join(m.aliases), m.layout, m.summary, m.paper)
    Console().print(table)
    return 0


def add_list(sub: argparse._SubParsersAction) -> None:
    from normlab._registry import KINDS

    p = sub.add_parser(
        "list",
        help="the registered methods (with kind, aliases, layout) or claims",
        description="List registered methods (name, kind, aliases, layout, summary, paper) "
        "or claims (id, seed paper, hypothesis). PATTERN filters names (and aliases): a "
        "substring, or a glob such as 'rms*'. `normlab list PATTERN` lists methods.",
        formatter_class=Formatter,
    )
    p.add_argument(
        "terms",
        nargs="*",
        default=[None],
        metavar="[methods|claims] [PATTERN]",
        help="what to list (methods or claims; default: methods), then a substring "
        "or glob the names must match",
    )
    p.add_argument(
        "--kind",
        default=None,
        choices=None,
        metavar="KIND",
        help=f"only methods of this kind; one of: {', '.join(KINDS)}",
    )
    p.add_argument("--markdown", action="store_true", help="a Markdown table (for the README)")
    p.set_defaults(func=_list)
    # terms may also follow the options (`list --kind norm rms`): see normlab.cli.main
