"""approximate: a copy with approximate softmax and LayerNorms, the original unchanged."""

from __future__ import annotations

import torch

from normlab.attention.mha import MultiheadAttention
from normlab.layers import ApproxLayerNorm
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.surgery.approx import approximate


def _model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(d_model=32, n_layers=2, n_heads=2, context=16)).eval()


def test_approximate_swaps_a_copy_and_stays_close():
    model = _model()
    approx = approximate(model)  # the default datapaths
    assert not any(isinstance(m, ApproxLayerNorm) for m in model.modules())
    assert sum(isinstance(m, ApproxLayerNorm) for m in approx.modules()) == 5  # 2/block + final
    attns = [m for m in approx.modules() if isinstance(m, MultiheadAttention)]
    assert attns and all(m.score_name is None for m in attns)
    x = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        assert 0 < float((model(x) - approx(x)).abs().max()) < 0.05
    cheap = {"newton_steps": 0, "table_bits": 5}
    coarse = approximate(model, softmax_kwargs=cheap, layernorm_kwargs=cheap)
    with torch.no_grad():
        _, probs = coarse(x, return_probs=True)
    assert max(float((p.double().sum(-1) - 1).abs().max()) for p in probs) < 1e-6  # guaranteed
    assert all(m.newton_steps == 0 for m in coarse.modules() if isinstance(m, ApproxLayerNorm))
