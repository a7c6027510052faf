"""A cached trained LM is used only when its weights are finite and its log complete."""

from __future__ import annotations

import json
import math

import pytest
import torch

from normlab.models.gpt import GPTConfig
from normlab.training.lm import LMTrainConfig, train_lm

TINY = GPTConfig(d_model=16, n_layers=1, n_heads=2, context=16)
SHORT = LMTrainConfig(steps=3, batch=2, warmup=1, eval_batches=1)


def _fill_tensor_bytes(path, value: int) -> None:
    """Overwrite every tensor byte of a safetensors file (the header stays valid)."""
    data = bytearray(path.read_bytes())
    start = 8 + int.from_bytes(data[:8], "little")
    data[start:] = bytes([value]) * (len(data) - start)
    path.write_bytes(bytes(data))


@pytest.fixture
def trained(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path))
    model, log = train_lm(TINY, SHORT, seed=0)
    (weights,) = (tmp_path / "lm").glob("*.safetensors")
    return model, log, weights, weights.with_suffix(".json")


def test_nan_weights_in_the_cache_are_retrained_not_used(trained):
    model, log, weights, _ = trained
    _fill_tensor_bytes(weights, 0xFF)  # 0xffffffff is a float32 NaN
    with pytest.warns(RuntimeWarning, match=weights.name):
        again, log2 = train_lm(TINY, SHORT, seed=0)
    assert all(torch.isfinite(t).all() for t in again.state_dict().values())
    for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # the same run, trained again
    assert log2["val_bpb"] == log["val_bpb"]
    _, log3 = train_lm(TINY, SHORT, seed=0)  # and the rewritten cache is good
    assert log3 == log2


@pytest.mark.parametrize("bad", [None, math.nan, "missing"])
def test_a_log_without_its_numbers_is_retrained(trained, bad):
    _, log, _, log_path = trained
    stored = json.loads(log_path.read_text())
    if bad == "missing":
        del stored["val_bpb"]
    else:
        stored["val_bpb"] = [bad]
    log_path.write_text(json.dumps(stored))
    with pytest.warns(RuntimeWarning, match="val_bpb"):
        _, again = train_lm(TINY, SHORT, seed=0)
    assert again["val_bpb"] == log["val_bpb"] and math.isfinite(again["val_bpb"][0])
