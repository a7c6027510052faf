"""``normlab bench``: normlab's kernels against torch's ops, their eager and compiled forms,
and the memory copy bandwidth, all measured in one run (see :mod:`normlab.bench`)."""

from __future__ import annotations

import argparse

from normlab.bench import OPS, SHAPES
from normlab.cli._common import Formatter, fail, positive_int

__all__ = ["add_parser"]

_DTYPES = ("float32", "bfloat16", "float16")
_MODES = ("fwd", "fwd+bwd")


def _shape(text: str) -> tuple[int, int]:
    """argparse type: ``ROWSxFEATURES``, e.g. ``8192x1024``."""
    try:
        rows, features = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a shape; write ROWSxFEATURES, e.g. 8192x1024"
        ) from None
    if rows < 1 or features < 1:
        raise argparse.ArgumentTypeError(f"shape {text!r} needs positive sizes")
    return rows, features


def _choices(allowed: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        unknown = sorted(set(items) - set(allowed))
        if not items or unknown:
            raise argparse.ArgumentTypeError(
                f"{text!r}: choose a comma-separated subset of {', '.join(allowed)}"
            )
        return items

    return parse


def _run(args: argparse.Namespace) -> int:
    import torch

    from normlab import bench

    if args.device == "cuda" and not torch.cuda.is_available():
        return fail("bench", "--device cuda needs a CUDA GPU; none is visible here.")
    if args.threads:
        torch.set_num_threads(args.threads)
    options = {
        "quick": not args.full,
        "out": args.out,
        "plot": args.plot,
        "device": args.device,
        "model": args.model,
        "compile": args.compile,
        "repeats": args.repeats,
    }
    options.update(shapes=args.shapes, dtypes=args.dtypes, ops=args.ops, modes=args.modes)
    return bench.run_benchmarks(**options)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="speed of normlab's layers against torch, and copy bandwidth",
        description=(
            "Time normlab's kernels against torch's own op, its eager formula, torch.compile "
            "of that formula and the memory copy bandwidth, in one run with preallocated "
            "inputs; print GB/s and ratios."
        ),
        formatter_class=Formatter,
    )
    p.add_argument("--full", action="store_true", help="more repeats, with the compiled peer")
    p.add_argument("--out", default=None, help="also write the records as JSON to this file")
    p.add_argument("--plot", default=None, help="save a PNG of the ratios to copy bandwidth")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to run")
    p.add_argument(
        "--model", action="store_true", help="also time TinyGPT end to end, kernels on vs off"
    )
    p.add_argument(
        "--shapes",
        type=lambda t: [_shape(s) for s in t.split(",")],
        default=",".join(f"{r}x{d}" for r, d in SHAPES),
        help="comma-separated ROWSxFEATURES",
    )
    p.add_argument("--dtypes", type=_choices(_DTYPES), default="float32,bfloat16", help="dtypes")
    p.add_argument("--ops", type=_choices(OPS), default=",".join(OPS), help="operations")
    p.add_argument("--modes", type=_choices(_MODES), default="fwd,fwd+bwd", help="passes")
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="time torch.compile of the eager formula (None: only with --full)",
    )
    p.add_argument("--repeats", type=positive_int, default=None, help="interleaved repeats")
    p.add_argument(
        "--threads", type=positive_int, default=None, help="torch threads (None: torch's default)"
    )
    p.set_defaults(func=_run)
