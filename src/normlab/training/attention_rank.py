"""Rank collapse in attention-only stacks, random and trained, and LayerNorm's rank arithmetic.

For "Rank Collapse Revisited: LayerNorm Affine-Rank Neutrality, Residuals and Position-Gated
Output Projections" (citing Dong et al., 2021). The collapse measure is Dong et al.'s
relative residual ``||X - 1 mean(X)|| / ||X||`` of the token matrix (:func:`rank_one_distance`:
0 when every token is the same vector, i.e. rank one) after each layer of an attention-only
stack (:class:`AttentionStack`: optional pre-LayerNorm, optional residual connection, no MLP).
:func:`stack_distances` reads it on a stack with random weights; :func:`train_stack` trains
the same kind of stack inside a small causal language model (embedding + stack + head,
recall the token two positions back) through :func:`~normlab.training.fit.fit`, and the same
quantity is then read on the trained stack's states.

:func:`ln_rank_trials` measures LayerNorm's effect on the affine rank of token sets;
:func:`pgop_trained` trains a one-block model with the plain or the position-gated output
projection (PG-OP) and returns the trained gains' identifiability.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import nn

from normlab.attention.mha import MultiheadAttention
from normlab.functional import layer_norm
from normlab.probes.rank import affine_rank, numerical_rank
from normlab.training.fit import Divergence, FitResult, fit, late_share

__all__ = [
    "AttentionStack",
    "collapse_row",
    "ln_rank_trials",
    "pgop_properties",
    "pgop_trained",
    "random_stack_curve",
    "rank_one_distance",
    "stack_distances",
    "token_set",
    "train_stack",
    "trained_layernorm",
    "trained_ln_rank",
    "trained_stack_row",
]

_TOL = 1e-9


def rank_one_distance(x: torch.Tensor) -> float:
    """``||X - 1 mean(X)|| / ||X||`` for one ``(tokens, dim)`` matrix: Dong et al.'s distance
    from rank one (0 when all tokens coincide).

    Examples:
        >>> import torch
        >>> rank_one_distance(torch.ones(4, 3)), rank_one_distance(torch.eye(2)) > 0.7
        (0.0, True)
    """
    centred = x - x.mean(0, keepdim=True)
    return float(centred.norm() / x.norm().clamp_min(1e-300))


class AttentionStack(nn.Module):
    """``depth`` multi-head attention layers, no MLP: ``x <- x + attn(LN(x))`` (``residual``,
    ``norm``), ``x <- attn(LN(x))`` (``norm`` only), and so on; LN without parameters.

    Examples:
        >>> import torch
        >>> stack = AttentionStack(8, 2, 3, residual=True, norm=True)
        >>> len(stack.states(torch.randn(1, 5, 8))), stack(torch.randn(2, 5, 8)).shape
        (3, torch.Size([2, 5, 8]))
    """

    def __init__(
        self, dim: int, heads: int, depth: int, *, residual: bool, norm: bool, causal: bool = False
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            MultiheadAttention(dim, heads, bias=False, causal=causal) for _ in range(depth)
        )
        self.residual, self.norm, self.dim = residual, norm, dim

    def states(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The token states after each layer."""
        out = []
        for attn in self.layers:
            h = layer_norm(x, (self.dim,)) if self.norm else x
            x = x + attn(h) if self.residual else attn(h)
            out.append(x)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.states(x)[-1]


@torch.no_grad()
def stack_distances(stack: AttentionStack, x: torch.Tensor) -> list[float]:
    """:func:`rank_one_distance` of the first sequence of ``x`` after each layer of ``stack``.

    Examples:
        >>> _ = torch.manual_seed(0)
        >>> stack = AttentionStack(8, 2, 4, residual=False, norm=False)
        >>> d = stack_distances(stack, torch.randn(1, 6, 8))
        >>> len(d), d[-1] < 1e-3 < d[0]  # attention alone collapses the tokens to rank one
        (4, True)
    """
    return [rank_one_distance(h[0]) for h in stack.states(x)]


