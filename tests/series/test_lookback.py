"""Instance-statistics normalizers built with a ``lookback`` refuse shorter windows, as
Dish-TS, SAN and FAN do, and still take longer ones (issue 36, item 16)."""

from __future__ import annotations

import pytest
import torch

import normlab


@pytest.mark.parametrize("name", ["revin", "revin-calendar", "pamod", "norin"])
def test_a_window_shorter_than_the_lookback_is_refused(name):
    norm = normlab.create(name, 2, lookback=8, horizon=4, periods=(4,))
    index = torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match="shorter than the lookback=8"):
        norm.normalize(torch.randn(3, 5, 2), index=index)
    z, _ = norm.normalize(torch.randn(3, 12, 2), index=index)
    assert z.shape == (3, 12, 2)


@pytest.mark.parametrize("name", ["revin", "norin"])
def test_no_lookback_takes_any_length(name):
    z, _ = normlab.create(name, 2).normalize(torch.randn(3, 2, 2))
    assert z.shape == (3, 2, 2)
