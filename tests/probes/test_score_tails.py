"""score_tails: kappa-softmax and Abe softmax against softmax on random score rows."""

from __future__ import annotations

import math

import torch

from normlab.probes.score_tails import (
    abe_deviation,
    random_scores,
    softmax_limit,
    tail_exponent,
    tail_probability,
)


def _scores(seed: int = 0) -> torch.Tensor:
    return random_scores(8, 16, 2.0, torch.Generator().manual_seed(seed))


def test_random_scores_are_float64_and_fixed_by_the_generator():
    s = _scores()
    assert s.shape == (8, 16) and s.dtype == torch.float64 and torch.equal(s, _scores())


def test_kappa_softmax_tends_to_softmax_at_second_order():
    row = softmax_limit(_scores(), (1e-3, 1e-2))
    assert row["max_err"] == row["max_err_kappa_0.001"] < 1e-5
    assert abs(row["order_in_kappa"] - 2) < 0.05
    assert math.isnan(softmax_limit(_scores(), (1e-3,))["order_in_kappa"])


def test_the_tail_slope_is_minus_one_over_kappa():
    row, curve = tail_exponent(_scores(), (0.1, 0.4), 9)
    assert row["max_rel_error"] < 0.1 and row["expected_kappa_0.4"] == -2.5
    assert len(curve["distance"]) == len(curve["kappa_0.1"]) == 9


def test_abe_has_no_odd_terms():
    row, curve = abe_deviation(_scores(), (0.05, 0.1))
    assert abs(row["order_in_eps"] - 2) < 0.1 and row["reciprocal_gap"] < 1e-12
    assert curve["eps"] == [0.05, 0.1] and len(curve["deviation"]) == 2


def test_kappa_keeps_algebraic_mass_where_softmax_keeps_none():
    near, far = tail_probability(_scores(), 50.0, 0.2), tail_probability(_scores(), 100.0, 0.2)
    assert abs(near["kappa-softmax"] - far["kappa-softmax"] - math.log10(2) / 0.2) < 0.1
    assert abs(near["softmax"] - far["softmax"] - 50 / math.log(10)) < 1e-6
