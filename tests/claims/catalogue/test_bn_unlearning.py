"""The bn-unlearning claim: its smoke run, its unlearning modes and its effects' signs."""

from __future__ import annotations

import pytest
import torch

from normlab.claims.catalogue.bn_unlearning import CLAIM, MODES, _unlearn
from normlab.models.bn_cnn import bn_cnn


def test_smoke_run_has_every_arm(smoke_measurement):
    m = smoke_measurement("bn-unlearning")
    for method in ("grad-ascent", "neggrad+"):
        for mode in MODES:
            row = m["table"][f"batch/{method}/{mode}"]
            assert 0 <= row["forget_acc"] <= 1 and 0 <= row["forget_acc_attacker"] <= 1
            assert row["bn_mean_shift"] > 0
    control = m["table"]["group/grad-ascent/train"]
    assert control["recal_gap"] == 0.0  # no running statistics: nothing to recalibrate


def test_eval_mode_unlearning_leaves_running_statistics_alone():
    model = bn_cnn(8, 2, norm="batch", seed=0)
    x, y = torch.rand(32, 1, 8, 8), torch.randint(0, 10, (32,))
    stats = model.norms[0].running_mean.clone()

    def unlearn_in(mode: str, *, stop_acc: float = -1.0, max_steps: int = 3) -> None:
        _unlearn(
            model,
            "grad-ascent",
            (x, y),
            (x, y),
            lr=1e-2,
            batch=16,
            stop_acc=stop_acc,
            max_steps=max_steps,
            generator=torch.Generator().manual_seed(0),
            mode=mode,
        )

    unlearn_in("eval")
    assert torch.equal(model.norms[0].running_mean, stats)
    unlearn_in("train")
    assert not torch.equal(model.norms[0].running_mean, stats)
    with pytest.raises(ValueError, match="mode"):
        unlearn_in("test", stop_acc=0.0, max_steps=1)


def _table(after, recal, attack, eval_recal):
    row = {
        "forget_acc_trained": 0.95,
        "forget_acc": after,
        "recal_gap": recal - after,
        "attacker_fraction": (attack - after) / max(recal - after, 0.01),
    }
    table = {f"batch/{k}/train": dict(row) for k in ("grad-ascent", "neggrad+")}
    for k in ("grad-ascent", "neggrad+"):
        table[f"batch/{k}/eval"] = {**row, "recal_gap": eval_recal - after}
    table["group/grad-ascent/train"] = {"forget_acc": after, "recal_gap": 0.0}
    return {"table": table}


def test_effects_take_both_signs_on_constructed_tables():
    artifact, none = _table(0.02, 0.8, 0.7, 0.1), _table(0.3, 0.1, 0.1, 0.6)
    for effect in CLAIM.effects:
        margin = 0.5 if effect.name == "attacker_recovers_most" else 0.0
        assert effect.fn(artifact) > margin > effect.fn(none), effect.name
