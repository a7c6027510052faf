"""``normlab compare``: which normalization for *my* model, on the claims engine.

Example:
    >>> from normlab.compare import compare  # doctest: +SKIP
    >>> c = compare("tinygpt", "text.txt", ["layernorm", "rmsnorm", "dyt"], steps=300)
    >>> c.write("compare-out")
"""

from normlab.compare.api import Arm, Comparison, compare, prepare
from normlab.compare.stats import ArmStats, judge_arms

__all__ = ["Arm", "ArmStats", "Comparison", "compare", "judge_arms", "prepare"]
