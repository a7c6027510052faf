"""``normlab bench``: normlab's kernels against torch's ops, their eager and compiled forms,
and the memory copy bandwidth, all measured in one run; then the performance targets, each
with its measured ratio and whether it is met (:mod:`normlab.cli._bench_ops`,
:mod:`normlab.cli._bench_model`, :mod:`normlab.cli._bench_report`)."""

from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path
from typing import Any

from normlab.cli._bench_ops import OPS, SHAPES, SWEEP
from normlab.cli._common import CliError, Formatter, fail, positive_int

__all__ = ["add_parser", "run_benchmarks"]

_DTYPES = ("float32", "bfloat16", "float16")
_MODES = ("fwd", "fwd+bwd")
#: Tensors of the input's size a measurement holds at once (inputs, outputs, gradients).
_BUFFERS = 12
#: The TinyGPT step on a GPU: the CPU's d=256 model (4 layers, batch 8) takes a GPU
#: milliseconds, mostly kernel launches, so its ratios would time Python, not the norms.
_GPU_MODEL = {"d_model": 1024, "n_layers": 8, "batch": 32, "min_time": 0.2}


def _shapes(text: str) -> list[tuple[int, int]]:
    """argparse type: comma-separated ``ROWSxFEATURES``, or ``sweep`` for :data:`SWEEP`."""
    if text.strip().lower() == "sweep":
        return list(SWEEP)
    return [_shape(s) for s in text.split(",")]


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


def _check_file(path: str | Path, what: str) -> Path:
    """``path`` as an output file, after a real write into its folder (nothing left behind).

    Raises:
        CliError: ``path`` is a folder, or its folder cannot be written.
    """
    path = Path(path)
    if path.is_dir():
        raise CliError(f"the {what} {path} is a folder; give a file name, e.g. {path}/bench")
    folder = path.parent
    probe = folder / f".normlab-bench-{uuid.uuid4().hex}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise CliError(
            f"cannot write the {what} to {path}: {err.strerror or err}; choose another path"
        ) from None
    return path


def _plot_path(text: str) -> Path:
    """Where the plot goes: ``DIR/bench.png`` for a folder, ``.png`` added without a suffix."""
    path = Path(text)
    if path.is_dir():
        return path / "bench.png"
    return path if path.suffix else path.with_name(path.name + ".png")


def _check_memory(shapes: list[tuple[int, int]], dtypes: list[str]) -> None:
    """Refuse shapes whose buffers cannot fit in this machine's memory, before any work."""
    size = 4 if "float32" in dtypes else 2
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    for rows, d in shapes:
        need = _BUFFERS * rows * d * size
        if need > total // 2:
            raise CliError(
                f"shape {rows}x{d} needs about {need / 2**30:.1f} GiB for its inputs, outputs "
                f"and gradients; this machine has {total / 2**30:.1f} GiB. Use a smaller shape."
            )


def run_benchmarks(
    *,
    quick: bool = True,
    out: str | Path | None = None,
    shapes: Any = SHAPES,
    dtypes: Any = ("float32", "bfloat16"),
    ops: Any = OPS,
    modes: Any = _MODES,
    device: str = "cpu",
    compile: bool | None = None,
    plot: str | Path | None = None,
    model: bool = False,
    regimes: bool = True,
    repeats: int | None = None,
    allow_load: bool = False,
) -> int:
    """Measure, print the tables and the targets, write ``out`` (JSON) and ``plot``; 0.

    Args:
        quick: 5 repeats of ~0.05 s per variant and no ``torch.compile`` peer (unless
            ``compile=True``); otherwise 7 repeats of ~0.2 s with the compiled peer.
        out: write the records as JSON to this file.
        shapes, dtypes, ops, modes: what to measure (modes: "fwd", "fwd+bwd").
        device: "cpu" or "cuda" (adds Liger-Kernel's ops when installed).
        compile: time ``torch.compile`` of the formula (and of the model with ``model``).
        plot: save a PNG of the ``x copy`` ratios to this file.
        model: also time a TinyGPT training step with kernels, without, and compiled.
        regimes: first measure fresh outputs with the default allocator, then (with freed
            memory kept) small inputs in cache (CPU).
        repeats: override the number of interleaved repeats.
        allow_load: print (marked) and judge the ratios of records measured while the
            1-minute load average exceeded the thread count; otherwise they are withheld.

    Raises:
        CliError: an output path cannot be written or a shape cannot fit in memory.
    """
    import torch

    from normlab import kernels as K
    from normlab._io import atomic_write_json
    from normlab.cli import _bench_ops as B
    from normlab.cli import _bench_report as R

    shapes = [(int(r), int(d)) for r, d in shapes]
    out = None if out is None else _check_file(out, "results file")
    plot = None if plot is None else _check_file(_plot_path(str(plot)), "plot")
    _check_memory(shapes, list(dtypes))
    compile = (not quick) if compile is None else compile
    reps = repeats or (5 if quick else 7)
    min_time = 0.05 if quick else 0.2
    load = {"start": os.getloadavg()}
    threads = torch.get_num_threads()
    K.available(device)  # build or load the CPU library before timing
    torch_dtypes = [getattr(torch, str(dt).removeprefix("torch.")) for dt in dtypes]
    fwd_ops = [op for op in ops if not op.startswith("add_")]
    fresh = []
    if regimes and device == "cpu":
        fresh = B.fresh_output_regime(fwd_ops, shapes, torch_dtypes, repeats=reps,
                                      min_time=min_time)  # fmt: skip
    if device == "cpu":
        B.keep_freed_memory()
    small = []
    if regimes and device == "cpu":
        small = B.small_input_regime(ops, torch_dtypes, repeats=reps, min_time=min_time,
                                     modes=modes)  # fmt: skip
    records = [
        B.bench_op(
            op,
            s,
            dt,
            backward=mode == "fwd+bwd",
            device=device,
            compile=compile,
            repeats=reps,
            min_time=min_time,
        )
        for op in ops
        for s in shapes
        for dt in torch_dtypes
        for mode in modes
    ]
    model_record = None
    if model:
        from normlab.cli._bench_model import bench_model

        sized = _GPU_MODEL if device == "cuda" else {}
        model_record = bench_model(compile=compile, repeats=reps, device=device, **sized)
    load["end"] = os.getloadavg()
    targets = R.check_targets(records, model_record, device, allow_load=allow_load,
                              fresh=fresh, small=small)  # fmt: skip
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    title = (
        f"normlab bench ({name}, torch {torch.__version__}, {threads} threads, "
        f"load {load['start'][0]:.2f} -> {load['end'][0]:.2f} on {os.cpu_count()} cores"
        f"{', thread CPU time' if B.clock(device) is time.thread_time else ''})"
    )
    R.print_results(records, fresh, targets, model_record, title, allow_load=allow_load,
                    threads=threads, small=small)  # fmt: skip
    print(f"load average (1 min): {load['start'][0]:.2f} before, {load['end'][0]:.2f} after")
    if plot is not None:
        R.plot(records, plot)
        print(f"plot: {plot}")
    if out is not None:
        meta = {
            "torch": torch.__version__,
            "threads": threads,
            "device": name,
            "load_avg_1_5_15": load,
            "cores": os.cpu_count(),
            "malloc_env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
        }
        payload = {"meta": meta, "ops": records, "fresh_outputs": fresh, "small_inputs": small,
                   "targets": targets, "model": model_record}  # fmt: skip
        atomic_write_json(out, payload)
        print(f"results: {out}")
    return 0


