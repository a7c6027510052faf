"""Recalibrate BatchNorm running statistics without touching a weight.

One pass over a data loader recomputes every BatchNorm's ``running_mean`` and
``running_var`` from scratch as a cumulative average over the batches (``momentum=None``:
``stat = mean_b stat_b``, equal weight per batch, unbiased batch variance as torch uses).
Only the BatchNorm modules run in train mode during the pass; dropout and everything else
stay in eval mode, gradients are off, and each module's mode and momentum are restored.

This is the weight-preserving operator of the BatchNorm confound in unlearning evaluation
(seed paper "bn-unlearning"): any change in a metric it causes is attributable to the
running statistics alone, since no parameter moves. A model without BatchNorm (GroupNorm,
LayerNorm) has nothing to recalibrate and its gap is exactly zero.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from normlab._records import Record

__all__ = ["BNRecalibration", "batchnorm_modules", "recalibrate_bn", "recalibration_footprint"]

Metric = Callable[[nn.Module], float | Mapping[str, float]]


@dataclass(frozen=True)
class BNRecalibration(Record):
    """The outcome of :func:`recalibrate_bn`.

    Attributes:
        modules: qualified names of the recalibrated BatchNorm modules.
        batches: batches seen.
        samples: samples seen (first dimension of each input).
        before: the metric(s) before, or empty.
        after: the metric(s) after, or empty.
        mean_shift: mean over modules of ``||mu_new - mu_old|| / (||mu_old|| + 1e-12)``.
        var_shift: the same for the running variances.
    """

    modules: tuple[str, ...]
    batches: int
    samples: int
    before: Mapping[str, float] = field(default_factory=dict)
    after: Mapping[str, float] = field(default_factory=dict)
    mean_shift: float = 0.0
    var_shift: float = 0.0

    @property
    def gap(self) -> dict[str, float]:
        """``after - before`` per metric."""
        return {k: self.after[k] - self.before[k] for k in self.before if k in self.after}


def batchnorm_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The BatchNorm modules of ``model`` that track running statistics."""
    return [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
    ]


def _measure(model: nn.Module, metric: Metric | None) -> dict[str, float]:
    if metric is None:
        return {}
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            value = metric(model)
    finally:
        for m, training in modes:
            m.training = training
    return (
        {k: float(v) for k, v in value.items()}
        if isinstance(value, Mapping)
        else {"metric": float(value)}
    )


def _inputs(batch: Any) -> Any:
    return batch[0] if isinstance(batch, tuple | list) else batch


def _shift(new: torch.Tensor, old: torch.Tensor) -> float:
    return float((new - old).norm() / (old.norm() + 1e-12))


def recalibrate_bn(
    model: nn.Module,
    loader: Iterable[Any],
    *,
    metric: Metric | None = None,
    forward: Callable[[nn.Module, Any], Any] | None = None,
) -> BNRecalibration:
    """Recompute the running statistics of every BatchNorm of ``model`` in one pass.

    Args:
        model: the model, changed in place (running statistics only).
        loader: batches: a tensor, or a tuple/list whose first item is the input.
        metric: ``metric(model) -> float or {name: float}``, evaluated (eval mode, no grad)
            before and after, e.g. forget-set accuracy.
        forward: ``forward(model, batch)`` when the model needs more than ``model(x)``.

    Returns:
        A :class:`BNRecalibration` with the metric gap and how far the statistics moved.

    Example:
        >>> record = recalibrate_bn(net, retain_loader, metric=lambda m: accuracy(m, forget))
        >>> record.gap
    """
    before = _measure(model, metric)
    bns = batchnorm_modules(model)
    if not bns:
        return BNRecalibration((), 0, 0, before, dict(before))
    iterator = iter(loader)
    first = next(iterator, None)
    if first is None:
        raise ValueError("recalibrate_bn got an empty loader; pass at least one batch.")
    old = {n: (m.running_mean.clone(), m.running_var.clone()) for n, m in bns}
    saved = [(m, m.training) for m in model.modules()]
    momenta = {n: m.momentum for n, m in bns}
    batches = samples = 0
    try:
        model.eval()
        for _, m in bns:
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the pass
            m.train()
        with torch.no_grad():
            for batch in itertools.chain([first], iterator):
                if forward is None:
                    x = _inputs(batch)
                    model(x)
                    samples += int(x.shape[0])
                else:
                    forward(model, batch)
                    samples += int(_inputs(batch).shape[0])
                batches += 1
    finally:
        for n, m in bns:
            m.momentum = momenta[n]
        for m, training in saved:
            m.training = training
    mean_shift = sum(_shift(m.running_mean, old[n][0]) for n, m in bns) / len(bns)
    var_shift = sum(_shift(m.running_var, old[n][1]) for n, m in bns) / len(bns)
    after = _measure(model, metric)
    names = tuple(n for n, _ in bns)
    return BNRecalibration(names, batches, samples, before, after, mean_shift, var_shift)


def recalibration_footprint(
    model: nn.Module, loader: Iterable[Any], *, metric: Metric | None = None
) -> dict[str, float]:
    """What one :func:`recalibrate_bn` pass changed in ``model`` (run in place).

    Keys: ``modules`` (BatchNorm modules recalibrated), ``state_changed`` and
    ``weights_changed`` (1.0 when any tensor of the state dict, or any parameter, differs
    bit for bit afterwards) and ``gap`` (the largest ``|metric after - before|``; 0 without
    a metric). The BatchNorm unlearning paper's operator is weight-preserving: a network
    without running statistics (GroupNorm) must read 0 everywhere, a BatchNorm network must
    keep every weight.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.GroupNorm(2, 4))
        >>> recalibration_footprint(net, [torch.randn(8, 3)])
        {'modules': 0.0, 'state_changed': 0.0, 'weights_changed': 0.0, 'gap': 0.0}
    """
    state = {k: v.clone() for k, v in model.state_dict().items()}
    weights = {k: v.clone() for k, v in model.named_parameters()}
    record = recalibrate_bn(model, loader, metric=metric)
    return {
        "modules": float(len(record.modules)),
        "state_changed": float(
            any(not torch.equal(state[k], v) for k, v in model.state_dict().items())
        ),
        "weights_changed": float(
            any(not torch.equal(weights[k], v) for k, v in model.named_parameters())
        ),
        "gap": max((abs(v) for v in record.gap.values()), default=0.0),
    }
