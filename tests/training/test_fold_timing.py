"""normlab.training.fold_timing: the timed arms run the paths they name, the zoo, the load."""

from __future__ import annotations

import pytest
import torch

from normlab.layers.norms import LayerNorm, RMSNorm
from normlab.models.gpt import GPTConfig
from normlab.training import fold_timing as ft


def test_timed_arms_run_the_paths_they_name():
    arch = GPTConfig(d_model=32, n_layers=1, n_heads=2, context=16)
    arms, x, result = ft.fold_arms(arch, 1, 0)
    assert result.folded
    for name, backend in (("folded-normlab", "kernel"), ("folded-torch", "torch")):
        norms = [m for m in arms[name].modules() if isinstance(m, RMSNorm)]
        assert norms and all(m.backend == backend for m in norms), name
    lns = [m for m in arms["layernorm-torch"].modules() if isinstance(m, LayerNorm)]
    assert lns and all(m.backend == "torch" for m in lns)
    assert not any(isinstance(m, LayerNorm) for m in arms["no-norm"].modules())
    with torch.no_grad():
        ref = arms["layernorm"](x)
        for name in ("folded-normlab", "folded-torch", "layernorm-torch"):
            torch.testing.assert_close(arms[name](x), ref, atol=1e-5, rtol=1e-5)


def test_time_fold_rows():
    arch = GPTConfig(d_model=32, n_layers=1, n_heads=2, context=16)
    table, times = ft.time_fold(arch, batch=1, reps=3, warmup=1, seed=0)
    assert all(len(t) == 3 for t in times.values())
    assert table["fold"]["max_abs_change"] <= 1e-5
    for key in ("speedup_normlab", "speedup_torch"):
        assert table[key]["q25"] <= table[key]["median"] <= table[key]["q75"]


def test_width_sweep_rows_and_loads(monkeypatch):
    monkeypatch.setattr(ft, "tasks_waiting_for_a_core", lambda: 0.0)
    archs = {str(d): GPTConfig(d_model=d, n_layers=1, n_heads=2, context=16) for d in (16, 32)}
    rows, loads = ft.width_sweep(archs, seed=0, batch=1, reps=2, warmup=1)
    assert list(rows) == ["16", "32"] and len(loads) == 2
    for row in rows.values():
        assert set(row) == {"normlab", "torch", "norm_share"}
        assert all(isinstance(v, float) for v in row.values())


def test_paired_speedup_is_the_median_ratio():
    row = ft.paired_speedup([2.0, 3.0, 4.0], [1.0, 1.0, 1.0])
    assert row["median"] == pytest.approx(2.0)
    assert row["q25"] <= 2.0 <= row["q75"]


def test_machine_load_counts_waiting_tasks(monkeypatch):
    monkeypatch.setattr(ft, "tasks_waiting_for_a_core", lambda: 3.0)
    monkeypatch.setattr(ft, "load_average", lambda: 6.0)
    monkeypatch.setattr(ft.os, "cpu_count", lambda: 2)
    assert ft.machine_load() == {"tasks_waiting": 3.0, "load_1min": 6.0, "cores": 2.0}


def test_zoo_matches_the_structural_rule_without_hf():
    rows = ft.fold_zoo(["tinygpt-pre", "tinygpt-gated", "tinygpt-post", "convnext-like"])
    assert all(r["match"] == 1.0 for r in rows.values())
    assert rows["tinygpt-post"]["foldable"] == 0
    assert 0 < rows["tinygpt-gated"]["foldable"] < rows["tinygpt-gated"]["layernorms"]
