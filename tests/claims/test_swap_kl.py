"""The swap-kl claim runs at smoke scale; its matrices and orders are well formed."""

from __future__ import annotations

import torch

from normlab.claims import get_claim


def test_smoke_run():
    torch.set_num_threads(1)
    claim = get_claim("swap-kl")
    m = claim.run(claim.config("smoke"), 0)
    n = claim.config("smoke")["n_layers"]
    assert len(m["swap"]["replacement"]) == n
    for order in (m["swap"]["order_replacement"], m["swap"]["order_interchange"]):
        assert all(abs(a - b) > 1 for a in order for b in order if a != b)
    assert -1 <= m["table"]["protocols"]["spearman"] <= 1
    assert m["curves"]["interchange"]["kl"][0] == 0.0
