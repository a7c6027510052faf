"""LayerNorm folding: exact on every pre-LN TinyGPT, refused with reasons where it cannot be."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from normlab.layers.norms import LayerNorm as NormlabLayerNorm
from normlab.layers.norms import RMSNorm
from normlab.models.checkpoint import load_model, save_model
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.surgery import analyze_fold, fold_layernorms


@torch.no_grad()
def _randomise(model: nn.Module, generator: torch.Generator) -> None:
    """Non-trivial gamma/beta (init is 1/0) and O(1) embeddings, so folding has work to do."""
    for module in model.modules():
        if isinstance(module, nn.LayerNorm | NormlabLayerNorm) and module.weight is not None:
            module.weight.copy_(1 + 0.5 * torch.randn(module.weight.shape, generator=generator))
            if module.bias is not None:
                module.bias.copy_(0.5 * torch.randn(module.bias.shape, generator=generator))
        if isinstance(module, nn.Embedding):
            module.weight.copy_(torch.randn(module.weight.shape, generator=generator))


def _lns(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, nn.LayerNorm | NormlabLayerNorm)]


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    d_heads=st.sampled_from([(8, 2), (16, 4), (24, 3), (32, 4)]),
    n_layers=st.integers(1, 3),
    bias=st.booleans(),
    ln_scaling=st.booleans(),
    gqa=st.booleans(),
    moe=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fold_is_exact_on_random_pre_ln_tinygpt(
    d_heads, n_layers, bias, ln_scaling, gqa, moe, seed
):
    d, heads = d_heads
    config = GPTConfig(
        d_model=d,
        n_layers=n_layers,
        n_heads=heads,
        context=16,
        bias=bias,
        ln_scaling=ln_scaling,
        kv_heads=1 if gqa else None,
        moe_experts=3 if moe else 0,
    )
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = TinyGPT(config).eval()
    _randomise(model, generator)
    x = torch.randint(0, config.vocab, (3, 16), generator=generator)
    with torch.no_grad():
        before = model(x)
    names = _lns(model)
    result = fold_layernorms(model, x)
    assert set(result.folded) == set(names) and len(names) == 2 * n_layers + 1
    assert not _lns(model), "every LayerNorm must be gone"
    with torch.no_grad():
        after = model(torch.randint(0, config.vocab, (3, 16), generator=generator))
        again = model(x)
    assert torch.isfinite(after).all()
    assert float((again - before).abs().max()) <= 1e-5
    assert result.max_abs_change is not None and result.max_abs_change <= 1e-5


def test_folded_stream_is_centred_and_rmsnorm_matches_layernorm():
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=16)).eval()
    _randomise(model, torch.Generator().manual_seed(1))
    x = torch.randint(0, 257, (2, 16))
    fold_layernorms(model, x)
    means = []
    handles = [
        m.register_forward_hook(lambda _m, a, _o: means.append(a[0].mean(-1).abs().max()))
        for m in model.modules()
        if isinstance(m, RMSNorm)
    ]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    assert len(means) == 5
    assert max(float(m) for m in means) < 1e-5


def test_post_ln_is_refused_with_the_reason():
    model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=16, residual="post"))
    x = torch.randint(0, 257, (2, 16))
    analysis = analyze_fold(model, x)
    assert analysis.foldable == []
    reasons = " ".join(r for rs in analysis.refused.values() for r in rs)
    assert "post-LN" in reasons
    result = fold_layernorms(model, x)
    assert result.folded == () and result.max_abs_change == 0.0


def test_gated_attention_norms_are_refused_the_mlp_norms_fold():
    torch.manual_seed(0)
    model = TinyGPT(
        GPTConfig(d_model=16, n_layers=2, n_heads=2, context=16, gated_attention=True)
    ).eval()
    _randomise(model, torch.Generator().manual_seed(0))
    x = torch.randint(0, 257, (2, 16))
    analysis = analyze_fold(model, x)
    assert set(analysis.refused) == {"blocks.0.norm1", "blocks.1.norm1"}
    assert all("beta" in r for r in analysis.refused["blocks.0.norm1"])
    result = fold_layernorms(model, x)
    assert result.max_abs_change <= 1e-5


class _NonlinearWriter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.mix = nn.Embedding(10, 8), nn.Linear(8, 8)
        self.norm, self.head = nn.LayerNorm(8), nn.Linear(8, 10)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.embed(idx)
        h = h + torch.tanh(self.mix(h))  # a nonlinear writer to the stream
        return self.head(self.norm(h))


class _ConvWriter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.conv = nn.Embedding(10, 8), nn.Conv1d(8, 8, 3, padding=1, groups=8)
        self.norm, self.head = nn.LayerNorm(8), nn.Linear(8, 10)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.conv(self.embed(idx).transpose(1, 2)).transpose(1, 2)
        return self.head(self.norm(h))


@pytest.mark.parametrize(
    ("model", "needle"), [(_NonlinearWriter(), "tanh"), (_ConvWriter(), "convolution")]
)
def test_nonlinear_and_conv_writers_are_refused(model, needle):
    analysis = analyze_fold(model, torch.randint(0, 10, (2, 5)))
    assert analysis.foldable == []
    assert any(needle in r for r in analysis.refused["norm"])


class _LearnedPosition(nn.Module):
    def __init__(self, reuse: bool) -> None:
        super().__init__()
        self.reuse = reuse
        self.embed, self.pos = nn.Embedding(10, 8), nn.Parameter(torch.randn(5, 8))
        self.norm, self.head = nn.LayerNorm(8), nn.Linear(8, 10)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.embed(idx) + self.pos
        if self.reuse:  # the vector also scales something: centring it would show
            h = h * self.pos.sum()
        return self.head(self.norm(h))


def test_learned_vector_writer_is_centred_unless_used_elsewhere():
    x = torch.randint(0, 10, (2, 5))
    model = _LearnedPosition(reuse=False)
    _randomise(model, torch.Generator().manual_seed(0))
    result = fold_layernorms(model, x)
    assert result.folded == ("norm",) and result.max_abs_change <= 1e-5
    assert torch.allclose(model.pos.mean(-1), torch.zeros(5), atol=1e-6)
    reused = analyze_fold(_LearnedPosition(reuse=True), x)
    assert any("pos" in r and "also used" in r for r in reused.refused["norm"])


def test_analysis_leaves_model_unchanged():
    model = TinyGPT(GPTConfig(d_model=16, n_layers=1, n_heads=2, context=16)).train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    analyze_fold(model, torch.randint(0, 257, (2, 8)))
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def _gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=16,
        n_head=2,
        vocab_size=50,
        n_positions=16,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config).eval()


def test_gpt2_folds_exactly_and_unties_the_head():
    model = _gpt2()
    _randomise(model, torch.Generator().manual_seed(0))
    x = {"input_ids": torch.randint(0, 50, (2, 16))}
    assert model.lm_head.weight is model.transformer.wte.weight
    result = fold_layernorms(model, x)
    assert len(result.folded) == 5
    assert ("transformer.wte", "lm_head") in result.untied
    assert model.lm_head.weight is not model.transformer.wte.weight
    assert result.max_abs_change <= 1e-5


def test_tied_embeddings_refused_on_request():
    model = _gpt2()
    analysis = analyze_fold(model, {"input_ids": torch.randint(0, 50, (2, 8))}, tied="refuse")
    # the embedding writes to every later stream, so every LayerNorm needs it centred
    assert analysis.foldable == []
    assert all(any("tied" in r for r in rs) for rs in analysis.refused.values())


def test_bert_is_refused_as_post_ln():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        num_hidden_layers=1,
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=32,
        vocab_size=50,
    )
    analysis = analyze_fold(
        transformers.BertModel(config), {"input_ids": torch.randint(0, 50, (2, 8))}
    )
    assert analysis.foldable == []
    assert any("post-LN" in r for rs in analysis.refused.values() for r in rs)


def test_checkpoint_round_trip_of_a_folded_model(tmp_path):
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=16, bias=False)).eval()
    _randomise(model, torch.Generator().manual_seed(0))
    x = torch.randint(0, 257, (2, 16))
    with torch.no_grad():
        before = model(x)
    result = fold_layernorms(model, x)
    assert result.added_bias  # bias-free readers needed one for beta
    save_model(model, tmp_path / "folded", fold={"structure": result.structure()})
    loaded, kind = load_model(tmp_path / "folded")
    assert kind == "normlab"
    with torch.no_grad():
        assert float((loaded(x) - before).abs().max()) <= 1e-5


def test_fold_command(tmp_path, capsys):
    from normlab.cli import main

    def fold_command(argv):
        return main(["fold", *argv])

    torch.manual_seed(0)
    save_model(TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=32)), tmp_path / "in")
    assert fold_command([str(tmp_path / "in"), str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"max \|delta logits\| = \d\.\d{3}e[-+]\d+", out)
    assert (tmp_path / "out" / "model.safetensors").exists()
    assert isinstance(load_model(tmp_path / "out")[0].norm_f, RMSNorm)
    post = TinyGPT(GPTConfig(d_model=16, n_layers=1, n_heads=2, context=32, residual="post"))
    save_model(post, tmp_path / "post")
    assert fold_command([str(tmp_path / "post"), str(tmp_path / "post-out")]) == 2
    captured = capsys.readouterr()
    assert "post-LN" in captured.out and "nothing to fold" in captured.err
    assert not (tmp_path / "post-out").exists()
    assert fold_command([str(tmp_path / "missing"), str(tmp_path / "x")]) == 2


def test_output_matches_reference_layernorm_formula():
    """The RMSNorm that replaces a LayerNorm keeps its eps (LN(x) == RMSNorm(x) on centred x)."""
    x = torch.randn(4, 16, dtype=torch.float64)
    x = x - x.mean(-1, keepdim=True)
    rms = RMSNorm(16, eps=1e-3, elementwise_affine=False, dtype=torch.float64)
    assert torch.allclose(rms(x), F.layer_norm(x, (16,), eps=1e-3), atol=1e-12)
