"""A one-block ConvNeXt-style sequence model: a LayerNorm written by a depthwise convolution.

ConvNeXt (Liu et al., 2022, "A ConvNet for the 2020s") normalizes the output of a
depthwise convolution with a LayerNorm before an inverted-bottleneck MLP. Over a token
sequence that block is the smallest model whose LayerNorm cannot be folded into RMSNorm:
its input is written by a depthwise convolution, whose per-channel filters cannot be
column-centred like a linear layer's (see :func:`normlab.surgery.fold_detect.analyze_fold`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TinyConvNeXt"]


class TinyConvNeXt(nn.Module):
    """Embedding, one ConvNeXt block (residual), final LayerNorm and a linear head.

    ``h = e + W_down gelu(W_up LN(dwconv(e)))``, logits ``= head(LN_f(h))``, with a depthwise
    convolution of kernel 3 along the tokens and an MLP four times as wide.

    Args:
        vocab: vocabulary size (input ids and logits).
        d: width.

    Examples:
        >>> import torch
        >>> model = TinyConvNeXt(vocab=64, d=16)
        >>> model(torch.randint(0, 64, (2, 10))).shape
        torch.Size([2, 10, 64])
    """

    def __init__(self, vocab: int = 64, d: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.dwconv = nn.Conv1d(d, d, 3, padding=1, groups=d)
        self.norm = nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.norm_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, tokens, vocab)`` for token ids ``idx`` of shape ``(batch, tokens)``."""
        h = self.embed(idx)
        y = self.norm(self.dwconv(h.transpose(1, 2)).transpose(1, 2))
        h = h + self.down(F.gelu(self.up(y)))
        return self.head(self.norm_f(h))
