"""A ReLU MLP with or without BatchNorm, with the same Linear weights either way.

Comparing a network with BatchNorm against the same network without it is only fair when
everything else is equal: :func:`bn_mlp` draws the Linear layers first, from one seed, and
inserts ``BatchNorm1d`` (or an identity) after each, so the two differ only by the norm.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["INITS", "bn_mlp"]

#: Weight initialisations :func:`bn_mlp` offers.
INITS = ("default", "he", "he-bias")


def bn_mlp(
    width: int,
    depth: int,
    *,
    bn: bool,
    seed: int,
    init: str = "default",
    in_features: int = 2,
    bias_std: float = 1.0,
) -> nn.Sequential:
    """``depth`` blocks ``Linear -> BatchNorm1d (or Identity) -> ReLU`` and a scalar head.

    The network is float64 and seeds the global RNG with ``seed`` before drawing the Linear
    layers (hidden first, then the head), so the same ``seed`` gives the same weights with
    and without BatchNorm.

    Args:
        width: hidden width.
        depth: number of hidden blocks.
        bn: BatchNorm after each hidden Linear.
        seed: the seed of the weights.
        init: "default" (torch's Linear init) or "he" (Kaiming-normal weights for ReLU,
            He et al. 2015, and zero biases) or "he-bias" (the same weights and biases
            drawn from ``N(0, bias_std^2)``: with zero biases every first-layer switching
            line ``w_i . x + b_i = 0`` passes through the origin, a degenerate partition;
            with random biases the lines sit at random offsets ``-b_i / ||w_i||``).
        in_features: input width (2 for the plane, where linear regions can be drawn).
        bias_std: the biases' standard deviation for ``init="he-bias"``.

    Examples:
        >>> import torch
        >>> a = bn_mlp(8, 2, bn=True, seed=0)
        >>> b = bn_mlp(8, 2, bn=False, seed=0)
        >>> bool(torch.equal(a[3].weight, b[3].weight)), type(b[1]).__name__
        (True, 'Identity')
        >>> a(torch.randn(5, 2, dtype=torch.float64)).shape
        torch.Size([5, 1])
    """
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}; got {init!r}.")
    torch.manual_seed(seed)
    linears = [nn.Linear(in_features if i == 0 else width, width) for i in range(depth)]
    if init != "default":
        for lin in linears:
            nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
            nn.init.zeros_(lin.bias)
    if init == "he-bias":  # after every weight, so "he" and "he-bias" share the weights
        for lin in linears:
            nn.init.normal_(lin.bias, std=bias_std)
    mods: list[nn.Module] = []
    for lin in linears:
        mods += [lin, nn.BatchNorm1d(width) if bn else nn.Identity(), nn.ReLU()]
    mods.append(nn.Linear(width, 1))
    return nn.Sequential(*mods).double()
