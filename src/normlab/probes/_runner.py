"""Run a model with a chosen list of blocks through its :class:`ModelAdapter`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from normlab.probes.hooks import ModelAdapter, adapt

__all__ = ["BlockSubsetRunner", "as_block_runner"]


class BlockSubsetRunner:
    """``runner(tokens, layers)``: the adapter's output running only ``layers`` (None: all).

    Attributes:
        adapter: the model's adapter.
        n_layers: its number of blocks.
    """

    def __init__(self, adapter: ModelAdapter) -> None:
        self.adapter = adapter
        self.n_layers = len(adapter.blocks())

    def __call__(self, tokens: torch.Tensor, layers: Sequence[int] | None) -> torch.Tensor:
        return self.adapter.run(tokens, layers=layers)


def as_block_runner(model: Any, *, need_lm_head: bool = False) -> BlockSubsetRunner:
    """A :class:`BlockSubsetRunner` for a model or an adapter.

    Raises:
        ValueError: when ``need_lm_head`` and the model has no LM head (swap-KL compares
            next-token distributions).
    """
    adapter = model if isinstance(model, ModelAdapter) else adapt(model)
    if need_lm_head and not adapter.has_lm_head:
        raise ValueError(
            f"{type(adapter.model).__name__} has no LM head: swap-KL and pruning curves "
            "compare output distributions; load it with its LM head (e.g. *ForCausalLM)."
        )
    return BlockSubsetRunner(adapter)
