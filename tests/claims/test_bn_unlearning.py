"""The bn-unlearning claim at smoke scale: GroupNorm's gap is exactly zero."""

from __future__ import annotations

import torch

from normlab.claims import get_claim


def test_smoke_run():
    torch.set_num_threads(1)
    claim = get_claim("bn-unlearning")
    m = claim.run(claim.config("smoke"), 0)
    for name, row in m["table"].items():
        if name.startswith("group/"):
            assert row["forget_gap"] == 0.0 and row["bn_mean_shift"] == 0.0
        else:
            assert row["bn_mean_shift"] > 0
            assert row["forget_acc_recalibrated"] - row["forget_acc"] == row["forget_gap"]
