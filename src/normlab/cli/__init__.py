"""The ``normlab`` command: one argparse tree for every subcommand.

``normlab report`` reproduces the seed papers' claims and writes a report; ``claim`` runs
one claim verbosely; ``list`` shows the registered methods or claims; ``probe`` diagnoses a
model; ``fold`` converts a model's LayerNorms to RMSNorm; ``bench`` times normlab's layers;
``compare`` answers which normalization suits the user's own model and data.
Errors in the input go to stderr with exit status 2; Ctrl-C ends any command with one line
on stderr and exit status 130, SIGTERM with one line and exit status 143 (``report`` and
``claim`` also say how to resume), and no worker process outlives either.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from normlab.claims._workers import Terminated, sigterm_raises
from normlab.cli import bench, claims, compare, fold, probe
from normlab.cli._common import Formatter

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``normlab`` argument parser with every subcommand."""
    from normlab import __version__

    parser = argparse.ArgumentParser(
        prog="normlab", description=__doc__, formatter_class=Formatter
    )
    parser.add_argument("--version", action="version", version=f"normlab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    claims.add_report(sub)
    claims.add_claim(sub)
    claims.add_list(sub)
    probe.add_parser(sub)
    fold.add_parser(sub)
    bench.add_parser(sub)
    compare.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
        # argparse gives optional positionals their value before the first option, so
        # `list --kind norm rms` leaves "rms" over: a command that takes terms gets them
        if extra and (not getattr(args, "terms", None) or any(e.startswith("-") for e in extra)):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exit_:  # --help, --version (0) and usage errors (2)
        return int(exit_.code or 0)
    if extra:
        args.terms = [*args.terms, *extra]
    try:
        with sigterm_raises():  # so that cleanup (worker pools, Ray) runs before exiting
            return int(args.func(args))
    except KeyboardInterrupt:
        print(f"\nnormlab {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated as stop:
        print(f"\nnormlab {args.command}: terminated (SIGTERM)", file=sys.stderr)
        return int(stop.code)
