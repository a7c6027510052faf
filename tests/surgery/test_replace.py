"""replace_norms on torch modules and on a Hugging Face GPT-2 built from a config."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normlab.layers import DyT, RMSNorm, llm_alpha_init
from normlab.surgery import replace_norms


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(8, eps=1e-3)
        self.body = nn.ModuleList([nn.Linear(8, 8), nn.RMSNorm(8)])
        self.ln_f = nn.LayerNorm(8, elementwise_affine=False)

    def forward(self, x):
        return self.ln_f(self.body[1](self.body[0](self.ln_1(x))))


def test_replaces_every_norm_and_reports_it():
    model = Toy().double()
    with torch.no_grad():
        model.ln_1.weight.fill_(2.0)
    replaced = replace_norms(model, "dyt", site_kwargs=lambda n: {"alpha_init": llm_alpha_init(n)})
    assert [r.name for r in replaced] == ["ln_1", "body.1", "ln_f"]
    assert [r.old for r in replaced] == ["LayerNorm", "RMSNorm", "LayerNorm"]
    assert all(isinstance(m, DyT) for m in (model.ln_1, model.body[1], model.ln_f))
    assert model.ln_1.weight.dtype == torch.float64
    assert torch.equal(model.ln_1.weight, torch.full((8,), 2.0, dtype=torch.float64))
    assert model.ln_1.alpha.item() == pytest.approx(0.8)
    assert model.ln_f.alpha.item() == pytest.approx(0.2)
    assert model(torch.randn(2, 8, dtype=torch.float64)).shape == (2, 8)


def test_eps_carries_over_and_layer_norm_to_rms_norm():
    model = Toy()
    replace_norms(model, "rmsnorm")
    assert isinstance(model.ln_1, RMSNorm) and model.ln_1.eps == 1e-3


def test_rejects_non_norm_methods():
    with pytest.raises(ValueError, match="needs a norm"):
        replace_norms(Toy(), "softmax1")
    with pytest.raises(KeyError, match="Closest"):
        replace_norms(Toy(), "dytt")


def test_hugging_face_gpt2_from_config():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=16
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    replaced = replace_norms(model, "rmsnorm")
    assert len(replaced) == 2 * 2 + 1  # ln_1, ln_2 per block and ln_f
    assert all(r.size == (32,) for r in replaced)
    logits = model(torch.randint(0, 100, (1, 8))).logits
    assert logits.shape == (1, 8, 100) and torch.isfinite(logits).all()


def test_hugging_face_llama_rms_norm_is_recognised():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=100,
    )
    model = transformers.LlamaForCausalLM(config)
    replaced = replace_norms(model, "dyt")
    assert {r.old for r in replaced} == {"LlamaRMSNorm"}
    assert len(replaced) == 3


def test_refuses_a_norm_whose_layout_does_not_fit_the_site():
    model = Toy()
    for name in ("quadnorm", "blendquadnorm"):
        with pytest.raises(ValueError, match=r"channels_first norm.*features_last norm: "):
            replace_norms(model, name)
    assert isinstance(model.ln_1, torch.nn.LayerNorm)  # nothing was changed
    replace_norms(model, "dyt")  # a features-last norm is fine


def test_target_norm_is_required():
    with pytest.raises(TypeError):
        replace_norms(Toy())  # type: ignore[call-arg]


def _slow_path(module, *args, **kwargs):
    """The module's output with torch's fused transformer fast path switched off."""
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        return module(*args, **kwargs)
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


@pytest.mark.parametrize("to", ["dyt", "rmsnorm", "hypersphere"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_readme_quick_start_runs_in_eval_and_train_mode(to, batch_first):
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(64, 8, dropout=0.0, batch_first=batch_first)
    replace_norms(model, to)  # the README's quick start, then eval (issue 24)
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        train = model.train()(x)
        model.eval()
        y = model(x)
        reference = _slow_path(model, x)
    assert type(model.norm1).__name__ != "LayerNorm"
    torch.testing.assert_close(y, reference)  # the new norms ran (the MHA kernel may differ)
    torch.testing.assert_close(y, train)  # no dropout: train and eval agree


def test_transformer_and_encoder_with_padding_mask_run_the_new_norms_in_eval():
    torch.manual_seed(0)
    t = nn.Transformer(32, 4, 2, 2, 64, dropout=0.0, batch_first=True)
    replace_norms(t, "dyt")
    assert t.encoder.use_nested_tensor is False
    src, tgt = torch.randn(2, 10, 32), torch.randn(2, 7, 32)
    pad = torch.zeros(2, 10, dtype=torch.bool)
    pad[1, 8:] = True
    with torch.no_grad():
        y = t.eval()(src, tgt, src_key_padding_mask=pad)
        torch.testing.assert_close(y, _slow_path(t, src, tgt, src_key_padding_mask=pad))
        torch.testing.assert_close(y, t.train()(src, tgt, src_key_padding_mask=pad))
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2)
    replace_norms(encoder, "rmsnorm")
    with torch.no_grad():
        out = encoder.eval()(src, src_key_padding_mask=pad)
        torch.testing.assert_close(out, _slow_path(encoder, src, src_key_padding_mask=pad))
    assert not out.is_nested and torch.isfinite(out).all()


def test_untouched_layers_keep_their_fast_path():
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    replace_norms(layer, "dyt", match=lambda m: False)  # nothing matches: nothing changes
    assert layer.activation_relu_or_gelu == 1
