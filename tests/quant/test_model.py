"""quantize_model: wrapping, undoing, presets, calibration, and training through FP4."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.quant import (
    PRESETS,
    QuantFormat,
    QuantLinear,
    calibrate,
    dequantize_model,
    quantize_model,
    quantized,
)


def model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(d_model=32, n_layers=2, n_heads=2, context=16)).eval()


def tokens() -> torch.Tensor:
    return torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))


def test_wrap_and_undo_restore_the_model_exactly():
    net = model()
    x = tokens()
    before = net(x)
    linears = {n: m for n, m in net.named_modules() if isinstance(m, nn.Linear)}
    keys = list(net.state_dict())
    names = quantize_model(net, "w4a4")
    assert sorted(names) == sorted(linears)
    assert all(isinstance(net.get_submodule(n), QuantLinear) for n in names)
    after = net(x)
    assert not torch.allclose(after, before)
    assert (after - before).abs().max() < before.abs().max()
    with pytest.raises(ValueError, match="already quantized"):
        quantize_model(net, "w8a8")
    assert dequantize_model(net) == len(names)
    assert all(net.get_submodule(n) is m for n, m in linears.items())
    assert list(net.state_dict()) == keys
    torch.testing.assert_close(net(x), before, rtol=0, atol=0)


def test_more_bits_is_closer_and_identity_formats_are_exact():
    net = model()
    x = tokens()
    ref = net(x)
    errors = {}
    for scheme in ("w8a8", "w4a4", "w8a8-tensor", "nvfp4", "mxfp4"):
        with quantized(net, scheme):
            errors[scheme] = (net(x) - ref).abs().mean().item()
    assert errors["w8a8"] < errors["w4a4"] and errors["w8a8"] < errors["nvfp4"]
    with quantized(net, weights=None, activations=None):
        torch.testing.assert_close(net(x), ref, rtol=0, atol=0)
    assert not any(isinstance(m, QuantLinear) for m in net.modules())
    assert set(PRESETS) >= {"w8a8", "w4a4", "w8a8-tensor", "nvfp4", "mxfp4"}


def test_skip_and_calibrated_static_ranges():
    net = model()
    x = tokens()
    names = quantize_model(net, "w8a8-tensor", skip=lambda name, m: name == "head")
    assert "head" not in names and isinstance(net.head, nn.Linear)
    assert calibrate(net, lambda m: m(x)) == len(names)
    layer = net.blocks[0].attn.qkv
    assert layer.lo is not None and layer.lo <= 0 <= layer.hi
    inputs = net.blocks[0].norm1(net.embed(x) + net.pos(torch.arange(16)))
    assert layer.lo == pytest.approx(inputs.min().item(), rel=1e-5)
    assert "static" in repr(layer)
    dequantize_model(net)
    with pytest.raises(ValueError, match="quantize_model"):
        calibrate(net, lambda m: m(x))


def test_training_gradients_through_forward_and_backward_fp4():
    x, y = tokens(), tokens()
    grads = {}
    for backward in (None, False, True):
        net = model().train()
        if backward is not None:
            quantize_model(net, "nvfp4", backward=backward)
        loss = nn.functional.cross_entropy(net(x).flatten(0, 1), y.flatten())
        loss.backward()
        grads[backward] = torch.cat([p.grad.flatten() for p in net.parameters()])
        assert torch.isfinite(grads[backward]).all()
    ref = grads[None]
    for backward in (False, True):
        cosine = torch.cosine_similarity(grads[backward], ref, dim=0)
        assert 0.8 < cosine < 1.0, (backward, cosine)
    assert not torch.equal(grads[True], grads[False])


@pytest.mark.slow  # the first transformers import alone takes seconds
def test_hf_gpt2_conv1d_is_wrapped():
    pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    net = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100)).eval()
    x = torch.randint(0, 100, (1, 8))
    ref = net(x).logits
    names = quantize_model(net, weights=QuantFormat("int", bits=8, granularity="token"),
                           activations=None)  # fmt: skip
    assert "transformer.h.0.attn.c_attn" in names
    wrapped = net.transformer.h[0].attn.c_attn
    assert wrapped.weight_matrix().shape == (96, 32)
    out = net(x).logits
    assert 0 < (out - ref).abs().max() < 0.05 * ref.abs().max()
    dequantize_model(net)
    torch.testing.assert_close(net(x).logits, ref)
