"""The fold-ln claim: detection matches the analysis and folding is exact at smoke scale."""

from __future__ import annotations

import torch

from normlab.claims import get_claim


def test_smoke_detection_and_exactness():
    torch.set_num_threads(1)
    claim = get_claim("fold-ln")
    m = claim.run(claim.config("smoke"), 0)
    assert all(row["match"] == 1.0 for row in m["table"].values())
    assert all(row.get("max_abs_change", 0.0) <= 1e-5 for row in m["table"].values())
    assert "post-LN" in " ".join(r for rs in m["reasons"]["tinygpt-post"].values() for r in rs)
    values = {e.name: e.fn(m) for e in claim.effects}
    assert values["detection_matches"] > 0 and values["exact"] > 0
    assert m["table"]["trained-tinygpt"]["speedup"] > 0
    assert set(claim.config("quick")["archs"]) >= {"gpt2", "bert", "tinygpt-post"}
