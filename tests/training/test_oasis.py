"""normlab.training.oasis: the variants, the coupling's own rate, the measured row."""

from __future__ import annotations

import math

from normlab.models.gpt import TinyGPT
from normlab.training.oasis import (
    MEASURED,
    VARIANTS,
    coupling,
    measure,
    train_variant,
    variant_config,
    variant_train_config,
)

_SMALL = {"d_model": 16, "n_layers": 1, "n_heads": 2, "context": 16, "beta_init": 0.0}
_SMALL |= {"steps": 10, "batch": 2, "lr": 1e-3, "weight_decay": 0.0, "beta_lr_scale": 30.0}


def test_variants_and_coupling():
    built = {name: variant_config(name, _SMALL) for name in VARIANTS}
    assert built["oasis"].score == "softmax1" and built["oasis"].null_beta_init == 0.0
    assert built["attnres+clipped"].score_kwargs == {"gamma": -12 / 16}
    assert math.isclose(coupling(TinyGPT(built["oasis"])), math.log(2), rel_tol=1e-6)
    assert math.isnan(coupling(TinyGPT(built["attnres+softmax1"])))
    assert variant_train_config(_SMALL, "attnres").lr_multipliers == ()
    assert variant_train_config(_SMALL, "oasis").lr_multipliers == (("beta_raw", 30.0),)


def test_measure_row():
    model = TinyGPT(variant_config("oasis", _SMALL)).eval()
    row = measure(model, 8, 8, 1, 0)
    assert set(row) == set(MEASURED)
    assert math.isclose(row["w4a4_degradation"], row["w4a4_bpb"] - row["fp_bpb"])
    plain = measure(TinyGPT(variant_config("attnres", _SMALL)).eval(), 8, 8, 1, 0)
    assert "beta" not in plain and plain["null_mass"] < 1e-6 < row["null_mass"]


def test_train_variant(monkeypatch, tmp_path):
    monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path))
    config = {**_SMALL, "probe_sequences": 8, "calibration_sequences": 8, "eval_batches": 1}
    out = train_variant("oasis", config, 0, probe_trajectory=True)
    assert set(out) == {"row", "curve", "beta", "trajectory"}
    assert set(out["row"]) == {*MEASURED, "train_seconds"}
    assert out["beta"]["step"][0] == 0 and out["beta"]["step"][-1] == config["steps"]
    assert out["beta"]["beta"][-1] == out["row"]["beta"]
    assert out["trajectory"]["step"][-1] == config["steps"]
    assert set(train_variant("attnres", config, 0)) == {"row", "curve"}


def test_train_variant_diverged(monkeypatch):
    import normlab.training.oasis as T

    log = {"diverged": {"step": 3, "last": 9.0}, "seconds": 1.5}
    monkeypatch.setattr(T, "train_lm", lambda *a, **k: (None, log))
    out = train_variant("pre-ln", _SMALL, 0)
    assert out["diverged"] == log["diverged"] and out["row"]["train_seconds"] == 1.5
    assert all(math.isnan(out["row"][k]) for k in MEASURED)
