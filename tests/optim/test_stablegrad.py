"""StableGrad: forward untouched, per-layer gradient std equalised, torch optimizer conventions."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import normlab
from normlab.optim import StableGrad, rescale_weight_grads_


def _net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2)
    )


def _batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(32, 3, generator=g), torch.randn(32, 2, generator=g)


def _weights(net):
    return [p for p in net.parameters() if p.dim() >= 2]


def test_registered_as_optim():
    m = normlab.get("stablegrad")
    assert m.kind == "optim" and m.builder is StableGrad


def test_forward_and_loss_bit_identical_and_grad_std_equalised():
    net, ref = _net(), _net()
    x, y = _batch()
    opt = StableGrad(torch.optim.SGD(net.parameters(), lr=0.1))
    out = opt.watch(net(x))
    loss = (out - y).square().mean()
    out_ref = ref(x)
    assert torch.equal(out, out_ref) and torch.equal(loss, (out_ref - y).square().mean())
    loss.backward()
    # reference: std of dL/dy_hat computed directly
    o = ref(x).detach().requires_grad_(True)
    (go,) = torch.autograd.grad((o - y).square().mean(), o)
    s = float(go.double().std(correction=0))
    assert opt.reference_std() == pytest.approx(s, rel=1e-12)
    params = [p for g in opt.param_groups for p in g["params"]]
    rescale_weight_grads_(params, opt.reference_std())
    for w in _weights(net):
        assert float(w.grad.double().std(correction=0)) == pytest.approx(s, rel=1e-6)
    assert torch.equal(net(x), ref(x))  # the forward model is untouched


def test_last_reference_and_biases_untouched():
    net = _net()
    x, y = _batch()
    opt = StableGrad(torch.optim.SGD(net.parameters(), lr=0.0), reference="last")
    (net(x) - y).square().mean().backward()
    last = float(net[4].weight.grad.double().std(correction=0))
    bias = net[0].bias.grad.clone()
    opt.step()
    for w in _weights(net):
        assert float(w.grad.double().std(correction=0)) == pytest.approx(last, rel=1e-6)
    assert torch.equal(net[0].bias.grad, bias)


def test_output_reference_needs_watch():
    net = _net()
    x, y = _batch()
    opt = StableGrad(torch.optim.SGD(net.parameters(), lr=0.1))
    (net(x) - y).square().mean().backward()
    with pytest.raises(ValueError, match="watch"):
        opt.step()
    with pytest.raises(ValueError, match="reference"):
        StableGrad(torch.optim.SGD(net.parameters(), lr=0.1), reference="input")


def _train(net, opt, steps, seed=3):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = torch.randn(16, 3, generator=g), torch.randn(16, 2, generator=g)
        opt.zero_grad(set_to_none=True)
        (opt.watch(net(x)) - y).square().mean().backward()
        opt.step()


def test_state_dict_round_trip_resumes_identically():
    net = _net()
    opt = StableGrad(torch.optim.Adam(net.parameters(), lr=1e-2))
    _train(net, opt, 5)
    net2 = copy.deepcopy(net)
    opt2 = StableGrad(torch.optim.Adam(net2.parameters(), lr=1e-2))
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    _train(net, opt, 4, seed=9)
    _train(net2, opt2, 4, seed=9)
    for a, b in zip(net.parameters(), net2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_param_groups_scheduler_and_set_to_none():
    net = _net()
    base = torch.optim.SGD(
        [{"params": net[0].parameters(), "lr": 0.1}, {"params": net[2:].parameters()}], lr=0.01
    )
    opt = StableGrad(base)
    assert opt.param_groups is base.param_groups and len(opt.param_groups) == 2
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    _train(net, opt, 1)
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    opt.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in net.parameters())


def test_gradient_accumulation_equals_full_batch():
    x, y = _batch()
    net_a, net_b = _net(), _net()
    opt_a = StableGrad(torch.optim.SGD(net_a.parameters(), lr=0.1))
    opt_b = StableGrad(torch.optim.SGD(net_b.parameters(), lr=0.1))
    opt_a.zero_grad()
    (opt_a.watch(net_a(x)) - y).square().mean().backward()
    opt_a.step()
    opt_b.zero_grad()
    for xs, ys in zip(x.chunk(2), y.chunk(2), strict=True):
        ((opt_b.watch(net_b(xs)) - ys).square().mean() / 2).backward()
    opt_b.step()
    for a, b in zip(net_a.parameters(), net_b.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_grad_scaler_gives_the_unscaled_step():
    x, y = _batch()
    net_a, net_b = _net(), _net()
    opt_a = StableGrad(torch.optim.SGD(net_a.parameters(), lr=0.1))
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    opt_b = StableGrad(torch.optim.SGD(net_b.parameters(), lr=0.1), grad_scaler=scaler)
    (opt_a.watch(net_a(x)) - y).square().mean().backward()
    opt_a.step()
    scaler.scale((opt_b.watch(net_b(x)) - y).square().mean()).backward()
    scaler.unscale_(opt_b)
    scaler.step(opt_b)
    scaler.update()
    for a, b in zip(net_a.parameters(), net_b.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_zero_gradient_stays_zero():
    w, c = nn.Parameter(torch.ones(3, 3)), nn.Parameter(torch.ones(2, 2))
    w.grad, c.grad = torch.zeros(3, 3), torch.full((2, 2), 0.5)
    assert rescale_weight_grads_([w, c], 1.0) == [1.0, 1.0]
    assert torch.equal(w.grad, torch.zeros(3, 3)) and torch.equal(c.grad, torch.full((2, 2), 0.5))