def _run(args: argparse.Namespace) -> int:
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        return fail("bench", "--device cuda needs a CUDA GPU; none is visible here.")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return run_benchmarks(
            quick=not args.full, out=args.out, plot=args.plot, device=args.device,
            model=args.model, compile=args.compile, repeats=args.repeats,
            regimes=args.regimes, shapes=args.shapes, dtypes=args.dtypes, ops=args.ops,
            modes=args.modes, allow_load=args.allow_load,
        )  # fmt: skip
    except CliError as err:
        return fail("bench", str(err))


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="speed of normlab's layers against torch, and copy bandwidth",
        description=(
            "Time normlab's kernels against torch's own op, its eager formula, torch.compile "
            "of that formula and the memory copy bandwidth, in one run with preallocated "
            "inputs, every variant (the copy included) cycling through buffers totalling "
            ">= 8x the last-level cache so the baseline is memory, not cache; print GB/s, "
            "the fraction of the memory limit, ratios, and each target "
            "(forward >= 0.9x copy, forward+backward >= 0.8x the memory limit, never slower "
            "than torch's op or torch.compile) met or not. Rows measured while the 1-minute "
            "load average exceeds the thread count are marked and their ratios withheld "
            "unless --allow-load; the load before and after is printed."
        ),
        formatter_class=Formatter,
    )
    p.add_argument("--full", action="store_true", help="more repeats, with the compiled peer")
    p.add_argument("--out", default=None, help="also write the records as JSON to this file")
    p.add_argument(
        "--plot", default=None, help="save a PNG of the ratios (a folder gets bench.png)"
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to run")
    p.add_argument(
        "--model",
        action="store_true",
        help="also time a TinyGPT training step: kernels, without, torch.compile without",
    )
    p.add_argument(
        "--shapes",
        type=_shapes,
        default=",".join(f"{r}x{d}" for r, d in SHAPES),
        help="comma-separated ROWSxFEATURES, or 'sweep' (widths 64-65536 with non-powers of "
        "two, and the QK-norm shape 364800x128)",
    )
    p.add_argument("--dtypes", type=_choices(_DTYPES), default="float32,bfloat16", help="dtypes")
    p.add_argument("--ops", type=_choices(OPS), default=",".join(OPS), help="operations")
    p.add_argument("--modes", type=_choices(_MODES), default="fwd,fwd+bwd", help="passes")
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="time torch.compile of the formula (None: only with --full)",
    )
    p.add_argument(
        "--regimes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time fresh outputs with the default allocator and small inputs in cache (CPU)",
    )
    p.add_argument("--repeats", type=positive_int, default=None, help="interleaved repeats")
    p.add_argument(
        "--allow-load",
        action="store_true",
        help="print and judge ratios measured above the thread count's load (marked *)",
    )
    p.add_argument(
        "--threads", type=positive_int, default=None, help="torch threads (None: torch's default)"
    )
    p.set_defaults(func=_run)
