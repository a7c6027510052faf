"""Attention score normalizers (kind "score") and attention modules built on them."""

from normlab.attention.depth import AttnResidual, DepthBlock
from normlab.attention.mha import MultiheadAttention
from normlab.attention.pgop import PositionGatedOutput, gate_identifiability
from normlab.attention.scores import ScoreNorm, score_norm

__all__ = [
    "AttnResidual",
    "DepthBlock",
    "MultiheadAttention",
    "PositionGatedOutput",
    "ScoreNorm",
    "gate_identifiability",
    "score_norm",
]
