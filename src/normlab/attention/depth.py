"""Depth-wise attention residuals (AttnRes) and OASIS's inter-layer null signal.

A plain residual stream gives sublayer ``l`` the sum of everything before it,
``h_l = v_0 + v_1 + ... + v_{l-1}``. An attention residual replaces the sum by a learned,
normalized mix over depth (Kimi Team, "Attention Residuals"):

``h_l = sum_{i<l} a_{i->l} v_i``,  ``a_{i->l} = softmax_i(w_l . RMSNorm(v_i))``

with ``v_0`` the embedding output, ``v_i`` the raw outputs of the earlier sublayers, and one
learned, input-independent query ``w_l`` per sublayer, initialised to 0 (uniform mixing).
The keys are RMS-normalized without an affine weight (a per-channel weight would only
rescale ``w_l``) and there is no ``1/sqrt(d)``. The mix is computed per token (in float32
for half-precision inputs).

OASIS (outlier- and sink-aware inter-layer null signaling) makes token attention use
Softmax1, whose left-over mass ``1 - sum_j p_j`` is the head's evidence for "nothing to
add", pools it over heads into a per-token layer signal ``psi`` (:func:`null_signal`) and
couples it into the depth logits as in the public OASIS router:

``g_i = w_l . RMSNorm(v_i) - beta (psi_i - mean_r psi_r)``,  ``beta = min(softplus(b), 10)``

with ``b`` initialised to -5 (``beta ~ 0.007``: a near no-op at the start), ``psi_i`` the
signal of the layer that wrote ``v_i`` (both sublayers of a layer share it; the embedding
has ``psi = 0``), and the logits clamped to [-50, 50]. A layer whose heads mostly attended
to nothing (a sink-dominated layer) is routed less.

Choices, normlab's and deliberate: (1) the router is Kimi's static query over RMS-normed
keys for both AttnRes and OASIS, not OASIS's input-dependent low-rank query with a recency
bias, so that the OASIS-vs-AttnRes comparison isolates Softmax1 and the null coupling;
(2) the null evidence enters as a centred penalty on each source's logit rather than as an
extra "null slot" in the depth softmax. A null slot only takes mass from every source
alike, shrinking ``h_l`` toward 0, and the sublayer's pre-norm undoes that shrinkage; the
centred penalty redistributes mass away from the sink-dominated sources specifically and is
unchanged when all layers' null mass rises together.

:class:`DepthBlock` is a pre-norm transformer block whose two sublayers read such mixes
instead of the residual sum; with ``null_coupling`` (OASIS) it also emits the layer's null
signal from its attention. Its norms, attention and MLP are passed in.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from normlab import functional as NF
from normlab.functional._precision import upcast

__all__ = ["AttnResidual", "DepthBlock", "null_signal"]

#: Upper bound on the null-coupling strength ``beta`` (OASIS's public code).
BETA_MAX = 10.0
#: Logit clamp of the depth softmax.
LOGIT_CLAMP = 50.0


def null_signal(probs: torch.Tensor) -> torch.Tensor:
    """Per-token null mass pooled over heads: ``psi = mean_h max(0, 1 - sum_j p_hj)``.

    Args:
        probs: attention probabilities ``(batch, heads, queries, keys)``; rows of a
            Softmax1 head sum to at most 1.

    Returns:
        ``(batch, queries)``; 0 for a plain softmax.
    """
    if probs.dim() != 4:
        raise ValueError(
            f"null_signal expects probabilities (batch, heads, queries, keys), got shape "
            f"{tuple(probs.shape)}."
        )
    return NF.null_mass(probs, dim=-1).mean(dim=1)


class AttnResidual(nn.Module):
    """A sublayer's input as a learned softmax mix over the outputs of all earlier sublayers.

    ``h = sum_i softmax_i(w . RMSNorm(v_i) - beta (psi_i - mean psi)) v_i``; the null term
    only with ``null_coupling=True`` (OASIS). See the module docstring for the forms.

    Args:
        dim: feature size of the values.
        null_coupling: subtract the centred inter-layer null signal (OASIS).
        beta_init: initial raw coupling ``b`` in ``beta = min(softplus(b), 10)``.
        eps: RMSNorm epsilon on the keys.
    """

    def __init__(
        self,
        dim: int,
        *,
        null_coupling: bool = False,
        beta_init: float = -5.0,
        eps: float = 1e-6,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.dim, self.null_coupling, self.eps = dim, null_coupling, eps
        self.beta_init = float(beta_init)
        self.query = nn.Parameter(torch.empty(dim, **factory))
        if null_coupling:
            self.beta_raw = nn.Parameter(torch.empty((), **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.query)
        if self.null_coupling:
            nn.init.constant_(self.beta_raw, self.beta_init)

    def beta(self) -> torch.Tensor:
        """The coupling strength ``min(softplus(b), 10)`` (0 without coupling)."""
        if not self.null_coupling:
            return torch.zeros((), device=self.query.device)
        return F.softplus(upcast(self.beta_raw)).clamp(max=BETA_MAX)

    def weights(
        self, values: Sequence[torch.Tensor], nulls: Sequence[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Depth weights ``a_i`` of shape ``(len(values), *values[0].shape[:-1])``."""
        if not values:
            raise ValueError("AttnResidual needs at least one value to mix.")
        keys = torch.stack([upcast(v) for v in values])
        if keys.shape[-1] != self.dim:
            raise ValueError(f"values have {keys.shape[-1]} features; expected {self.dim}.")
        keys = keys * torch.rsqrt(keys.pow(2).mean(-1, keepdim=True) + self.eps)
        logits = keys @ self.query.to(keys.dtype)
        if self.null_coupling:
            if nulls is None or len(nulls) != len(values):
                raise ValueError(
                    "null_coupling needs one null signal per value (0 for the embedding); "
                    f"got {None if nulls is None else len(nulls)} for {len(values)} values."
                )
            psi = torch.stack([p.to(keys.dtype).expand(logits.shape[1:]) for p in nulls])
            logits = logits - self.beta().to(keys.dtype) * (psi - psi.mean(0, keepdim=True))
        return torch.softmax(logits.clamp(-LOGIT_CLAMP, LOGIT_CLAMP), dim=0)

    def forward(
        self, values: Sequence[torch.Tensor], nulls: Sequence[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Mix ``values`` (each ``(..., dim)``) over depth; ``nulls`` are ``(...)`` signals."""
        a = self.weights(values, nulls)
        out = sum(a[i, ..., None] * upcast(v) for i, v in enumerate(values))
        return out.to(values[-1].dtype)  # type: ignore[union-attr]

    def extra_repr(self) -> str:
        extra = f", null_coupling=True, beta_init={self.beta_init}" if self.null_coupling else ""
        return f"{self.dim}{extra}"


class DepthBlock(nn.Module):
    """A pre-norm block whose sublayers read :class:`AttnResidual` mixes over depth.

    ``forward(values, nulls)`` appends the attention and MLP outputs to ``values`` (and the
    layer's null signal, twice, to ``nulls``) and returns the attention sublayer's input
    state, the analogue of the residual stream entering the block.

    Args:
        dim: model width.
        norm1: norm before attention.
        attn: the attention, ``attn(h, return_probs=...)`` returning the output (and the
            probabilities ``(batch, heads, queries, keys)`` when asked).
        norm2: norm before the MLP.
        mlp: the MLP.
        null_coupling: OASIS's null signal in the depth routing.
        beta_init: initial raw coupling of both routers (see :class:`AttnResidual`).
        norm_scale: factor on both norms' outputs (LayerNorm Scaling).
    """

    def __init__(
        self,
        dim: int,
        *,
        norm1: nn.Module,
        attn: nn.Module,
        norm2: nn.Module,
        mlp: nn.Module,
        null_coupling: bool = False,
        beta_init: float = -5.0,
        norm_scale: float = 1.0,
    ) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2, self.mlp = norm1, attn, norm2, mlp
        self.route_attn = AttnResidual(dim, null_coupling=null_coupling, beta_init=beta_init)
        self.route_mlp = AttnResidual(dim, null_coupling=null_coupling, beta_init=beta_init)
        self.null_coupling, self.norm_scale = null_coupling, norm_scale

    def forward(
        self,
        values: list[torch.Tensor],
        nulls: list[torch.Tensor],
        *,
        return_probs: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.route_attn(values, nulls)
        need = return_probs or self.null_coupling
        out = self.attn(self.norm1(h) * self.norm_scale, return_probs=need)
        a, probs = out if need else (out, None)
        psi = null_signal(probs) if self.null_coupling else torch.zeros_like(h[..., 0])
        values.append(a)
        nulls.append(psi)
        m = self.mlp(self.norm2(self.route_mlp(values, nulls)) * self.norm_scale)
        values.append(m)
        nulls.append(psi)
        return h, probs if return_probs else None
