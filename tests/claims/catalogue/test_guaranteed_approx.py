"""The guaranteed-approx claim: model surgery, the guarantee and its control, effect signs."""

from __future__ import annotations

import math

import torch

from normlab.attention.mha import MultiheadAttention
from normlab.claims import get_claim
from normlab.claims.catalogue.guaranteed_approx import (
    VARIANTS,
    approximate_model,
    operator_errors,
    variants,
)
from normlab.layers import ApproxLayerNorm
from normlab.models.gpt import GPTConfig, TinyGPT

CLAIM = get_claim("guaranteed-approx")


def _model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(d_model=32, n_layers=2, n_heads=2, context=16)).eval()


def test_approximate_model_swaps_a_copy_and_stays_close():
    model = _model()
    softmax_kwargs, ln_kwargs = variants()["default"]
    approx = approximate_model(model, softmax_kwargs=softmax_kwargs, layernorm_kwargs=ln_kwargs)
    assert not any(isinstance(m, ApproxLayerNorm) for m in model.modules())
    assert sum(isinstance(m, ApproxLayerNorm) for m in approx.modules()) == 5  # 2/block + final
    attns = [m for m in approx.modules() if isinstance(m, MultiheadAttention)]
    assert attns and all(m.score_name is None for m in attns)
    x = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        assert 0 < float((model(x) - approx(x)).abs().max()) < 0.05


def test_guarantee_holds_and_its_control_breaks_it():
    model, x = _model(), torch.randint(0, 256, (2, 16))
    guaranteed = operator_errors(model, x, "guaranteed")
    control = operator_errors(model, x, "unguaranteed")
    assert guaranteed["max_sum_error"] < 1e-6 and guaranteed["max_sigma_error"] < 1e-4
    assert control["max_sum_error"] > 1e-3 and control["max_sigma_error"] > 1e-3
    fixed = operator_errors(model, x, "guaranteed-fixed8")
    assert fixed["max_sum_error"] == 0.0  # exact in fixed point


def test_smoke_table(smoke_measurement):
    table = smoke_measurement("guaranteed-approx")["table"]
    assert set(table) == {"exact", *VARIANTS}
    assert all(math.isfinite(v) for row in table.values() for v in row.values())
    assert CLAIM.config("quick")["seeds"] >= 5


def test_effect_signs_on_hand_built_tables():
    def m(guaranteed: float, unguaranteed: float) -> dict:
        rows = {n: {"val_bpb": 3.3} for n in ("exact", *VARIANTS)}
        rows["guaranteed"] = {"val_bpb": guaranteed}
        rows["unguaranteed"] = {"val_bpb": unguaranteed}
        return {"table": rows}

    assert CLAIM.primary.fn(m(3.30, 3.35)) < 0 < CLAIM.primary.fn(m(3.35, 3.30))
