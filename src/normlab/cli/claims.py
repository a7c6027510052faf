"""``normlab report``, ``normlab claim`` and ``normlab list``."""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from typing import Any

from normlab.claims._workers import Terminated
from normlab.cli._common import Formatter, fail, jobs_type

__all__ = ["add_claim", "add_list", "add_report"]


def _scales() -> tuple[str, ...]:
    from normlab.claims.core import SCALES

    return SCALES


def _message(err: BaseException) -> str:
    return str(err.args[0]) if err.args else str(err)


def _interrupted(
    command: str, done: int, total: int, out: str, stop: BaseException | None = None
) -> int:
    """The one line Ctrl-C (exit status 130) or SIGTERM (``stop``, exit status 143) leaves,
    with the resume hint."""
    how = "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted"
    print(
        f"\nnormlab {command}: {how} after {done} of {total} task(s); the finished ones "
        f"are cached in {out}/tasks, so the same command resumes where this one stopped.",
        file=sys.stderr,
    )
    return int(stop.code) if isinstance(stop, Terminated) else 130


def _import_modules(command: str, modules: list[str] | None) -> int:
    """Import the user's modules (from the current folder too) so their claims register;
    return 0, or the exit status 2 of a module that cannot be imported."""
    import importlib
    import os

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in modules or []:
        try:
            importlib.import_module(name)
        except ImportError as err:
            return fail(command, f"cannot import --module {name}: {err}")
    return 0


def _add_module(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--module",
        action="append",
        metavar="MODULE",
        default=None,
        help="import this module first (repeatable), so the claims it registers with "
        "register_claim can be run; the current folder is searched too",
    )


def _report(args: argparse.Namespace) -> int:
    from rich.console import Console

    import normlab.claims
    from normlab.claims.api import resolve_claims
    from normlab.claims.plan import default_robustness, extra_overrides
    from normlab.claims.progress import summary_table

    if args.address is not None and args.backend != "ray":
        return fail("report", "--address is a Ray cluster address; add --backend ray")
    if _import_modules("report", args.module):
        return 2
    try:
        claims = resolve_claims(args.only)
    except KeyError as err:
        return fail("report", _message(err))
    done = [0]

    def count(result: object) -> None:
        done[0] += 1

    robustness = args.robustness or default_robustness(args.scale)
    placebo = args.placebo if args.placebo is not None else args.scale == "full"
    total = sum(
        len(c.seeds(args.scale))
        * (1 + len(extra_overrides(c, args.scale, robustness=robustness, placebo=placebo)))
        + bool(c.checks)
        for c in claims
    )
    try:
        report = normlab.claims.run(
            [c.id for c in claims] if args.only else None,
            args.scale,
            jobs=args.jobs,
            out=args.out,
            force=args.force,
            backend=args.backend,
            address=args.address,
            on_result=count,
            progress=not args.no_progress,
            robustness=robustness,
            placebo=placebo,
        )
    except (KeyError, PermissionError, ValueError, ConnectionError) as err:
        return fail("report", _message(err))
    except (KeyboardInterrupt, Terminated) as stop:
        return _interrupted("report", done[0], total, args.out, stop)
    results = report.results
    Console().print(summary_table(results))
    if args.only:
        print(f"merged {len(results)} claim(s) into the report")
    print(f"report: {report.index}")
    print(f"results: {report.results_json}")
    failed = [r.claim.id for r in results if r.label == "error"]
    if failed:
        Console(stderr=True).print(
            f"[red]{len(failed)} claim(s) ended in error:[/red] {', '.join(failed)}"
        )
        return 1
    return 0


