"""The contract every registered norm, score normalizer and activation keeps.

Inputs are built from each method's registered layout, so a new method is tested by
registering it.
"""

from __future__ import annotations

import io

import pytest
import torch

import normlab

FEATURES = 8
#: Methods whose outputs are piecewise constant by design (fixed-point emulation), so a
#: finite-difference gradcheck does not apply; each names why.
NOT_SMOOTH: dict[str, str] = {}

#: Methods that need an optional package at use (the registry holds them regardless).
EXTRAS: dict[str, str] = {"entmax15": "entmax"}

MODULE_METHODS = [m for m in normlab.methods() if m.kind in ("norm", "score", "activation")]
IDS = [m.name for m in MODULE_METHODS]


def build(method: normlab.Method, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    if method.name in EXTRAS:
        pytest.importorskip(EXTRAS[method.name])
    if method.layout == "scores":
        return method.create().to(dtype)
    return method.create(FEATURES).to(dtype)


def sample(method: normlab.Method, dtype: torch.dtype = torch.float32, small: bool = False):
    g = torch.Generator().manual_seed(1)
    if method.layout == "channels_first":
        shape = (2, FEATURES, 5, 5) if small else (2, FEATURES, 9, 9)
    elif method.layout == "scores":
        shape = (2, 3, 5) if small else (2, 3, 7, 7)
    else:
        shape = (2, 3, FEATURES)
    return (torch.randn(shape, generator=g) * 2 + 0.5).to(dtype)


@pytest.mark.parametrize("method", MODULE_METHODS, ids=IDS)
class TestContract:
    def test_shape_and_dtype(self, method):
        for dtype in (torch.float32, torch.float64):
            x = sample(method, dtype)
            y = build(method, dtype)(x)
            assert y.shape == x.shape and y.dtype == dtype
            assert torch.isfinite(y).all()

    def test_gradients_reach_every_parameter(self, method):
        module = build(method)
        x = sample(method).requires_grad_()
        weights = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
        (module(x) * weights).sum().backward()
        assert x.grad is not None and torch.isfinite(x.grad).all()
        for name, p in module.named_parameters():
            assert p.grad is not None, f"no gradient reached {name}"
            assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name

    def test_gradcheck_float64(self, method):
        if method.name in NOT_SMOOTH:
            pytest.skip(NOT_SMOOTH[method.name])
        module = build(method, torch.float64)
        x = sample(method, torch.float64, small=True).requires_grad_()
        assert torch.autograd.gradcheck(module, (x,), eps=1e-6, atol=1e-5, rtol=1e-4)

    def test_state_dict_round_trip(self, method):
        module = build(method)
        with torch.no_grad():
            for p in module.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        buffer = io.BytesIO()
        torch.save(module.state_dict(), buffer)
        buffer.seek(0)
        clone = build(method)
        clone.load_state_dict(torch.load(buffer, weights_only=True))
        x = sample(method)
        torch.testing.assert_close(clone(x), module(x), rtol=0, atol=0)

    def test_eval_is_deterministic(self, method):
        module = build(method).eval()
        x = sample(method)
        with torch.no_grad():
            torch.testing.assert_close(module(x), module(x), rtol=0, atol=0)

    @pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
    def test_half_precision_inputs(self, method, low):
        module = build(method)
        x = sample(method)
        y = module(x.to(low))
        assert y.dtype == low and torch.isfinite(y).all()
        reference = module(x.to(low).float())
        torch.testing.assert_close(y.float(), reference, rtol=2e-2, atol=2e-2)

    def test_wrong_feature_size_is_a_clear_error(self, method):
        if method.layout == "scores":
            pytest.skip("score normalizers have no feature size")
        module = build(method)
        x = sample(method)
        bad = x[:, :-1] if method.layout == "channels_first" else x[..., :-1]
        with pytest.raises(ValueError, match=str(FEATURES)):
            module(bad)
