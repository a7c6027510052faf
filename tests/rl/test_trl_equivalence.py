"""normlab's advantages against TRL 1.16's own code (the peers extra installs trl).

TRL computes advantages inline in ``GRPOTrainer._generate_and_score_completions`` and
``RLOOTrainer._generate_and_score_completions``, whose other lines generate completions with
a model. :mod:`normlab.rl.trl_reference` cuts the advantage block out of TRL's installed
source (from ``unscorable_mask = ...`` to ``advantages = torch.nan_to_num(...)``) and
executes it, in its module's namespace, with a stub ``self`` carrying the trainer settings
it reads: TRL's code runs unchanged, nothing of its formula is copied here. If TRL moves
the block, the markers are not found and the test fails, saying so.
"""

from __future__ import annotations

import pytest
import torch

from normlab.rl import advantages

trl = pytest.importorskip(
    "trl", reason="trl is a peer library for this test: pip install -e '.[peers]'"
)
pytestmark = pytest.mark.slow  # importing trl (transformers, accelerate) takes ~8 s

NAN = float("nan")


@pytest.fixture(scope="module")
def trl_advantages():
    """``f(rewards_per_func, num_generations, method) -> advantages`` running TRL's code
    (:func:`normlab.rl.trl_reference.trl_advantages`, shared with grpo-family's check)."""
    from normlab.rl.trl_reference import trl_advantages

    return trl_advantages


TRL_METHODS = ("grpo", "batch-std", "dr-grpo", "rloo", "gdpo")


@pytest.mark.parametrize("method", TRL_METHODS)
def test_issue_example_with_an_unscorable_completion(trl_advantages, method):
    r = torch.tensor([[1.0, 2.0], [NAN, NAN], [0.0, 1.0], [3.0, -1.0]], dtype=torch.float64)
    ref = trl_advantages(r, 4, method)
    ours = advantages(r, 4, method=method)
    torch.testing.assert_close(ours, ref, atol=1e-7, rtol=1e-7)
    assert ours[1] == 0
    if method == "grpo":  # the issue's numbers: TRL [1, 0, -1, 0], normlab was [1.16, ...]
        expect = torch.tensor([1.0, 0, -1, 0], dtype=torch.float64)
        torch.testing.assert_close(ours, expect, atol=2e-4, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("method", TRL_METHODS)
def test_random_batches_with_none_rewards_match_trl(trl_advantages, method, dtype):
    gen = torch.Generator().manual_seed(7)
    r = (torch.randn(32, 3, generator=gen, dtype=torch.float64) * 2 + 1).to(dtype)
    r[3, 1] = NAN  # one reward function returned None
    r[5] = NAN  # every one did: unscorable
    r[8:12] = 0.5  # a constant group
    r[12:15] = NAN  # a group with a single scorable completion
    r[16:20] = NAN  # a group with none
    r[21, 0], r[22, 2] = NAN, NAN
    r[24:28, 1] = NAN  # one column missing for a whole group
    # TRL's nanstd computes Bessel's count / (count - 1) from int64 counts, in float32 even
    # for float64 rewards: its std is off by ~1e-8 relative, normlab's is exact.
    tol = {"atol": 1e-7, "rtol": 1e-7} if dtype == torch.float64 else {"atol": 2e-5, "rtol": 2e-5}
    for g in (4, 8):
        ours = advantages(r, g, method=method)
        torch.testing.assert_close(ours, trl_advantages(r, g, method), **tol)
        assert ours.dtype == dtype and torch.all(ours[5] == 0) and torch.all(ours[16:20] == 0)


def test_gdpo_on_a_constant_float32_group_of_eight_is_zero(trl_advantages):
    for value, k in ((0.1, 1), (1 / 3, 1), (2.7, 3), (405.9068831679489, 2), (-7e5, 2)):
        r = torch.full((8, k), value, dtype=torch.float32)
        ref = trl_advantages(r, 8, "gdpo")
        ours = advantages(r, 8, method="gdpo")
        assert ref.abs().max() < 1e-6  # TRL's own answer: ~0
        assert ours.abs().max() < 1e-6, (value, ours)  # was 3e-4 at 405.9, 2 columns
        torch.testing.assert_close(ours, ref, atol=1e-6, rtol=0)
