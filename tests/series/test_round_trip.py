"""denormalize(normalize(x)) == x, on ordinary and degenerate windows, with no NaN or inf."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from normlab.series import FAN, SAN, DishTS, NoRIN, PAMod, RevIN

from ._windows import KINDS, assert_round_trip, windows

LENGTHS = (1, 2, 3, 48)


def _perturb(module: torch.nn.Module, seed: int = 0) -> None:
    """Move every parameter away from its initialisation, so the test is not trivial."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))


REVIN_VARIANTS = {
    "revin": dict(affine=False),
    "revin-affine": dict(affine=True),
    "revin-last": dict(affine=False, subtract_last=True),
    "revin-last-affine": dict(affine=True, subtract_last=True),
}


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("variant", list(REVIN_VARIANTS))
def test_revin_round_trip(variant, kind, length):
    norm = RevIN(3, **REVIN_VARIANTS[variant])
    _perturb(norm)
    x = windows(kind, length)
    z, state = norm.normalize(x)
    assert torch.isfinite(z).all()
    assert_round_trip(x, norm.denormalize(z, state))


SHAPES = [(0.3, 0.0), (0.3, -3.0), (0.7, 2.0), (1.0, 0.0), (3.0, -1.5), (30.0, 3.0), (1e4, 1.0)]


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"d{d}-e{e}" for d, e in SHAPES])
def test_norin_round_trip(shape, kind, length):
    delta, epsilon = shape
    norm = NoRIN(3, delta=delta, epsilon=epsilon, subtract_last=length % 2 == 0)
    _perturb(norm)
    x = windows(kind, length)
    z, state = norm.normalize(x)
    assert torch.isfinite(z).all()
    assert_round_trip(x, norm.denormalize(z, state))


@settings(max_examples=60, deadline=None)
@given(
    log_delta=st.floats(-1.2, 9.0),
    epsilon=st.floats(-3.0, 3.0),
    seed=st.integers(0, 2**31 - 1),
    log_scale=st.floats(-3, 6),
    offset=st.floats(-1e5, 1e5),
)
def test_norin_round_trip_at_any_shape(log_delta, epsilon, seed, log_scale, offset):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 24, 2, generator=g) * 10**log_scale + offset
    x = x + torch.randn(3, 24, 2, generator=g).pow(3) * 10**log_scale  # skewed, heavy tails
    norm = NoRIN(2, delta=float(torch.tensor(log_delta).exp()), epsilon=epsilon, affine=False)
    z, state = norm.normalize(x)
    assert torch.isfinite(z).all()
    assert_round_trip(x, norm.denormalize(z, state))


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("kind", KINDS)
def test_pamod_round_trip_at_matching_phases(kind, length):
    norm = PAMod(3, periods=(5, 7))
    _perturb(norm)
    x = windows(kind, length)
    index = torch.tensor([0, 3, 11, 1000])
    z, state = norm.normalize(x, index=index)
    assert torch.isfinite(z).all()
    assert_round_trip(x, norm.invert(z, state))
    # denormalize reads the horizon's phases, which differ from the window's
    if kind == "random" and length > 1:
        assert not torch.allclose(norm.denormalize(z, state), x, atol=1e-3)


def _predicting_norms(length: int) -> dict[str, torch.nn.Module]:
    period = 2 if length % 2 == 0 else 1
    return {
        "dish-ts": DishTS(3, lookback=length),
        "san": SAN(3, lookback=length, horizon=2 * length, period=period),
        "fan": FAN(3, lookback=length, horizon=2 * length, k=min(4, length // 2 + 1)),
    }


@pytest.mark.parametrize("length", (1, 2, 4, 48))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["dish-ts", "san", "fan"])
def test_predicting_norms_invert_with_window_statistics(name, kind, length):
    norm = _predicting_norms(length)[name]
    _perturb(norm)
    x = windows(kind, length)
    z, state = norm.normalize(x)
    assert torch.isfinite(z).all()
    assert_round_trip(x, norm.invert(z, state))
    y = norm.denormalize(torch.randn(x.shape[0], 2 * length if name != "dish-ts" else 5, 3), state)
    assert torch.isfinite(y).all()
    if name != "dish-ts":
        aux = norm.auxiliary_loss(torch.randn_like(y), state, torch.randn_like(y))
        assert torch.isfinite(aux)


def test_float64_round_trip_is_tight():
    # affine=False: RevIN's affine inverse divides by gamma + eps^2, exact only to ~eps^2.
    x = windows("random", 48).double()
    kw = {"affine": False}
    for norm in (RevIN(3, **kw), NoRIN(3, delta=0.5, epsilon=1.0, **kw), PAMod(3, **kw)):
        norm = norm.double()
        _perturb(norm)
        z, state = norm.normalize(x, index=torch.arange(4))
        torch.testing.assert_close(norm.invert(z, state), x, rtol=1e-12, atol=1e-12)
