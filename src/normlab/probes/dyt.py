"""How saturated a model's Dynamic Tanh layers are: the regime DyT works in.

DyT (``paper("dyt")``) replaces a norm by ``tanh(alpha x)``: linear for small ``|alpha x|``,
squashing outliers like a norm for large ones. :func:`dyt_saturation` reads the inputs of
every DyT layer of a model on a batch and pools, over all of them, the fraction of entries
in the saturated regime, ``|alpha x| > threshold``, and the mean of ``|alpha x|``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from normlab._records import Record
from normlab.layers.dyt import DyT
from normlab.probes.hooks import adapt

__all__ = ["DyTSaturation", "dyt_saturation"]


@dataclass(frozen=True)
class DyTSaturation(Record):
    """The pre-tanh values ``alpha x`` of a model's DyT layers, pooled over the layers.

    Attributes:
        saturation: fraction of entries with ``|alpha x| > threshold``.
        mean_abs_alpha_x: mean of ``|alpha x|``.
        threshold: the threshold.
        layers: the DyT layers' names.

    Examples:
        >>> DyTSaturation(0.25, 1.1, 2.0, ("blocks.0.norm1",)).to_dict()["saturation"]
        0.25
    """

    saturation: float
    mean_abs_alpha_x: float
    threshold: float
    layers: tuple[str, ...]


@torch.no_grad()
def dyt_saturation(
    model: torch.nn.Module, tokens: torch.Tensor, *, threshold: float = 2.0
) -> DyTSaturation:
    """Saturation and scale of ``alpha x`` over every DyT layer of ``model`` on ``tokens``.

    The norm inputs are read through the model's adapter (:func:`~normlab.probes.adapt`),
    which leaves the model unchanged; every entry of every DyT layer counts once.

    Args:
        model: a model the adapter registry knows (TinyGPT, Hugging Face models).
        tokens: token ids ``(batch, tokens)``.
        threshold: the ``|alpha x|`` above which an entry counts as saturated.

    Returns:
        A :class:`DyTSaturation`.

    Raises:
        ValueError: when the model has no DyT layer.

    Examples:
        >>> import torch
        >>> from normlab.models.gpt import GPTConfig, TinyGPT
        >>> model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=8, norm="dyt"))
        >>> stats = dyt_saturation(model, torch.randint(0, 256, (2, 8)))
        >>> len(stats.layers), 0 <= stats.saturation <= 1
        (5, True)
    """
    adapter = adapt(model)
    trace = adapter.trace(tokens, norms=True)
    sites = [s for s in adapter.norm_sites() if isinstance(s.module, DyT)]
    if not sites:
        raise ValueError("The model has no DyT layers to measure saturation on.")
    saturated = magnitude = total = 0.0
    for site in sites:
        inputs = trace.norm_inputs[site.name]
        saturated += site.module.saturation(inputs, threshold) * inputs.numel()
        magnitude += float((site.module.alpha * inputs).abs().sum())
        total += inputs.numel()
    names = tuple(s.name for s in sites)
    return DyTSaturation(saturated / total, magnitude / total, float(threshold), names)
