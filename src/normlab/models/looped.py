"""Looped TinyGPT variants: the plain Looped Transformer and the Fully Looped Transformer's
two parameter-free changes, alone and together (normlab's readings; see
:class:`~normlab.models.gpt.GPTConfig` ``loop_signal`` and ``attention_injection``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch

from normlab.data.corpus import VOCAB
from normlab.models.gpt import GPTConfig, TinyGPT

__all__ = ["VARIANTS", "loop_parity", "looped_config"]

#: variant -> (loop_signal, attention_injection): plain (input injection only), fully
#: looped (both changes), the loop signal alone, attention injection alone.
VARIANTS: dict[str, tuple[bool, bool]] = {
    "plain": (False, False),
    "fully": (True, True),
    "signal": (True, False),
    "attn": (False, True),
}


def looped_config(shape: Mapping[str, Any], loops: int, variant: str) -> GPTConfig:
    """The TinyGPT of ``shape`` (``d_model``, ``n_layers``, ``n_heads``, ``context``) looped
    ``loops`` times with ``variant``'s changes."""
    signal, injection = VARIANTS[variant]
    arch = {k: shape[k] for k in ("d_model", "n_layers", "n_heads", "context")}
    return GPTConfig(**arch, loops=loops, loop_signal=signal, attention_injection=injection)


@torch.no_grad()
def loop_parity(config: GPTConfig) -> tuple[int, float]:
    """``(parameter gap, one-loop error)``: the largest difference in parameter count among
    the variants at ``config``'s shape (looped as ``config`` and once), and the largest
    absolute logit difference between one loop of ``config`` and the ordinary model on the
    same weights (both 0 when the changes are parameter-free and vanish at one loop)."""

    def variant(v: str, loops: int) -> GPTConfig:
        signal, injection = VARIANTS[v]
        return replace(config, loops=loops, loop_signal=signal, attention_injection=injection)

    torch.manual_seed(0)
    counts = {TinyGPT(variant(v, n)).num_parameters() for v in VARIANTS for n in (config.loops, 1)}
    one = TinyGPT(replace(config, loops=1))
    base = TinyGPT(variant("plain", 1))
    one.load_state_dict(base.state_dict())
    x = torch.randint(0, VOCAB, (2, config.context), generator=torch.Generator().manual_seed(0))
    return max(counts) - min(counts), float((one(x) - base(x)).abs().max())
