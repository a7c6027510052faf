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
