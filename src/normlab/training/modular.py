"""Sparse modular addition and a training loop that records norm-layer curvature per step.

For the curvature-spikes claim (``normlab.papers.paper("curvature-spikes")``): sequences of
``length`` tokens drawn uniformly from ``Z_p``; the label is the sum mod ``p`` of the tokens at
``k`` fixed positions (the others are distractors). A pre-LN :class:`~normlab.models.gpt.TinyGPT`
with vocabulary ``p`` reads the sequence and predicts the label from its last position.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.probes.dynamics import norm_curvature
from normlab.training.fit import fit

__all__ = ["sparse_modular_addition", "train_modular"]


def sparse_modular_addition(
    n: int, p: int, length: int, positions: tuple[int, ...], *, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)``: ``x`` (n, length) tokens in ``[0, p)``, ``y = sum(x[:, positions]) % p``."""
    if max(positions) >= length:
        raise ValueError(f"positions {positions} must be < length {length}.")
    x = torch.randint(0, p, (n, length), generator=generator)
    return x, x[:, list(positions)].sum(1) % p


def train_modular(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """AdamW on a fixed training set; per step the loss and the max LN Jacobian spectral norm.

    Each step draws ``batch`` examples with replacement, or takes the whole set (full-batch,
    deterministic) when ``batch >= train_size``. The curvature is measured on a fixed probe
    batch of ``probe_size`` (default 64) sequences at the parameters the step's loss was
    computed with (before the update), every ``curvature_every`` steps (default 1).
    Optional keys: ``adam_eps`` (default 1e-8), ``betas`` (default (0.9, 0.98)),
    ``loss_sequences`` (default 0): when positive, the loss of the first this many training
    sequences (a fixed set, free of the minibatch's resampling noise) is also recorded at
    every step, at the same parameters as the curvature, as ``"set_loss"``.

    Returns ``{"loss", "curvature", "curvature_step", "min_scale", "test_acc", "diverged"}``
    and ``"set_loss"`` when asked (test accuracy at the end; ``curvature_step`` the steps the
    curvature was measured at; ``diverged`` None, or the record of the step whose loss was
    not finite, where the run stopped).
    """
    gen = torch.Generator().manual_seed(seed)
    p, length, positions = config["p"], config["length"], tuple(config["positions"])
    torch.manual_seed(seed)
    model = TinyGPT(
        GPTConfig(
            d_model=config["d_model"],
            n_layers=config["n_layers"],
            n_heads=config["n_heads"],
            context=length,
            vocab=p,
            bias=True,
        )
    )
    opt = torch.optim.AdamW(
        model.parameters(),
        lr=config["lr"],
        weight_decay=config["weight_decay"],
        betas=tuple(config.get("betas", (0.9, 0.98))),
        eps=config.get("adam_eps", 1e-8),
        foreach=True,  # the per-tensor loop's arithmetic (bit-identical), in fewer calls
    )
    probe_x, _ = sparse_modular_addition(
        config.get("probe_size", 64), p, length, positions, generator=gen
    )
    train_x, train_y = sparse_modular_addition(
        config["train_size"], p, length, positions, generator=gen
    )
    every = int(config.get("curvature_every", 1))
    full = config["batch"] >= len(train_y)
    out: dict[str, Any] = {"curvature": [], "curvature_step": [], "min_scale": []}
    fixed = int(config.get("loss_sequences", 0))
    if fixed > 0:
        out["set_loss"] = []

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        # the curvature at the parameters this step's loss is computed with
        if step % every == 0:
            rec = norm_curvature(model, lambda m: m(probe_x))
            out["curvature"].append(rec.overall_max)
            out["curvature_step"].append(float(step))
            out["min_scale"].append(min(rec.min_scale))
        if fixed > 0:
            with torch.no_grad():
                logits = model(train_x[:fixed])[:, -1]
                out["set_loss"].append(float(F.cross_entropy(logits, train_y[:fixed])))
        if full:
            return train_x, train_y
        idx = torch.randint(0, len(train_y), (config["batch"],), generator=gen)
        return train_x[idx], train_y[idx]

    result = fit(
        model, lambda m, xy: F.cross_entropy(m(xy[0])[:, -1], xy[1]), batch, config["steps"], opt
    )
    out["loss"] = result.losses
    out["diverged"] = None if result.diverged is None else result.diverged.record()
    test_x, test_y = sparse_modular_addition(512, p, length, positions, generator=gen)
    with torch.no_grad():
        acc = float((model(test_x)[:, -1].argmax(-1) == test_y).float().mean())
    out["test_acc"] = [acc]
    return out
