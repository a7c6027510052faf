"""TRL's own advantage code, run on a reward matrix: the reference normlab's advantages are
checked against (the ``[peers]`` extra installs ``trl``).

TRL computes GRPO-family advantages inline in ``GRPOTrainer._generate_and_score_completions``
(and ``RLOOTrainer``'s), whose other lines generate completions with a model.
:func:`trl_advantages` cuts the advantage block out of TRL's installed source, from
``unscorable_mask = ...`` to ``advantages = torch.nan_to_num(advantages, nan=0.0)``, and
executes it in its module's namespace with a stub ``self`` carrying the trainer settings it
reads: TRL's code runs unchanged and nothing of its formula is copied here. In TRL 1.16 a
completion whose every reward is NaN (every reward function returned None) is left out of its
group's mean and std and gets advantage 0; rewards ``[[1, 2], [nan, nan], [0, 1], [3, -1]]``
in one group of 4 give GRPO advantages ``[0.9999, 0, -0.9999, 0]``. If a TRL release moves
the block, the markers are not found and :func:`trl_advantages` raises, saying so.

``trl`` is imported on first use only (it pulls in transformers): ``import normlab`` stays
light.
"""

from __future__ import annotations

import inspect
import math
import textwrap
import types
from functools import cache
from typing import Any

import torch

__all__ = ["TRL_SETTINGS", "trl_advantages", "trl_mismatch", "trl_version"]

#: normlab method -> (TRL trainer, ``scale_rewards``, ``multi_objective_aggregation``).
TRL_SETTINGS: dict[str, tuple[str, str | None, str | None]] = {
    "grpo": ("grpo", "group", "sum_then_normalize"),
    "batch-std": ("grpo", "batch", "sum_then_normalize"),
    "dr-grpo": ("grpo", "none", "sum_then_normalize"),
    "gdpo": ("grpo", "group", "normalize_then_sum"),
    "rloo": ("rloo", None, None),
}
_START, _END = "unscorable_mask = ", "advantages = torch.nan_to_num(advantages, nan=0.0)"


def trl_version() -> str:
    """The installed TRL's version (ImportError when it is not installed)."""
    import trl

    return str(trl.__version__)


def _block(cls: type) -> str:
    src = inspect.getsource(cls._generate_and_score_completions).splitlines()
    first = next((i for i, line in enumerate(src) if line.strip().startswith(_START)), None)
    last = next((i for i, line in enumerate(src) if line.strip() == _END), None)
    if first is None or last is None or first >= last:
        raise RuntimeError(
            f"TRL {trl_version()} moved the advantage block of {cls.__name__}; the markers "
            f"{_START!r} ... {_END!r} were not found."
        )
    return textwrap.dedent("\n".join(src[first : last + 1]))


@cache
def _compiled(trainer: str) -> tuple[Any, Any]:
    from trl.trainer import grpo_trainer, rloo_trainer

    module, cls = {
        "grpo": (grpo_trainer, grpo_trainer.GRPOTrainer),
        "rloo": (rloo_trainer, rloo_trainer.RLOOTrainer),
    }[trainer]
    return compile(_block(cls), f"<trl {trainer} advantages>", "exec"), module


def trl_advantages(
    rewards_per_func: torch.Tensor, num_generations: int, method: str
) -> torch.Tensor:
    """TRL's advantages of ``rewards_per_func`` (completions x reward functions, NaN for a
    reward function that returned None; consecutive groups of ``num_generations``) under
    the trainer settings of normlab's ``method`` (:data:`TRL_SETTINGS`), computed by TRL's
    installed code."""
    if method not in TRL_SETTINGS:
        raise ValueError(f"TRL has no {method!r}; expected one of {tuple(TRL_SETTINGS)}.")
    trainer, scale, aggregation = TRL_SETTINGS[method]
    k = rewards_per_func.shape[1]
    stub = types.SimpleNamespace(
        scale_rewards=scale,
        multi_objective_aggregation=aggregation,
        reward_weights=torch.ones(k, dtype=rewards_per_func.dtype),
        reward_funcs=[None] * k,
        reward_clip_range=None,
        beta=0.0,
        normalize_advantages=False,
    )
    compiled, module = _compiled(trainer)
    scope = dict(vars(module))
    scope.update(
        self=stub,
        rewards_per_func=rewards_per_func.clone(),
        num_generations=num_generations,
        device=rewards_per_func.device,
    )
    exec(compiled, scope)  # TRL's own lines, unchanged
    return scope["advantages"]


def trl_mismatch(methods: tuple[str, ...] = ("grpo", "batch-std", "dr-grpo")) -> float:
    """The largest ``|normlab - TRL|`` advantage over ``methods`` on two float64 reward
    matrices: the example above (one group of 4, its second completion unscorable) and 32
    completions x 2 reward functions from ``N(0, 1)`` (seed 0) in groups of 8, with one
    reward None, completion 9 unscorable and the whole third group unscorable. NaN when the
    two disagree on which advantages are NaN."""
    from normlab.rl.advantages import advantages

    nan = float("nan")
    example = torch.tensor([[1.0, 2.0], [nan, nan], [0.0, 1.0], [3.0, -1.0]], dtype=torch.float64)
    r = torch.randn(32, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    r[5, 0] = nan
    r[9] = nan
    r[16:24] = nan
    worst = 0.0
    for x, g in ((example, 4), (r, 8)):
        for method in methods:
            err = float(
                (advantages(x, g, method=method) - trl_advantages(x, g, method)).abs().max()
            )
            if math.isnan(err):
                return nan
            worst = max(worst, err)
    return worst
