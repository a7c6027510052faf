"""The streak-segmentation trainer: each scaling's net, the learned curve's starts, training
and its F1."""

from __future__ import annotations

import pytest
import torch

from normlab.data.streaks import streak_frames
from normlab.training.streaks import (
    SCALINGS,
    asinh_start_gap,
    learned_curve,
    neutral_start_bend,
    segnet_f1,
    streak_segnet,
    train_streak_segnet,
)


def _frames(n=4):
    return streak_frames(n, torch.Generator().manual_seed(0), size=8, frames=3, stars=2)


def test_learned_and_frozen_start_alike_and_frozen_does_not_train():
    x, _ = _frames()
    for start in ("asinh", "linear"):
        outs = {}
        for scaling in ("asinh", "learned", "frozen"):
            torch.manual_seed(0)
            outs[scaling] = streak_segnet(scaling, x, frames=3, width=4, start=start).scale(x)
        torch.testing.assert_close(outs["frozen"], outs["learned"], rtol=1e-5, atol=1e-5)
        same = torch.allclose(outs["learned"], outs["asinh"], rtol=1e-5, atol=1e-5)
        assert same == (start == "asinh")
    frozen = streak_segnet("frozen", x, frames=3, width=4)
    assert not any(p.requires_grad for p in frozen.scaling.parameters())
    with pytest.raises(ValueError, match="scaling"):
        streak_segnet("robust", x, frames=3, width=4)
    with pytest.raises(ValueError, match="start"):
        streak_segnet("learned", x, frames=3, width=4, start="log")


def test_the_starts_are_what_they_say():
    assert asinh_start_gap() < 1e-5
    bend, grads = neutral_start_bend()
    assert bend < 0.15 and grads


def test_training_moves_only_the_trainable_curve():
    torch.set_num_threads(1)
    x, y = _frames(16)
    kw = {"steps": 5, "batch": 4, "pos_power": 0.5, "frames": 3, "width": 4, "seed": 1}
    curves = {}
    for scaling in SCALINGS:
        net, result = train_streak_segnet(scaling, (x, y), 3e-2, **kw)
        assert result.diverged is None and 0.0 <= segnet_f1(net, x, y) <= 1.0
        assert len(result.losses) == kw["steps"]
        curves[scaling] = learned_curve(net)
    assert curves["zscore"] == {} and set(curves["learned"]) == {"lo", "hi", "softening"}
    start = learned_curve(streak_segnet("learned", x, frames=3, width=4))
    assert curves["frozen"] == pytest.approx(start)
    assert curves["learned"] != pytest.approx(start)
    again, _ = train_streak_segnet("learned", (x, y), 3e-2, **kw)
    assert learned_curve(again) == curves["learned"]
