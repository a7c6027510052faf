"""nGPT hypersphere normalization: unit-norm states, unit-norm weights, normalized residuals.

Loshchilov et al. (2024) keep every hidden state and every weight row on the unit sphere;
the seed "nGPT Is Inherently Robust to NVFP4 Training" attributes nGPT's 4-bit robustness
to this constraint. The pieces here build such a model, up to nGPT's block
(:class:`NGPTBlock`): ``h <- norm(h + alpha_A (norm(Attn(h)) - h))``, then
``h <- norm(h + alpha_M (norm(MLP(h)) - h))``, with the gated MLP :class:`NGPTMLP`
``W_o (u * silu(v))``, ``u = s_u W_u h``, ``v = s_v sqrt(d) W_v h``, and every weight matrix
unit-norm along the model dimension (renormalized after each step). The attention, with
unit-norm queries/keys scaled by ``s_qk`` and a softmax scale ``sqrt(d_head)``, is passed in
(:class:`normlab.attention.MultiheadAttention` with ``normalized=True, qk_norm="l2"``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from normlab import functional as NF
from normlab._checks import check_trailing_shape
from normlab._registry import Method, register
from normlab.papers import paper

__all__ = [
    "NGPTMLP",
    "HypersphereNorm",
    "HypersphereResidual",
    "LearnedScale",
    "NGPTBlock",
    "NormalizedLinear",
    "renormalize_weights_",
    "unit_rows_",
]


class HypersphereNorm(nn.Module):
    """Project each feature vector onto the unit sphere: ``x / ||x||`` (no parameters).

    Args:
        dim: feature size of the last dimension (checked on input).
        eps: floor on the norm so an all-zero vector stays zero.

    Examples:
        >>> import torch
        >>> HypersphereNorm(4)(torch.tensor([[3.0, 4.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
        tensor([[0.6000, 0.8000, 0.0000, 0.0000],
                [0.0000, 0.0000, 0.0000, 0.0000]])
    """

    def __init__(self, dim: int, *, eps: float = 1e-12) -> None:
        super().__init__()
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}.")
        self.dim = dim
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_trailing_shape(x, (self.dim,))
        return NF.l2_normalize(x, dim=-1, eps=self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class LearnedScale(nn.Module):
    """A per-channel scale stored at a different magnitude than it acts: nGPT's trick.

    The parameter is initialised to ``scale`` and used as ``param * (init / scale)``, so the
    effective value starts at ``init`` while the optimizer sees a parameter of size
    ``scale``, which sets its effective learning rate (nGPT uses ``scale = 1/sqrt(d)``).

    Args:
        size: number of channels.
        init: initial effective value.
        scale: magnitude at which the parameter is stored.

    Examples:
        >>> s = LearnedScale(4, init=0.05, scale=0.5)
        >>> s.param.tolist(), [round(v, 4) for v in s().tolist()]
        ([0.5, 0.5, 0.5, 0.5], [0.05, 0.05, 0.05, 0.05])
    """

    def __init__(
        self,
        size: int,
        *,
        init: float,
        scale: float,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if scale <= 0:
            raise ValueError(f"scale must be positive, got {scale}.")
        self.init, self.scale = float(init), float(scale)
        self.param = nn.Parameter(torch.empty(size, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.param, self.scale)

    def forward(self) -> torch.Tensor:
        return self.param * (self.init / self.scale)

    def extra_repr(self) -> str:
        return f"{self.param.numel()}, init={self.init}, scale={self.scale:.4g}"


class HypersphereResidual(nn.Module):
    """nGPT's normalized residual update with a learned per-channel step size.

    ``h <- norm(h + alpha * (norm(block(h)) - h))``: a step along the sphere from ``h``
    toward the block's output, of learned length ``alpha`` (init 0.05, stored at
    ``1/sqrt(dim)``).

    Args:
        dim: feature size.
        alpha_init: initial step size.
        alpha_scale: storage magnitude of ``alpha``; ``None`` for ``1/sqrt(dim)``.

    Examples:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> res = HypersphereResidual(8)
        >>> h = torch.nn.functional.normalize(torch.randn(3, 8), dim=-1)
        >>> out = res(h, torch.randn(3, 8))
        >>> torch.allclose(out.norm(dim=-1), torch.ones(3)), bool((out * h).sum(-1).min() > 0.9)
        (True, True)
    """

    def __init__(
        self,
        dim: int,
        *,
        alpha_init: float = 0.05,
        alpha_scale: float | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.dim = dim
        scale = 1.0 / math.sqrt(dim) if alpha_scale is None else alpha_scale
        self.alpha = LearnedScale(dim, init=alpha_init, scale=scale, device=device, dtype=dtype)

    def forward(self, h: torch.Tensor, block_out: torch.Tensor) -> torch.Tensor:
        check_trailing_shape(h, (self.dim,))
        step = self.alpha().abs()
        return NF.l2_normalize(h + step * (NF.l2_normalize(block_out) - h))


class NormalizedLinear(nn.Linear):
    """A bias-free linear layer whose weight vectors live on the unit sphere.

    ``norm_dim="in"`` keeps each row (one output's weights over the inputs) at unit norm,
    the nGPT rule for matrices that read the model dimension; ``norm_dim="out"`` keeps each
    column at unit norm, for matrices that write it. Call :meth:`renormalize_` (or
    :func:`renormalize_weights_` on the model) after every optimizer step.

    Examples:
        >>> import torch
        >>> lin = NormalizedLinear(8, 4)
        >>> torch.allclose(lin.weight.norm(dim=1), torch.ones(4))  # rows: "in"
        True
        >>> with torch.no_grad():
        ...     _ = lin.weight.mul_(3.0)
        >>> lin.renormalize_()
        >>> torch.allclose(lin.weight.norm(dim=1), torch.ones(4))
        True
        >>> out = NormalizedLinear(4, 8, norm_dim="out")
        >>> torch.allclose(out.weight.norm(dim=0), torch.ones(4))  # columns: "out"
        True
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        norm_dim: str = "in",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if norm_dim not in ("in", "out"):
            raise ValueError(f"norm_dim must be 'in' or 'out', got {norm_dim!r}.")
        self.norm_dim = norm_dim
        super().__init__(in_features, out_features, bias=False, device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.renormalize_()

    @torch.no_grad()
    def renormalize_(self) -> None:
        """Put the weight vectors back on the unit sphere, in place."""
        dim = 1 if self.norm_dim == "in" else 0
        self.weight.copy_(NF.l2_normalize(self.weight, dim=dim))

    def extra_repr(self) -> str:
        return super().extra_repr() + f", norm_dim={self.norm_dim!r}"


def renormalize_weights_(model: nn.Module) -> int:
    """Call ``renormalize_`` on every :class:`NormalizedLinear` in ``model``; return the count.

    Examples:
        >>> import torch
        >>> model = torch.nn.Sequential(NormalizedLinear(8, 8), NormalizedLinear(8, 2))
        >>> with torch.no_grad():
        ...     _ = model[1].weight.add_(1.0)
        >>> renormalize_weights_(model)
        2
        >>> torch.allclose(model[1].weight.norm(dim=1), torch.ones(2))
        True
    """
    layers = [m for m in model.modules() if isinstance(m, NormalizedLinear)]
    for layer in layers:
        layer.renormalize_()
    return len(layers)


def unit_rows_(weight: torch.Tensor) -> None:
    """Normalize the rows of an embedding table in place (nGPT's embedding constraint).

    Examples:
        >>> import torch
        >>> emb = torch.nn.Embedding(5, 3)
        >>> unit_rows_(emb.weight)
        >>> torch.allclose(emb.weight.norm(dim=-1), torch.ones(5))
        True
    """
    with torch.no_grad():
        weight.copy_(NF.l2_normalize(weight, dim=-1))


class NGPTMLP(nn.Module):
    """nGPT's gated MLP ``W_o (u * silu(v))``, ``u = s_u W_u h``, ``v = s_v sqrt(d) W_v h``.

    Args:
        dim: model width.
        hidden: width of ``u`` and ``v``.

    Examples:
        >>> import torch
        >>> mlp = NGPTMLP(8, 16)
        >>> mlp(torch.randn(2, 3, 8)).shape
        torch.Size([2, 3, 8])
        >>> mlp.up.weight.shape  # u and v, stacked
        torch.Size([32, 8])
    """

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.dim = dim
        self.up = NormalizedLinear(dim, 2 * hidden, norm_dim="in")
        self.down = NormalizedLinear(hidden, dim, norm_dim="out")
        self.s_uv = LearnedScale(2 * hidden, init=1.0, scale=1.0)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        uv = self.up(h) * self.s_uv()
        u, v = uv.chunk(2, dim=-1)
        return self.down(u * F.silu(v * math.sqrt(self.dim)))


class NGPTBlock(nn.Module):
    """One nGPT block on the unit sphere; ``forward(h) -> (h, probs)``.

    ``h <- norm(h + alpha_A (norm(attn(h)) - h))``, ``h <- norm(h + alpha_M (norm(MLP(h)) - h))``
    (Loshchilov et al., 2024; ``paper("ngpt-fp4")``).

    Args:
        dim: model width.
        attn: the attention, a module ``attn(h, return_probs=...)`` returning the output (and
            the probabilities when asked), e.g. :class:`normlab.attention.MultiheadAttention`
            built with ``normalized=True, qk_norm="l2"``.
        hidden: MLP width.

    Examples:
        >>> import torch
        >>> from normlab.attention import MultiheadAttention
        >>> attn = MultiheadAttention(8, 2, normalized=True, qk_norm="l2", scale=2.0)
        >>> block = NGPTBlock(8, attn=attn, hidden=16)
        >>> h = torch.nn.functional.normalize(torch.randn(2, 5, 8), dim=-1)
        >>> out, probs = block(h, return_probs=True)
        >>> out.shape, probs.shape
        (torch.Size([2, 5, 8]), torch.Size([2, 2, 5, 5]))
        >>> torch.allclose(out.norm(dim=-1), torch.ones(2, 5))  # still on the sphere
        True
    """

    def __init__(self, dim: int, *, attn: nn.Module, hidden: int) -> None:
        super().__init__()
        self.attn = attn
        self.mlp = NGPTMLP(dim, hidden)
        self.res_attn = HypersphereResidual(dim)
        self.res_mlp = HypersphereResidual(dim)

    def forward(
        self, h: torch.Tensor, *, return_probs: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        out = self.attn(h, return_probs=return_probs)
        a, probs = out if return_probs else (out, None)
        h = self.res_attn(h, a)
        h = self.res_mlp(h, self.mlp(h))
        return h, probs


register(
    Method(
        "hypersphere",
        "norm",
        HypersphereNorm,
        paper("ngpt-fp4"),
        "x / ||x||: nGPT's projection of hidden states onto the unit sphere",
        aliases=("l2norm", "ngpt"),
    )
)
