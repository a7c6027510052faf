"""normlab.training.fp4_twins: the two recipes' configs, formats and the NVFP4 twin."""

from __future__ import annotations

import math

from normlab.training.fp4_twins import (
    fp4_forward_formats,
    fp4_twin,
    gpt_for,
    twin_train_config,
)


def test_recipes():
    ngpt = twin_train_config(steps=40, batch=2, lr=1e-2, weight_decay=0.1, ngpt=True)
    pre = twin_train_config(steps=40, batch=2, lr=1e-2, weight_decay=0.1, ngpt=False)
    assert (ngpt.weight_decay, ngpt.warmup) == (0.0, 0)
    assert (pre.weight_decay, pre.warmup) == (0.1, 4)
    assert gpt_for("ngpt", 16, 1, 2, 8).residual == "ngpt"
    assert gpt_for("tinygpt", 16, 1, 2, 8).residual == "pre"
    assert fp4_forward_formats(None) == {}
    assert fp4_forward_formats(0.5)["weights"].tensor_amax == 0.5


def test_twin_trains_and_evaluates_in_nvfp4():
    gpt = gpt_for("ngpt", 16, 1, 2, 8)
    tc = twin_train_config(steps=2, batch=2, lr=1e-2, weight_decay=0.0, ngpt=True)
    held = {"split": "test", "batches": 1, "batch": 2, "seed": 0}
    bpb, diverged, _ = fp4_twin(gpt, tc, 1.0, 0, held)
    assert diverged is None and math.isfinite(bpb) and 0 < bpb < 9
