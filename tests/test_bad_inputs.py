"""Every registered method on every awkward input: a right answer, a clear error, or NaN
confined to the row it came from; never a silent NaN, silent zeros, a wrong answer or a crash.

Driven by ``normlab.methods()``: each kind has an adapter that builds the method, feeds it
an input and returns a tensor, and says what a "row" is (the unit a bad value may spoil).
Each cell is compared with the same method in float64 on the same values (quantizers, which
compute in float32 whatever they get, against their own result at a unit scale: a quantizer
is scale-equivariant). ``python tests/test_bad_inputs.py`` prints the matrix and its counts.

Cells: ``ok``; ``clear error`` (ValueError/TypeError raised by normlab's own code, so its
message is normlab's); ``confined NaN``; ``n/a``; and the failures ``silent NaN``,
``silent zeros``, ``inaccurate`` (finite but off from float64) and ``crash`` (any other
exception, or an error raised from inside torch).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import normlab
from normlab import functional as NF

SRC = str(Path(normlab.__file__).parent)
D = 8  # feature size
GOOD = ("ok", "clear error", "confined NaN", "n/a")

INPUTS = (
    "normal",
    "nan",
    "+inf",
    "-inf",
    "1e19",
    "1e-30",
    "zeros",
    "empty",
    "0-d",
    "1-D",
    "wrong size",
    "int",
    "bf16",
    "fp16",
    "float64",
    "non-contiguous",
    "masked row",
)
SERIES_INPUTS = (
    "offset 1e6",
    "offset 1e6 round trip",
    "constant window",
    "1e30",
    "length 1",
    "wrong batch state",
    "huge forecast",
)


class NotApplicable(Exception):
    """The input does not exist for this kind (e.g. a masked row for a layer norm)."""


@dataclass
class Case:
    """How one method meets a tensor: ``run(x)`` in its own dtype, ``rows(t)`` the units."""

    run: Callable[[torch.Tensor], torch.Tensor]
    ref: Callable[[torch.Tensor], torch.Tensor]
    shape: tuple[int, ...]
    rows: Callable[[torch.Tensor], torch.Tensor]
    feature_dim: int | None = -1  # which dim "wrong size" shrinks; None: no feature size
    min_rank: int = 1
    #: the rows of the output an input's bad entries may spoil (default: the same rows)
    spoils: Callable[[torch.Tensor], torch.Tensor] | None = None


def _last_rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1]) if t.dim() else t.reshape(1, 1)


def _sample_rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], -1) if t.dim() else t.reshape(1, 1)


def _module_case(method: normlab.Method) -> Case:
    if method.layout == "scores":
        module = method.create()
        shape, rows, feat = (2, 3, 6), _last_rows, None
    else:
        module = method.create(D)
        if method.layout == "channels_first":
            shape, rows, feat = (2, D, 5, 5), _sample_rows, 1
        else:
            shape, rows, feat = (2, 3, D), _last_rows, -1
    with torch.no_grad():  # non-trivial affine parameters, so they take part
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(5)))
    double = copy.deepcopy(module).double()
    return Case(module, double, shape, rows, feat)


def _index(x: torch.Tensor) -> torch.Tensor | None:
    """Each window's absolute time step (PAMod reads it; the others ignore it)."""
    return torch.arange(x.shape[0]) * 5 if x.dim() else None


def _series_case(method: normlab.Method) -> Case:
    module = method.create(2, lookback=12, horizon=4, periods=(4,))
    double = copy.deepcopy(module).double()
    return Case(
        lambda x: module.normalize(x, index=_index(x))[0],
        lambda x: double.normalize(x, index=_index(x))[0],
        (2, 12, 2),
        _sample_rows,
        -1,
    )


def _advantage_case(method: normlab.Method) -> Case:
    if method.name == "p-grpo":

        def fn(r: torch.Tensor) -> torch.Tensor:
            ids = torch.arange(r.shape[0] if r.dim() else 1) // 4
            return method.create()(r, ids)
    else:

        def fn(r: torch.Tensor) -> torch.Tensor:
            return method.create(r, 4)

    def rows(t: torch.Tensor) -> torch.Tensor:  # a group of 4 rewards
        return t.reshape(-1, 4) if t.numel() % 4 == 0 and t.dim() == 1 else t.reshape(1, -1)

    return Case(fn, fn, (8,), rows, 0)


