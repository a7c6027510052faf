"""The CD layer's log-det and inverse are exact in float64 and compose inside a zuko flow."""

from __future__ import annotations

from normlab.flows.exactness import inverse_error, logdet_error, zuko_composition_error


def test_logdet_and_inverse_are_exact_in_float64():
    assert logdet_error((5, 16)) < 1e-10
    assert inverse_error((5, 16)) < 1e-10


def test_a_cd_flow_composes_in_zuko():
    assert zuko_composition_error(dim=4) < 1e-4
