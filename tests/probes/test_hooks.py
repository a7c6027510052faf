"""Model adapters: residual stream, norm sites, attention and layer reordering."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.probes.hooks import adapt

VOCAB = 300


def tinygpt(residual: str = "pre") -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(d_model=32, n_layers=3, n_heads=2, context=16, residual=residual))


def gpt2(lm_head: bool = True) -> nn.Module:
    pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=64,
        attn_implementation="eager",
    )  # fmt: skip
    return (GPT2LMHeadModel if lm_head else GPT2Model)(config)


def bert() -> nn.Module:
    pytest.importorskip("transformers")
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, attn_implementation="eager",
    )  # fmt: skip
    return BertForMaskedLM(config)


def llama() -> nn.Module:
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="eager",
    )  # fmt: skip
    return LlamaForCausalLM(config)


BUILDERS = {"tinygpt": tinygpt, "gpt2": gpt2, "bert": bert, "llama": llama}
N_LAYERS = {"tinygpt": 3, "gpt2": 2, "bert": 2, "llama": 3}


@pytest.fixture(scope="module", params=list(BUILDERS))
def family(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def model(family) -> nn.Module:
    return BUILDERS[family]()


def tokens(n: int = 10) -> torch.Tensor:
    return torch.randint(0, 250, (2, n), generator=torch.Generator().manual_seed(3))


def hook_state(model: nn.Module) -> list[tuple[int, int, int]]:
    return [
        (len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks))
        for m in model.modules()
    ]


def test_family_and_flags(model, family):
    adapter = adapt(model)
    assert adapter.family == family
    assert adapter.has_lm_head
    assert adapter.causal == (family != "bert")
    assert len(adapter.blocks()) == N_LAYERS[family]


def test_residual_reproduces_logits(model, family):
    adapter = adapt(model)
    x = tokens()
    trace = adapter.trace(x, norms=True, attention=True)
    n = N_LAYERS[family]
    assert len(trace.residual) == n + 1
    assert all(r.shape == (2, 10, 32) for r in trace.residual)
    # the embedding output differs from the first block's output
    assert not torch.allclose(trace.residual[0], trace.residual[1])
    with torch.no_grad():
        reference = adapter.run(x)
        from_residual = adapter.readout(trace.residual[-1])
    assert reference.shape[-1] == (VOCAB if family != "tinygpt" else 257)
    torch.testing.assert_close(trace.logits, reference)
    torch.testing.assert_close(from_residual, reference, rtol=1e-5, atol=1e-5)
    assert len(trace.attention) == n
    for probs in trace.attention:
        assert probs.shape[-2:] == (10, 10) and probs.shape[0] == 2
        torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs.sum(-1)))
        if adapter.causal:
            assert torch.all(probs.triu(1) == 0)


def test_norm_sites_are_named_by_position(model, family):
    adapter = adapt(model)
    sites = adapter.norm_sites()
    names = dict(model.named_modules())
    for site in sites:
        assert names[site.name] is site.module
        assert set(site.to_dict()) == {"name", "layer", "position"}
    positions = {s.position for s in sites if s.layer >= 0}
    expected = {"bert": {"post"}}.get(family, {"pre"})
    assert positions == expected
    n = N_LAYERS[family]
    assert sorted({s.layer for s in sites if s.layer >= 0}) == list(range(n))
    assert sum(s.layer == i for s in sites for i in [0]) == 2  # two norms per block
    final = [s for s in sites if s.position == "final"]
    assert len(final) == 1
    if family == "bert":
        assert [s.position for s in sites if s.layer == -1] == ["embed", "final"]
    trace = adapter.trace(tokens(), norms=True)
    assert set(trace.norm_inputs) == {s.name for s in sites}
    for site in sites:
        out = trace.norm_outputs[site.name]
        torch.testing.assert_close(site.module(trace.norm_inputs[site.name]), out)


def test_pre_norm_input_is_the_residual(model, family):
    """In pre-norm models each block's first norm reads exactly the residual stream."""
    adapter = adapt(model)
    if family == "bert":
        pytest.skip("post-norm: the norm reads the stream plus the sublayer output")
    trace = adapter.trace(tokens(), norms=True)
    first = [s for s in adapter.norm_sites() if s.position == "pre"][::2]
    for i, site in enumerate(first):
        torch.testing.assert_close(trace.norm_inputs[site.name], trace.residual[i])


