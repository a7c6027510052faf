"""TinyGPT's probe adapter: where its blocks and norms are, and its exact residual stream.

:mod:`normlab.models.gpt` registers :class:`TinyGPTAdapter` with
:func:`normlab.probes.register_adapter`, so :func:`normlab.probes.adapt` understands TinyGPT
without the probes importing it.
"""

from __future__ import annotations

import torch
from torch import nn

from normlab.probes.hooks import ModelAdapter, ModelLayout

__all__ = ["TINYGPT_LAYOUT", "TinyGPTAdapter"]

#: Where TinyGPT keeps its blocks, their norms, the final norm and the head.
TINYGPT_LAYOUT = ModelLayout(
    ("",), "blocks", "attn", ("norm1", "norm2"), "pre", "norm_f", head="head"
)


class TinyGPTAdapter(ModelAdapter):
    """The :class:`~normlab.probes.ModelAdapter` of a TinyGPT (family "tinygpt").

    TinyGPT runs any block order itself (``layers=``) and returns its residual stream from
    ``trunk``, so the adapter reads states from there instead of hooking the blocks.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model, "tinygpt", layout=TINYGPT_LAYOUT, causal=True)

    def norm_position(self) -> str:
        return "post" if self.model.config.residual == "post" else "pre"

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        return self.model.readout(h)

    def _call(self, tokens: torch.Tensor, layers: list[int] | None) -> torch.Tensor:
        return self.model(tokens, layers=layers)

    def _states(
        self, tokens: torch.Tensor, layers: list[int] | None, attention: bool
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        states, probs = self.model.trunk(tokens, layers=layers, return_probs=attention)
        return list(states), list(probs)
