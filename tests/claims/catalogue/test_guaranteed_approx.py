"""The guaranteed-approx claim: model surgery, the guarantee and its control, effect signs."""

from __future__ import annotations

import math

import torch

from normlab.claims import get_claim
from normlab.claims.catalogue.guaranteed_approx import VARIANTS
from normlab.models.gpt import GPTConfig, TinyGPT

CLAIM = get_claim("guaranteed-approx")


def _model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(d_model=32, n_layers=2, n_heads=2, context=16)).eval()


def test_guarantee_holds_and_its_control_breaks_it(smoke_measurement):
    table = smoke_measurement("guaranteed-approx")["table"]
    guaranteed, control = table["guaranteed"], table["unguaranteed"]
    assert guaranteed["max_sum_error"] < 1e-6 and guaranteed["max_sigma_error"] < 1e-4
    assert control["max_sum_error"] > 1e-3 and control["max_sigma_error"] > 1e-3
    assert table["guaranteed-fixed8"]["max_sum_error"] == 0.0  # exact in fixed point


def test_smoke_table(smoke_measurement):
    table = smoke_measurement("guaranteed-approx")["table"]
    assert set(table) == {"exact", *VARIANTS}
    assert all(math.isfinite(v) for row in table.values() for v in row.values())
    assert CLAIM.config("quick")["seeds"] >= 5


def test_effect_signs_on_hand_built_tables():
    def m(guaranteed: float, unguaranteed: float) -> dict:
        rows = {n: {"test_bpb": 3.3} for n in ("exact", *VARIANTS)}
        rows["guaranteed"] = {"test_bpb": guaranteed}
        rows["unguaranteed"] = {"test_bpb": unguaranteed}
        return {"table": rows}

    assert CLAIM.primary.fn(m(3.30, 3.35)) < 0 < CLAIM.primary.fn(m(3.35, 3.30))
