"""One task of a comparison: one arm, one seed, tuned over the learning rates (the first
seed) or trained at the first seed's choice (the others).

:func:`run_task` is what a worker process (or a Ray worker) runs. It resolves MODEL and
DATA from the plain setting (cached per process), measures the arm's untrained model on
validation and test (the learned premise's reference, and the value a diverged arm counts
as), then hands the arm to :func:`normlab.claims.arms.run_arms`: every learning rate is
trained on the same data order from the same initial weights, selected on validation, an
edge choice extends the grid, and the chosen run alone is scored on test.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab.claims import tune_once
from normlab.claims.arms import Trained, run_arms
from normlab.compare.data import Data, resolve_data
from normlab.compare.models import ModelSource, build, resolve_model
from normlab.training.fit import EpochBatches, fit

__all__ = ["metric", "resolved", "run_task", "search_config"]

_LN2 = math.log(2)
#: Evaluation windows (language modelling) or windows/examples (other tasks) per split.
EVAL_WINDOWS = 16
EVAL_BATCH = 256


@functools.cache
def _resolved(text: str) -> tuple[ModelSource, Data]:
    s = json.loads(text)
    source = resolve_model(s["model"], s["task"])
    data = resolve_data(
        s["data"],
        source,
        task=s["task"],
        context=s["context"],
        columns=s.get("columns"),
        lookback=s["lookback"],
        horizon=s["horizon"],
    )
    return source, data


def resolved(setting: Mapping[str, Any]) -> tuple[ModelSource, Data]:
    """MODEL and DATA of a setting, resolved once per process."""
    return _resolved(json.dumps(dict(setting), sort_keys=True))


def search_config(setting: Mapping[str, Any]) -> dict[str, Any]:
    """The claims search of a setting: every arm, the same learning rates, one extension."""
    return {
        "search": {
            "arms": list(setting["norms"]),
            "space": {"lr": [float(x) for x in setting["lrs"]]},
            "extend": int(setting.get("extend", 1)),
        }
    }


def _logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = model(x)
    if hasattr(out, "logits"):
        return out.logits
    return out[0] if isinstance(out, (tuple, list)) else out


def _windows(tokens: torch.Tensor, context: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    last = len(tokens) - context - 1
    starts = torch.linspace(0, last, min(n, last + 1)).round().long()
    span = torch.stack([tokens[s : s + context + 1] for s in starts.tolist()])
    return span[:, :-1], span[:, 1:]


@torch.no_grad()
def metric(model: nn.Module, data: Data, split: str, setting: Mapping[str, Any]) -> float:
    """The test/validation metric of ``model`` on a split (lower is better): bits per token
    (per byte for byte-level text), forecast MSE, or classification cross-entropy."""
    part = getattr(data, split)
    was = model.training
    model.eval()
    try:
        if data.task == "lm":
            x, y = _windows(part, setting["context"], EVAL_WINDOWS)
            logits = _logits(model, x)
            return float(F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())) / _LN2
        if data.task == "forecast":
            from normlab.training.forecast import evaluate

            return evaluate(model, part, n=EVAL_BATCH)["mse"]
        x, y = part
        return float(F.cross_entropy(_logits(model, x[: EVAL_BATCH * 4]), y[: EVAL_BATCH * 4]))
    finally:
        model.train(was)


def _loss_and_batches(
    model: nn.Module, data: Data, setting: Mapping[str, Any], seed: int
) -> tuple[Callable[[nn.Module, Any], torch.Tensor], Callable[[int], Any]]:
    gen = torch.Generator().manual_seed(seed)
    batch = int(setting["batch"])
    if data.task == "lm":
        context = int(setting["context"])
        tokens = data.train
        high = len(tokens) - context - 1

        def lm_batch(step: int) -> torch.Tensor:
            starts = torch.randint(0, high + 1, (batch,), generator=gen)
            return torch.stack([tokens[s : s + context + 1] for s in starts.tolist()])

        def lm_loss(m: nn.Module, span: torch.Tensor) -> torch.Tensor:
            logits = _logits(m, span[:, :-1])
            return F.cross_entropy(logits.flatten(0, 1).float(), span[:, 1:].flatten())

        return lm_loss, lm_batch
    if data.task == "forecast":
        windows = data.train
        ids = EpochBatches(len(windows), batch, gen, drop_last=len(windows) >= batch)
        schedule = getattr(getattr(model, "norm", None), "aux_schedule", "none")

        def fc_loss(m: nn.Module, chunk: torch.Tensor) -> torch.Tensor:
            x, y, index = windows.get(chunk)
            pred, y_hat, state = m(x, index)
            loss = F.mse_loss(pred, y)
            if schedule == "joint" and state is not None:
                aux = m.norm.auxiliary_loss(y_hat, state, y)
                loss = loss + aux if aux is not None else loss
            return loss

        return fc_loss, ids
    x, y = data.train
    ids = EpochBatches(len(x), batch, gen)

    def cls_loss(m: nn.Module, chunk: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(_logits(m, x[chunk]), y[chunk])

    return cls_loss, ids


def _train_one(
    source: ModelSource, data: Data, setting: Mapping[str, Any], arm: str, lr: float, seed: int
) -> tuple[Trained, float]:
    """Train ``arm`` at ``lr`` for the setting's steps; score it on validation."""
    start = time.perf_counter()
    model = build(source, arm, seed, data.dims, setting.get("keep") or ())
    steps = int(setting["steps"])
    loss_fn, batches = _loss_and_batches(model, data, setting, seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=float(setting.get("weight_decay", 0.0)))
    warm = max(1, steps // 10)
    every = max(1, steps // int(setting.get("curve_points", 5)))
    vocab_loss = math.log(max(2, data.dims.get("vocab_needed", 2)))
    result = fit(
        model,
        loss_fn,
        batches,
        steps,
        opt,
        schedule=lambda s: min(1.0, (s + 1) / warm),
        grad_clip=1.0,
        seed=seed,
        eval_fn=lambda m: metric(m, data, "val", setting),
        eval_every=every,
        diverge_above=max(50.0, 10 * vocab_loss) if data.task == "lm" else 1e6,
    )
    diverged = result.diverged.record() if result.diverged is not None else None
    val = result.evals[-1][1] if result.evals and diverged is None else math.inf
    curve = [(int(s), float(v)) for s, v in result.evals]
    trained = Trained(val, {"model": model, "curve": curve, "lr": lr}, diverged)
    return trained, time.perf_counter() - start


def run_task(
    setting: Mapping[str, Any], arm: str, seed: int, fixed: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Tune (or train at ``fixed``), train and test one arm for one seed; the task record
    the cache keeps.

    Args:
        setting: the comparison's plain setting (see :func:`normlab.compare.api.compare`).
        arm: one of ``setting["norms"]``.
        seed: the seed (weights, data order).
        fixed: the parameters the arm's first seed chose (``{"lr": ...}``): this seed
            trains once at them instead of tuning (:mod:`normlab.claims.tune_once`);
            None: it tunes.

    Returns:
        ``arm``, ``seed``, the chosen ``lr``, its validation score ``val``, its ``test``
        metric (a diverged choice counts as the untrained model's), the ``untrained``
        model's validation and test metric, the ``tuning`` record, ``fixed`` (whether it
        trained at the first seed's choice), ``diverged`` (or None),
        the chosen run's validation ``curve``, ``train_seconds`` (the trainings' own time)
        and ``seconds`` (the whole task).
    """
    start = time.perf_counter()
    torch.set_num_threads(int(setting.get("threads", 1)))
    source, data = resolved(setting)
    untrained_model = build(source, arm, seed, data.dims, setting.get("keep") or ())
    untrained = {s: metric(untrained_model, data, s, setting) for s in ("val", "test")}
    own = [0.0]

    def train(name: str, params: dict[str, Any], training_seed: int) -> Trained:
        trained, seconds = _train_one(source, data, setting, name, params["lr"], training_seed)
        own[0] += seconds
        return trained

    curve: list[tuple[int, float]] = []

    def test(name: str, trained: Trained) -> dict[str, float]:
        curve.extend(trained.model["curve"])
        if trained.diverged is not None:
            return {"test": untrained["test"]}
        return {"test": metric(trained.model["model"], data, "test", setting)}

    with tune_once.session([{arm: dict(fixed)}] if fixed else None):
        measured = run_arms(
            search_config(setting), seed, train, test, reference=untrained["val"], arms=[arm]
        )
    row = measured["table"][arm]
    record = measured["tuning"][arm]
    return {
        "arm": arm,
        "seed": seed,
        "lr": float(row["lr"]),
        "test": float(row["test"]),
        "val": record.get("val"),
        "untrained": untrained,
        "tuning": record,
        "fixed": bool(fixed),
        "diverged": measured["diverged"].get(arm),
        "curve": curve,
        "train_seconds": own[0],
        "seconds": time.perf_counter() - start,
    }
