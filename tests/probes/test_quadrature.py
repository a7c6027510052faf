"""The quadrature consistency probe: each rule's moment mismatch falls at its order."""

from __future__ import annotations

import pytest

from normlab.probes.quadrature import RULES, moment_mismatch


def test_each_rule_converges_at_its_order():
    sizes = [16, 32, 64, 128, 256]
    out = moment_mismatch(0, sizes)
    assert set(out) == set(RULES)
    assert out["uniform"]["slope"] == pytest.approx(1.0, abs=0.2)
    assert out["trapezoid"]["slope"] == pytest.approx(2.0, abs=0.2)
    assert out["simpson"]["slope"] > 3.0
    for rec in out.values():
        assert len(rec["mismatch"]) == len(rec["h"]) == len(sizes)
        assert rec["h"][0] == pytest.approx(1 / 15)


def test_the_fields_are_fixed_by_the_seed():
    assert moment_mismatch(3, [8, 16]) == moment_mismatch(3, [8, 16])
    assert moment_mismatch(3, [8, 16]) != moment_mismatch(4, [8, 16])
