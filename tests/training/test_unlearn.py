"""unlearn: gradient-ascent unlearning, its modes and its stop rule."""

from __future__ import annotations

import pytest
import torch

from normlab.models.bn_cnn import bn_cnn
from normlab.training.unlearn import unlearn


def test_eval_mode_unlearning_leaves_running_statistics_alone():
    model = bn_cnn(8, 2, norm="batch", seed=0)
    x, y = torch.rand(32, 1, 8, 8), torch.randint(0, 10, (32,))
    stats = model.norms[0].running_mean.clone()

    def unlearn_in(mode: str, *, stop_acc: float = -1.0, max_steps: int = 3) -> None:
        unlearn(
            model,
            "grad-ascent",
            (x, y),
            (x, y),
            lr=1e-2,
            batch=16,
            stop_acc=stop_acc,
            max_steps=max_steps,
            generator=torch.Generator().manual_seed(0),
            mode=mode,
        )

    unlearn_in("eval")
    assert torch.equal(model.norms[0].running_mean, stats)
    unlearn_in("train")
    assert not torch.equal(model.norms[0].running_mean, stats)
    with pytest.raises(ValueError, match="mode"):
        unlearn_in("test", stop_acc=0.0, max_steps=1)


@pytest.mark.parametrize("method", ["grad-ascent", "neggrad+"])
def test_stops_once_the_forget_accuracy_reaches_the_target(method):
    torch.manual_seed(0)
    model = bn_cnn(8, 2, norm="batch", seed=0)
    x, y = torch.rand(32, 1, 8, 8), torch.randint(0, 10, (32,))
    steps, div = unlearn(
        model, method, (x[:16], y[:16]), (x[16:], y[16:]), lr=0.05, batch=16,
        stop_acc=0.5, max_steps=500, generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert div is None and steps < 500 and not model.training
    with torch.no_grad():
        assert float((model(x[:16]).argmax(1) == y[:16]).float().mean()) <= 0.5


def test_unknown_method_or_mode_is_refused():
    model, data = bn_cnn(8, 2, seed=0), (torch.rand(4, 1, 8, 8), torch.zeros(4, dtype=torch.long))
    args = dict(lr=0.1, batch=2, stop_acc=0.0, max_steps=1, generator=torch.Generator())
    with pytest.raises(ValueError, match="method"):
        unlearn(model, "scrub", data, data, **args)
    with pytest.raises(ValueError, match="mode"):
        unlearn(model, "neggrad+", data, data, mode="frozen", **args)


def test_recalibration_gap_row():
    from normlab.data.images import forget_retain_split, load_digits_tensors
    from normlab.training.unlearn import recalibration_gap

    torch.manual_seed(0)
    sets, loaders = forget_retain_split(
        load_digits_tensors(0), 1, batch=64, attacker_images=10, generator=torch.Generator()
    )
    model = bn_cnn(8, 2, norm="batch", seed=0)
    row, div = recalibration_gap(
        model,
        "grad-ascent",
        "train",
        sets,
        loaders,
        lr=1e-2,
        batch=32,
        stop_acc=0.05,
        max_steps=5,
        generator=torch.Generator().manual_seed(0),
    )
    assert div is None and row["unlearn_steps"] <= 5
    assert row["recal_gap"] == row["forget_acc_recalibrated"] - row["forget_acc"]
    assert 0 <= row["forget_acc_attacker"] <= 1 and row["bn_mean_shift"] > 0