def train_stack(
    config: Mapping[str, int | float], seed: int, *, residual: bool, norm: bool = True
) -> tuple[AttentionStack, nn.Embedding, FitResult]:
    """Train a causal :class:`AttentionStack` (``config``: ``dim``, ``heads``, ``depth``,
    ``tokens``, ``train_steps``, ``train_lr``) inside ``embed -> stack -> LN -> head`` to
    predict the token two positions back (vocabulary 16, batches of 16 uniform sequences),
    Adam at ``train_lr``. Returns the stack, the embedding and the fit result, whose
    ``losses`` are the training curve (uniform prediction: ``log 16``).

    Examples:
        >>> config = {"dim": 8, "heads": 2, "depth": 2, "tokens": 6, "train_steps": 5,
        ...           "train_lr": 1e-2}
        >>> stack, embed, result = train_stack(config, 0, residual=True)
        >>> len(stack.layers), len(result.losses), abs(result.losses[0] - math.log(16)) < 1
        (2, 5, True)
    """
    d, n, vocab = int(config["dim"]), int(config["tokens"]), 16
    torch.manual_seed(seed)
    embed = nn.Embedding(vocab, d)
    stack = AttentionStack(
        d, int(config["heads"]), int(config["depth"]), residual=residual, norm=norm, causal=True
    )
    head = nn.Linear(d, vocab)
    g = torch.Generator().manual_seed(seed)

    def loss_fn(_: nn.Module, idx: torch.Tensor) -> torch.Tensor:
        logits = head(layer_norm(stack(embed(idx)), (d,)))
        return nn.functional.cross_entropy(logits[:, 2:].flatten(0, 1), idx[:, :-2].flatten())

    modules = nn.ModuleList([embed, stack, head])
    result = fit(
        modules,
        loss_fn,
        lambda step: torch.randint(0, vocab, (16, n), generator=g),
        int(config["train_steps"]),
        torch.optim.Adam(modules.parameters(), lr=float(config["train_lr"])),
    )
    return stack.eval(), embed, result


def token_set(n: int, d: int, r: int, g: torch.Generator, *, offset: bool = True) -> torch.Tensor:
    """``n`` float64 tokens of affine rank ``r`` (``A B`` plus, with ``offset``, a random
    shift, so the hull misses the origin).

    Examples:
        >>> x = token_set(6, 10, 2, torch.Generator().manual_seed(0))
        >>> x.shape, x.dtype, int(affine_rank(x, rtol=1e-9))
        (torch.Size([6, 10]), torch.float64, 2)
    """
    a = torch.randn(n, r, generator=g, dtype=torch.float64)
    b = torch.randn(r, d, generator=g, dtype=torch.float64)
    shift = 3 * torch.randn(1, d, generator=g, dtype=torch.float64) if offset else 0.0
    return shift + a @ b


