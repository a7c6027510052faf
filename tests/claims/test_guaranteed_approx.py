"""The guaranteed-approx claim at smoke scale and its model surgery."""

from __future__ import annotations

import json
import math

import torch

from normlab.attention.mha import MultiheadAttention
from normlab.claims import get_claim
from normlab.claims.catalogue.guaranteed_approx import approximate_model, operator_checks
from normlab.layers import ApproxLayerNorm
from normlab.models.gpt import GPTConfig, TinyGPT


def _model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(d_model=32, n_layers=2, n_heads=2, context=16)).eval()


def test_approximate_model_swaps_a_copy_and_stays_close():
    model = _model()
    approx = approximate_model(model, softmax=True, layernorm=True, softmax_kwargs={})
    assert not any(isinstance(m, ApproxLayerNorm) for m in model.modules())
    assert (
        sum(isinstance(m, ApproxLayerNorm) for m in approx.modules()) == 5
    )  # 2 per block + final
    attns = [m for m in approx.modules() if isinstance(m, MultiheadAttention)]
    assert attns and all(m.score_name is None for m in attns)
    x = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        exact, close = model(x), approx(x)
    assert 0 < float((exact - close).abs().max()) < 0.05
    fixed = approximate_model(
        model, softmax=True, layernorm=False, softmax_kwargs={"frac_bits": 6}
    )
    _, probs = fixed(x, return_probs=True)
    for p in probs:  # exact in fixed point: multiples of 2^-6 summing to 1
        scaled = p.double() * 64
        assert torch.equal(scaled, scaled.round())
        assert torch.equal(p.double().sum(-1), torch.ones_like(p.double().sum(-1)))


def test_operator_checks_on_a_model():
    checks = operator_checks(_model(), torch.randint(0, 256, (2, 16)))
    assert checks["max_sum_error"] < 1e-6 and checks["max_sigma_error"] < 1e-5
    assert 0 < checks["max_softmax_error"] < 0.0149 + 1e-3
    assert checks["max_layernorm_error"] < 1e-4


def test_smoke_run_table_and_effects():
    torch.set_num_threads(1)
    claim = get_claim("guaranteed-approx")
    measurement = claim.run(claim.config("smoke"), 0)
    json.dumps(measurement)
    table = measurement["table"]
    expected = {"operators", "exact", "approx-softmax", "approx-layernorm", "approx-both"}
    assert expected <= set(table)
    for name, row in table.items():
        assert set(row) <= set(claim.metrics), name
        assert all(isinstance(v, float) and math.isfinite(v) for v in row.values()), row
    assert table["operators"]["max_sum_error"] < 1e-6
    for effect in claim.effects:
        value = effect.fn(measurement)
        assert isinstance(value, float) and math.isfinite(value), effect.name
