"""Score normalizers as modules: one class, the normalizing function is its argument.

Registered here: softmax, softmax1, clipped softmax, the entropic kappa- and Abe-softmax,
the guaranteed-normalization approximate softmax, sparsemax and 1.5-entmax (always
registered; using it needs the optional ``entmax`` package, extra ``normlab[sparse]``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from normlab import functional as NF
from normlab import kernels as K
from normlab._registry import Method, get, register
from normlab.papers import paper

__all__ = ["ScoreNorm", "score_norm"]

ScoreFn = Callable[..., torch.Tensor]


class ScoreNorm(nn.Module):
    """Normalize attention scores along ``dim`` with ``fn(x, dim=dim, **kwargs)``.

    Args:
        fn: a score-normalizing function from :mod:`normlab.functional`, e.g. ``softmax1``.
        dim: axis to normalize over (the keys).
        **kwargs: the function's hyperparameters, checked against its signature now.

    Examples:
        >>> import torch
        >>> from normlab.functional import clipped_softmax, softmax1
        >>> ScoreNorm(softmax1)(torch.zeros(1, 3))
        tensor([[0.2500, 0.2500, 0.2500]])
        >>> ScoreNorm(clipped_softmax, gamma=-0.1)
        ScoreNorm(clipped_softmax, dim=-1, gamma=-0.1)
        >>> ScoreNorm(softmax1, gamma=-0.1)
        Traceback (most recent call last):
        ...
        TypeError: softmax1 does not take ['gamma']: ...
    """

    def __init__(self, fn: ScoreFn, *, dim: int = -1, **kwargs: Any) -> None:
        super().__init__()
        try:
            inspect.signature(fn).bind_partial(None, dim=dim, **kwargs)
        except TypeError as err:
            raise TypeError(f"{fn.__name__} does not take {sorted(kwargs)}: {err}") from None
        self.fn, self.dim, self.kwargs = fn, dim, kwargs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x, dim=self.dim, **self.kwargs)

    def extra_repr(self) -> str:
        extra = "".join(f", {k}={v}" for k, v in self.kwargs.items())
        return f"{self.fn.__name__}, dim={self.dim}{extra}"


def score_norm(score: str | ScoreFn | nn.Module, **kwargs: Any) -> nn.Module:
    """A score-normalizer module from a registry name, a function or a module.

    Raises:
        ValueError: when ``score`` names a registered method that is not of kind "score".

    Examples:
        >>> import torch
        >>> norm = score_norm("sparsemax")
        >>> norm(torch.tensor([[1.0, 0.8, -1.0]]))
        tensor([[0.6000, 0.4000, 0.0000]])
        >>> score_norm(norm) is norm
        True
        >>> score_norm("rmsnorm")
        Traceback (most recent call last):
        ...
        ValueError: 'rmsnorm' is a norm method, not an attention score normalizer; ...
    """
    if isinstance(score, nn.Module):
        return score
    if isinstance(score, str):
        method = get(score)
        if method.kind != "score":
            raise ValueError(
                f"{score!r} is a {method.kind} method, not an attention score normalizer; "
                "see normlab.methods('score')."
            )
        return method.create(**kwargs)
    return ScoreNorm(score, **kwargs)


def _register(name: str, fn: ScoreFn, paper_key: str, summary: str, **kw: Any) -> None:
    builder = functools.partial(ScoreNorm, fn)
    register(Method(name, "score", builder, paper(paper_key), summary, layout="scores", **kw))


_register("softmax", NF.softmax, "softmax", "exp(x_i) / sum_j exp(x_j)")
_register(
    "softmax1",
    K.softmax1,
    "softmax1",
    "exp(x_i) / (1 + sum_j exp(x_j)); leaves null mass for 'attend to nothing'",
    aliases=("softmax_one", "off_by_one"),
)
_register(
    "clipped-softmax",
    NF.clipped_softmax,
    "clipped",
    "clip((zeta - gamma) softmax(x) + gamma, 0, 1): exact zeros without extreme logits",
    aliases=("clipped",),
)
_register(
    "kappa-softmax",
    NF.kappa_softmax,
    "kappa",
    "argmax of Kaniadakis entropy + <p, x>: alpha exp_k((x - gamma)/lam), algebraic tail",
    aliases=("kappa",),
)
_register(
    "abe-softmax",
    NF.abe_softmax,
    "kappa",
    "argmax of Abe entropy (q <-> 1/q symmetric) + <p, x>; softmax at q = 1",
    aliases=("abe",),
)
_register(
    "approx-softmax",
    NF.approx_softmax,
    "guaranteed-approx",
    "softmax with 2^q (1 + f) exponent and table reciprocal; residual to argmax, sum p = 1",
)
_register(
    "sparsemax",
    NF.sparsemax,
    "sparsemax",
    "Euclidean projection onto the simplex: max(x - tau, 0), exact zeros",
)
# Registered whether or not the optional ``entmax`` package is installed, so the registry
# is the same everywhere; calling it without the package raises with the install hint.
_register(
    "entmax15",
    NF.entmax15,
    "entmax",
    "1.5-entmax: [(x/2 - tau)_+]^2, sparse and smoother than sparsemax (entmax package)",
    aliases=("entmax",),
)
