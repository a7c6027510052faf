"""Depth-wise attention residuals, OASIS's null signal, and the TinyGPT modes built on them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from normlab import functional as NF
from normlab.attention.depth import AttnResidual, null_signal
from normlab.attention.mha import MultiheadAttention
from normlab.models.gpt import GPTConfig, TinyGPT


def values(n: int = 4, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 5, 8, generator=g, dtype=torch.float64) * (i + 1) for i in range(n)]


def test_zero_query_mixes_uniformly_and_one_value_passes_through():
    route = AttnResidual(8).double()
    vs = values()
    torch.testing.assert_close(route(vs), sum(vs) / len(vs))
    torch.testing.assert_close(route(vs[:1]), vs[0])


def test_weights_follow_the_formula_and_ignore_value_scale():
    route = AttnResidual(8).double()
    with torch.no_grad():
        route.query.copy_(torch.linspace(-1, 1, 8))
    vs = values()
    keys = torch.stack([v / v.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() for v in vs])
    expected = torch.softmax(keys @ route.query.detach(), dim=0)
    a = route.weights(vs)
    torch.testing.assert_close(a, expected)
    torch.testing.assert_close(a.sum(0), torch.ones(2, 5, dtype=torch.float64))
    torch.testing.assert_close(route(vs), sum(a[i, ..., None] * v for i, v in enumerate(vs)))
    scaled = [v * 7.0 if i == 2 else v for i, v in enumerate(vs)]  # RMS-normed keys
    torch.testing.assert_close(route.weights(scaled), a)


def test_null_coupling_routes_away_from_sink_layers():
    route = AttnResidual(8, null_coupling=True).double()
    assert route.beta().item() == pytest.approx(math.log1p(math.exp(-5.0)))
    vs = values()
    psi = [torch.zeros(2, 5, dtype=torch.float64) for _ in vs]
    plain = route.weights(vs, psi)
    torch.testing.assert_close(plain, AttnResidual(8).double().weights(vs))
    with torch.no_grad():
        route.beta_raw.fill_(2.0)
    beta = F.softplus(torch.tensor(2.0, dtype=torch.float64))
    psi[2] = torch.full((2, 5), 0.8, dtype=torch.float64)
    a = route.weights(vs, psi)
    psi_all = torch.stack(psi)
    logits = -beta * (psi_all - psi_all.mean(0))
    torch.testing.assert_close(a, torch.softmax(logits, 0))
    assert torch.all(a[2] < plain[2]) and torch.all(a[0] > plain[0])
    shifted = [p + 0.3 for p in psi]  # only differences between layers matter
    torch.testing.assert_close(route.weights(vs, shifted), a)
    with torch.no_grad():
        route.beta_raw.fill_(50.0)
    assert route.beta().item() == 10.0
    with pytest.raises(ValueError, match="null signal"):
        route.weights(vs)


def test_null_signal():
    scores = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    assert torch.all(null_signal(NF.softmax(scores)).abs() < 1e-12)
    p1 = NF.softmax1(scores)
    expected = (1 - p1.sum(-1)).mean(1)
    torch.testing.assert_close(null_signal(p1), expected)
    assert null_signal(p1).shape == (2, 4) and torch.all(null_signal(p1) > 0)
    with pytest.raises(ValueError, match="batch, heads"):
        null_signal(scores[0])


def config(residual: str, **kw) -> GPTConfig:
    return GPTConfig(d_model=32, n_layers=2, n_heads=2, context=16, residual=residual, **kw)


def tokens() -> torch.Tensor:
    return torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize(
    "residual, score", [("attnres", "softmax"), ("oasis", "softmax1"), ("ngpt", "softmax")]
)
def test_tinygpt_modes_run_and_train(residual, score):
    torch.manual_seed(0)
    model = TinyGPT(config(residual, score=score))
    x = tokens()
    states, probs = model.trunk(x, return_probs=True)
    assert len(states) == 3 and len(probs) == 2
    torch.testing.assert_close(model.readout(states[-1]), model(x))
    embedding = model.embed(x) + model.pos(torch.arange(16))
    if residual == "ngpt":
        embedding = NF.l2_normalize(embedding)
    torch.testing.assert_close(states[0], embedding)
    torch.testing.assert_close(model.trunk(x, layers=[])[0], [embedding])
    loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    routers = [n for n, _ in model.named_parameters() if "route" in n]
    if residual == "ngpt":
        assert not routers and not hasattr(model, "norm_f")
        assert torch.allclose(states[1].norm(dim=-1), torch.ones(2, 16), atol=1e-5)
    else:
        assert len([n for n in routers if n.endswith("query")]) == 5  # 2 per block + final
        assert any(p.grad.abs().sum() > 0 for n, p in model.named_parameters() if "query" in n)
    if residual == "oasis":
        assert len([n for n in routers if n.endswith("beta_raw")]) == 5
        assert all(null_signal(p).min() > 0 for p in probs)


def test_ngpt_constraints_hold_after_a_step():
    torch.manual_seed(0)
    model = TinyGPT(config("ngpt"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    F.cross_entropy(model(tokens()).flatten(0, 1), tokens().flatten()).backward()
    opt.step()
    model.after_step()
    qkv = model.blocks[0].attn.qkv.weight
    out = model.blocks[0].attn.out.weight
    ones = torch.ones(qkv.shape[0])
    torch.testing.assert_close(qkv.norm(dim=1), ones)  # rows: read the model dimension
    torch.testing.assert_close(out.norm(dim=0), torch.ones(out.shape[1]))  # columns: write it
    torch.testing.assert_close(model.embed.weight.norm(dim=1), torch.ones(257))
    torch.testing.assert_close(model.head.weight.norm(dim=1), torch.ones(257))


def test_qk_norm_options():
    x = torch.randn(2, 6, 16)
    rms = MultiheadAttention(16, 2, qk_norm="rms", causal=True)
    q, k, _ = rms.project(x)
    for t in (q, k):
        torch.testing.assert_close(t.pow(2).mean(-1), torch.ones(2, 2, 6), rtol=1e-4, atol=1e-4)
    l2 = MultiheadAttention(16, 2, qk_norm="l2", scale=math.sqrt(8), normalized=True)
    q, k, _ = l2.project(x)
    torch.testing.assert_close(q.norm(dim=-1), torch.ones(2, 2, 6))  # s_qk starts at 1
    torch.testing.assert_close(k.norm(dim=-1), torch.ones(2, 2, 6))
    assert l2.qkv.bias is None and "qk_norm='l2'" in repr(l2)
    with pytest.raises(ValueError, match="qk_norm"):
        MultiheadAttention(16, 2, qk_norm="layer")
    torch.manual_seed(0)
    plain, normed = TinyGPT(config("pre")), TinyGPT(config("pre", qk_norm=True))
    assert normed.blocks[0].attn.qk_norm == "rms" and plain.blocks[0].attn.qk_norm is None
    assert sum(p.numel() for p in plain.parameters()) == normed.num_parameters()
