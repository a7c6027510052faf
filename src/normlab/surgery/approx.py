"""A model with its attention softmax and its LayerNorms swapped for hardware approximations.

The guaranteed-approximation paper (``paper("guaranteed-approx")``) replaces softmax and
LayerNorm by table-based datapaths whose outputs still sum to one and keep unit variance;
:func:`approximate` applies both to a copy of a trained model, so its accuracy can be
measured against the original; :func:`datapaths` names the paper's datapaths and their
unguaranteed twins, :func:`normalization_errors` measures how far each is from normalizing.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

# registers "approx-layernorm", which replace_norms looks up by name (and puts its code in
# the cache keys of what uses this module)
import normlab.layers.approx  # noqa: F401
from normlab import functional as NF
from normlab.attention.scores import ScoreNorm
from normlab.surgery.replace import replace_norms

__all__ = ["approximate", "datapaths", "normalization_errors"]


def approximate(
    model: nn.Module,
    *,
    softmax_kwargs: dict[str, Any] | None = None,
    layernorm_kwargs: dict[str, Any] | None = None,
) -> nn.Module:
    """A copy of ``model`` (in eval mode) with its softmax and LayerNorms approximated.

    Norms are replaced by :class:`~normlab.layers.ApproxLayerNorm` (``layernorm_kwargs``)
    with the trained weight, bias and eps; every attention's score normalizer (a module with
    ``score`` and ``score_name``, as :class:`~normlab.attention.MultiheadAttention`) becomes
    ``approx_softmax(**softmax_kwargs)``, with its fused softmax path switched off by
    clearing ``score_name``. The original is not changed.

    Args:
        model: the model.
        softmax_kwargs: keyword arguments of :func:`~normlab.functional.approx_softmax`.
        layernorm_kwargs: keyword arguments of :class:`~normlab.layers.ApproxLayerNorm`.

    Examples:
        >>> import torch
        >>> from normlab.attention import MultiheadAttention
        >>> net = nn.Sequential(nn.LayerNorm(8), MultiheadAttention(8, 2))
        >>> approx = approximate(net, softmax_kwargs={"table_bits": 5})
        >>> type(approx[0]).__name__, approx[1].score_name, type(net[0]).__name__
        ('ApproxLayerNorm', None, 'LayerNorm')
        >>> x = torch.randn(1, 4, 8)
        >>> bool((approx(x) - net.eval()(x)).abs().max() < 0.1)
        True
    """
    clone = copy.deepcopy(model)
    replace_norms(clone, "approx-layernorm", **(layernorm_kwargs or {}))
    for module in clone.modules():
        if hasattr(module, "score_name") and isinstance(getattr(module, "score", None), nn.Module):
            module.score = ScoreNorm(NF.approx_softmax, **(softmax_kwargs or {}))
            module.score_name = None
    return clone.eval()


def datapaths(table_bits: int = 5) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """The guaranteed-approximation paper's datapaths and their unguaranteed twins:
    name -> (:func:`~normlab.functional.approx_softmax` kwargs,
    :class:`~normlab.layers.ApproxLayerNorm` kwargs).

    ``"default"`` is the paper's design (one Newton step on the table reciprocals);
    ``"guaranteed"`` / ``"unguaranteed"`` the cheapest datapath (``table_bits``-bit tables,
    no Newton step) with and without the guarantee step (softmax: the rounding residual
    added to the largest entry so that ``sum p = 1``; LayerNorm: renormalized on the
    measured variance so that ``sigma = 1``); ``"guaranteed-fixed8"`` /
    ``"unguaranteed-fixed8"`` the 8-bit fixed-point softmax, with and without.

    Examples:
        >>> sorted(datapaths())
        ['default', 'guaranteed', 'guaranteed-fixed8', 'unguaranteed', 'unguaranteed-fixed8']
        >>> datapaths(4)["unguaranteed"][1]
        {'newton_steps': 0, 'table_bits': 4, 'renormalize': False}
    """
    cheap = {"newton_steps": 0, "table_bits": int(table_bits)}
    return {
        "guaranteed": (dict(cheap), dict(cheap)),
        "unguaranteed": ({**cheap, "guarantee": False}, {**cheap, "renormalize": False}),
        "guaranteed-fixed8": ({"frac_bits": 8}, {}),
        "unguaranteed-fixed8": ({"frac_bits": 8, "guarantee": False}, {"renormalize": False}),
        "default": ({}, {}),
    }


@torch.no_grad()
def normalization_errors(
    model: nn.Module,
    x: torch.Tensor,
    *,
    softmax_kwargs: dict[str, Any] | None = None,
    layernorm_kwargs: dict[str, Any] | None = None,
) -> dict[str, float]:
    """How far the approximate operators are from normalizing, on ``model``'s own inputs.

    ``max_sum_error`` is the largest ``|sum_j p_j - 1|`` of the approximate softmax over
    every attention row of :func:`approximate`'s copy run on ``x`` (the model must accept
    ``return_probs=True``, as :class:`~normlab.models.gpt.TinyGPT` does);
    ``max_sigma_error`` the largest ``|std(y) - std(y_exact)|`` over every row of every
    LayerNorm input of the exact model, ``y`` the approximate LayerNorm (no affine) and
    ``y_exact`` float64 LayerNorm.

    Examples:
        >>> from normlab.models.gpt import GPTConfig, TinyGPT
        >>> _ = torch.manual_seed(0)
        >>> model = TinyGPT(GPTConfig(d_model=16, n_layers=1, n_heads=2, context=8)).eval()
        >>> x = torch.randint(0, 256, (1, 8))
        >>> sm, ln = datapaths()["unguaranteed"]
        >>> errors = normalization_errors(model, x, softmax_kwargs=sm, layernorm_kwargs=ln)
        >>> errors["max_sum_error"] > 1e-3
        True
        >>> sm, ln = datapaths()["guaranteed"]
        >>> errors = normalization_errors(model, x, softmax_kwargs=sm, layernorm_kwargs=ln)
        >>> errors["max_sum_error"] < 1e-6
        True
    """
    ln_kwargs = layernorm_kwargs or {}
    inputs: list[torch.Tensor] = []
    handles = [
        m.register_forward_pre_hook(lambda _m, args: inputs.append(args[0].detach()))
        for m in model.modules()
        if isinstance(m, nn.LayerNorm) or type(m).__name__ == "LayerNorm"
    ]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    approx = approximate(model, softmax_kwargs=softmax_kwargs, layernorm_kwargs=ln_kwargs)
    _, probs = approx(x, return_probs=True)
    sum_error = max(float((p.double().sum(-1) - 1).abs().max()) for p in probs)
    sigma_error = 0.0
    for h in inputs:
        d = h.shape[-1]
        y = NF.approx_layer_norm(h, (d,), **ln_kwargs).double()
        exact = NF.layer_norm(h.double(), (d,))
        gap = y.std(-1, unbiased=False) - exact.std(-1, unbiased=False)
        sigma_error = max(sigma_error, float(gap.abs().max()))
    return {"max_sum_error": sum_error, "max_sigma_error": sigma_error}
