"""TinyGPT and its cached training."""

from __future__ import annotations

import json

import pytest
import torch

from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.training.lm import LMTrainConfig, evaluate_bpb, load_snapshot, train_lm

TINY = GPTConfig(d_model=16, n_layers=2, n_heads=2, context=16)
SHORT = LMTrainConfig(steps=6, batch=2, warmup=2, eval_batches=1, snapshots=(3,))


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"residual": "post"},
        {"norm": "dyt"},
        {"score": "softmax1"},
        {"kv_heads": 1},
        {"moe_experts": 3},
        {"ln_scaling": True},
        {"gated_attention": True},
    ],
)
def test_variants_are_causal(overrides):
    model = TinyGPT(GPTConfig(**{**TINY.to_dict(), **overrides})).eval()
    x = torch.randint(0, 257, (1, 10))
    y = torch.cat([x[:, :6], torch.randint(0, 257, (1, 4))], dim=1)
    torch.testing.assert_close(model(x)[:, :6], model(y)[:, :6])


def test_layers_argument_runs_blocks_in_the_given_order():
    model = TinyGPT(TINY).eval()
    x = torch.randint(0, 257, (2, 8))
    torch.testing.assert_close(model(x, layers=[0, 1]), model(x))
    assert not torch.allclose(model(x, layers=[1, 0]), model(x))
    _, probs = model(x, layers=[1], return_probs=True)
    assert len(probs) == 1 and probs[0].shape == (2, 2, 8, 8)


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="must divide"):
        GPTConfig(d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="not a registered score"):
        GPTConfig(score="rmsnorm")
    with pytest.raises(ValueError, match="residual"):
        GPTConfig(residual="sideways")
    with pytest.raises(ValueError, match="exceeds context"):
        TinyGPT(TINY)(torch.zeros(1, 17, dtype=torch.long))


def test_training_learns_and_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path))
    model, log = train_lm(TINY, SHORT, seed=0)
    assert not model.training and len(log["val_bpb"]) == 1
    assert log["train_bpb"][-1] < 8.1  # below a uniform guess over 257 tokens
    # every step's training bpb (the convergence curve); the 10-step log samples it
    assert len(log["step_bpb"]) == SHORT.steps and log["step_bpb"][-1] == log["train_bpb"][-1]
    stored = list((tmp_path / "lm").glob("*.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["key"] == log["key"]
    again, log2 = train_lm(TINY, SHORT, seed=0)
    assert log2 == log
    for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    other, _ = train_lm(TINY, SHORT, seed=1)
    assert not torch.equal(other.head.weight, model.head.weight)
    snap = load_snapshot(TINY, SHORT, 0, 3)
    assert not torch.equal(snap.head.weight, model.head.weight)
    with pytest.raises(ValueError, match=r"not in train_config\.snapshots"):
        load_snapshot(TINY, SHORT, 0, 4)


def test_evaluation_is_deterministic_and_restores_mode():
    model = TinyGPT(TINY).train()
    a = evaluate_bpb(model, batches=2, batch=2)
    assert model.training
    assert a == evaluate_bpb(model, batches=2, batch=2)
    assert 7.0 < a < 9.5  # an untrained model is near log2(257) = 8.0 bits


def test_learning_rate_schedule():
    tc = LMTrainConfig(steps=100, warmup=10, lr=1.0, min_lr_ratio=0.1)
    assert tc.lr_at(0) == pytest.approx(0.1) and tc.lr_at(9) == pytest.approx(1.0)
    assert tc.lr_at(99) == pytest.approx(0.1, abs=1e-3)
    assert all(tc.lr_at(s) >= tc.lr_at(s + 1) for s in range(10, 99))
