"""DyT: formula, saturation and per-site initialisation."""

from __future__ import annotations

import pytest
import torch

from normlab.layers import DyT, llm_alpha_init


def test_formula():
    dyt = DyT(6, alpha_init=0.7)
    with torch.no_grad():
        dyt.weight.copy_(torch.arange(6.0))
        dyt.bias.fill_(0.5)
    x = torch.randn(3, 6)
    torch.testing.assert_close(dyt(x), torch.arange(6.0) * torch.tanh(0.7 * x) + 0.5)


def test_output_is_bounded_by_weight_and_bias():
    dyt = DyT(4, alpha_init=5.0)
    y = dyt(torch.randn(100, 4) * 1e4)
    assert y.abs().max() <= 1.0


def test_saturation_counts_beyond_threshold():
    dyt = DyT(4, alpha_init=1.0)
    x = torch.tensor([[0.5, 1.9, 2.1, -3.0]])
    assert dyt.saturation(x) == 0.5
    assert dyt.saturation(x, threshold=0.1) == 1.0


def test_llm_site_initialisation():
    assert llm_alpha_init("blocks.0.attn_norm") == 0.8
    assert llm_alpha_init("transformer.h.3.ln_1") == 0.8
    assert llm_alpha_init("transformer.h.3.ln_2") == 0.2
    assert llm_alpha_init("norm_f") == 0.2


def test_reset_parameters_restores_init():
    dyt = DyT(3, alpha_init=0.3)
    with torch.no_grad():
        dyt.alpha.fill_(9.0)
        dyt.weight.fill_(9.0)
    dyt.reset_parameters()
    assert dyt.alpha.item() == pytest.approx(0.3) and torch.equal(dyt.weight, torch.ones(3))


def test_dyt_builds_on_the_affine_norms_parameter_handling():
    from normlab.layers.norms import _AffineNorm

    layer = DyT((2, 3), alpha_init=1.5, bias=False)
    assert isinstance(layer, _AffineNorm) and layer.bias is None
    assert layer.weight.shape == (2, 3) and layer.alpha.item() == 1.5
    with torch.no_grad():
        layer.weight.zero_()
        layer.alpha.zero_()
    layer.reset_parameters()
    assert torch.equal(layer.weight, torch.ones(2, 3)) and layer.alpha.item() == 1.5
    assert DyT(4, elementwise_affine=False).weight is None
    with pytest.raises(ValueError, match="normalized_shape"):
        DyT(0)
