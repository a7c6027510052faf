"""The ``normlab`` command: list methods, run the claims report, probe and fold models."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _list(args: argparse.Namespace) -> int:
    import normlab

    methods = normlab.methods(kind=args.kind)
    if args.markdown:
        print("| name | kind | what it does | paper |")
        print("|---|---|---|---|")
        for m in methods:
            summary = m.summary.replace("|", "\\|")
            print(f"| `{m.name}` | {m.kind} | {summary} | {m.paper} |")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "kind", "what it does", "paper", title=f"{len(methods)} methods")
    for m in methods:
        table.add_row(m.name, m.kind, m.summary, m.paper)
    Console().print(table)
    return 0


def _select_claims(only: Sequence[str] | None):  # -> list[Claim]
    from normlab.claims import all_claims, get_claim

    if not only:
        return all_claims()
    return [get_claim(claim_id) for claim_id in dict.fromkeys(only)]


def _report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from normlab.claims.progress import ClaimProgress, summary_table
    from normlab.claims.report import write_report
    from normlab.claims.runner import Runner

    console = Console(stderr=True)
    try:
        claims = _select_claims(args.only)
        runner = Runner(
            args.out, jobs=args.jobs, backend=args.backend, address=args.address, force=args.force
        )
    except (KeyError, PermissionError, ValueError) as err:
        console.print(f"[red]error:[/red] {err.args[0] if err.args else err}")
        return 2
    with ClaimProgress(claims, args.scale, console=console, enabled=not args.no_progress) as bar:
        runner.on_result = bar.update
        results = runner.run(claims, args.scale)
    index = write_report(results, args.out, args.scale)
    Console().print(summary_table(results))
    print(f"report: {index}")
    print(f"results: {index.parent / 'results.json'}")
    failed = [r.claim.id for r in results if r.verdict == "error"]
    if failed:
        console.print(f"[red]{len(failed)} claim(s) had failing tasks:[/red] {', '.join(failed)}")
        return 1
    return 0


def _claim(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console

    from normlab.claims.runner import Runner

    console = Console()
    try:
        (claim,) = _select_claims([args.id])
        runner = Runner(args.out, jobs=1, force=args.force)
    except (KeyError, PermissionError) as err:
        console.print(f"[red]error:[/red] {err.args[0] if err.args else err}")
        return 2
    (result,) = runner.run([claim], args.scale)
    console.print(f"[bold]{claim.id}[/bold]: {claim.hypothesis}")
    for task in result.tasks:
        console.print(f"seed {task.seed} ({task.status}, {task.seconds:.1f} s)")
        if task.error:
            console.print(task.error)
        else:
            console.print_json(json.dumps(task.measurement["table"]))
    for effect in result.effects:
        console.print(f"{effect.name}: {effect.values} -> {effect.verdict} ({effect.reason})")
    console.print(f"verdict: {result.verdict}")
    return 1 if result.verdict == "error" else 0


def _bench(args: argparse.Namespace) -> int:
    from normlab.bench import run_benchmarks

    return run_benchmarks(quick=not args.full, out=args.out)


def _parser() -> argparse.ArgumentParser:
    from normlab.claims.core import SCALES

    parser = argparse.ArgumentParser(prog="normlab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="the registered methods")
    p.add_argument("--kind", help="only methods of this kind")
    p.add_argument("--markdown", action="store_true", help="a Markdown table (for the README)")
    p.set_defaults(func=_list)

    p = sub.add_parser("report", help="reproduce the seed papers' claims and write a report")
    p.add_argument("--scale", choices=SCALES, default="quick")
    p.add_argument("--only", nargs="+", metavar="ID", help="run only these claims")
    p.add_argument("--jobs", type=int, default=os.cpu_count(), help="parallel tasks")
    p.add_argument("--out", default="report", help="output folder (default: report)")
    p.add_argument("--force", action="store_true", help="recompute cached tasks")
    p.add_argument("--backend", choices=("local", "ray"), default="local")
    p.add_argument("--address", help="Ray cluster address (with --backend ray)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_report)

    p = sub.add_parser("claim", help="run one claim and print its numbers")
    p.add_argument("id")
    p.add_argument("--scale", choices=SCALES, default="quick")
    p.add_argument("--out", default="report")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=_claim)

    p = sub.add_parser("bench", help="speed of normlab's layers against torch and copy bandwidth")
    p.add_argument("--full", action="store_true", help="more sizes and repeats")
    p.add_argument("--out", help="also write the results as JSON here")
    p.set_defaults(func=_bench)

    sub.add_parser(
        "fold", help="fold LayerNorm into RMSNorm (see normlab fold -h)", add_help=False
    )
    sub.add_parser("probe", help="diagnose a model (see normlab probe -h)", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "fold":
        from normlab.surgery.fold_cli import fold_command

        return fold_command(argv[1:])
    if argv and argv[0] == "probe":
        from normlab.probes.report import probe_command

        return probe_command(argv[1:])
    args = _parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
