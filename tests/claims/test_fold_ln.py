"""The fold-ln claim: detection and exactness checks, the fused RMSNorm, the speedup sign."""

from __future__ import annotations

import torch

from normlab.claims import get_claim
from normlab.claims.catalogue.fold_ln import FusedRMSNorm, fuse_rmsnorms
from normlab.layers.norms import RMSNorm

CLAIM = get_claim("fold-ln")


def test_smoke_table(smoke_measurement):
    table = smoke_measurement("fold-ln")["table"]
    assert table["fold"]["max_abs_change"] <= 1e-5
    assert table["fold"]["folded"] == table["fold"]["layernorms"]
    for name in ("layernorm", "folded-normlab", "folded-fused"):
        assert 0 < table[name]["forward_ms_min"] <= table[name]["forward_ms_median"]
    assert {"gpt2", "bert", "tinygpt-post"} <= set(CLAIM.config("quick")["archs"])


def test_fused_rmsnorm_matches_normlab():
    torch.manual_seed(0)
    model = torch.nn.Sequential(RMSNorm(8, eps=1e-6), torch.nn.Linear(8, 8), RMSNorm(8))
    with torch.no_grad():
        model[0].weight.uniform_(0.5, 1.5)
    x = torch.randn(4, 8)
    before = model(x)
    assert fuse_rmsnorms(model) == 2
    assert isinstance(model[0], FusedRMSNorm) and isinstance(model[2], FusedRMSNorm)
    torch.testing.assert_close(model(x), before)


def test_speedup_sign():
    def m(folded_ms: float) -> dict:
        return {
            "table": {
                "layernorm": {"forward_ms_min": 1.0},
                "folded-normlab": {"forward_ms_min": folded_ms},
            }
        }

    assert CLAIM.primary.fn(m(1.2)) < 0 < CLAIM.primary.fn(m(0.9))
