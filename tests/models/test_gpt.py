"""TinyGPT pieces that live with the model: LayerNorm-Scaling and its probe adapter."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normlab.models.gpt import GPTConfig, TinyGPT, ln_scaling
from normlab.models.gpt_adapter import TinyGPTAdapter
from normlab.probes import ModelAdapter, ModelLayout, adapt, families, hooks, register_adapter


def test_ln_scaling_option():
    config = ln_scaling(GPTConfig(d_model=16, n_layers=2, n_heads=2))
    assert config.ln_scaling
    model = TinyGPT(config)
    assert model.blocks[1].norm_scale == pytest.approx(1 / math.sqrt(2))
    with pytest.raises(TypeError):
        ln_scaling({"ln_scaling": False})


def test_tinygpt_adapter_is_registered_by_the_model():
    model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=8))
    adapter = adapt(model)
    assert isinstance(adapter, TinyGPTAdapter) and adapter.family == "tinygpt"
    assert "TinyGPT" in families()
    tokens = torch.randint(0, 256, (2, 8))
    trace = adapter.trace(tokens)
    assert torch.allclose(trace.logits, model(tokens))


class _Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.final = nn.LayerNorm(4)

    def forward(self, input_ids: torch.Tensor, **_: object) -> object:
        h = input_ids
        for layer in self.layers:
            h = layer(h)

        class Out:
            last_hidden_state = self.final(h)

        return Out()


def test_register_adapter_by_class_name_and_predicate(monkeypatch):
    monkeypatch.setattr(hooks, "_ADAPTERS", list(hooks._ADAPTERS))
    layout = ModelLayout(("",), "layers", "attn", (), "pre", "final")
    with pytest.raises(TypeError, match="Toy"):
        adapt(_Toy())
    register_adapter("_Toy", lambda m: ModelAdapter(m, "toy", layout=layout, causal=False))
    adapter = adapt(_Toy())
    assert adapter.family == "toy" and not adapter.causal and adapter.n_layers == 2
    assert [s.name for s in adapter.norm_sites()] == ["final"]
    x = torch.randn(3, 4)
    assert adapter.run(x).shape == (3, 4)
    register_adapter(
        lambda m: isinstance(m, _Toy), lambda m: ModelAdapter(m, "toy2", layout=layout)
    )
    assert adapt(_Toy()).family == "toy2"  # the latest registration wins
    with pytest.raises(TypeError):
        register_adapter(3, lambda m: m)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [{}, {"residual": "post"}, {"residual": "oasis"}, {"loops": 2, "attention_injection": True}],
)
def test_keys_values_are_what_each_attention_computes_and_leave_no_hook(options):
    model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=8, **options)).eval()
    idx = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(0))
    seen = []
    for block in model.blocks:  # the attention's own input, read by the test's own hooks
        block.attn.register_forward_hook(lambda m, args, out: seen.append(m.project(args[0])))
    kv = model.keys_values(idx)
    assert len(kv) == len(seen) > 0
    for (k, v), (_, k_ref, v_ref) in zip(kv, seen, strict=True):
        assert torch.equal(k, k_ref) and torch.equal(v, v_ref)
    assert all(len(b.attn._forward_pre_hooks) == 0 for b in model.blocks)


def test_keys_values_match_the_pre_ln_formula_bit_for_bit():
    # the formula nsnquant computed through the private projection before this API
    model = TinyGPT(GPTConfig(d_model=32, n_layers=3, n_heads=2, context=16)).eval()
    idx = torch.randint(0, 256, (3, 16), generator=torch.Generator().manual_seed(1))
    states, _ = model.trunk(idx)
    for (k, v), block, h in zip(model.keys_values(idx), model.blocks, states, strict=False):
        _, k_old, v_old = block.attn.project(block.norm1(h) * block.norm_scale)
        assert torch.equal(k, k_old) and torch.equal(v, v_old)
