"""Attention score normalizers: softmax, softmax1 (off-by-one) and clipped softmax."""

from __future__ import annotations

import torch

from normlab._checks import check_float
from normlab.functional._precision import upcast

__all__ = ["clipped_softmax", "null_mass", "softmax", "softmax1"]


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``exp(x_i) / sum_j exp(x_j)``, computed in float32 for half inputs.

    ``torch.softmax`` except on a row masked entirely with ``-inf``: normlab's softmax
    returns zeros there ("attend to nothing"), with zero gradients, where torch returns
    NaN. Every score normalizer in normlab does the same (softmax1, clipped softmax,
    sparsemax, 1.5-entmax, kappa- and Abe softmax, approximate softmax). Rows holding NaN
    still give NaN.

    Examples:
        >>> import torch
        >>> x = torch.tensor([[1.0, 2.0, float("-inf")], [float("-inf")] * 3])
        >>> softmax(x)
        tensor([[0.2689, 0.7311, 0.0000],
                [0.0000, 0.0000, 0.0000]])
        >>> torch.softmax(x, -1)[1].isnan().all().item()  # torch's softmax gives NaN
        True
    """
    check_float(x)
    xf = upcast(x)
    if xf.numel() == 0:
        return torch.softmax(xf, dim=dim).to(x.dtype)
    dead = torch.isneginf(xf.amax(dim=dim, keepdim=True))
    if not bool(dead.any()):
        return torch.softmax(xf, dim=dim).to(x.dtype)
    # a finite stand-in for a dead row keeps NaN out of the forward and the backward pass
    p = torch.softmax(xf.masked_fill(dead, 0.0), dim=dim)
    return p.masked_fill(dead, 0.0).to(x.dtype)


def softmax1(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    r"""Off-by-one softmax: ``exp(x_i) / (1 + sum_j exp(x_j))`` (Miller, 2023).

    $$p_i = \frac{e^{x_i}}{1 + \sum_j e^{x_j}}$$

    An implicit extra logit fixed at 0 lets a head put weight on "nothing"; the mass left
    over, ``1 - sum_i p_i`` (:func:`null_mass`), is the null evidence OASIS routes on. The
    stable form shifts the implicit 1 as well: with ``m = max(0, max_j x_j)``,
    ``p_i = exp(x_i - m) / (exp(-m) + sum_j exp(x_j - m))``, which equals
    ``softmax([0, x])[1:]``. A row masked entirely with ``-inf`` gives zeros, not NaN.

    Examples:
        >>> import torch
        >>> p = softmax1(torch.zeros(1, 3))
        >>> p, null_mass(p)
        (tensor([[0.2500, 0.2500, 0.2500]]), tensor([0.2500]))
        >>> x = torch.tensor([3.0, -1.0, 100.0])
        >>> torch.allclose(softmax1(x), torch.softmax(torch.cat([torch.zeros(1), x]), 0)[1:])
        True
    """
    check_float(x)
    xf = upcast(x)
    m = xf.amax(dim=dim, keepdim=True).clamp_min(0.0)
    e = torch.exp(xf - m)
    return (e / (torch.exp(-m) + e.sum(dim=dim, keepdim=True))).to(x.dtype)


def null_mass(p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``max(0, 1 - sum p)`` along ``dim``: the weight a score normalizer gave to nothing.

    Examples:
        >>> import torch
        >>> null_mass(torch.tensor([[0.25, 0.25], [0.5, 0.5]]))
        tensor([0.5000, 0.0000])
    """
    return (1.0 - upcast(p).sum(dim=dim)).clamp_min(0.0)


def clipped_softmax(
    x: torch.Tensor, dim: int = -1, gamma: float = -0.025, zeta: float = 1.0
) -> torch.Tensor:
    """Clipped softmax: ``clip((zeta - gamma) * softmax(x) + gamma, 0, 1)``.

    Bondarenko et al. (2023): stretching the softmax range below 0 (``gamma < 0``) lets a
    head assign exact zeros without pushing logits to extremes, which removes the outliers
    heads create to "do nothing". Defaults are the BERT setting (``gamma = -0.025``,
    ``zeta = 1``); OPT uses ``gamma = -12 / T``. Rows need not sum to 1. A row masked
    entirely with ``-inf`` gives zeros (attend to nothing), like every normlab score
    normalizer (``torch.softmax`` gives NaN there).

    Examples:
        >>> import torch
        >>> x = torch.tensor([[0.0, 0.0, -10.0]])
        >>> clipped_softmax(x)  # an exact zero where softmax gives 4.5e-5
        tensor([[0.4875, 0.4875, 0.0000]])
        >>> clipped_softmax(x, gamma=0.0).tolist() == torch.softmax(x, -1).tolist()
        True
    """
    check_float(x)
    if not zeta > gamma:
        raise ValueError(f"clipped_softmax needs zeta > gamma, got zeta={zeta}, gamma={gamma}.")
    xf = upcast(x)
    if xf.numel() == 0:
        return xf.clone().to(x.dtype)
    dead = torch.isneginf(xf).all(dim=dim, keepdim=True)
    # a finite stand-in for a dead row keeps NaN out of the forward and the backward pass
    p = torch.softmax(xf.masked_fill(dead, 0.0), dim=dim)
    out = ((zeta - gamma) * p + gamma).clamp(0.0, 1.0)
    return out.masked_fill(dead, 0.0).to(x.dtype)
