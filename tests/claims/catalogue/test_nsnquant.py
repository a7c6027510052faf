"""The nsnquant claim: smoke run, checks, and effect signs on hand-built tables."""

from __future__ import annotations

import json
import math

from normlab.claims.catalogue.nsnquant import CLAIM, clear_stale_build_lock
from normlab.claims.core import measured_at


def _table(nsn: float, kmeans: float, kivi: float, shift: float = 0.02) -> dict:
    """Every row at error ``err`` on the shifted domains (tables, prose); k-means is
    ``shift`` better in domain (code) and calibrated on tables (the oracle)."""
    table = {"fp": {"tables_bpb": 3.5, "prose_bpb": 3.0, "code_bpb": 2.5}}
    rows = (("nsn", nsn), ("kmeans", kmeans), ("kivi", kivi), ("kmeans-matched", kmeans))
    rows += (("kivi-matched", kivi), ("kmeans-oracle", kmeans - shift), ("hqq", kivi))
    for name, err in rows:
        for bits in (1, 2):
            table[f"{name}-{bits}bit"] = {
                "tables_attn_err": err,
                "prose_attn_err": err,
                "code_attn_err": err - (shift if name == "kmeans" else 0),
                "tables_bpb": 3.5 + err,
                "prose_bpb": 3.0 + err,
                "code_bpb": 2.5,
                "bytes_per_token": 10.0,
            }
    return {"table": table}


def test_smoke_run_checks_and_finite_effects(smoke_measurement):
    config = CLAIM.config("smoke")
    m = smoke_measurement(CLAIM.id)
    json.dumps(m)
    for effect in CLAIM.effects:
        assert measured_at(effect, "smoke"), effect.name
        for e in effect.parts or (effect,):
            assert math.isfinite(e.fn(m)), e.name
    for check in CLAIM.checks:
        assert check.fn(config).passed, check.name
    rows = m["table"]
    for domain in ("tables", "prose", "code"):
        assert rows["nsn-2bit"][f"{domain}_attn_err"] < rows["nsn-1bit"][f"{domain}_attn_err"]
    assert rows["kmeans-2bit"]["bytes_per_token"] == 2 * rows["kmeans-1bit"]["bytes_per_token"]
    for bits in (1, 2):  # matched baselines store no more than NSNQuant's bytes
        nsn = rows[f"nsn-{bits}bit"]["bytes_per_token"]
        assert rows[f"kmeans-matched-{bits}bit"]["bytes_per_token"] <= nsn
        assert rows[f"kivi-matched-{bits}bit"]["bytes_per_token"] <= nsn


def test_effects_land_on_both_sides():
    good, bad = _table(0.05, 0.10, 0.12), _table(0.12, 0.08, 0.10)
    p = CLAIM.primary
    assert p.baseline == "kmeans-matched-2bit" and p.name == "attn_err_2bit_tables"
    assert p.fn(good) < -p.margin.value and p.fn(bad) > 0
    every = next(e for e in CLAIM.secondary if e.name == "attn_err_2bit_vs_every")
    for part in every.parts:
        assert part.fn(good) < -part.margin.value and part.fn(bad) > 0
    (pre,) = CLAIM.premises
    assert pre.fn(good) > pre.margin.value > pre.fn(_table(0.05, 0.1, 0.1, -0.02))
    assert pre.gates == ("shift_degradation",)
    shift = next(e for e in CLAIM.secondary if e.name == "shift_degradation")
    assert shift.fn(good) < 0 < shift.fn(_table(0.05, 0.1, 0.1, shift=-0.02))


def test_peer_quantizer_is_transformers_hqq_layer():
    import pytest
    import torch

    pytest.importorskip("hqq")
    from normlab.claims.catalogue.nsnquant import PeerQuantizer

    x = torch.randn(2, 1, 48, 64, generator=torch.Generator().manual_seed(0))
    q = PeerQuantizer("hqq", bits=2, group=64)
    stored = q.quantize(x)
    err = float((q.dequantize(stored) - x).norm() / x.norm())
    assert 0.05 < err < 0.8  # 2-bit: lossy, but far better than zeros
    assert stored.bits == x.numel() * 2 + 32 * x.numel() // 64


def test_peer_quantizer_is_transformers_quanto_layer():
    import pytest
    import torch

    pytest.importorskip("optimum.quanto")
    from normlab.claims.catalogue.nsnquant import PeerQuantizer

    x = torch.randn(2, 1, 48, 64, generator=torch.Generator().manual_seed(0))
    q = PeerQuantizer("quanto", bits=2, group=64)  # builds quanto's CPU kernels once
    stored = q.quantize(x)
    err = float((q.dequantize(stored) - x).norm() / x.norm())
    assert 0.05 < err < 0.8
    assert stored.bits == x.numel() * 2 + 32 * x.numel() // 64


def test_a_stale_build_lock_is_removed_and_a_fresh_one_kept(tmp_path):
    import os
    import time

    import pytest

    assert not clear_stale_build_lock(tmp_path)  # no lock: nothing to do
    lock = tmp_path / "lock"
    lock.touch()
    assert not clear_stale_build_lock(tmp_path) and lock.exists()  # a build in progress
    old = time.time() - 3600
    os.utime(lock, (old, old))
    with pytest.warns(RuntimeWarning, match="interrupted build"):
        assert clear_stale_build_lock(tmp_path)
    assert not lock.exists()
