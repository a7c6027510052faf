"""normlab.kernels.sdpa: the fused CPU softmax attention against torch's op in float64,
and the calls it hands to torch's op."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import normlab.kernels as K
from normlab.attention.mha import MultiheadAttention
from normlab.kernels import sdpa as A

pytestmark = pytest.mark.skipif(not K.available("cpu"), reason="no C++ compiler")


def _inputs(shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=dtype) for _ in range(4)]


def _reference(q, k, v, do, causal, scale=None):
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)
    out.backward(do.double())
    return out, [t.grad for t in leaves]


def _assert_matches(out, leaves, do, causal, scale=None):
    """``out`` and the leaves' gradients against float64 attention: float32 sums of <= 256
    terms of O(1), a few ulp of the largest term, as torch's own op gives."""
    q, k, v = (t.detach() for t in leaves)
    ref, grads = _reference(q, k, v, do, causal, scale)
    torch.testing.assert_close(out.double(), ref, atol=2e-6, rtol=1e-5)
    for leaf, grad in zip(leaves, grads, strict=True):
        torch.testing.assert_close(leaf.grad.double(), grad, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("head_dim", [8, 16, 32])
@pytest.mark.parametrize("tokens", [1, 15, 16, 17, 64, 130, 256])
@pytest.mark.parametrize("causal", [True, False])
def test_matches_float64_attention(head_dim, tokens, causal):
    q, k, v, do = _inputs((2, 3, tokens, head_dim), seed=tokens + head_dim)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    assert A._fused(*leaves)
    out = K.attention(*leaves, causal=causal)
    out.backward(do)
    _assert_matches(out, leaves, do, causal)


def test_scale_and_leading_dimensions():
    q, k, v, do = _inputs((5, 24, 8))  # 3-d: (slices, tokens, head_dim)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = K.attention(*leaves, causal=True, scale=0.7)
    out.backward(do)
    _assert_matches(out, leaves, do, True, scale=0.7)


def test_non_contiguous_views_equal_contiguous_inputs():
    q, k, v, _ = _inputs((2, 20, 4, 16))  # (batch, tokens, heads, dim) viewed as heads-first
    views = [t.transpose(1, 2) for t in (q, k, v)]
    assert not views[0].is_contiguous()
    expected = K.attention(*[t.contiguous() for t in views], causal=True)
    assert torch.equal(K.attention(*views, causal=True), expected)


@pytest.mark.parametrize("layout", ["mixed_strides", "summed", "transposed_grad"])
def test_any_input_and_gradient_layout(layout):
    """Heads read in place (views of one projection), copied when q, k and v disagree; the
    output gradient as autograd sends it: expanded (a sum's) or a transposed view."""
    q, k, v, do = _inputs((2, 4, 19, 16))
    if layout == "mixed_strides":
        k = k.transpose(1, 2).contiguous().transpose(1, 2)  # same values, other strides
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = K.attention(*leaves, causal=True)
    if layout == "summed":
        do = torch.ones_like(do)
        out.sum().backward()
    elif layout == "transposed_grad":
        out.backward(do.transpose(1, 2).contiguous().transpose(1, 2))
    else:
        out.backward(do)
    _assert_matches(out, leaves, do, True)


def test_large_scores_stay_finite():
    q, k, v, do = _inputs((1, 2, 33, 8))
    q = q * 40.0  # scores in the hundreds: exp would overflow without the row maximum
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = K.attention(*leaves, causal=True)
    out.backward(do)
    ref, _ = _reference(q, k, v, do, True)
    assert torch.isfinite(out).all() and all(torch.isfinite(t.grad).all() for t in leaves)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-4)


def test_thread_count_does_not_change_the_numbers():
    q, k, v, do = _inputs((3, 4, 40, 16))
    results = []
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            out = K.attention(*leaves, causal=True)
            out.backward(do)
            results.append([out, *(t.grad for t in leaves)])
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))


def test_double_backward_follows_the_formula():
    q, k, v, _ = _inputs((1, 2, 6, 8), dtype=torch.float32)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    (gq,) = torch.autograd.grad(K.attention(*leaves, causal=True).square().sum(), leaves[:1],
                                create_graph=True)  # fmt: skip
    second = torch.autograd.grad(gq.sum(), leaves[1])[0]
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    out = A.explicit_attention(*ref_leaves, causal=True, scale=8**-0.5)
    (rq,) = torch.autograd.grad(out.square().sum(), ref_leaves[:1], create_graph=True)
    reference = torch.autograd.grad(rq.sum(), ref_leaves[1])[0]
    torch.testing.assert_close(second.double(), reference, atol=1e-5, rtol=1e-4)


class _PassThrough(TorchFunctionMode):
    """A torch-function mode that changes nothing (the fold tracer is one that records)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "case",
    [
        "float64",
        "bfloat16",
        "head_dim_12",
        "head_dim_64",
        "tokens_257",
        "cross_lengths",
        "disabled",
        "function_mode",
    ],
)
def test_other_calls_take_torchs_op(case, monkeypatch):
    shape, dtype = (2, 2, 9, 8), torch.float32
    if case in ("float64", "bfloat16"):
        dtype = getattr(torch, case)
    shape = {"head_dim_12": (2, 2, 9, 12), "head_dim_64": (2, 2, 9, 64)}.get(case, shape)
    shape = {"tokens_257": (1, 1, 257, 8)}.get(case, shape)
    q, k, v, _ = _inputs(shape, dtype=dtype)
    if case == "cross_lengths":
        k, v = torch.randn(2, 2, 11, 8), torch.randn(2, 2, 11, 8)

    def fail(*args, **kwargs):
        raise AssertionError("the fused kernel ran")

    monkeypatch.setattr(A._AttentionFn, "apply", fail)
    expected = F.scaled_dot_product_attention(q, k, v)
    if case == "disabled":
        with K.disabled():
            got = K.attention(q, k, v)
    elif case == "function_mode":
        with _PassThrough():
            got = K.attention(q, k, v)
    else:
        got = K.attention(q, k, v)
    assert torch.equal(got, expected)


def test_multihead_softmax_attention_uses_the_kernel_and_equals_the_explicit_scores():
    torch.manual_seed(0)
    attn = MultiheadAttention(32, 4, causal=True)
    x = torch.randn(3, 21, 32)
    q, k, v = attn.project(x)
    assert A._fused(q, k, v)
    explicit = attn.output(attn.attend(q, k, v), x)  # scores, mask and softmax spelled out
    torch.testing.assert_close(attn(x), explicit, atol=1e-6, rtol=1e-5)