def _optim_case(method: normlab.Method) -> Case:
    def fn(g: torch.Tensor) -> torch.Tensor:
        w = torch.nn.Parameter(
            torch.randn(g.shape, generator=torch.Generator().manual_seed(3)).to(g.dtype)
        )
        if not g.is_contiguous():  # the parameter shares the gradient's layout
            w = torch.nn.Parameter(w.detach().mT.contiguous().mT)
        other = torch.nn.Parameter(torch.eye(D, dtype=g.dtype))
        if method.name == "stablegrad":
            opt = method.create(torch.optim.SGD([w, other], lr=0.1), reference="last")
        else:
            opt = method.create([w, other], lr=0.1)
        w.grad, other.grad = g.clone(), torch.ones_like(other) / D
        opt.step()
        return torch.cat([w.detach().reshape(-1), other.detach().reshape(-1)])

    def rows(t: torch.Tensor) -> torch.Tensor:  # the stepped parameter, then the other one
        w, o = t[: -D * D], t[-D * D :]
        out = torch.zeros(2, max(w.numel(), o.numel()), dtype=t.dtype)
        out[0, : w.numel()], out[1] = w, o
        return out

    def spoils(bad: torch.Tensor) -> torch.Tensor:  # a bad gradient may spoil its parameter
        return torch.stack([bad.any(), torch.tensor(False)])

    return Case(fn, fn, (D, D), rows, None, min_rank=2, spoils=spoils)


def _flow_case(method: normlab.Method) -> Case:
    module = method.create(D)
    double = copy.deepcopy(module).double()
    return Case(module, double, (3, D), _last_rows, -1)


def _quant_case(method: normlab.Method) -> Case:
    if method.name == "nsnquant":
        quantizer = method.create(bits=2, samples=2048)

        def fn(x: torch.Tensor) -> torch.Tensor:
            return quantizer.dequantize(quantizer.quantize(x), x.dtype)

        shape: tuple[int, ...] = (2, 6, 16)
        rows = _sample_rows  # one chunk: its shift couples every token
    else:
        fn = method.create()
        shape, rows = (2, 64), _last_rows

    def ref(x: torch.Tensor) -> torch.Tensor:
        # scale-equivariance: the same values brought to unit scale by a power of two
        amax = x.abs().amax() if x.numel() else torch.ones(())
        finite = amax.isfinite() and amax > 0
        s = torch.exp2(torch.floor(torch.log2(amax))) if finite else torch.ones(())
        return (fn((x / s).float()).double() * s).to(x.dtype)

    return Case(fn, ref, shape, rows, None)


ADAPTERS: dict[str, Callable[[normlab.Method], Case]] = {
    "norm": _module_case,
    "activation": _module_case,
    "score": _module_case,
    "series": _series_case,
    "advantage": _advantage_case,
    "optim": _optim_case,
    "flow": _flow_case,
    "quant": _quant_case,
}


