"""TinyConvNeXt: the ConvNeXt block's formula and its LayerNorm that cannot fold."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from normlab.models.convnext import TinyConvNeXt
from normlab.surgery import analyze_fold


def test_forward_is_the_convnext_block_formula():
    torch.manual_seed(0)
    model = TinyConvNeXt(vocab=32, d=8).double()
    idx = torch.randint(0, 32, (2, 7))
    e = model.embed(idx)
    conv = F.conv1d(e.transpose(1, 2), model.dwconv.weight, model.dwconv.bias, padding=1, groups=8)
    y = F.layer_norm(conv.transpose(1, 2), (8,), model.norm.weight, model.norm.bias)
    h = e + F.linear(F.gelu(F.linear(y, model.up.weight, model.up.bias)), *model.down.parameters())
    logits = model.head(F.layer_norm(h, (8,), model.norm_f.weight, model.norm_f.bias))
    torch.testing.assert_close(model(idx), logits, rtol=0, atol=1e-12)
    # the depthwise convolution mixes neighbouring tokens only (kernel 3)
    changed = idx.clone()
    changed[:, 0] = (changed[:, 0] + 1) % 32
    moved = (model(changed) - model(idx)).abs().amax(dim=(0, 2))
    assert bool((moved[:2] > 0).all()) and bool((moved[2:] == 0).all())


def test_no_layernorm_of_it_folds():
    analysis = analyze_fold(TinyConvNeXt(), torch.randint(0, 64, (2, 6)))
    assert not analysis.foldable and set(analysis.refused) == {"norm", "norm_f"}
