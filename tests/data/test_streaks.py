"""Synthetic streak frames and the tiny segmentation net: shapes, determinism, content."""

from __future__ import annotations

import pytest
import torch

from normlab.data.streaks import streak_frames
from normlab.models.segnet import TinySegNet


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_shapes_and_binary_mask():
    x, m = streak_frames(6, _gen(0), size=16, frames=3)
    assert x.shape == m.shape == (6, 3, 16, 16)
    assert set(m.unique().tolist()) <= {0.0, 1.0}
    assert torch.isfinite(x).all()


def test_deterministic_by_seed():
    a, b, c = (streak_frames(4, _gen(s), size=16)[0] for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_streak_pixels_present_and_brighter_than_background():
    x, m = streak_frames(8, _gen(3), size=16, p_object=1.0, stars=0, amplitude=(8.0, 16.0))
    for i in range(8):
        assert m[i].sum() >= 1  # the object is in the frames (it may leave the field)
        lift = x[i][m[i] == 1].mean() - x[i][m[i] == 0].median()
        assert lift > 3.0  # mask = profile > 0.5 of a peak >= 8 noise sigma
    none = streak_frames(8, _gen(3), size=16, p_object=0.0)[1]
    assert none.sum() == 0


def test_high_dynamic_range():
    x, _ = streak_frames(8, _gen(4), size=16)
    spread = x - x.median()
    assert spread.max() > 100 * (spread.abs().median() + 1)


@pytest.mark.parametrize("scaling", ["learned", "zscore", "minmax", "asinh"])
def test_segnet_shapes_and_gradients(scaling):
    torch.manual_seed(0)
    x, m = streak_frames(2, _gen(5), size=16, frames=3)
    net = TinySegNet(3, scaling=scaling, width=4)
    net.scaling.fit(x.reshape(-1, 1))
    out = net(x)
    assert out.shape == m.shape
    torch.nn.functional.binary_cross_entropy_with_logits(out, m).backward()
    if scaling == "learned":
        for name, p in net.scaling.named_parameters():  # log_lo, log_hi, log_soft
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
    torch.manual_seed(0)
    again = TinySegNet(3, scaling=scaling, width=4)
    again.scaling.fit(x.reshape(-1, 1))
    assert torch.equal(again(x), out.detach())
