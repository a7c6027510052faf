"""Speed of normlab's layers, as ratios against baselines measured in the same run.

Absolute times on shared CPUs are noise; ratios are not. Each layer is timed against
(1) torch's own implementation of the same operation where one exists and (2) copy
bandwidth, the speed of ``out.copy_(x)`` on the same tensor, which bounds any
memory-bound elementwise or reduction kernel from above.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import normlab

__all__ = ["bench_layer", "run_benchmarks"]


def _seconds(fn: Callable[[], Any], min_run_time: float) -> float:
    from torch.utils.benchmark import Timer

    return (
        Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time).median
    )


def _baseline(name: str, d: int) -> nn.Module | None:
    if name == "layernorm":
        return nn.LayerNorm(d)
    if name == "rmsnorm":
        return nn.RMSNorm(d)
    return None


@torch.no_grad()
def bench_layer(name: str, rows: int, d: int, *, min_run_time: float = 0.2) -> dict[str, Any]:
    """Time one registered norm's forward pass on a ``(rows, d)`` float32 input.

    Returns:
        A record with seconds per call, the fraction of copy bandwidth reached (bytes read
        plus written over time, relative to a plain copy), and the speed relative to torch's
        own op (> 1 means normlab is faster) where torch has one.
    """
    x = torch.randn(rows, d)
    out = torch.empty_like(x)
    layer = normlab.create(name, d).eval()
    ours = _seconds(lambda: layer(x), min_run_time)
    copy = _seconds(lambda: out.copy_(x), min_run_time)
    record: dict[str, Any] = {
        "method": name,
        "shape": [rows, d],
        "seconds": ours,
        "copy_bandwidth_fraction": copy / ours,
        "vs_torch": None,
    }
    baseline = _baseline(name, d)
    if baseline is not None:
        record["vs_torch"] = _seconds(lambda: baseline(x), min_run_time) / ours
    return record


def run_benchmarks(*, quick: bool = True, out: str | Path | None = None) -> int:
    """Benchmark every registered feature-last norm and print a table; return 0."""
    from rich.console import Console
    from rich.table import Table

    shapes = [(4096, 512)] if quick else [(4096, 512), (1024, 4096), (16384, 128)]
    names = [m.name for m in normlab.methods("norm") if m.layout == "features_last"]
    records = [
        bench_layer(name, rows, d, min_run_time=0.2 if quick else 1.0)
        for rows, d in shapes
        for name in names
    ]
    table = Table(
        "method",
        "shape",
        "µs/call",
        "× copy bandwidth",
        "× torch speed",
        title=f"normlab bench (torch {torch.__version__}, {torch.get_num_threads()} threads)",
    )
    for r in records:
        vs = "" if r["vs_torch"] is None else f"{r['vs_torch']:.2f}"
        table.add_row(
            r["method"],
            "x".join(map(str, r["shape"])),
            f"{r['seconds'] * 1e6:.0f}",
            f"{r['copy_bandwidth_fraction']:.2f}",
            vs,
        )
    Console().print(table)
    if out is not None:
        Path(out).write_text(json.dumps(records, indent=1))
        print(f"results: {out}")
    return 0