def ln_rank_trials(
    n: int,
    d: int,
    trials: int,
    g: torch.Generator,
    affine: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, list[int]]:
    """Affine/matrix rank changes ``rank(LN(X)) - rank(X)`` (eps 0, SVD tolerance 1e-9)
    over random token sets.

    Keys: ``general`` (affine rank, ``n - 1`` points in general position), ``low`` (planted
    affine rank ``r < n/2``, hull off the origin), ``through_origin`` (planted rank ``r``,
    centred hull through the origin), ``matrix_zero_bias`` (matrix rank, LN without bias, on
    the low-rank sets). ``affine`` fixes LN's ``(weight, bias)``; otherwise each trial draws
    a random positive weight and a random bias.

    Why ``low`` reads +1 (against the paper's "precisely affine-rank-neutral"): LN centres
    each token (a linear projection ``P``, so the points stay in the ``r``-dimensional affine
    subspace ``Pm + span(PB)`` for ``X = m + A B``) and then divides each by its own standard
    deviation; scaling each point by a different scalar maps an affine subspace that misses
    the origin onto the ``(r + 1)``-dimensional linear span ``span(Pm, PB)``. When the
    centred hull passes through the origin (``Pm in span(PB)``) the rank is kept
    (``through_origin``), and points in general position have no room to gain one.

    Examples:
        >>> import torch
        >>> t = ln_rank_trials(6, 12, 2, torch.Generator().manual_seed(0))
        >>> t["general"], t["low"]  # LN adds one dimension to low-rank sets off the origin
        ([0, 0], [1, 1])
    """

    def ln(x: torch.Tensor, bias: bool) -> torch.Tensor:
        if affine is not None:
            w, b = affine
        else:
            w = torch.rand(d, generator=g, dtype=x.dtype) + 0.5
            b = torch.randn(d, generator=g, dtype=x.dtype)
        return layer_norm(x, (d,), w, b if bias else None, eps=0.0)

    def arank(x: torch.Tensor) -> int:
        return int(affine_rank(x, rtol=_TOL))

    out: dict[str, list[int]] = {
        k: [] for k in ("general", "low", "through_origin", "matrix_zero_bias")
    }
    for _ in range(trials):
        x = token_set(n, d, n - 1, g)
        out["general"].append(arank(ln(x, True)) - arank(x))
        r = int(torch.randint(1, max(n // 2, 2), (1,), generator=g))
        x = token_set(n, d, r, g)
        out["low"].append(arank(ln(x, True)) - arank(x))
        rank = int(numerical_rank(ln(x, False), rtol=_TOL)) - int(numerical_rank(x, rtol=_TOL))
        out["matrix_zero_bias"].append(rank)
        x0 = token_set(n, d, r, g, offset=False)  # a linear subspace: P x stays in it
        out["through_origin"].append(arank(ln(x0, True)) - arank(x0))
    return out


def pgop_trained(
    config: Mapping[str, int], seed: int, gated: bool
) -> tuple[dict[str, float], Divergence | None]:
    """Train a one-block causal attention model (plain or PG-OP output projection) to
    recall the token two positions back; its gate identifiability and final loss (mean of
    the last tenth of the steps), and the divergence, if any.

    Both arms start from the same weights (PG-OP's gates at 0 make it the plain projection
    at initialisation), see the same batches and use the same optimizer (Adam 1e-2).

    Examples:
        >>> config = {"dim": 8, "tokens": 6, "heads": 2, "pgop_steps": 5}
        >>> plain, _ = pgop_trained(config, 0, gated=False)
        >>> gated, diverged = pgop_trained(config, 0, gated=True)
        >>> plain["gate_identifiability"] < 1e-9 < gated["gate_identifiability"], diverged
        (True, None)
    """
    from normlab.attention.pgop import PositionGatedOutput, gate_identifiability

    d, n, heads, vocab = config["dim"], config["tokens"], config["heads"], 16
    torch.manual_seed(seed)
    embed, pos = nn.Embedding(vocab, d), nn.Parameter(0.1 * torch.randn(n, d))
    norm, head = nn.LayerNorm(d), nn.Linear(d, vocab)
    attn = MultiheadAttention(d, heads, causal=True)
    if gated:
        out = PositionGatedOutput(d, heads, n)
        with torch.no_grad():
            out.proj.load_state_dict(attn.out.state_dict())
        attn.out = out
    params = [*embed.parameters(), pos, *norm.parameters(), *attn.parameters()]
    opt = torch.optim.Adam([*params, *head.parameters()], lr=1e-2)
    g = torch.Generator().manual_seed(seed)

    def loss_fn(_: nn.Module, idx: torch.Tensor) -> torch.Tensor:
        h = embed(idx) + pos
        logits = head(h + attn(norm(h)))
        return nn.functional.cross_entropy(logits[:, 2:].flatten(0, 1), idx[:, :-2].flatten())

    result = fit(
        nn.ModuleList([embed, norm, attn, head]),
        loss_fn,
        lambda step: torch.randint(0, vocab, (16, n), generator=g),
        config.get("pgop_steps", 150),
        opt,
    )
    losses = result.losses or [math.nan]
    gains = attn.out.gains(n) if gated else torch.ones(n, heads)
    tail = losses[-max(1, len(losses) // 10) :]
    row = {"gate_identifiability": gate_identifiability(gains), "loss": sum(tail) / len(tail)}
    return row, result.diverged


def trained_layernorm(
    config: Mapping[str, int],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A pre-LN attention block trained briefly (``train_steps``, default 60, Adam 1e-2) to
    predict the previous token: its LayerNorm's (weight, bias) and the embedded token states
    of one fresh sequence (float64), for LN's rank arithmetic at trained parameters.

    Examples:
        >>> w, b, states = trained_layernorm({"dim": 8, "tokens": 6, "heads": 2, "train_steps": 3})
        >>> w.shape, states.shape, states.dtype, float((w - 1).abs().max()) > 0  # trained
        (torch.Size([8]), torch.Size([6, 8]), torch.float64, True)
    """
    d, n = config["dim"], config["tokens"]
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    embed, norm = nn.Embedding(32, d), nn.LayerNorm(d)
    attn, head = MultiheadAttention(d, config["heads"], causal=True), nn.Linear(d, 32)
    params = [*embed.parameters(), *norm.parameters(), *attn.parameters(), *head.parameters()]

    def loss_fn(_: nn.Module, idx: torch.Tensor) -> torch.Tensor:
        h = embed(idx)
        logits = head(h + attn(norm(h)))
        return nn.functional.cross_entropy(logits[:, 1:].flatten(0, 1), idx[:, :-1].flatten())

    fit(
        nn.ModuleList([embed, norm, attn, head]),
        loss_fn,
        lambda step: torch.randint(0, 32, (16, n), generator=g),
        config.get("train_steps", 60),
        torch.optim.Adam(params, lr=1e-2),
    )
    with torch.no_grad():
        states = embed(torch.randint(0, 32, (1, n), generator=g))[0].double()
    return norm.weight.detach().double(), norm.bias.detach().double(), states


def trained_ln_rank(config: Mapping[str, int]) -> dict[str, float]:
    """LN's rank arithmetic at a trained LayerNorm's gain and bias (:func:`trained_layernorm`):
    ``moved`` (``max |w - 1| + max |b|``), ``states_kept`` (1.0 when LN keeps the affine rank
    of the model's own token states), ``general_changed`` (general-position sets whose rank
    changed) and ``low_plus_one`` / ``low_trials`` (low-rank sets off the origin that gained
    one dimension), over ``max(trials // 4, 3)`` sets of :func:`ln_rank_trials`.

    Examples:
        >>> config = {"dim": 8, "tokens": 6, "heads": 2, "train_steps": 3, "trials": 4}
        >>> row = trained_ln_rank(config)
        >>> row["states_kept"], row["general_changed"], row["low_plus_one"], row["low_trials"]
        (1.0, 0.0, 3.0, 3.0)
    """
    w, b, states = trained_layernorm(config)
    n_sets = max(config["trials"] // 4, 3)
    g = torch.Generator().manual_seed(1)
    trials = ln_rank_trials(config["tokens"], config["dim"], n_sets, g, affine=(w, b))
    normed = layer_norm(states, (states.shape[-1],), w, b, eps=0.0)
    kept = int(affine_rank(normed, rtol=_TOL)) == int(affine_rank(states, rtol=_TOL))
    return {
        "moved": float((w - 1).abs().max() + b.abs().max()),
        "states_kept": float(kept),
        "general_changed": float(sum(v != 0 for v in trials["general"])),
        "low_plus_one": float(sum(v == 1 for v in trials["low"])),
        "low_trials": float(len(trials["low"])),
    }


def pgop_properties(config: Mapping[str, int]) -> dict[str, float]:
    """PG-OP's construction: ``same`` (1.0 when at initialisation it equals the plain output
    projection), ``overhead`` at BERT-base (768 wide, 12 heads, 512 positions), and the gate
    identifiability of its gains at initialisation (``plain``) and with random gates
    (``gated``).

    Examples:
        >>> p = pgop_properties({"dim": 8, "heads": 2, "tokens": 4})
        >>> p["same"], p["plain"], p["gated"] > 0, round(p["overhead"], 4)
        (1.0, 0.0, True, 0.0104)
    """
    from normlab.attention.pgop import PositionGatedOutput, gate_identifiability

    torch.manual_seed(0)
    d, heads, n = config["dim"], config["heads"], config["tokens"]
    pgop = PositionGatedOutput(d, heads, n).double()
    x = torch.randn(2, n, d, dtype=torch.float64)
    same = torch.equal(pgop(x), pgop.proj(x))
    plain = gate_identifiability(pgop.gains(n))
    with torch.no_grad():
        pgop.gate.normal_(std=0.1)
    return {
        "same": float(same),
        "overhead": PositionGatedOutput(768, 12, 512).overhead,
        "plain": plain,
        "gated": gate_identifiability(pgop.gains(n)),
    }


def collapse_row(curve: list[float]) -> dict[str, float]:
    """``residual_last`` (the distance from rank one after the last layer) and
    ``log10_drop`` (decades lost from the first layer to the last) of a
    :func:`stack_distances` curve.

    Examples:
        >>> collapse_row([1.0, 0.1, 0.01])
        {'residual_last': 0.01, 'log10_drop': 2.0}
    """
    return {
        "residual_last": curve[-1],
        "log10_drop": math.log10(curve[0] / max(curve[-1], 1e-300)),
    }


def random_stack_curve(config: Mapping[str, int], seed: int, *, residual: bool, norm: bool):
    """:func:`stack_distances` of a float64 :class:`AttentionStack` with random weights
    (``config``: ``tokens``, ``dim``, ``heads``, ``depth``; torch's default init drawn after
    ``torch.manual_seed(seed)``) on one Gaussian token sequence drawn after it.

    Examples:
        >>> config = {"tokens": 8, "dim": 16, "heads": 2, "depth": 6}
        >>> plain = random_stack_curve(config, 0, residual=False, norm=False)
        >>> pre_ln = random_stack_curve(config, 0, residual=True, norm=True)
        >>> len(plain), plain[-1] < 1e-9, pre_ln[-1] > 0.5  # the residual keeps the rank
        (6, True, True)
    """
    n, d = config["tokens"], config["dim"]
    torch.manual_seed(seed)
    stack = AttentionStack(d, config["heads"], config["depth"], residual=residual, norm=norm)
    return stack_distances(stack.double(), torch.randn(1, n, d, dtype=torch.float64))


def trained_stack_row(
    config: Mapping[str, int | float], seed: int, *, residual: bool
) -> tuple[dict[str, float], list[float], Divergence | None]:
    """:func:`train_stack` (``stack_steps`` Adam steps at ``stack_lr``), then the trained
    stack's :func:`stack_distances` on one fresh token sequence (drawn by ``seed + 1``).
    Row: :func:`collapse_row`, ``loss`` (mean of the last tenth of the training losses) and
    ``late_share`` (:func:`~normlab.training.fit.late_share` of the training curve).

    Examples:
        >>> config = {"dim": 8, "heads": 2, "depth": 2, "tokens": 6, "stack_steps": 5,
        ...           "stack_lr": 1e-2}
        >>> row, curve, diverged = trained_stack_row(config, 0, residual=False)
        >>> sorted(row), len(curve), row["residual_last"] == curve[-1], diverged
        (['late_share', 'log10_drop', 'loss', 'residual_last'], 2, True, None)
    """
    train = {"train_steps": config["stack_steps"], "train_lr": config["stack_lr"]}
    stack, embed, result = train_stack({**config, **train}, seed, residual=residual)
    g = torch.Generator().manual_seed(seed + 1)
    probe = torch.randint(0, 16, (1, int(config["tokens"])), generator=g)
    with torch.no_grad():
        curve = stack_distances(stack, embed(probe))
    losses = result.losses or [math.nan]
    tail = losses[-max(1, len(losses) // 10) :]
    row = collapse_row(curve) | {"loss": sum(tail) / len(tail), "late_share": late_share(losses)}
    return row, curve, result.diverged
