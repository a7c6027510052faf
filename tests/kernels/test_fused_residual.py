"""The residual-in norms: layer form, gain variants and TinyGPT's fused pre-norm step."""

from __future__ import annotations

import pytest
import torch

from normlab import functional as NF
from normlab import kernels as K
from normlab.layers import LayerNorm, RMSNorm
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.models.gpt_blocks import add_norm


@pytest.mark.parametrize("cls", [RMSNorm, LayerNorm])
@pytest.mark.parametrize("backend", ["kernel", "torch"])
def test_residual_form_is_the_sum_then_the_norm(cls: type, backend: str) -> None:
    norm = cls(24, backend=backend)
    with torch.no_grad():
        norm.weight.normal_()
    x, r = torch.randn(3, 5, 24), torch.randn(3, 5, 24)
    y, s = norm(x, residual=r)
    assert torch.equal(s, x + r)
    torch.testing.assert_close(y, norm(x + r), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("cls", [RMSNorm, LayerNorm])
def test_zero_centered_and_offset_start_at_gain_one(cls: type) -> None:
    x = torch.randn(4, 16)
    plain = cls(16)(x)
    for kwargs in ({"zero_centered": True}, {"offset": 1.0}, {"offset": 0.25}):
        norm = cls(16, **kwargs)
        torch.testing.assert_close(norm(x), plain, atol=1e-6, rtol=1e-6)
        assert norm.offset and f"offset={norm.offset}" in repr(norm)
    assert float(cls(16, zero_centered=True).weight.detach().abs().max()) == 0.0
    with pytest.raises(ValueError, match="zero_centered"):
        cls(16, zero_centered=True, offset=0.5)


def test_gemma_gain_is_formed_in_float32_for_bf16_inputs() -> None:
    """bf16 rounds 1 + 2^-9 to 1; the gain must keep it (Liger-Kernel #74)."""
    w = torch.full((64,), 2.0**-9)
    x = torch.randn(8, 64).to(torch.bfloat16)
    want = NF.rms_norm(x.double(), (64,), w.double() + 1) / (1 + 2.0**-9)
    for fn in (K.rms_norm, NF.rms_norm):
        y = fn(x, (64,), w, 1e-6, offset=1.0).double() / (1 + 2.0**-9)
        assert (y - want).abs().max() < 1e-2  # bf16 output rounding
        # with the gain rounded in bf16 the mean ratio would be exactly 1 / (1 + 2^-9)
        ratio = fn(x, (64,), w, 1e-6, offset=1.0).double() / fn(x, (64,), None, 1e-6).double()
        assert abs(float(ratio[x != 0].mean()) - (1 + 2.0**-9)) < 5e-4


def test_add_norm_falls_back_for_hooked_or_foreign_norms() -> None:
    x, r = torch.randn(2, 8), torch.randn(2, 8)
    norm = LayerNorm(8)
    seen = []
    norm.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    y, s = add_norm(norm, x, r)
    assert torch.equal(seen[0], r + x) and torch.equal(s, r + x)
    y2, s2 = add_norm(torch.nn.LayerNorm(8), x, r)
    torch.testing.assert_close(y2, y)
    assert torch.equal(s2, s)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_tinygpt_fused_residual_equals_the_unfused_block(
    norm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused_calls = []
    name = "add_layer_norm" if norm == "layernorm" else "add_rms_norm"
    real = getattr(K, name)
    monkeypatch.setattr(K, name, lambda *a, **k: fused_calls.append(1) or real(*a, **k))
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=32, n_layers=2, n_heads=2, context=16, norm=norm))
    idx = torch.randint(0, 256, (3, 16))
    results = []
    for hooked in (False, True):  # a no-op hook on every norm takes the unfused path
        handles = [
            m.register_forward_hook(lambda *_: None)
            for m in model.modules()
            if hooked and isinstance(m, (LayerNorm, RMSNorm))
        ]
        model.zero_grad()
        before = len(fused_calls)
        logits = model(idx)
        assert (len(fused_calls) - before) == (0 if hooked else 2)  # one per block
        logits.square().mean().backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
        for h in handles:
            h.remove()
    (fused, g1), (plain, g2) = results
    torch.testing.assert_close(fused, plain, atol=1e-6, rtol=0)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
