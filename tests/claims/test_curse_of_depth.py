"""The curse-of-depth claim runs at smoke scale with one profile per variant."""

from __future__ import annotations

import torch

from normlab.claims import get_claim


def test_smoke_run():
    torch.set_num_threads(1)
    claim = get_claim("curse-of-depth")
    config = claim.config("smoke")
    m = claim.run(config, 0)
    assert set(m["table"]) == {"dense", *config["variants"]}
    for profile in m["curves"].values():
        assert len(profile["variance"]) == config["n_layers"] + 1
        assert len(profile["drop_loss"]) == config["n_layers"]
    assert set(claim.config("quick")["variants"]) == {"weight-decay", "gqa", "moe"}
