"""TinyGPT's looped options: shared weights, loop count, inter-loop signals, injection."""

from __future__ import annotations

import pytest
import torch

from normlab.models.gpt import GPTConfig, TinyGPT

BASE = {"d_model": 16, "n_layers": 2, "n_heads": 2, "context": 8}


def test_one_loop_is_the_ordinary_model_and_params_do_not_grow():
    torch.manual_seed(0)
    plain = TinyGPT(GPTConfig(**BASE))
    looped = TinyGPT(GPTConfig(**BASE, loops=3, loop_signal=True, attention_injection=True))
    assert plain.num_parameters() == looped.num_parameters()
    x = torch.randint(0, 200, (2, 8))
    looped.load_state_dict(plain.state_dict())
    one = TinyGPT(GPTConfig(**BASE, loops=1, loop_signal=True))
    one.load_state_dict(plain.state_dict())
    assert torch.equal(one(x), plain(x))


def test_plain_loop_equals_manual_unrolling_with_input_injection():
    torch.manual_seed(1)
    model = TinyGPT(GPTConfig(**BASE, loops=2))
    x = torch.randint(0, 200, (2, 8))
    e = model.embed(x) + model.pos(torch.arange(8))
    h = e
    for k in range(2):
        h = h + e if k else h
        for b in model.blocks:
            h, _ = b(h)
    assert torch.allclose(model(x), model.readout(h), atol=1e-6)
    states, _ = model.trunk(x)
    assert len(states) == 1 + 2 * 2


def test_loop_signal_and_attention_injection_change_the_function():
    torch.manual_seed(2)
    x = torch.randint(0, 200, (2, 8))
    ref = TinyGPT(GPTConfig(**BASE, loops=3))
    outs = []
    for sig, inj in ((False, False), (True, False), (False, True)):
        m = TinyGPT(GPTConfig(**BASE, loops=3, loop_signal=sig, attention_injection=inj))
        m.load_state_dict(ref.state_dict())
        outs.append(m(x))
    assert not torch.allclose(outs[0], outs[1]) and not torch.allclose(outs[0], outs[2])
    # with the mean mix, block l's input in loop 2 is the average of the two streams
    m = TinyGPT(GPTConfig(**BASE, loops=2, loop_signal=True))
    e = m.embed(x) + m.pos(torch.arange(8))
    h, ins = e, []
    for b in m.blocks:
        ins.append(h)
        h, _ = b(h)
    h = h + e
    for b, prev in zip(m.blocks, ins, strict=True):
        h, _ = b(0.5 * (h + prev))
    assert torch.allclose(m(x), m.readout(h), atol=1e-6)


def test_attention_injection_keeps_the_input_injection():
    """normlab's reading: ``h <- h + e + attn_0(norm1_0(e))`` at every loop after the first;
    with the first attention's output projection zeroed it is the plain looped model."""
    torch.manual_seed(3)
    x = torch.randint(0, 200, (2, 8))
    m = TinyGPT(GPTConfig(**BASE, loops=2, attention_injection=True))
    e = m.embed(x) + m.pos(torch.arange(8))
    h = e
    for b in m.blocks:
        h, _ = b(h)
    first = m.blocks[0]
    h = h + e + first.attn(first.norm1(e))
    for b in m.blocks:
        h, _ = b(h)
    assert torch.allclose(m(x), m.readout(h), atol=1e-6)
    plain = TinyGPT(GPTConfig(**BASE, loops=2))
    with torch.no_grad():
        first.attn.out.weight.zero_()
        first.attn.out.bias.zero_()
    plain.load_state_dict(m.state_dict())
    assert torch.allclose(m(x), plain(x), atol=1e-6)


def test_bad_loop_settings_raise():
    with pytest.raises(ValueError, match="loops"):
        GPTConfig(**BASE, loops=0)
    with pytest.raises(ValueError, match="residual"):
        GPTConfig(**BASE, loops=2, residual="attnres")


def test_looped_variants_and_their_parity():
    from normlab.models.looped import VARIANTS, loop_parity, looped_config

    configs = {v: looped_config(BASE, 3, v) for v in VARIANTS}
    assert configs["fully"].loop_signal and configs["fully"].attention_injection
    assert not configs["plain"].loop_signal and not configs["plain"].attention_injection
    assert {c.loops for c in configs.values()} == {3}
    assert loop_parity(configs["fully"]) == (0, 0.0)