def test_run_all_layers_equals_forward(model, family):
    adapter = adapt(model)
    x = tokens()
    n = N_LAYERS[family]
    full = adapter.run(x)
    torch.testing.assert_close(adapter.run(x, layers=list(range(n))), full)
    dropped = adapter.run(x, layers=list(range(n - 1)))
    assert not torch.allclose(dropped, full)
    assert len(adapter.blocks()) == n  # the block list is back
    swapped = list(range(n))[::-1]
    trace = adapter.trace(x, layers=swapped, attention=True)
    assert len(trace.residual) == n + 1 and len(trace.attention) == n
    torch.testing.assert_close(trace.logits, adapter.run(x, layers=swapped))
    repeated = adapter.trace(x, layers=[0, 0])
    assert len(repeated.residual) == 3
    with pytest.raises(ValueError, match="out of range"):
        adapter.run(x, layers=[n])


def test_trace_leaves_model_unchanged(model, family):
    adapter = adapt(model)
    model.train()
    model.get_submodule(adapter.norm_sites()[0].name).eval()  # a mixed-mode model
    modes = [m.training for m in model.modules()]
    params = {k: v.clone() for k, v in model.state_dict().items()}
    hooks = hook_state(model)
    adapter.trace(tokens(), norms=True, attention=True, layers=[1, 0])
    adapter.run(tokens(), layers=[0])
    assert [m.training for m in model.modules()] == modes
    assert hook_state(model) == hooks
    for k, v in model.state_dict().items():
        assert torch.equal(v, params[k]), k
    model.eval()


def test_base_models_without_head():
    adapter = adapt(gpt2(lm_head=False))
    assert adapter.family == "gpt2" and not adapter.has_lm_head
    trace = adapter.trace(tokens())
    torch.testing.assert_close(adapter.readout(trace.residual[-1]), trace.logits)
    assert trace.logits.shape == (2, 10, 32)


def test_sdpa_attention_is_a_clear_error():
    pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB, n_positions=32)
    model = GPT2LMHeadModel(config)
    model.config._attn_implementation = "sdpa"
    adapter = adapt(model)
    with pytest.raises(ValueError, match="eager"):
        adapter.trace(tokens(), attention=True)
    assert all(not m._forward_hooks for m in model.modules())


def test_post_norm_tinygpt_and_unknown_model():
    sites = adapt(tinygpt("post")).norm_sites()
    assert {s.position for s in sites if s.layer >= 0} == {"post"}
    with pytest.raises(TypeError, match="gpt2"):
        adapt(nn.Linear(2, 2))


@pytest.mark.parametrize("residual", ["attnres", "oasis", "ngpt"])
def test_tinygpt_depth_and_ngpt_modes(residual):
    torch.manual_seed(0)
    score = "softmax1" if residual == "oasis" else "softmax"
    config = GPTConfig(
        d_model=32, n_layers=3, n_heads=2, context=16, residual=residual, score=score
    )
    model = TinyGPT(config).eval()
    adapter = adapt(model)
    x = tokens()
    trace = adapter.trace(x, norms=True, attention=True)
    assert len(trace.residual) == 4 and len(trace.attention) == 3
    torch.testing.assert_close(adapter.readout(trace.residual[-1]), adapter.run(x))
    torch.testing.assert_close(adapter.run(x, layers=[0, 1, 2]), model(x))
    sites = adapter.norm_sites()
    assert len(sites) == (0 if residual == "ngpt" else 7)
    assert set(trace.norm_inputs) == {s.name for s in sites}


def test_unknown_architecture_is_refused_with_the_known_families_and_how_to_declare():
    pytest.importorskip("transformers")
    from transformers import GPTJConfig, GPTJForCausalLM

    config = GPTJConfig(n_embd=32, n_layer=1, n_head=4, rotary_dim=4, vocab_size=VOCAB)
    with pytest.raises(TypeError) as err:
        adapt(GPTJForCausalLM(config))
    text = str(err.value)
    assert "model_type 'gptj'" in text and "register_layout" in text
    for family in ("gpt2", "qwen3_moe", "gemma3_text", "t5", "falcon"):
        assert family in text


def test_a_new_family_is_one_layout_record():
    pytest.importorskip("transformers")
    from transformers import GPTJConfig, GPTJForCausalLM

    from normlab import _layouts
    from normlab.probes import ModelLayout, register_layout

    torch.manual_seed(0)
    config = GPTJConfig(n_embd=32, n_layer=2, n_head=4, rotary_dim=4, vocab_size=VOCAB)
    config._attn_implementation = "eager"
    model = GPTJForCausalLM(config).eval()
    layout = ModelLayout(("transformer.",), "h", "attn", ("ln_1",), "pre", "ln_f")
    register_layout("gptj", layout)
    try:
        with pytest.raises(ValueError, match="already has a layout"):
            register_layout("gptj", layout)
        adapter = adapt(model)
        x = torch.randint(0, VOCAB, (2, 8))
        trace = adapter.trace(x, norms=True, attention=True)
        assert adapter.family == "gptj" and len(trace.attention) == 2
        assert torch.equal(adapter.readout(trace.residual[-1]), trace.logits)
    finally:
        del _layouts.LAYOUTS["gptj"]
