"""Sink score and first-token mass against hand-built attention maps."""

from __future__ import annotations

import pytest
import torch

from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.probes import sink_alpha, sink_stats


def causal_uniform(n: int) -> torch.Tensor:
    return torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None]


def test_alpha_by_hand():
    n = 4
    uniform = causal_uniform(n)  # A[i, 0] = 1/(i+1): alpha_0 = (1 + 1/2 + 1/3 + 1/4) / 4
    sink = torch.zeros(n, n)
    sink[:, 0] = 1.0  # every query attends to the first token only
    probs = torch.stack([uniform, sink])[None]  # (1, 2 heads, 4, 4)
    alpha = sink_alpha(probs)
    torch.testing.assert_close(alpha, torch.tensor([25 / 48, 1.0], dtype=torch.float64))
    # alpha_1 = mean over i >= 1 of A[i, 1] = (1/2 + 1/3 + 1/4) / 3 for the uniform head
    torch.testing.assert_close(
        sink_alpha(probs, key=1)[0], torch.tensor(13 / 36, dtype=torch.float64)
    )
    with pytest.raises(ValueError, match="key"):
        sink_alpha(probs, key=4)


def test_sink_score_on_a_model_and_model_unchanged():
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=32, n_layers=2, n_heads=2, context=16)).eval()
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    model.train()
    report = sink_stats(model, [x[:1], x[1:]])
    assert model.training
    _, probs = model.eval().trunk(x, return_probs=True)
    alpha = torch.stack([sink_alpha(p) for p in probs])
    assert [a for row in report.alpha for a in row] == pytest.approx(alpha.flatten().tolist())
    assert report.sink_score == pytest.approx(float((alpha > 0.3).double().mean()))
    mass = torch.stack([p[..., 0].mean() for p in probs]).mean().item()
    assert report.first_token_mass == pytest.approx(mass, rel=1e-5)
    assert {"sink_score", "first_token_mass", "alpha", "threshold", "key"} <= set(report.to_dict())


def test_a_planted_sink_head_is_counted():
    """Head 0 of every layer is made to attend to the first token only: score 2/4."""
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=32, n_layers=2, n_heads=2, context=16)).eval()
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    base = sink_stats(model, x)
    assert base.sink_score == 0.0  # random init: attention is spread out
    c = 31  # a marker channel: 1 at position 0, 0 everywhere else
    with torch.no_grad():
        model.embed.weight[:, c] = 0.0
        model.pos.weight[:, c] = 0.0
        model.pos.weight[0, c] = 1.0
        for block in model.blocks:
            qkv = block.attn.qkv  # rows 0..15: head-0 queries, rows 32..47: head-0 keys
            qkv.weight[:16] = 0.0
            qkv.bias[:16] = 1.0
            qkv.weight[32:48] = 0.0
            qkv.weight[32:48, c] = 10.0
            qkv.bias[32:48] = 0.0
    report = sink_stats(model, x)
    assert report.sink_score == 0.5
    for layer in report.alpha:
        assert layer[0] > 0.99 and layer[1] < 0.3
    assert report.first_token_mass > base.first_token_mass + 0.3
