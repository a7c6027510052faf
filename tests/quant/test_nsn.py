"""NSNQuant, the k-means VQ and KIVI-style baselines, and their Hugging Face cache."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.quant import IntKIVI, KMeansVQ, NSNQuantizer, hadamard
from normlab.quant.nsn import gaussian_codebooks, nsn_normalize


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_nsn_normalize_decomposes_exactly():
    x = torch.randn(2, 3, 20, 16, dtype=torch.float64) * 4 + 2
    z, s1, s2, o = nsn_normalize(x)
    torch.testing.assert_close(s1 * (s2 * z + o), x)
    torch.testing.assert_close(z.norm(dim=-1), torch.full(z.shape[:-1], 4.0, dtype=x.dtype))
    # after the shift the chunk's normalized tokens have (nearly) zero channel mean
    assert float((z * s2).mean(-2).abs().max()) < 1e-12


def test_codebook_and_bit_accounting():
    books = gaussian_codebooks(2)
    assert books.shape == (2, 256, 8)
    q = NSNQuantizer(bits=2)
    assert q.codebook_bytes == 2 * 256 * 8 * 2
    x = torch.randn(1, 2, 32, 16)
    chunk = q.quantize(x)
    tokens = 2 * 32
    # codes: 2 stages x 2 sub-vectors x 8 bits per token; s1, s2 fp16 per token; o and the
    # int16 exponent of s1 per chunk
    assert chunk.bits == tokens * (2 * 2 * 8 + 32) + 2 * 16 * 16 + 2 * 16
    kivi = IntKIVI(bits=2, axis="channel", group=32).quantize(x)
    assert kivi.bits == x.numel() * 2 + 2 * (2 * 16 * 1) * 16  # one group of 32 tokens/channel
    km = KMeansVQ.calibrate(torch.randn(512, 16), bits=1, iters=3)
    assert km.quantize(x).bits == tokens * 2 * 8


@pytest.mark.parametrize("bits", [1, 2])
def test_nsn_error_on_gaussian_and_shifted_data(bits):
    torch.manual_seed(0)
    q = NSNQuantizer(bits=bits)
    x = torch.randn(4, 64, 16)
    err = _rel(q.dequantize(q.quantize(x)), x)
    # 1 bit / value VQ of a Gaussian: distortion ~ 0.3-0.4 of the energy; 2 bits: ~0.1
    assert err < (0.65 if bits == 1 else 0.4)
    # scale, offset and an outlier channel do not change the relative error much: NSN removes them
    shifted = x * 30 + torch.linspace(-50, 50, 16)
    shifted[..., 3] *= 8
    assert _rel(q.dequantize(q.quantize(shifted)), shifted) < err * 1.5 + 0.05
    more = NSNQuantizer(bits=2) if bits == 1 else None
    if more is not None:
        assert _rel(more.dequantize(more.quantize(x)), x) < err


def test_hadamard_step_matters_for_outlier_channels():
    torch.manual_seed(0)
    x = torch.randn(2, 64, 16)
    x[..., 0] *= 20  # one dominant channel: without rotation one sub-vector carries it all
    rot, plain = NSNQuantizer(bits=1), NSNQuantizer(bits=1, rotate=False)
    assert _rel(rot.dequantize(rot.quantize(x)), x) < _rel(plain.dequantize(plain.quantize(x)), x)


def test_kmeans_degrades_under_shift_and_nsn_does_not():
    torch.manual_seed(0)
    mix = torch.randn(16, 16)
    calib = torch.randn(4096, 16) @ mix
    km = KMeansVQ.calibrate(calib, bits=1, iters=10)
    inside = torch.randn(1, 256, 16) @ mix
    outside = (torch.randn(1, 256, 16) @ torch.randn(16, 16)) * 3  # another distribution
    err_in = _rel(km.dequantize(km.quantize(inside)), inside)
    err_out = _rel(km.dequantize(km.quantize(outside)), outside)
    nsn = NSNQuantizer(bits=1)
    assert err_out > 1.3 * err_in
    assert _rel(nsn.dequantize(nsn.quantize(outside)), outside) < err_out


@pytest.mark.parametrize("axis", ["channel", "token"])
@pytest.mark.parametrize("bits", [1, 2, 4])
def test_kivi_integer_grid(axis, bits):
    x = torch.randn(2, 3, 40, 16)
    q = IntKIVI(bits=bits, axis=axis, group=32)
    y = q.dequantize(q.quantize(x))
    assert y.shape == x.shape
    # each group: error at most half a step, step = range / (2^b - 1)
    grouped = q._grouped(x)
    step = (grouped.amax(-1) - grouped.amin(-1)).max() / (2**bits - 1)
    assert float((y - x).abs().max()) <= float(step) / 2 * (1 + 1e-3) + 1e-3
    if bits == 4:
        assert _rel(y, x) < 0.15


def test_hadamard_reused_is_orthonormal():
    x = torch.randn(5, 16, dtype=torch.float64)
    torch.testing.assert_close(hadamard(hadamard(x)), x)
    assert math.isclose(float(hadamard(x).norm()), float(x.norm()), rel_tol=1e-12)


def _models():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            n_embd=64,
            n_layer=2,
            n_head=4,
            vocab_size=101,
            n_positions=128,
            bos_token_id=0,
            eos_token_id=0,
        )
    )
    llama = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=101,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=0,
        )
    )
    return [gpt2.eval(), llama.eval()]


def test_cache_in_generate_gpt2_and_llama():
    from transformers import DynamicCache

    from normlab.quant.kv_cache import KVQuantizedCache, NSNQuantCache

    torch.set_num_threads(1)
    for model in _models():
        ids = torch.randint(1, 101, (2, 24), generator=torch.Generator().manual_seed(1))
        kw = {"max_new_tokens": 10, "do_sample": False, "pad_token_id": 0}
        ref = model.generate(ids, past_key_values=DynamicCache(config=model.config), **kw)
        cache = NSNQuantCache(model.config, bits=2, residual_length=8)
        out = model.generate(ids, past_key_values=cache, **kw)
        assert out.shape == ref.shape and cache.get_seq_length() == out.shape[1] - 1
        # an untrained model's logits are nearly flat, so greedy paths may part after a while;
        # the first new tokens read the quantized prompt and must agree
        assert torch.equal(out[:, :27], ref[:, :27])
        assert 0 < cache.bytes_per_token(quantized_only=True) < cache.bytes_per_token()
        with torch.no_grad():  # logits after a quantized prefix stay close to full precision
            full = model(ids).logits[:, 16:]
            kivi = KVQuantizedCache(
                model.config,
                key_quantizer=IntKIVI(bits=2, axis="channel"),
                value_quantizer=IntKIVI(bits=2, axis="token"),
                residual_length=8,
            )
            errors = []
            for c in (NSNQuantCache(model.config, bits=2, residual_length=8), kivi):
                model(ids[:, :16], past_key_values=c)
                errors.append(_rel(model(ids[:, 16:], past_key_values=c).logits, full))
                assert c.layers[0].quantized_tokens() == 24  # 3 full windows of 8
        assert max(errors) < 0.2, errors


def test_cache_bytes_are_what_is_stored():
    from transformers import GPT2Config

    from normlab.quant.kv_cache import NSNQuantCache

    cache = NSNQuantCache(GPT2Config(n_embd=64, n_layer=2, n_head=4), bits=1, residual_length=8)
    k = torch.randn(1, 4, 20, 16)
    for layer in range(2):
        cache.update(k, k.clone(), layer)
    # per head vector of a quantized token: 2 codes x 8 bits + s1, s2 (fp16) + (o and the
    # int16 exponent of s1) / 8 tokens
    per_vector = (2 * 8 + 32 + (16 * 16 + 16) / 8) / 8
    assert cache.bytes_per_token(quantized_only=True) == pytest.approx(2 * 2 * 4 * per_vector)
    window = 4 * 4 * 16 * 4 * 2 * 2  # 4 fp32 tokens x 4 heads x 16 x 4 bytes x (K, V) x layers
    total = 16 * 2 * 2 * 4 * per_vector + window
    assert cache.bytes_per_token() == pytest.approx(total / 20)