def add_report(sub: argparse._SubParsersAction) -> None:
    from normlab.claims.plan import ROBUSTNESS

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
        choices=_scales(),
        default="quick",
        help="smoke proves the pipeline; quick is the report; full is paper-like",
    )
    p.add_argument(
        "--only",
        nargs="+",
        action="extend",
        metavar="ID",
        default=None,
        help="run only these claims (ids with - or _) and merge them into the existing report "
        "(repeatable)",
    )
    p.add_argument(
        "--jobs",
        type=jobs_type,
        default="auto",
        help="parallel tasks: a positive integer or 'auto' (one per CPU core, the default "
        "of normlab.claims.run too)",
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
    p.add_argument(
        "--robustness",
        nargs="?",
        const="all",
        choices=ROBUSTNESS,
        default=None,
        help="rerun each claim's primary at free settings' neighbours and mark the verdict "
        "robust or fragile: 'decisive' (the claim's decisive setting), 'all' (the same as "
        "the bare flag) or 'none' (default: all at --scale full, decisive at quick, none at "
        "smoke); only claims whose verdict is decided are rerun",
    )
    p.add_argument(
        "--placebo",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the A/A placebo of every tuned claim: its baseline trained again through "
        "the method's path, flagged when it beats the baseline (default: on at --scale "
        "full, off otherwise)",
    )
    _add_module(p)
    p.set_defaults(func=_report)


def _fmt_effect(e: dict[str, Any]) -> str:
    from normlab.claims._format import fmt_estimate, seeds_text

    mean = fmt_estimate(e["mean"], e["low"], e["high"], e.get("unit"))  # keeps its mean inside
    return (
        f"{e['role']} {e['name']}: [{seeds_text(e['values'])}] mean {mean} "
        f"-> {e['verdict']} ({e['reason']})"
    )


def _claim(args: argparse.Namespace) -> int:
    from rich.console import Console

    from normlab._progress import StepBars
    from normlab.claims._format import premise_phrase, premise_words
    from normlab.claims.api import resolve_claims
    from normlab.claims.report import claim_record
    from normlab.claims.runner import ClaimRunner
    from normlab.claims.schema import decode

    console = Console()
    if _import_modules("claim", args.module):
        return 2
    try:
        (claim,) = resolve_claims([args.id])
        runner = ClaimRunner(args.out, jobs=1, force=args.force)
    except (KeyError, PermissionError) as err:
        return fail("claim", _message(err))
    console.print(f"[bold]{claim.id}[/bold]: {claim.hypothesis}")
    console.print(f"caching tasks in {runner.tasks_dir} (change with --out)")
    n_tasks = len(claim.seeds(args.scale)) + (1 if claim.checks else 0)
    done = [0]
    try:
        with StepBars(enabled=not args.no_progress) as bars:
            overall = bars.add(f"{claim.id} ({args.scale}) tasks", n_tasks)

            def on_result(result: object) -> None:
                done[0] += 1
                bars.advance(overall)

            runner.on_result = on_result
            (result,) = runner.run([claim], args.scale)
    except (KeyboardInterrupt, Terminated) as stop:
        return _interrupted("claim", done[0], n_tasks, args.out, stop)
    for task in result.all_tasks:
        which = "checks" if task.is_checks else f"seed {task.seed}"
        cached = ", cached" if task.cached else ""
        cpu = "" if task.cpu_seconds is None else f", {task.cpu_seconds:.1f} s CPU"
        console.print(f"{which} ({task.status}, {task.seconds:.1f} s wall{cpu}{cached})")
        if task.error:
            console.print(task.error, markup=False, highlight=False)
        elif not task.is_checks and task.measurement:
            console.print_json(json.dumps(task.measurement.get("table", {})))
    record = decode(claim_record(result))
    premises = (record.get("premises") or []) + (record.get("preconditions") or [])
    for effect in record["effects"]:
        console.print(_fmt_effect(effect), markup=False, highlight=False)
    for check in record["checks"]:
        console.print(
            f"check {check['name']}: {check['status']} ({check['detail']})", markup=False
        )
    for premise in premises:
        state = premise_words(premise)  # "one seed: no interval" is not a failure
        text = premise_phrase(premise, link="needs")
        console.print(f"premise {premise['name']}: {text}: {state}", markup=False)
    console.print(record["why"], markup=False, highlight=False)
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
    p.add_argument("id", help="the claim id, - or _ alike (see `normlab list claims`)")
    p.add_argument("--scale", choices=_scales(), default="quick", help="the scale to run at")
    p.add_argument(
        "--out",
        default="report",
        help="report folder whose tasks/ subfolder caches the claim's tasks",
    )
    p.add_argument("--force", action="store_true", help="recompute cached tasks")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_module(p)
    p.set_defaults(func=_claim)


def _claim_matches(pattern: str | None, claim_id: str) -> bool:
    if not pattern:
        return True
    pattern = pattern.lower().replace("_", "-")
    glob = any(ch in pattern for ch in "*?[")
    return fnmatch.fnmatchcase(claim_id, pattern) if glob else pattern in claim_id


def _table(title: str, columns: list[tuple[str, bool]]) -> Any:
    """A rich table whose ``True`` columns never wrap (names) and whose others fold."""
    from rich.table import Column, Table

    return Table(
        *(
            Column(name, no_wrap=keep, overflow="fold" if not keep else "ignore")
            for name, keep in columns
        ),
        title=title,
    )


def _short(text: str, wide: bool) -> Any:
    """A compact cell is cut to the terminal with an ellipsis; a wide one wraps."""
    from rich.text import Text

    return Text(text, no_wrap=not wide, overflow="fold" if wide else "ellipsis")


def _nothing_matched(what: str, pattern: str | None, names: list[str]) -> int:
    """Exit status 2 for a pattern no name matches, naming the closest names."""
    import difflib

    close = difflib.get_close_matches(str(pattern).lower(), names, n=4, cutoff=0.5)
    hint = f"closest: {', '.join(close)}" if close else "none is close"
    every = "`normlab list claims`" if what == "claim" else "`normlab list`"
    return fail("list", f"no {what} matches {pattern!r} ({hint}); {every} shows them all")


def _method_cards(methods: list[Any]) -> Any:
    """Methods as labelled lines that wrap between words, never inside a name or alias."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for i, m in enumerate(methods):
        if i:
            grid.add_row("", "")
        grid.add_row(f"[bold]{m.name}[/bold]", f"{m.kind}, layout {m.layout}")
        if m.aliases:
            grid.add_row("  aliases", ", ".join(m.aliases))
        grid.add_row("  does", m.summary)
        grid.add_row("  paper", m.paper)
    return grid


def _list(args: argparse.Namespace) -> int:
    from rich.console import Console

    import normlab
    from normlab.claims.api import resolve_claims

    terms = [t for t in args.terms if t is not None]
    what = terms.pop(0) if terms and terms[0] in ("methods", "claims") else "methods"
    if len(terms) > 1:
        return fail("list", f"expected [methods|claims] [PATTERN], got {' '.join(args.terms)!r}")
    pattern = terms[0] if terms else None
    console = Console()
    if what == "claims":
        if args.kind is not None:
            return fail("list", "--kind applies to methods, not claims")
        every = resolve_claims(None)
        chosen = [c for c in every if _claim_matches(pattern, c.id)]
        if not chosen:
            return _nothing_matched("claim", pattern, [c.id for c in every])
        if args.markdown:
            print("| claim | seed paper |\n|---|---|")
            for c in chosen:
                print(f"| `{c.id}` | {c.paper} |")
            return 0
        columns = [("claim", True), ("hypothesis", False)]
        if args.wide:
            columns.insert(1, ("seed paper", False))
        table = _table(f"{len(chosen)} claims", columns)
        for c in chosen:
            cells = [c.id, _short(c.hypothesis, args.wide)]
            if args.wide:
                cells.insert(1, _short(c.paper, True))
            table.add_row(*cells)
        console.print(table)
        return 0
    try:
        methods = normlab.methods(pattern, kind=args.kind)
    except ValueError as err:
        return fail("list", _message(err))
    if not methods:
        every = normlab.methods(kind=args.kind)
        return _nothing_matched(
            "method", pattern, [n for m in every for n in (m.name, *m.aliases)]
        )
    if args.markdown:
        print("| name | kind | what it does | paper |")
        print("|---|---|---|---|")
        for m in methods:
            summary = m.summary.replace("|", "\\|")
            print(f"| `{m.name}` | {m.kind} | {summary} | {m.paper} |")
        return 0
    if args.wide:
        console.print(f"{len(methods)} methods", style="bold")
        console.print(_method_cards(methods))
        return 0
    table = _table(
        f"{len(methods)} methods (--wide for aliases, layout and paper)",
        [("name", True), ("kind", True), ("what it does", False)],
    )
    for m in methods:
        table.add_row(m.name, m.kind, _short(m.summary, False))
    console.print(table)
    return 0


def add_list(sub: argparse._SubParsersAction) -> None:
    from normlab._registry import KINDS

    p = sub.add_parser(
        "list",
        help="the registered methods (with kind, aliases, layout) or claims",
        description="List registered methods or claims, one line each: names in full, "
        "then what they do (cut at the terminal's width; --wide gives each method "
        "labelled lines with its aliases, layout and paper, wrapped between words). "
        "PATTERN filters names (and aliases): a substring, or "
        "a glob such as 'rms*'. `normlab list PATTERN` lists methods.",
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
    p.add_argument(
        "--wide",
        action="store_true",
        help="every field (aliases, layout, paper), wrapped between words, not one line each",
    )
    p.add_argument("--markdown", action="store_true", help="a Markdown table (for the README)")
    p.set_defaults(func=_list)
    # terms may also follow the options (`list --kind norm rms`): see normlab.cli.main
