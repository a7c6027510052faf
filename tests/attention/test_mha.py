"""MultiheadAttention: fast path, masking, gating, grouped-query attention."""

from __future__ import annotations

import pytest
import torch

from normlab.attention import MultiheadAttention
from normlab.attention.mha import GATE_BIAS_INIT


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_fast_path_equals_explicit_softmax(causal):
    attn = MultiheadAttention(16, 4, causal=causal).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    fast = attn(x)
    explicit, probs = attn(x, return_probs=True)
    torch.testing.assert_close(fast, explicit, rtol=0, atol=1e-12)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 6, dtype=torch.float64))


@pytest.mark.parametrize("score", ["softmax", "softmax1", "clipped-softmax"])
def test_causal_output_ignores_future_tokens(score):
    attn = MultiheadAttention(8, 2, score=score, causal=True)
    x = torch.randn(1, 5, 8)
    y = torch.cat([x[:, :3], torch.randn(1, 2, 8)], dim=1)
    torch.testing.assert_close(attn(x)[:, :3], attn(y)[:, :3])


def test_attention_mask_blocks_keys():
    attn = MultiheadAttention(8, 2)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[:, 3] = False
    _, probs = attn(torch.randn(1, 4, 8), attn_mask=mask, return_probs=True)
    assert torch.equal(probs[..., 3], torch.zeros_like(probs[..., 3]))
    fast = attn(torch.ones(1, 4, 8), attn_mask=mask)
    explicit, _ = attn(torch.ones(1, 4, 8), attn_mask=mask, return_probs=True)
    torch.testing.assert_close(fast, explicit)


def test_gate_starts_near_a_quarter():
    attn = MultiheadAttention(8, 2, gated=True)
    assert torch.sigmoid(torch.tensor(GATE_BIAS_INIT)).item() == pytest.approx(0.25)
    with torch.no_grad():
        attn.gate_weight.zero_()
    plain = MultiheadAttention(8, 2)
    plain.load_state_dict({k: v for k, v in attn.state_dict().items() if not k.startswith("gate")})
    with torch.no_grad():
        plain.out.bias.zero_()
        attn.out.bias.zero_()
    x = torch.randn(1, 3, 8)
    torch.testing.assert_close(attn(x), 0.25 * plain(x))


def test_grouped_query_attention_shares_keys_and_values():
    attn = MultiheadAttention(16, 4, kv_heads=2)
    assert attn.qkv.out_features == 16 + 2 * 2 * 4
    q, k, v = attn.project(torch.randn(1, 3, 16))
    assert q.shape == k.shape == v.shape == (1, 4, 3, 4)
    torch.testing.assert_close(k[:, 0], k[:, 1])
    torch.testing.assert_close(v[:, 2], v[:, 3])


def test_bad_configuration_and_input():
    with pytest.raises(ValueError, match="divisor"):
        MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="kv_heads"):
        MultiheadAttention(16, 4, kv_heads=3)
    with pytest.raises(ValueError, match="not an attention score"):
        MultiheadAttention(16, 4, score="rmsnorm")
    with pytest.raises(ValueError, match="batch, tokens, dim"):
        MultiheadAttention(16, 4)(torch.randn(3, 16))


@pytest.mark.parametrize("score", ["softmax", "softmax1"])
@pytest.mark.parametrize("gated", [False, True])
def test_project_attend_output_is_the_forward_and_a_tail_reads_the_cache(score, gated):
    attn = MultiheadAttention(16, 4, kv_heads=2, score=score, gated=gated, causal=True).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    q, k, v = attn.project(x)
    y, probs = attn.attend(q, k, v, return_probs=True)
    torch.testing.assert_close(attn.output(y, x), attn(x), rtol=0, atol=1e-12)
    torch.testing.assert_close(probs, attn(x, return_probs=True)[1], rtol=0, atol=1e-12)
    # the last three tokens' queries over all seven keys: the end-aligned causal mask
    tail = attn.attend(q[..., 4:, :], k, v)
    torch.testing.assert_close(attn.output(tail, x[:, 4:]), attn(x)[:, 4:], rtol=0, atol=1e-12)


def test_attend_over_substituted_keys_is_the_explicit_formula_bit_for_bit():
    # the formula nsnquant computed by hand before the public API existed
    attn = MultiheadAttention(32, 2, causal=True)
    x = torch.randn(3, 10, 32)
    q, k, v = attn.project(x)
    k2, v2 = k + 0.1 * torch.randn_like(k), v.round()  # a stand-in for a quantized cache
    qt = q[..., 6:, :]
    scores = (qt @ k2.transpose(-2, -1)) * attn.scale
    keep = torch.ones(4, 10, dtype=torch.bool).tril(10 - 4)
    old = scores.masked_fill(~keep, float("-inf")).softmax(-1) @ v2
    new = attn.attend(qt, k2, v2)
    assert torch.equal(new, old)
    merged = attn.out(old.transpose(1, 2).reshape(3, 4, -1))
    assert torch.equal(attn.output(new, x[:, 6:]), merged)


def test_attend_masks_and_refuses_bad_shapes():
    attn = MultiheadAttention(8, 2, causal=True)
    q, k, v = attn.project(torch.randn(1, 5, 8))
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[:, 0] = False
    _, probs = attn.attend(q[..., 3:, :], k, v, attn_mask=mask, return_probs=True)
    assert torch.equal(probs[..., 0], torch.zeros_like(probs[..., 0]))
    assert bool((probs[..., 0, 4] == 0).all())  # query 3 does not see key 4
    with pytest.raises(ValueError, match="keys >= queries"):
        attn.attend(q, k[..., :2, :], v[..., :2, :])
    with pytest.raises(ValueError, match="one shape"):
        attn.attend(q, k, v[..., :2, :])
