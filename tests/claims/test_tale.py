"""The tale claim runs at smoke scale; pruning never worsens the validation-selected score."""

from __future__ import annotations

import torch

from normlab.claims import get_claim


def test_smoke_run():
    torch.set_num_threads(1)
    claim = get_claim("tale")
    m = claim.run(claim.config("smoke"), 0)
    for dist in ("id", "ood"):
        tale = m["curves"][dist]["tale"]
        assert tale["best_score"] >= tale["baseline"]  # the best on the path includes the start
        assert m["table"][f"tale-{dist}"]["layers_kept"] == len(tale["best_kept"])
    assert m["table"]["tale-id"]["distortion"] == 0.0  # ID against itself
