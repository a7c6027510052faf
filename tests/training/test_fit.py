"""The one training loop: it trains, schedules, evaluates, and returns divergence."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.training.fit import EpochBatches, fit


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


def test_epoch_batches_reshuffle_each_epoch_and_cover_the_data():
    batches = EpochBatches(10, 4, torch.Generator().manual_seed(0))
    assert batches.per_epoch == 3 and batches.steps(2) == 6
    epochs = [[batches(s) for s in range(e * 3, e * 3 + 3)] for e in range(2)]
    for epoch in epochs:
        assert [len(b) for b in epoch] == [4, 4, 2]
        assert sorted(torch.cat(epoch).tolist()) == list(range(10))
    assert [batches.size(s) for s in range(3)] == [4, 4, 2]
    assert not torch.equal(torch.cat(epochs[0]), torch.cat(epochs[1]))


def test_epoch_batches_take_a_subset_and_drop_the_short_batch():
    same = torch.Generator().manual_seed(1)
    batches = EpochBatches(10, 3, torch.Generator().manual_seed(1), take=7, drop_last=True)
    assert batches.per_epoch == 2
    order = torch.randperm(10, generator=same)[:7]
    assert torch.equal(torch.cat([batches(0), batches(1)]), order[:6])


def test_stop_ends_the_run_before_a_step_without_divergence():
    model, data = _problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loss(m):
        return float(_mse(m, data).detach())

    result = fit(model, _mse, lambda step: data, 100, opt, stop=lambda m: loss(m) < 0.5)
    assert result.diverged is None and 0 < result.steps < 100
    assert loss(model) < 0.5


def test_train_mode_false_keeps_batchnorm_statistics():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    stats = model[1].running_mean.clone()
    x = torch.randn(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fit(model, lambda m, b: m(b).square().mean(), [x, x], 2, opt, train_mode=False)
    assert torch.equal(model[1].running_mean, stats) and not model.training
    fit(model, lambda m, b: m(b).square().mean(), [x], 1, opt)
    assert not torch.equal(model[1].running_mean, stats)
