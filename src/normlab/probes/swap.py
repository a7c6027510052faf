"""Replacement and interchange swap-KL for every layer pair, and greedy pruning by each.

Seed paper "swap-kl": two output-grounded tests of whether layers ``i`` and ``j`` are
"equivalent" need not agree.

- Replacement: ``d_repl(i, j) = max(KL(p_M || p_M[i<-j]), KL(p_M || p_M[j<-i]))``, where
  ``M[i<-j]`` runs block ``j``'s weights in slot ``i`` (block ``j`` twice, block ``i`` never).
- Interchange: ``d_int(i, j) = KL(p_M || p_M[i<->j])``, both blocks run once at swapped depths.

KL is of the next-token distribution of the unmodified model to the modified one, in nats,
averaged over all positions (``positions="all"``) or over the last position of each
sequence (``"last"``); the reference's two scripts differ in this, so both are offered. A
block run elsewhere keeps any per-index constant it owns (e.g. TinyGPT's LayerNorm-Scaling
factor), which differs slightly from copying weights alone.

Pruning order (reference code): ``s(i) = min_{j != i} d(i, j)``; layers sorted by ``s``
ascending and taken greedily, never adjacent to one already taken. The pruning curve
removes the first ``k`` layers of an order and reports the KL (and, given targets, the
loss) of the pruned model.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from normlab._records import Record
from normlab.probes._runner import BlockSubsetRunner, as_block_runner

__all__ = [
    "PruneCurve",
    "SwapKL",
    "guided_pruning",
    "kl_to_base",
    "pruning_curve",
    "pruning_order",
    "random_pruning_order",
    "swap_kl",
]


def kl_to_base(base: torch.Tensor, other: torch.Tensor, *, positions: str = "all") -> float:
    """Mean ``KL(softmax(base) || softmax(other))`` in nats over positions.

    Args:
        base: logits of the unmodified model ``(batch, tokens, vocab)``.
        other: logits of the modified model, same shape.
        positions: "all" tokens or only the "last" of each sequence.
    """
    if positions not in ("all", "last"):
        raise ValueError(f"positions must be 'all' or 'last', got {positions!r}.")
    if positions == "last":
        base, other = base[:, -1:], other[:, -1:]
    logp = F.log_softmax(base.double(), dim=-1)
    logq = F.log_softmax(other.double(), dim=-1)
    return float((logp.exp() * (logp - logq)).sum(-1).mean().clamp_min(0.0))


@dataclass(frozen=True)
class SwapKL(Record):
    """Swap-KL of every layer pair under both protocols.

    Attributes:
        replacement: ``d_repl(i, j)``, symmetric, zero diagonal.
        directed: ``KL(p_M || p_M[i<-j])`` (row ``i`` receives block ``j``).
        interchange: ``d_int(i, j)``, symmetric, zero diagonal.
        positions: "all" or "last".
    """

    replacement: tuple[tuple[float, ...], ...]
    directed: tuple[tuple[float, ...], ...]
    interchange: tuple[tuple[float, ...], ...]
    positions: str

    @property
    def n_layers(self) -> int:
        return len(self.replacement)

    def pairs(self, protocol: str) -> list[float]:
        """The upper-triangle values ``d(i, j), i < j`` of one protocol, row by row."""
        d = self.matrix(protocol)
        n = len(d)
        return [d[i][j] for i in range(n) for j in range(i + 1, n)]

    def matrix(self, protocol: str) -> tuple[tuple[float, ...], ...]:
        """The distance matrix of "replacement" or "interchange"."""
        if protocol not in ("replacement", "interchange"):
            raise ValueError(f"protocol must be 'replacement' or 'interchange', got {protocol!r}.")
        return self.replacement if protocol == "replacement" else self.interchange

    def order(self, protocol: str) -> list[int]:
        """The pruning order this protocol suggests (see :func:`pruning_order`)."""
        return pruning_order(self.matrix(protocol))

    def to_dict(self) -> dict[str, Any]:
        return {
            **super().to_dict(),
            "order_replacement": self.order("replacement"),
            "order_interchange": self.order("interchange"),
        }


def pruning_order(distances: Sequence[Sequence[float]]) -> list[int]:
    """Layers sorted by ``s(i) = min_{j != i} d(i, j)``, taken greedily, none adjacent.

    Ties keep the lower index first. The order stops when every remaining layer is
    adjacent to one already taken.
    """
    n = len(distances)
    if n < 2:
        return []
    score = [min(distances[i][j] for j in range(n) if j != i) for i in range(n)]
    chosen: list[int] = []
    for i in sorted(range(n), key=lambda k: (score[k], k)):
        if all(abs(i - c) > 1 for c in chosen):
            chosen.append(i)
    return chosen


def random_pruning_order(n_layers: int, length: int, rng: random.Random) -> list[int]:
    """``length`` distinct, pairwise non-adjacent layers of ``0..n_layers-1`` in random
    order: the placebo of a :func:`pruning_order` of that length (as the reference rule,
    never two adjacent layers)."""
    if length > (n_layers + 1) // 2:
        raise ValueError(f"{n_layers} layers hold at most {(n_layers + 1) // 2} non-adjacent.")
    while True:
        chosen: list[int] = []
        for i in rng.sample(range(n_layers), n_layers):
            if all(abs(i - c) > 1 for c in chosen):
                chosen.append(i)
            if len(chosen) == length:
                return chosen


@torch.no_grad()
def swap_kl(model: Any, tokens: torch.Tensor, *, positions: str = "all") -> SwapKL:
    """Replacement and interchange swap-KL for all pairs of blocks of ``model``.

    Args:
        model: a model with an LM head that :func:`normlab.probes.adapt` understands (or a
            :class:`~normlab.probes.ModelAdapter`).
        tokens: token ids ``(batch, tokens)``.
        positions: average KL over "all" positions or the "last" one.

    Returns:
        A :class:`SwapKL`; ``n (n - 1)`` replacement and ``n (n - 1) / 2`` interchange runs.
    """
    run = as_block_runner(model, need_lm_head=True)
    n = run.n_layers
    base = run(tokens, None)
    directed = [[0.0] * n for _ in range(n)]
    inter = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            order = list(range(n))
            order[i] = j
            directed[i][j] = kl_to_base(base, run(tokens, order), positions=positions)
            if i < j:
                order = list(range(n))
                order[i], order[j] = j, i
                inter[i][j] = inter[j][i] = kl_to_base(
                    base, run(tokens, order), positions=positions
                )
    repl = [
        [max(directed[i][j], directed[j][i]) if i != j else 0.0 for j in range(n)]
        for i in range(n)
    ]
    as_tuple = lambda m: tuple(tuple(r) for r in m)  # noqa: E731
    return SwapKL(as_tuple(repl), as_tuple(directed), as_tuple(inter), positions)


@dataclass(frozen=True)
class PruneCurve(Record):
    """KL (and loss) after removing the first ``k`` layers of an order, ``k = 0..K``.

    Attributes:
        order: the removal order.
        kl: KL to the unmodified model after removing ``k`` layers (``kl[0] = 0``).
        loss: mean next-token cross-entropy (nats) with ``k`` removed, if targets were given.
    """

    order: tuple[int, ...]
    kl: tuple[float, ...]
    loss: tuple[float, ...] = ()

    def mean_cost(self, budget: int | None = None) -> float:
        """Mean over ``k = 1..budget`` (default: every ``k`` of the curve) of the loss
        increase with ``k`` layers removed (nats; needs targets)."""
        budget = len(self.loss) - 1 if budget is None else budget
        return sum(self.loss[k] - self.loss[0] for k in range(1, budget + 1)) / budget


@torch.no_grad()
def pruning_curve(
    model: Any,
    tokens: torch.Tensor,
    order: Sequence[int],
    *,
    targets: torch.Tensor | None = None,
    positions: str = "all",
) -> PruneCurve:
    """Remove the first ``k`` layers of ``order`` for every ``k`` and measure the damage."""
    run: BlockSubsetRunner = as_block_runner(model, need_lm_head=True)
    base = run(tokens, None)
    kls, losses = [], []
    for k in range(len(order) + 1):
        drop = set(order[:k])
        logits = run(tokens, [i for i in range(run.n_layers) if i not in drop])
        kls.append(kl_to_base(base, logits, positions=positions))
        if targets is not None:
            losses.append(float(F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())))
    return PruneCurve(tuple(order), tuple(kls), tuple(losses))


def guided_pruning(
    model: Any,
    orders: Mapping[str, Sequence[int]],
    tokens: torch.Tensor,
    targets: torch.Tensor,
    *,
    random_orders: int,
    rng: random.Random,
) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """Prune ``model`` by each named order, and by ``random_orders`` random non-adjacent
    orders (the placebo), at every budget ``k = 1..K`` all the named orders reach.

    Returns ``(rows, curves)``: per name, ``removal_cost`` (the next-token loss increase on
    ``tokens``/``targets`` averaged over the budgets, :meth:`PruneCurve.mean_cost`),
    ``cost_remove_1``, ``cost_remove_max`` and ``budget``; the row ``"random"`` holds the
    placebo orders' mean ``removal_cost``; ``curves`` the :class:`PruneCurve` dicts (a list
    of them for ``"random"``).
    """
    budget = min(len(o) for o in orders.values())
    curves = {
        p: pruning_curve(model, tokens, o[:budget], targets=targets) for p, o in orders.items()
    }
    n = as_block_runner(model, need_lm_head=True).n_layers
    randoms = [
        pruning_curve(model, tokens, random_pruning_order(n, budget, rng), targets=targets)
        for _ in range(random_orders)
    ]
    rows = {
        p: {
            "removal_cost": c.mean_cost(budget),
            "cost_remove_1": c.loss[1] - c.loss[0],
            "cost_remove_max": c.loss[-1] - c.loss[0],
            "budget": float(budget),
        }
        for p, c in curves.items()
    }
    rows["random"] = {
        "removal_cost": sum(c.mean_cost(budget) for c in randoms) / max(1, len(randoms)),
        "budget": float(budget),
    }
    out: dict[str, Any] = {p: c.to_dict() for p, c in curves.items()}
    return rows, {**out, "random": [c.to_dict() for c in randoms]}
