"""pixel_f1: the Dice coefficient of the predicted and target masks."""

from __future__ import annotations

import math

import torch

from normlab.models.segnet import pixel_f1


def test_pixel_f1_closed_form_and_edge_cases():
    mask = torch.tensor([1.0, 1.0, 0.0, 0.0])
    logits = torch.tensor([2.0, -1.0, 3.0, -2.0])  # TP 1, FN 1, FP 1
    assert math.isclose(pixel_f1(logits, mask), 2 / 4)
    assert pixel_f1(2 * mask - 1, mask) == 1.0  # perfect
    assert pixel_f1(1 - 2 * mask, mask) == 0.0  # every pixel wrong
    assert pixel_f1(-torch.ones(4), torch.zeros(4)) == 1.0  # both empty


def test_pixel_f1_is_the_dice_coefficient():
    g = torch.Generator().manual_seed(0)
    logits, mask = (
        torch.randn(2, 3, 8, 8, generator=g),
        (torch.rand(2, 3, 8, 8, generator=g) > 0.7),
    )
    pred = logits > 0
    dice = 2 * int((pred & mask).sum()) / int(pred.sum() + mask.sum())
    assert math.isclose(pixel_f1(logits, mask.float()), dice, rel_tol=1e-12)
