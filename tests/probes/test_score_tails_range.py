"""normlab.probes.score_tails.attention_log_range: the softmax score range of real rows."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.probes.score_tails import attention_log_range


def _causal_softmax(scores: torch.Tensor) -> torch.Tensor:
    n = scores.shape[-1]
    causal = torch.ones(n, n).tril().bool()
    return scores.masked_fill(~causal, -math.inf).softmax(-1)


def test_range_is_the_score_range_of_the_long_rows():
    scores = torch.zeros(1, 1, 4, 4)
    scores[..., 3, :] = torch.tensor([0.0, -2.0, -7.0, -1.0])
    assert attention_log_range([_causal_softmax(scores)], min_keys=4) == pytest.approx(7.0)


def test_median_over_layers_and_underflow_is_finite():
    g = torch.Generator().manual_seed(0)
    wide = 200.0 * torch.randn(2, 2, 8, 8, generator=g)  # probabilities underflow to 0
    r = attention_log_range([_causal_softmax(wide), _causal_softmax(wide)], min_keys=2)
    assert math.isfinite(r) and r > 50
    flat = attention_log_range([_causal_softmax(torch.zeros(1, 1, 8, 8))], min_keys=2)
    assert flat == pytest.approx(0.0, abs=1e-9)
