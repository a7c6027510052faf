"""Swap-KL: zero for identical layers, the protocols' algebra, greedy orders, no side effects."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.probes import kl_to_base, pruning_curve, pruning_order, swap_kl


def _model(n_layers: int = 4, seed: int = 0) -> TinyGPT:
    torch.manual_seed(seed)
    model = TinyGPT(GPTConfig(d_model=16, n_layers=n_layers, n_heads=2, context=16))
    with torch.no_grad():  # larger weights so that swapping blocks visibly matters
        for p in model.parameters():
            p.mul_(20 if p.dim() > 1 else 1)
    return model


@pytest.mark.parametrize("positions", ["all", "last"])
def test_identical_layers_give_zero_kl(positions):
    model = _model()
    for block in model.blocks[1:]:
        block.load_state_dict(model.blocks[0].state_dict())
    result = swap_kl(model, torch.randint(0, 257, (3, 16)), positions=positions)
    assert max(result.pairs("replacement")) < 1e-12
    assert max(result.pairs("interchange")) < 1e-12


def test_protocol_algebra():
    model = _model()
    result = swap_kl(model, torch.randint(0, 257, (3, 16)))
    n = result.n_layers
    for i in range(n):
        assert result.replacement[i][i] == 0 and result.interchange[i][i] == 0
        for j in range(n):
            assert result.interchange[i][j] == result.interchange[j][i] >= 0
            assert result.replacement[i][j] == max(result.directed[i][j], result.directed[j][i])
    assert min(result.pairs("replacement")) > 0  # distinct random blocks are not equivalent
    assert len(result.pairs("interchange")) == n * (n - 1) // 2


def test_swap_kl_leaves_the_model_unchanged():
    model = _model().train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    blocks = list(model.blocks)
    swap_kl(model, torch.randint(0, 257, (2, 8)))
    assert model.training and all(m.training for m in model.modules())
    assert all(a is b for a, b in zip(blocks, model.blocks, strict=True))
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_kl_to_base_matches_torch():
    p, q = torch.randn(2, 5, 7), torch.randn(2, 5, 7)
    ref = F.kl_div(F.log_softmax(q, -1), F.log_softmax(p, -1), log_target=True, reduction="none")
    assert kl_to_base(p, q) == pytest.approx(float(ref.sum(-1).mean()), rel=1e-5)
    assert kl_to_base(p, p) == 0.0
    assert kl_to_base(p, q, positions="last") == pytest.approx(
        float(ref[:, -1].sum(-1).mean()), rel=1e-5
    )


def test_pruning_order_is_sorted_and_never_adjacent():
    d = [[0, 5, 9, 9, 9], [5, 0, 1, 9, 9], [9, 1, 0, 9, 9], [9, 9, 9, 0, 2], [9, 9, 9, 2, 0]]
    # s = [5, 1, 1, 2, 2]: 1 first, 2 is adjacent to 1, then 3, then 4 is adjacent to 3
    assert pruning_order(d) == [1, 3]
    order = pruning_order([[abs(i - j) for j in range(8)] for i in range(8)])
    assert all(abs(a - b) > 1 for a in order for b in order if a != b)


def test_pruning_curve_starts_at_zero():
    model = _model(n_layers=5)
    x = torch.randint(0, 257, (2, 16))
    curve = pruning_curve(model, x, [1, 3], targets=x)
    assert curve.kl[0] == 0.0 and len(curve.kl) == len(curve.loss) == 3
    assert curve.kl[2] > 0


def test_random_pruning_orders_are_non_adjacent():
    import random

    from normlab.probes.swap import random_pruning_order

    rng = random.Random(0)
    for _ in range(50):
        order = random_pruning_order(8, 3, rng)
        assert len(set(order)) == 3 and all(abs(a - b) > 1 for a in order for b in order if a != b)
    with pytest.raises(ValueError, match="non-adjacent"):
        random_pruning_order(4, 3, rng)


def test_mean_cost_averages_the_loss_increase_over_budgets():
    from normlab.probes.swap import PruneCurve

    curve = PruneCurve(order=(0, 2), kl=(0.0, 0.1, 0.3), loss=(2.0, 2.5, 3.5))
    assert curve.mean_cost(1) == pytest.approx(0.5) and curve.mean_cost() == pytest.approx(1.0)


def test_guided_pruning_rows_and_placebo():
    import random

    from normlab.probes.swap import guided_pruning

    model = _model(n_layers=6)
    x = torch.randint(0, 257, (2, 16))
    rows, curves = guided_pruning(
        model, {"a": [1, 3, 5], "b": [4, 0]}, x, x, random_orders=3, rng=random.Random(0)
    )
    assert rows["a"]["budget"] == rows["b"]["budget"] == rows["random"]["budget"] == 2.0
    assert len(curves["a"]["loss"]) == 3 and len(curves["random"]) == 3  # budget 2: k = 0..2
    loss = curves["a"]["loss"]
    assert rows["a"]["removal_cost"] == pytest.approx((loss[1] + loss[2]) / 2 - loss[0])
    assert rows["a"]["cost_remove_1"] == pytest.approx(loss[1] - loss[0])
    placebo = [c["loss"] for c in curves["random"]]
    mean = sum((c[1] + c[2]) / 2 - c[0] for c in placebo) / 3
    assert rows["random"]["removal_cost"] == pytest.approx(mean)
