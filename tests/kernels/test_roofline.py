"""benchmarks/bench_roofline.py builds its kernel and times every arithmetic load it names."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "bench_roofline.py"


def _bf16_vectors() -> bool:
    try:
        return "avx512_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not _bf16_vectors(), reason="roofline.cpp needs AVX-512 BF16")
def test_the_roofline_benchmark_times_copy_and_every_k(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_roofline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "roofline.json"
    args = ["--rows", "16", "--repeats", "1", "--threads", "1", "--out", str(out)]
    threads = torch.get_num_threads()
    try:
        assert module.main(args) == 0
    finally:
        torch.set_num_threads(threads)
    record = json.loads(out.read_text())
    assert record["values"] == 16 * 1024 and record["seconds"]["copy"] > 0
    assert set(record["copy_over_kernel"]) == {f"k{k}" for k in module.OPS_PER_16}
    assert all(r > 0 for r in record["copy_over_kernel"].values())
    with pytest.raises(SystemExit):
        module.main(["--rows", "0"])
