"""End-to-end timing for ``normlab bench --model``: a TinyGPT training step, several ways.

- ``kernels``: normlab's fused kernels (the default; each block adds the attention output
  to the residual stream and applies its second norm in one fused call),
- ``unfused``: the same kernels with the residual add as its own op (a no-op forward hook
  on each norm makes the block take its unfused path, as any hooked model does),
- ``plain``: the same model inside ``normlab.kernels.disabled()`` (the plain torch path),
- ``compiled``: ``torch.compile`` of the plain model (traced inside ``disabled()``),
- ``no-norm``, ``no-norm-plain``: the model with its norm layers replaced by
  ``nn.Identity``, with and without the kernels (softmax1 keeps its path), to estimate the
  share of the step spent in norms: ``1 - t(no-norm) / t(model)``.

All arms are timed interleaved, medians of repeats; each arm owns a copy of the model and
its optimizer, started from the same weights.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab import kernels as K
from normlab._machine import load_average
from normlab.cli._bench_ops import median_times
from normlab.layers import DyT, LayerNorm, RMSNorm

__all__ = ["bench_model"]


def _strip_norms(model: nn.Module) -> nn.Module:
    for name, module in list(model.named_modules()):
        if name and isinstance(module, LayerNorm | RMSNorm | DyT):
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, leaf, nn.Identity())
    return model


def _unfused(model: nn.Module) -> nn.Module:
    for module in model.modules():
        if isinstance(module, LayerNorm | RMSNorm):
            module.register_forward_hook(lambda *_: None)
    return model


def train_step(
    model: nn.Module, idx: torch.Tensor, scope: Callable[[], Any]
) -> Callable[[], None]:
    """One AdamW training step of ``model`` on ``idx`` (next-byte loss) inside ``scope()``."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        with scope():
            logits = model(idx)
            loss = F.cross_entropy(logits.flatten(0, 1), idx.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    return step


def bench_model(
    *,
    norm: str = "rmsnorm",
    d_model: int = 256,
    n_layers: int = 4,
    context: int = 128,
    batch: int = 8,
    compile: bool = True,
    repeats: int = 5,
    device: str = "cpu",
    min_time: float = 0.0,
) -> dict[str, Any]:
    """One record: seconds per training step of each arm, speedups and the norms' share.

    ``min_time``: seconds each arm runs per repeat (0: one step, enough where a step takes
    a tenth of a second, as on the CPU; a GPU step takes milliseconds).
    """
    from normlab.models.gpt import GPTConfig, TinyGPT

    torch.manual_seed(0)
    config = GPTConfig(d_model=d_model, n_layers=n_layers, n_heads=4, norm=norm, score="softmax1")
    base = TinyGPT(config).to(device)
    idx = torch.randint(0, config.vocab, (batch, config.context), device=device)
    on, off = contextlib.nullcontext, K.disabled
    arms: dict[str, Callable[[], None]] = {
        "kernels": train_step(copy.deepcopy(base), idx, on),
        "unfused": train_step(_unfused(copy.deepcopy(base)), idx, on),
        "plain": train_step(copy.deepcopy(base), idx, off),
        "no-norm": train_step(_strip_norms(copy.deepcopy(base)), idx, on),
        "no-norm-plain": train_step(_strip_norms(copy.deepcopy(base)), idx, off),
    }
    if compile:
        arms["compiled"] = train_step(torch.compile(copy.deepcopy(base)), idx, off)
    before = load_average()
    samples = median_times(arms, device, repeats, min_time)
    after = load_average()
    t = {k: statistics.median(v) for k, v in samples.items()}
    record: dict[str, Any] = {
        "model": f"TinyGPT d={d_model} L={n_layers} {norm} + softmax1, batch {batch}x"
        f"{config.context}, {device}",
        "seconds": t,
        "spread": {k: [min(v), max(v)] for k, v in samples.items()},
        "speedup": {k: t[k] / t["kernels"] for k in ("unfused", "plain", "compiled") if k in t},
        "norm_share": {
            "kernels": 1 - t["no-norm"] / t["kernels"],
            "plain": 1 - t["no-norm-plain"] / t["plain"],
        },
        "load": [before, after],
        "loaded": max(before, after) > torch.get_num_threads(),
    }
    return record
