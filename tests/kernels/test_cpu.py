"""The CPU fast paths equal the plain torch path, forward and backward, and fall back."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest
import torch

from normlab import kernels as K
from normlab.kernels import _dispatch, cpu
from normlab.kernels import autograd as KA
from normlab.layers import DyT, LayerNorm, RMSNorm
from tests.kernels._cases import CASES, assert_close, make_inputs, run

DTYPES = (torch.float32, torch.bfloat16)


@pytest.fixture(scope="session", autouse=True)
def library() -> None:
    """Build (or load) the library once; skip everything where no compiler exists."""
    if cpu.library() is None:
        pytest.skip("no C++ compiler: the CPU kernels are unavailable here")


def _fast_fns() -> tuple[str, ...]:
    return tuple(f"{cls.__name__}Backward" for cls in (
        KA.RMSNormFn, KA.AddRMSNormFn, KA.LayerNormFn, KA.DyTFn, KA.Softmax1Fn
    ))  # fmt: skip


def _on_fast_path(y: torch.Tensor) -> bool:
    fn = y.grad_fn
    while fn is not None and type(fn).__name__.startswith(("View", "Reshape", "Unsafe")):
        fn = fn.next_functions[0][0]  # the reshape back to the caller's shape
    return fn is not None and type(fn).__name__.startswith(_fast_fns())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "strided"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_fast_path_equals_reference(name: str, dtype: torch.dtype, contiguous: bool) -> None:
    fast, ref, _ = CASES[name]
    inputs = make_inputs(name, (5, 123, 1023), dtype, contiguous=contiguous)
    before = [t.clone() for t in inputs]
    outs, grads_in, grads_out = run(fast, inputs, None)
    kept = [g.clone() for g in grads_out]
    ref_outs, ref_grads, _ = run(ref, inputs, grads_out)
    for i, (a, b) in enumerate(zip(outs, ref_outs, strict=True)):
        assert a.dtype == b.dtype
        assert_close(a, b, dtype, f"{name} output {i}")
    for i, (a, b) in enumerate(zip(grads_in, ref_grads, strict=True)):
        assert_close(a, b, dtype if inputs[i].dtype == dtype else torch.float32, f"grad {i}")
    for t, t0 in zip([*inputs, *grads_out], [*before, *kept], strict=True):
        assert torch.equal(t, t0), "a caller's tensor was changed in place"


@pytest.mark.parametrize("name", sorted(CASES))
def test_zero_rows(name: str) -> None:
    fast, ref, _ = CASES[name]
    inputs = make_inputs(name, (0, 1023), torch.float32, contiguous=True)
    outs, grads, g = run(fast, inputs, None)
    ref_outs, ref_grads, _ = run(ref, inputs, g)
    for a, b in zip([*outs, *grads], [*ref_outs, *ref_grads], strict=True):
        assert_close(a, b, torch.float32, name)


def test_layers_use_the_fast_path_and_the_switches_turn_it_off() -> None:
    x = torch.randn(4, 8, 64, requires_grad=True)
    layers = [RMSNorm(64), LayerNorm(64), DyT(64)]
    for layer in layers:
        assert _on_fast_path(layer(x)), type(layer).__name__
    assert _on_fast_path(K.softmax1(x))
    with K.disabled():
        assert not K.enabled()
        with K.disabled():  # nested blocks restore the outer state
            pass
        assert not K.enabled()
        assert not any(_on_fast_path(layer(x)) for layer in layers)
    assert K.enabled()
    torch_layers = [RMSNorm(64, backend="torch"), LayerNorm(64, backend="torch")]
    torch_layers.append(DyT(64, backend="torch"))
    for plain, fast in zip(torch_layers, layers, strict=True):
        y = plain(x)
        assert not _on_fast_path(y) and "backend='torch'" in repr(plain)
        torch.testing.assert_close(y, fast(x), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="backend must be one of"):
        RMSNorm(64, backend="triton")
    code = "import normlab.kernels as K; print(K.enabled())"
    env = {**os.environ, "NORMLAB_KERNELS": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
    assert not hasattr(K, "use_kernels"), "the global switch object is gone (issue 28.3)"


def test_plain_path_where_no_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(cpu, "build", fail)
    monkeypatch.setattr(_dispatch, "_READY", {})
    cpu.reset()
    try:
        with pytest.warns(RuntimeWarning, match="CPU kernels are unavailable"):
            assert cpu.library() is None and not K.available("cpu")
        x = torch.randn(3, 16, requires_grad=True)
        y = RMSNorm(16)(x)
        assert not _on_fast_path(y)
        torch.testing.assert_close(y, torch.nn.functional.rms_norm(x, (16,)))
    finally:
        cpu.reset()
    monkeypatch.undo()
    assert cpu.library() is not None


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm", "dyt"])
def test_weight_gradients_are_deterministic(name: str) -> None:
    fast = CASES[name][0]
    inputs = make_inputs(name, (300, 1023), torch.float32, contiguous=True)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        _, g1, grads = run(fast, inputs, None)
        torch.set_num_threads(2)
        _, g2, _ = run(fast, inputs, grads)
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(g1[1:], g2[1:], strict=True):
        assert torch.equal(a, b)


def test_dyt_tanh_is_within_1e6_of_torch() -> None:
    z = torch.linspace(-30.0, 30.0, 600_001).reshape(1, -1)
    z = torch.cat([z, torch.logspace(-12, 1, 100).reshape(1, -1).repeat(1, 6001)[:, :600_001]])
    y = K.dyt(z, torch.tensor([1.0]))
    assert (y - torch.tanh(z)).abs().max().item() <= 1e-6


def test_dyt_backward_tanh_vector_form_equals_the_scalar_form() -> None:
    """DyT's backward computes tanh by an explicit vector form; it must give gcc's vectorised
    scalar form's values bit for bit (the backward's outputs did not move), within 1e-7 of
    float64's tanh."""
    bits = torch.arange(0, 0x7F800000, 4099, dtype=torch.int64).to(torch.int32)
    z = bits.view(torch.float32)
    z = torch.cat([z, -z, torch.tensor([float("nan"), float("inf"), -float("inf"), 0.4, -0.4])])
    z = torch.cat([z, torch.linspace(-10, 10, 100_003)])  # not a multiple of 16: masked tail
    out = {}
    for vector in (0, 1):
        out[vector] = torch.empty_like(z)
        cpu.library().nl_tanh_precise(z.data_ptr(), out[vector].data_ptr(), z.numel(), vector)
    assert torch.equal(out[0].view(torch.int32), out[1].view(torch.int32))
    finite = z.isfinite()
    assert (out[1][finite].double() - torch.tanh(z[finite].double())).abs().max() < 1e-7
    nan, inf, minus_inf = out[1][~finite].tolist()  # |z| is clamped at 9: 1 - 6e-8
    assert nan != nan and 1 - inf < 1e-7 and 1 + minus_inf < 1e-7


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=str)
def test_dyt_16bit_output_is_faithfully_rounded(dtype: torch.dtype) -> None:
    """Into a 16-bit output the forward's tanh is the short rational: within its stated 5.3e-5
    relative error before rounding, so every output is within one ulp of float64's tanh."""
    z = torch.linspace(-12.0, 12.0, 400_001)
    tiny = torch.logspace(-30, 1, 5_000)
    x = torch.cat([z, tiny, -tiny, torch.tensor([float("nan")])]).to(dtype)
    y = K.dyt(x.reshape(1, -1), torch.tensor([1.0])).reshape(-1).double()
    t = torch.tanh(x.double())
    assert y[-1].isnan()
    y, t = y[:-1], t[:-1]
    info = torch.finfo(dtype)  # an ulp, subnormals' spacing included
    ulp = info.eps * torch.exp2(torch.floor(torch.log2(t.abs()))).clamp_min(info.smallest_normal)
    err = (y - t).abs()
    assert bool((err <= ulp / 2 + 5.3e-5 * t.abs()).all())
    assert (err / ulp).max().item() < 1.0
    assert y.abs().max().item() <= 1.0


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16), ids=str)
def test_dyt_value_does_not_depend_on_the_column(dtype: torch.dtype) -> None:
    """The kernel runs 64 columns at a time and a row's last columns apart: a value (clamped,
    NaN and tiny ones included) comes out the same wherever it sits in the row."""
    row = torch.cat([torch.randn(900) * 10, torch.tensor([float("nan"), 1e-30, -20.0])])
    row = row[torch.randperm(row.numel(), generator=torch.Generator().manual_seed(0))]
    x = torch.stack([row.roll(k) for k in (0, 37, 500, 901)]).to(dtype)
    y = K.dyt(x, torch.tensor([0.7]), torch.full((903,), 1.3), torch.full((903,), 0.1))
    for i, k in enumerate((0, 37, 500, 901)):
        assert torch.equal(y[i].float().nan_to_num(7.0), y[0].roll(k).float().nan_to_num(7.0))


