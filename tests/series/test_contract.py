"""The contract every registered series normalizer keeps, and clear errors on bad input."""

from __future__ import annotations

import io

import pytest
import torch

import normlab
from normlab.models.forecaster import build_norm

L, H, C = 48, 24, 3
SERIES_METHODS = normlab.methods(kind="series")
IDS = [m.name for m in SERIES_METHODS]


def test_every_series_method_is_registered():
    assert set(IDS) == {"revin", "revin-calendar", "dish-ts", "san", "fan", "norin", "pamod"}
    for method in SERIES_METHODS:
        assert method.layout == "series" and method.paper and method.summary


def _build(method, **kwargs):
    return build_norm(method.name, C, lookback=L, horizon=H, periods=(12, 24), **kwargs)


def _sample(dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(2, L, C, generator=g) * 3 + 10).to(dtype)


INDEX = torch.tensor([0, 17])


@pytest.mark.parametrize("method", SERIES_METHODS, ids=IDS)
class TestSeriesContract:
    def test_shapes_and_dtypes(self, method):
        for dtype in (torch.float32, torch.float64):
            norm = _build(method).to(dtype)
            x = _sample(dtype)
            z, state = norm.normalize(x, index=INDEX)
            assert z.shape == x.shape and z.dtype == dtype
            y = norm.denormalize(torch.randn(2, H, C, dtype=dtype), state)
            assert y.shape == (2, H, C) and y.dtype == dtype and torch.isfinite(y).all()

    def test_half_precision_inputs(self, method):
        norm = _build(method)
        x = _sample()
        z, state = norm.normalize(x.to(torch.bfloat16), index=INDEX)
        assert z.dtype == torch.bfloat16 and torch.isfinite(z).all()
        y = norm.denormalize(torch.zeros(2, H, C, dtype=torch.bfloat16), state)
        assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()

    def test_gradients_reach_every_parameter(self, method):
        kwargs = (
            {"learn_shape": True, "delta": 0.8, "epsilon": 0.3} if method.name == "norin" else {}
        )
        norm = _build(method, **kwargs)
        with torch.no_grad():  # move off the zero-initialised tables so every path is live
            for p in norm.parameters():
                p.add_(0.1 * torch.randn_like(p))
        x = _sample()
        z, state = norm.normalize(x, index=INDEX)
        backbone = torch.nn.Linear(L, H)
        y_hat = backbone(z.transpose(1, 2)).transpose(1, 2)
        target = torch.randn(2, H, C)
        loss = (norm.denormalize(y_hat, state) - target).pow(2).mean()
        aux = norm.auxiliary_loss(y_hat, state, target)
        if aux is not None:
            loss = loss + aux
        loss.backward()
        for name, p in norm.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
            assert p.grad.abs().sum() > 0, name

    def test_state_dict_round_trip(self, method):
        norm = _build(method)
        with torch.no_grad():
            for p in norm.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        buffer = io.BytesIO()
        torch.save(norm.state_dict(), buffer)
        buffer.seek(0)
        clone = _build(method)
        clone.load_state_dict(torch.load(buffer, weights_only=True))
        x = _sample()
        z1, s1 = norm.normalize(x, index=INDEX)
        z2, s2 = clone.normalize(x, index=INDEX)
        torch.testing.assert_close(z1, z2, rtol=0, atol=0)
        y = torch.randn(2, H, C)
        torch.testing.assert_close(norm.denormalize(y, s1), clone.denormalize(y, s2))

    def test_nan_in_a_window_is_a_clear_error(self, method):
        x = _sample()
        x[1, 5, 2] = float("nan")
        with pytest.raises(ValueError, match=r"NaN.*\(1, 5, 2\)"):
            _build(method).normalize(x, index=INDEX)

    @pytest.mark.parametrize("shape", [(L, C), (2, 1, L, C), (L,)])
    def test_wrong_rank_is_a_clear_error(self, method, shape):
        with pytest.raises(ValueError, match=r"\(batch, length, channels\)"):
            _build(method).normalize(torch.randn(shape), index=INDEX)

    def test_wrong_channel_count_is_a_clear_error(self, method):
        with pytest.raises(ValueError, match=f"built for {C}"):
            _build(method).normalize(_sample()[..., :-1], index=INDEX)

    def test_integer_input_is_a_type_error(self, method):
        with pytest.raises(TypeError, match="floating-point"):
            _build(method).normalize(torch.ones(2, L, C, dtype=torch.long), index=INDEX)

    def test_wrong_forecast_shape_is_a_clear_error(self, method):
        norm = _build(method)
        _, state = norm.normalize(_sample(), index=INDEX)
        with pytest.raises(ValueError, match="denormalize"):
            norm.denormalize(torch.randn(2, H), state)
        with pytest.raises(ValueError, match="batch"):
            norm.denormalize(torch.randn(3, H, C), state)


def test_length_shorter_than_a_san_slice_is_a_clear_error():
    with pytest.raises(ValueError, match="shorter than one slice"):
        normlab.create("san", C, lookback=12, horizon=48, period=24)
    with pytest.raises(ValueError, match="multiple of the slice length"):
        normlab.create("san", C, lookback=36, horizon=48, period=24)
    san = normlab.create("san", C, lookback=48, horizon=48, period=24)
    with pytest.raises(ValueError, match="lookback=48"):
        san.normalize(torch.randn(2, 12, C))


def test_fixed_lookback_normalizers_name_the_expected_length():
    for name in ("dish-ts", "fan"):
        norm = build_norm(name, C, lookback=L, horizon=H)
        with pytest.raises(ValueError, match=f"lookback={L}"):
            norm.normalize(torch.randn(2, L - 1, C))


def test_pamod_needs_the_time_index():
    norm = normlab.create("pamod", C, periods=(24,))
    with pytest.raises(ValueError, match="index"):
        norm.normalize(_sample())
    with pytest.raises(ValueError, match="one start step per window"):
        norm.normalize(_sample(), index=torch.arange(3))
    with pytest.raises(ValueError, match="integer"):
        norm.normalize(_sample(), index=torch.zeros(2))


def test_bad_hyperparameters_are_clear_errors():
    with pytest.raises(ValueError, match="delta"):
        normlab.create("norin", C, delta=0.0)
    with pytest.raises(ValueError, match="k must be"):
        normlab.create("fan", C, lookback=8, horizon=8, k=9)
    with pytest.raises(ValueError, match="periods"):
        normlab.create("pamod", C, periods=())
    with pytest.raises(ValueError, match="channels"):
        normlab.create("revin", 0)


def test_fan_denormalize_needs_its_horizon():
    norm = build_norm("fan", C, lookback=L, horizon=H)
    _, state = norm.normalize(_sample())
    with pytest.raises(ValueError, match=f"horizon={H + 1}"):
        norm.denormalize(torch.randn(2, H + 1, C), state)