def _normal(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 2 + 0.5


def make_input(name: str, kind: str, case: Case) -> torch.Tensor:
    x = _normal(case.shape)
    if name == "normal":
        return x
    if name in ("nan", "+inf", "-inf"):
        x.view(-1)[0] = {"nan": math.nan, "+inf": math.inf, "-inf": -math.inf}[name]
        return x
    if name == "1e19":
        return x * 1e19
    if name == "1e-30":
        return x * 1e-30
    if name == "zeros":
        return torch.zeros_like(x)
    if name == "empty":
        return x[:0]
    if name == "0-d":
        return x.reshape(-1)[0].clone()
    if name == "1-D":
        if len(case.shape) == 1:
            raise NotApplicable
        return x.reshape(-1)[: case.shape[-1]].clone()
    if name == "wrong size":
        if case.feature_dim is None:
            raise NotApplicable
        return x.narrow(case.feature_dim, 0, x.shape[case.feature_dim] - 1).clone()
    if name == "int":
        if kind == "optim":
            raise NotApplicable  # torch itself refuses an integer parameter
        return x.round().to(torch.int64)
    if name in ("bf16", "fp16"):
        return x.to(torch.bfloat16 if name == "bf16" else torch.float16)
    if name == "float64":
        return x.double()
    if name == "non-contiguous":
        if x.dim() < 2:
            return torch.randn(2 * x.shape[0], generator=torch.Generator().manual_seed(1))[::2]
        return x.mT.contiguous().mT
    if name == "masked row":
        if kind != "score":
            raise NotApplicable
        x[0, 1] = -math.inf
        x[1, 0, :2] = -math.inf  # a partly masked row, too
        return x
    raise ValueError(name)


def make_series_input(name: str) -> tuple[torch.Tensor, Callable | None]:
    """A series input, and for round trips the check to run on the normalizer."""
    x = _normal((2, 12, 2))
    if name == "offset 1e6":
        return x + 1e6, None
    if name == "offset 1e6 round trip":
        return x + 1e6, "invert"
    if name == "constant window":
        return torch.full((2, 12, 2), 3.0), None
    if name == "1e30":
        return x * 1e30, None
    if name == "length 1":
        return x[:, :1], None
    if name == "wrong batch state":
        return x, "wrong batch"
    if name == "huge forecast":
        return x, "huge forecast"
    raise ValueError(name)


def _own_error(err: BaseException) -> bool:
    """A ValueError/TypeError raised by normlab's own code (not from inside torch)."""
    if not isinstance(err, ValueError | TypeError) or not str(err).strip():
        return False
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(SRC)


def _bad(x: torch.Tensor, scores: bool) -> torch.Tensor:
    """Entries that may spoil their row: NaN and inf (for scores -inf is a mask, not bad)."""
    return torch.isnan(x) | (x == math.inf) if scores else ~torch.isfinite(x)


def _compare(
    y: torch.Tensor, ref: torch.Tensor, x: torch.Tensor, case: Case, tol: float, scores: bool
) -> str:
    """The verdict for a finished call: output ``y``, float64 reference ``ref``."""
    if y.shape != ref.shape:
        return "inaccurate"
    if y.numel() == 0:
        return "ok"
    yr, rr = case.rows(y.double()), case.rows(ref.double())
    if case.spoils is not None:
        bad_in = case.spoils(_bad(x, scores))
    elif x.shape == y.shape:
        bad_in = _bad(case.rows(x.double()), scores).any(-1)
    else:  # no row map: a bad value anywhere may spoil the whole output
        bad_in = _bad(x, scores).any().expand(yr.shape[0])
    clean = ~bad_in
    bad_out = ~torch.isfinite(yr).all(-1)
    if bool((bad_out & clean).any()):
        return "silent NaN"
    yc, rc = yr[clean], rr[clean]
    scale = rc.abs().amax().clamp_min(1e-300) if rc.numel() else torch.ones(())
    err = (yc - rc).abs().amax() if rc.numel() else torch.zeros(())
    if float(err) > tol * max(float(scale), 1e-6):
        zero = bool((yc == 0).all()) or bool(((yc == 0).all(-1) & (rc != 0).any(-1)).any())
        return "silent zeros" if zero else "inaccurate"
    return "confined NaN" if bool(bad_out.any()) else "ok"


def _tolerance(x: torch.Tensor, kind: str) -> float:
    if x.dtype in (torch.bfloat16, torch.float16):
        return 5e-2
    return 2e-3 if kind in ("optim", "quant") else 1e-4


def cell(method: normlab.Method, name: str) -> str:
    torch.manual_seed(0)
    try:
        case = ADAPTERS[method.kind](method)
        x = make_input(name, method.kind, case)
    except NotApplicable:
        return "n/a"
    try:
        with torch.no_grad():
            y = case.run(x)
    except Exception as err:
        return "clear error" if _own_error(err) else "crash"
    if not isinstance(y, torch.Tensor) or not y.is_floating_point():
        return "inaccurate"
    if x.is_floating_point() and y.dtype != x.dtype:
        return "inaccurate"
    with torch.no_grad():
        ref = case.ref(x.double())
    return _compare(y, ref, x, case, _tolerance(x, method.kind), method.kind == "score")


def series_cell(method: normlab.Method, name: str) -> str:
    torch.manual_seed(0)
    x, check = make_series_input(name)
    module = method.create(2, lookback=12, horizon=4, periods=(4,))
    double = copy.deepcopy(module).double()
    try:
        with torch.no_grad():
            if check == "wrong batch":
                _, state = module.normalize(x, index=_index(x))
                module.denormalize(torch.zeros(3, 4, 2), state)
                return "inaccurate"  # a state of 2 windows used for 3 forecasts went through
            if check == "huge forecast":
                _, state = module.normalize(x, index=_index(x))
                _, state64 = double.normalize(x.double(), index=_index(x))
                f = torch.full((2, 4, 2), 1e30)
                return _compare(
                    module.denormalize(f, state),
                    double.denormalize(f.double(), state64),
                    f,
                    _series_case(method),
                    1e-4,
                    False,
                )
            z, state = module.normalize(x, index=_index(x))
            y = module.invert(z, state) if check == "invert" else z
    except Exception as err:
        return "clear error" if _own_error(err) else "crash"
    if check == "invert":  # the round trip gives the window back to float32 resolution
        err = float((y.double() - x.double()).abs().max())
        return "ok" if err <= 4 * torch.finfo(x.dtype).eps * float(x.abs().max()) else "inaccurate"
    with torch.no_grad():
        ref = double.normalize(x.double(), index=_index(x))[0]
    return _compare(y, ref, x, _series_case(method), 1e-4, False)


def _skip_missing(method: normlab.Method) -> None:
    if method.name == "entmax15":
        pytest.importorskip("entmax")


@functools.cache
def matrix() -> dict[tuple[str, str], str]:
    cells = {}
    for m in normlab.methods():
        for name in INPUTS:
            cells[m.name, name] = cell(m, name)
        if m.kind == "series":
            for name in SERIES_INPUTS:
                cells[m.name, name] = series_cell(m, name)
    return cells


METHODS = normlab.methods()
#: Methods with a fused kernel (normlab.kernels): their cells are also run on the plain path.
KERNELED = {"layernorm", "rmsnorm", "dyt", "dyt-regime", "softmax1"}
RUNS = [(m, "default") for m in METHODS] + [
    (m, "kernels off") for m in METHODS if m.name in KERNELED
]


@pytest.mark.parametrize(
    ("method", "path"), RUNS, ids=[f"{m.name}-{p.replace(' ', '-')}" for m, p in RUNS]
)
def test_every_input_is_answered_refused_or_confined(method, path):
    _skip_missing(method)
    names = INPUTS + (SERIES_INPUTS if method.kind == "series" else ())
    with normlab.kernels.disabled() if path == "kernels off" else contextlib.nullcontext():
        verdicts = {
            n: (series_cell(method, n) if n in SERIES_INPUTS else cell(method, n)) for n in names
        }
    wrong = {n: v for n, v in verdicts.items() if v not in GOOD}
    assert not wrong, f"{method.name}: {wrong}"
    assert verdicts["normal"] == "ok"
    assert verdicts["float64"] == "ok"


def test_the_matrix_covers_every_kind():
    assert {m.kind for m in METHODS} == set(normlab.KINDS)
    assert set(ADAPTERS) == set(normlab.KINDS)


HUGE = ["layernorm", "rmsnorm", "hypersphere", "quadnorm", "blendquadnorm", "approx-layernorm"]


@pytest.mark.parametrize("name", HUGE)
@pytest.mark.parametrize("scale", [1e19, 1e30, 2.0**120])
def test_norms_do_not_overflow_at_huge_values(name, scale):
    # before: zeros from layernorm, rmsnorm, hypersphere, quadnorm, blendquadnorm; NaN from
    # approx-layernorm
    case = _module_case(normlab.get(name))
    x = _normal(case.shape)
    y = case.run(x * scale)
    torch.testing.assert_close(y, case.run(x), rtol=1e-4, atol=1e-4)  # scale-invariant
    torch.testing.assert_close(y.double(), case.ref(x.double() * scale), rtol=1e-4, atol=1e-4)
    if y.requires_grad:  # the affine parameters get finite gradients
        (y * torch.randn(y.shape, generator=torch.Generator().manual_seed(3))).sum().backward()
        assert all(p.grad is not None and p.grad.isfinite().all() for p in case.run.parameters())


@pytest.mark.parametrize("name", HUGE)
def test_huge_rows_do_not_change_the_other_rows(name):
    case = _module_case(normlab.get(name))
    x = _normal(case.shape)
    mixed = x.clone()
    mixed[0] = mixed[0] * 1e25
    y, ref = case.run(mixed), case.run(x)
    torch.testing.assert_close(y[1:], ref[1:], rtol=0, atol=0)  # the fast path, bit for bit
    torch.testing.assert_close(y[0], ref[0], rtol=1e-4, atol=1e-4)


def test_gradients_through_the_rescaled_path_match_float64():
    x = (_normal((2, D)) * 1e20).requires_grad_()
    w = torch.randn(2, D, generator=torch.Generator().manual_seed(2))
    for fn in (
        lambda t: NF.layer_norm(t, (D,)),
        lambda t: NF.rms_norm(t, (D,), eps=1e-6),
        lambda t: NF.l2_normalize(t),
    ):
        x.grad = None
        (fn(x) * w).sum().backward()
        x64 = x.detach().double().requires_grad_()
        (fn(x64) * w.double()).sum().backward()
        torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-28)


