"""Advantages on bad rewards: +-inf refused, huge rewards exact, NaN unscorable, integers cast.

Each case failed before (issue 25 item 1, issue 23 p-grpo): +-inf was mapped to +-3.4e38 and
zeroed other samples, rewards >= 1e19 overflowed the squares in float32 and gave all-zero
advantages, integer rewards reached a raw ``index_add_`` dtype error in P-GRPO.
"""

from __future__ import annotations

import pytest
import torch

from normlab.rl import METHODS, PreferenceGroupAdvantage, advantages

NAN, INF = float("nan"), float("inf")
SCALE_FREE = ("grpo", "batch-std", "slas")  # A(c r, eps) = A(r, eps / c)
LINEAR = ("dr-grpo", "rloo")  # A(c r) = c A(r)


def _adv(r, method, eps=1e-4, history=None):
    if method != "p-grpo":
        return advantages(r, 4, method=method, eps=eps)
    state = PreferenceGroupAdvantage(eps=eps)
    ids = torch.arange(r.shape[0]) % 3
    if history is not None:  # else a cold start: scored against the batch itself
        state(history.to(r.dtype), ids[: history.shape[0]])
    return state(r, ids)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bad", [INF, -INF])
def test_infinite_reward_is_refused_naming_its_index(method, bad):
    r = torch.tensor([1.0, 2, 3, 4, 5, 6, 7, 8])
    r[5] = bad
    with pytest.raises(ValueError, match=r"rewards\[5\] is .*inf.*NaN to mark the sample"):
        _adv(r, method, history=torch.ones(3))
    cols = torch.ones(8, 2)
    cols[2, 1] = bad
    if method != "p-grpo":
        with pytest.raises(ValueError, match=r"rewards\[\(2, 1\)\]"):
            advantages(cols, 4, method=method)


@pytest.mark.parametrize("method", (*SCALE_FREE, *LINEAR, "p-grpo", "gdpo"))
@pytest.mark.parametrize(
    ("dtype", "scale"),
    [
        (torch.float32, 1e19),
        (torch.float32, 2.0**100),
        (torch.float32, 1e37),
        (torch.float64, 1e200),
    ],
)
def test_huge_rewards_give_the_rescaled_advantages(method, dtype, scale):
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(12, generator=gen, dtype=torch.float64)
    hist = torch.randn(6, generator=gen, dtype=torch.float64)
    r = (base * scale).to(dtype)
    ours = _adv(r, method, history=hist * scale)
    assert ours.dtype == dtype and torch.isfinite(ours).all()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    if method in LINEAR:
        ref, ours = _adv(base, method), ours.double() / scale
    elif method == "gdpo":  # eps enters twice: in reward units, then in z-score units
        ref = _adv(base, method, eps=1e-4 / scale)
        tol = max(tol, 3e-4)
        exact = _adv(r, method, eps=0.0).double()
        torch.testing.assert_close(exact, _adv(base, method, eps=0.0), atol=1e-5, rtol=1e-5)
    else:
        ref = _adv(base, method, eps=1e-4 / scale, history=hist)
        if method == "p-grpo":
            cold = _adv(r, method).double()
            torch.testing.assert_close(
                cold, _adv(base, method, eps=1e-4 / scale), atol=tol, rtol=tol
            )
    assert ref.abs().max() > 0.1  # non-trivial advantages
    torch.testing.assert_close(ours.double(), ref, atol=tol, rtol=tol)


def test_one_huge_group_does_not_flatten_the_others():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0, 1e30, 2e30, 3e30, 4e30])
    grpo = advantages(r, 4, method="grpo")
    torch.testing.assert_close(grpo[:4], grpo[4:], atol=1e-4, rtol=0)
    assert grpo[:4].abs().min() > 0.3
    batch = advantages(r, 4, method="batch-std")  # small group ~1e-30 of the huge one
    torch.testing.assert_close(batch[:4] * 1e30, batch[4:], rtol=1e-4, atol=0)
    assert (batch[:4] != 0).all()


def test_linear_advantages_beyond_the_dtype_raise():
    r = torch.tensor([-3e38, 3e38, 3e38, 3e38])
    with pytest.raises(ValueError, match="dr-grpo advantage of sample 0 overflows"):
        advantages(r, 4, method="dr-grpo")
    assert torch.isfinite(advantages(r, 4, method="grpo")).all()
    with pytest.raises(ValueError, match=r"overflows torch\.float16"):
        advantages(torch.tensor([-6e4, 6e4, 6e4]).half(), 3, method="dr-grpo")
    with pytest.raises(ValueError, match="no reward columns"):
        advantages(torch.zeros(4, 0), 2)


@pytest.mark.parametrize("method", ("slas", "p-grpo"))
def test_unscorable_samples_outside_trl_get_zero_and_no_weight(method):
    r = torch.tensor([1.0, NAN, 3.0, 4.0, 2.0, 2.0, NAN, 5.0], dtype=torch.float64)
    keep = ~torch.isnan(r)
    if method == "slas":
        ours = advantages(r, [0, 0, 0, 0, 1, 1, 1, 1], method=method)
        ref = advantages(r[keep], [0, 0, 0, 1, 1, 1], method=method)
    else:
        ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
        state, clean = PreferenceGroupAdvantage(), PreferenceGroupAdvantage()
        ours = state(r, ids)
        ref = clean(r[keep], ids[keep])
        assert state.state_dict() == clean.state_dict()  # NaN never enters the history
        torch.testing.assert_close(state(r, ids)[keep], clean(r[keep], ids[keep]))
    assert ours[1] == 0 and ours[6] == 0
    torch.testing.assert_close(ours[keep], ref)


def test_rloo_group_with_one_scorable_sample_is_zero():
    r = torch.tensor([NAN, 2.0, 1.0, 3.0])
    torch.testing.assert_close(advantages(r, 2, method="rloo"), torch.tensor([0.0, 0, -2, 2]))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_rewards_are_cast(dtype):
    r = torch.tensor([0, 1, 1, 0, 1, 1, 1, 0]).to(dtype)
    as_float = r.to(torch.get_default_dtype())
    state, ref_state = PreferenceGroupAdvantage(), PreferenceGroupAdvantage()
    ids = torch.tensor([0, 0, 1, 1, 0, 0, 1, 1])
    for _ in range(2):  # cold start, then history
        out = state(r, ids)
        assert out.dtype == torch.get_default_dtype()
        torch.testing.assert_close(out, ref_state(as_float, ids))
    for method in ("grpo", "gdpo", "rloo"):
        torch.testing.assert_close(
            advantages(r, 4, method=method), advantages(as_float, 4, method=method)
        )


def test_p_grpo_rejects_a_group_size_and_bad_state():
    with pytest.raises(TypeError, match="preference-group id per reward"):
        advantages(torch.ones(4), 2, method="p-grpo", state=PreferenceGroupAdvantage())
    with pytest.raises(ValueError, match="one integer preference id"):
        PreferenceGroupAdvantage()(torch.ones(4), [0, 1])
    with pytest.raises(ValueError, match="missing"):
        PreferenceGroupAdvantage().load_state_dict({"count": {}, "mean": {}, "m2": {}})


def test_half_precision_rewards_are_computed_in_float32():
    r = torch.tensor([1.0, 2.0, 3.0, 5.0, 1000.0, 1001.0, 999.0, 1000.5])
    for method in ("grpo", "batch-std", "gdpo"):
        half = advantages(r.half(), 4, method=method)
        assert half.dtype == torch.float16
        torch.testing.assert_close(
            half.float(), advantages(r, 4, method=method), atol=2e-3, rtol=2e-3
        )
