"""training.attention_rank: rank-collapse stacks, random and trained, and LN's rank arithmetic."""

from __future__ import annotations

import math

import torch

from normlab.training import attention_rank as ar

_CFG = {"tokens": 8, "dim": 16, "heads": 2, "depth": 6, "stack_steps": 20, "stack_lr": 3e-3}


def test_random_stacks_collapse_without_residuals():
    torch.set_num_threads(1)
    without = ar.random_stack_curve(_CFG, 0, residual=False, norm=True)
    with_res = ar.random_stack_curve(_CFG, 0, residual=True, norm=True)
    assert len(without) == len(with_res) == 6
    assert ar.collapse_row(without)["log10_drop"] > ar.collapse_row(with_res)["log10_drop"] + 1
    assert ar.rank_one_distance(torch.ones(3, 4)) == 0.0


def test_trained_stack_row():
    torch.set_num_threads(1)
    row, curve, div = ar.trained_stack_row(_CFG, 0, residual=True)
    assert div is None and len(curve) == 6
    assert set(row) == {"residual_last", "log10_drop", "loss", "late_share"}
    assert 0 < row["loss"] < math.log(16) + 0.5 and row["residual_last"] == curve[-1]


def test_ln_arithmetic_and_pgop_properties():
    r = ar.trained_ln_rank({"tokens": 6, "dim": 12, "heads": 2, "trials": 12, "train_steps": 5})
    assert r["states_kept"] == 1.0 and r["general_changed"] == 0 and r["moved"] > 0
    assert r["low_plus_one"] == r["low_trials"] == 3
    p = ar.pgop_properties({"tokens": 6, "dim": 8, "heads": 2})
    assert p["same"] == 1.0 and p["overhead"] < 0.016 and p["plain"] < 1e-12 < p["gated"]
