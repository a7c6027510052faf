"""A model with its attention softmax and its LayerNorms swapped for hardware approximations.

The guaranteed-approximation paper (``paper("guaranteed-approx")``) replaces softmax and
LayerNorm by table-based datapaths whose outputs still sum to one and keep unit variance;
:func:`approximate` applies both to a copy of a trained model, so its accuracy can be
measured against the original.
"""

from __future__ import annotations

import copy
from typing import Any

from torch import nn

# registers "approx-layernorm", which replace_norms looks up by name (and puts its code in
# the cache keys of what uses this module)
import normlab.layers.approx  # noqa: F401
from normlab import functional as NF
from normlab.attention.scores import ScoreNorm
from normlab.surgery.replace import replace_norms

__all__ = ["approximate"]


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
