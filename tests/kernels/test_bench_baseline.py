"""The bench's copy baseline reads memory, not cache: its buffers cycle over several LLCs."""

from __future__ import annotations

import torch

from normlab.cli import _bench_ops as B

MiB = 2**20


def test_rotation_exceeds_several_last_level_caches():
    llc = 32 * MiB
    for set_bytes in (2 * 16 * MiB, 2 * 32 * MiB, 3 * 32 * MiB, 1000 * MiB):
        sets = B.rotation(set_bytes, llc)
        assert sets * set_bytes >= B.CACHE_MULTIPLE * llc
        assert (sets - 1) * set_bytes < B.CACHE_MULTIPLE * llc  # no more than needed
    # a bfloat16 8192x1024 copy (16 MB read + 16 MB written): 8 pairs, 256 MB
    assert B.rotation(2 * 8192 * 1024 * 2, llc) == 8
    assert B.rotation(1, llc) == B.MAX_SETS
    assert B.rotation(0, llc) == B.MAX_SETS


def test_last_level_cache_is_read_and_positive():
    assert B.last_level_cache() >= 2**20
    assert B._cache_size("32768K") == 32 * MiB
    assert B._cache_size("1M") == MiB
    assert B._cache_size("512") == 512


def test_rotating_copy_cycles_distinct_pairs_and_copies():
    x = torch.randn(64, 64, dtype=torch.bfloat16)
    copy = B.rotating_copy(x, llc=2 * x.numel() * x.element_size())
    assert copy.sets == B.CACHE_MULTIPLE  # one pair holds an LLC's worth
    seen = set()
    for _ in range(2 * copy.sets):
        out = copy()
        assert torch.equal(out, x)
        seen.add(out.data_ptr())
    assert len(seen) == copy.sets
    assert x.data_ptr() not in seen


def test_bench_record_states_its_rotation_and_every_variant_cycles(monkeypatch):
    llc = 64 * 32 * 4  # one x-sized buffer
    monkeypatch.setattr(B, "last_level_cache", lambda: llc)
    seen: dict[str, set[int]] = {}

    def spy(fns, device, repeats, min_time):
        for name, fn in fns.items():
            for _ in range(20):
                out = fn()
                if name == "copy":
                    seen.setdefault(name, set()).add(out.data_ptr())
        return {name: [1e-3] for name in fns}

    monkeypatch.setattr(B, "median_times", spy)
    fast = B._fast("add_rmsnorm")
    xs: set[int] = set()

    def recording(x, *rest):
        xs.add(x.data_ptr())
        return fast(x, *rest)

    monkeypatch.setattr(B, "_fast", lambda op: recording)
    rec = B.bench_op("add_rmsnorm", (64, 32), torch.float32, backward=True, compile=False)
    # x, residual and incoming gradient per set: 3 x-sized tensors; copy: 2 per pair
    sets = -(-B.CACHE_MULTIPLE // 3)
    assert rec["rotation"] == {"llc": llc, "sets": sets, "copy_sets": B.CACHE_MULTIPLE // 2}
    assert len(seen["copy"]) == B.CACHE_MULTIPLE // 2
    assert len(xs) == sets  # the kernel read a distinct x on each of its sets
    assert rec["x_copy"]["normlab"] > 0