SCORES = [m.name for m in normlab.methods(kind="score")]


@pytest.mark.parametrize("name", SCORES)
def test_every_score_normalizer_gives_zeros_on_a_fully_masked_row(name):
    # before: softmax gave NaN there and the other seven zeros
    if name == "entmax15":
        pytest.importorskip("entmax")
    x = _normal((3, 5))
    x[1] = -math.inf
    x[2, :2] = -math.inf
    x.requires_grad_()
    p = normlab.create(name)(x)
    assert torch.equal(p[1].detach(), torch.zeros(5))
    assert torch.isfinite(p).all() and (p[[0, 2]].sum(-1) > 0).all()
    assert torch.equal(p[2, :2].detach(), torch.zeros(2))
    p.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.equal(x.grad[1], torch.zeros(5))


def _counts(cells: dict[tuple[str, str], str]) -> dict[str, int]:
    return dict(Counter(cells.values()))


if __name__ == "__main__":
    paths = (("default", contextlib.nullcontext), ("kernels off", normlab.kernels.disabled))
    for label, ctx in paths:
        matrix.cache_clear()
        with ctx():
            cells = matrix()
        for (m, n), v in cells.items():
            if v not in GOOD:
                print(f"{label:12s} {m:20s} {n:24s} {v}")
        print(label, _counts(cells), "cells:", len(cells))