def test_softmax1_masked_row_is_zero_and_bf16_weight_mix() -> None:
    x = torch.full((2, 7), -torch.inf)
    x[1] = torch.randn(7)
    y = K.softmax1(x)
    assert torch.equal(y[0], torch.zeros(7)) and torch.isfinite(y).all()
    xb = torch.randn(6, 32, dtype=torch.bfloat16, requires_grad=True)
    layer = RMSNorm(32, eps=1e-6)  # float32 weight, bfloat16 input
    with torch.no_grad():
        layer.weight.uniform_(0.5, 1.5)
    y = layer(xb)
    with K.disabled():
        ref = layer(xb)
    assert y.dtype == torch.bfloat16
    assert_close(y, ref, torch.bfloat16, "bf16 input, fp32 weight")


def test_double_backward_matches_reference() -> None:
    x = torch.randn(4, 32, requires_grad=True)
    w = torch.randn(32, requires_grad=True)
    got = []
    for on in (True, False):
        with contextlib.nullcontext() if on else K.disabled():
            for fn in (lambda: K.rms_norm(x, (32,), w), lambda: K.layer_norm(x, (32,), w)):
                (gx,) = torch.autograd.grad((fn() ** 3).sum(), x, create_graph=True)
                got.append(torch.autograd.grad(gx.pow(2).sum(), (x, w)))
            y = K.softmax1(x)
            (gx,) = torch.autograd.grad((y**2).sum(), x, create_graph=True)
            got.append(torch.autograd.grad(gx.pow(2).sum(), x))
    for a, b in zip(got[:3], got[3:], strict=True):
        for u, v in zip(a, b, strict=True):
            torch.testing.assert_close(u, v, atol=1e-4, rtol=1e-4)


