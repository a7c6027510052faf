"""Per-layer activation statistics: how far each layer's output is from zero-centred.

Without BatchNorm nothing re-centres a deep stack, and a non-zero mean in every layer's
output compounds with depth; Zero-Centered Swish (``paper("zc-swish")``) is built to keep
each layer's mean near zero. :func:`activation_stats` reads the output of every activation
module (or of the modules named) on a batch through forward hooks and reports its mean,
standard deviation and ``mean / rms``; the mean drift of the network is the average of
``|mean / rms|`` over the layers: 0 for centred layers, 1 for constant ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab._records import Record
from normlab.layers.activations import ZCSwish

__all__ = ["ActivationStats", "LayerActivation", "activation_stats", "is_activation"]


@dataclass(frozen=True)
class LayerActivation(Record):
    """Statistics of one module's output over every element of the batch.

    Attributes:
        name: the module's name in the model.
        mean: mean of the output.
        std: its standard deviation (population, over every element).
        rms: its root mean square.
        mean_rms: ``mean / rms`` (``rms`` floored at 1e-30), in ``[-1, 1]``: 0 for a centred
            output, +-1 for a constant one.

    Examples:
        >>> LayerActivation("act", mean=1.0, std=0.0, rms=1.0, mean_rms=1.0).to_dict()["mean_rms"]
        1.0
    """

    name: str
    mean: float
    std: float
    rms: float
    mean_rms: float


@dataclass(frozen=True)
class ActivationStats(Record):
    """Activation statistics of a model's layers on one batch, in the order they ran.

    Attributes:
        layers: one record per call of a probed module.

    Examples:
        >>> a = LayerActivation("0", mean=0.5, std=0.5, rms=0.7, mean_rms=0.7)
        >>> b = LayerActivation("1", mean=-0.1, std=1.0, rms=1.0, mean_rms=-0.1)
        >>> round(ActivationStats((a, b)).mean_drift(), 6)  # (0.7 + 0.1) / 2
        0.4
    """

    layers: tuple[LayerActivation, ...]

    def mean_drift(self) -> float:
        """The average over layers of ``|mean / rms|`` (0: every layer centred)."""
        return sum(abs(layer.mean_rms) for layer in self.layers) / len(self.layers)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "mean_drift": self.mean_drift()}


def is_activation(module: nn.Module) -> bool:
    """Whether ``module`` is an elementwise activation: torch's or normlab's ZC-Swish.

    Examples:
        >>> from torch import nn
        >>> is_activation(nn.SiLU()), is_activation(nn.Linear(2, 2))
        (True, False)
    """
    return type(module).__module__ == nn.modules.activation.__name__ or isinstance(module, ZCSwish)


@torch.no_grad()
def activation_stats(
    model: nn.Module,
    *inputs: Any,
    modules: Sequence[str] | Callable[[nn.Module], bool] = is_activation,
) -> ActivationStats:
    """Mean, standard deviation and ``mean / rms`` of the output of each probed module.

    The model runs once on ``inputs`` in eval mode without gradients; forward hooks read the
    probed modules' outputs and are removed afterwards, and the model's modes are restored.

    Args:
        model: any ``nn.Module``.
        *inputs: what ``model(*inputs)`` takes.
        modules: the names of the modules to probe, or a predicate on modules (by default
            :func:`is_activation`).

    Returns:
        An :class:`ActivationStats`, one record per call of a probed module in call order.

    Raises:
        ValueError: when a name is not a module of ``model``, or nothing was probed.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU())
        >>> stats = activation_stats(net, torch.randn(64, 4))
        >>> [layer.name for layer in stats.layers]
        ['1', '3']
        >>> all(0 < layer.mean_rms <= 1 for layer in stats.layers)  # ReLU outputs are >= 0
        True
    """
    named = dict(model.named_modules())
    if callable(modules):
        chosen = [(name, m) for name, m in named.items() if modules(m)]
    else:
        missing = [name for name in modules if name not in named]
        if missing:
            raise ValueError(f"{missing} are not modules of the model; see model.named_modules().")
        chosen = [(name, named[name]) for name in modules]
    records: list[LayerActivation] = []

    def hook(name: str) -> Callable[..., None]:
        def read(module: nn.Module, args: Any, out: torch.Tensor) -> None:
            rms = out.square().mean().sqrt()
            records.append(
                LayerActivation(
                    name=name,
                    mean=float(out.mean()),
                    std=float(out.std(correction=0)),
                    rms=float(rms),
                    mean_rms=float(out.mean() / rms.clamp_min(1e-30)),
                )
            )

        return read

    modes = [(m, m.training) for m in model.modules()]
    handles = [m.register_forward_hook(hook(name)) for name, m in chosen]
    try:
        model.eval()
        model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
        for m, training in modes:
            m.training = training
    if not records:
        raise ValueError("no probed module ran; pass modules= with the names to read.")
    return ActivationStats(tuple(records))
