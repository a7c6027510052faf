"""Attention score normalizers (kind "score") and attention modules built on them."""

from normlab.attention.mha import MultiheadAttention
from normlab.attention.scores import ScoreNorm, score_norm

__all__ = ["MultiheadAttention", "ScoreNorm", "score_norm"]