class _Block(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(d, d)
        self.rms, self.ln, self.dyt = RMSNorm(d), LayerNorm(d), DyT(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dyt(self.ln(self.rms(self.lin(x))))
        y, s = K.add_rms_norm(h, x, (x.shape[-1],), self.rms.weight)
        y = y + K.add_layer_norm(h, x, (x.shape[-1],), self.ln.weight, self.ln.bias)[0]
        return K.softmax1(y) + s


@pytest.mark.slow
def test_under_torch_compile() -> None:
    model = _Block(24)
    x = torch.randn(3, 5, 24)
    ref = model(x)
    ref.square().sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    y = compiled(x)
    y.square().sum().backward()
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)
    for p, g in zip(model.parameters(), ref_grads, strict=True):
        torch.testing.assert_close(p.grad, g, atol=1e-5, rtol=1e-5)


def test_a_two_dim_input_goes_as_it_is_and_several_trailing_dims_still_make_one_row() -> None:
    """A (rows, d) input reaches the kernel without a reshape (its output's grad_fn is the
    kernel's own node: a view would add ~5 us a call each way), while a normalized shape of
    several dimensions is still one row: (4, 8) normalized over (4, 8) is one row of 32."""
    from normlab import functional as NF

    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(4, 8, generator=g).requires_grad_() for _ in range(3))
    y = K.layer_norm(x, (4, 8), w, b)
    want = NF.layer_norm(x, (4, 8), w, b)
    assert y.shape == (4, 8) and _on_fast_path(y)
    torch.testing.assert_close(y, want)
    dy = torch.randn(4, 8, generator=g)
    got = torch.autograd.grad(y, (x, w, b), dy)
    for a, e in zip(got, torch.autograd.grad(want, (x, w, b), dy), strict=True):
        torch.testing.assert_close(a, e)
    x2, w2 = torch.randn(6, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    assert type(K.rms_norm(x2, (8,), w2).grad_fn).__name__ == "RMSNormFnBackward"
    assert type(K.layer_norm(x2, (8,)).grad_fn).__name__ == "LayerNormFnBackward"
