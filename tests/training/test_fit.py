"""The one training loop: it trains, schedules, evaluates, and returns divergence."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.training.fit import fit


def _problem():
    torch.manual_seed(0)
    x = torch.randn(64, 3)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3
    model = torch.nn.Linear(3, 1)
    return model, (x, y)


def _mse(model, batch):
    x, y = batch
    return ((model(x).squeeze(-1) - y) ** 2).mean()


def test_fit_trains_and_evaluates():
    model, data = _problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    evals = []
    result = fit(
        model,
        _mse,
        lambda step: data,
        50,
        opt,
        eval_fn=lambda m: float(_mse(m, data).detach()),
        eval_every=20,
        after_step=lambda s, loss: evals.append(s),
    )
    assert result.steps == 50 and result.diverged is None
    assert result.final_loss < 0.01 * result.losses[0]
    assert [s for s, _ in result.evals] == [20, 40, 50]
    assert evals == list(range(50))


def test_schedule_scales_the_initial_rates():
    model, data = _problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fit(model, _mse, lambda step: data, 3, opt, schedule=lambda step: 0.5)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)


def test_divergence_is_returned_not_raised():
    model, data = _problem()
    opt = torch.optim.SGD(model.parameters(), lr=10.0)  # far beyond stability
    result = fit(model, _mse, lambda step: data, 200, opt)
    assert result.diverged is not None and result.steps == result.diverged.step
    assert math.isfinite(result.diverged.last)
    assert result.diverged.record()["step"] == result.diverged.step


def test_exhausted_batches_say_so():
    model, data = _problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="ran out at step 2"):
        fit(model, _mse, [data, data], 5, opt)
