"""Forward error of LayerNorm, RMSNorm and softmax in fp16/bf16 against float64.

Seed paper "numerics" (mixed-precision analysis of transformer inference) compares LayerNorm
and RMSNorm in the massive-outlier regime and the shifted evaluation of softmax with
attention sinks. normlab measures both and sets them beside first-order condition numbers.

Norms. For ``f(x) = (x - mu) / sqrt(var + eps)`` (LayerNorm) or ``x / sqrt(mean(x^2) + eps)``
(RMSNorm) with Jacobian ``J``, the error of the *bulk* channels ``S`` (all but the planted
outliers) under componentwise input perturbations ``|dx_j| <= u |x_j|`` is bounded to first
order by ``u * kappa_S`` with

    kappa_S(x) = || (|J| |x|)_S ||_2 / || f_S(x) ||_2,
    J_LN  = (I - 1 1^T / d - c c^T / (d s^2)) / s,   c = x - mu, s = sqrt(var + eps),
    J_RMS = (I - x x^T / (d r^2)) / r,               r = sqrt(mean(x^2) + eps).

For RMSNorm ``kappa_S <= 2`` whatever the outlier; for LayerNorm the outlier's own
perturbation cancels as ``M`` grows (LayerNorm is scale invariant), so ``kappa_S`` stays
O(1) too: input rounding alone does not separate the two norms. What can separate them is
the arithmetic. ``compute="native"`` does every operation in the low dtype (pairwise sums
rounded at each level, like a tree reduction); ``"upcast"`` computes in float32 and rounds
the output, as torch's CPU norms do. normlab's first-order *running* bound for the native
evaluation (:func:`error_bound`, ``L = ceil(log2 d)`` levels of pairwise summation) adds,
to the input term ``kappa_S``, the mean's absolute error ``u (L mean|x| + |mu|)`` seen
through the bulk (``/ rms_S(x - mu)``, LayerNorm only), the rounding of ``x - mu`` (2u), the
relative error of the sum of squares (``u (L + 2) / 2`` on the scale) and the square root
and division (2u); upcast evaluation is bounded by ``u (kappa_S + 1)``. These are normlab's
derivations, not the paper's (its bounds are not public). In fp16 without upcast, ``x^2``
overflows for ``|x| > 256`` in both norms.

Residual scaling (:func:`residual_scaling_errors`): the paper's GPT-2 experiment, the
relative rounding error along a trained model's residual stream with its residual
projections scaled.

Softmax (:mod:`normlab.probes._softmax_numerics`, re-exported here): shifted vs unshifted
evaluation with a sink logit; the shifted form's error grows with ``max |x - max(x)|``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from normlab._records import Record
from normlab.probes._lowp import pairwise_sum, round_to, unit_roundoff
from normlab.probes._softmax_numerics import SoftmaxError, lowp_softmax, sink_sweep

__all__ = [
    "FP16_SQUARE_LIMIT",
    "NormError",
    "SoftmaxError",
    "bound_failures",
    "condition_number",
    "error_bound",
    "expected_overflow",
    "lowp_norm",
    "lowp_softmax",
    "norm_sweeps",
    "outlier_sweep",
    "rank_correlation",
    "residual_scaling_errors",
    "residual_scaling_table",
    "sink_sweep",
    "sweep_table",
    "unit_roundoff",
]


def lowp_norm(
    x: torch.Tensor, kind: str, dtype: torch.dtype, *, compute: str = "native", eps: float = 1e-5
) -> torch.Tensor:
    """LayerNorm or RMSNorm (no affine) of ``x`` evaluated in ``dtype``, returned in fp64.

    Args:
        x: input ``(..., d)`` in high precision; it is rounded to ``dtype`` first.
        kind: "layernorm" or "rmsnorm".
        dtype: torch.float16 or torch.bfloat16 (or float32).
        compute: "native" (every operation rounded to ``dtype``) or "upcast" (float32
            arithmetic, output rounded to ``dtype``).
        eps: the norm's epsilon.

    Examples:
        >>> x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        >>> exact = x / x.square().mean(-1, keepdim=True).add(1e-5).sqrt()
        >>> y = lowp_norm(x, "rmsnorm", torch.bfloat16)
        >>> err = (y - exact).norm(dim=-1) / exact.norm(dim=-1)
        >>> y.dtype, bool((err <= error_bound(x, "rmsnorm", torch.bfloat16)).all())
        (torch.float64, True)
        >>> big = torch.full((4,), 300.0)  # fp16 native: 300^2 overflows and the output is 0
        >>> for compute in ("native", "upcast"):
        ...     print(compute, lowp_norm(big, "rmsnorm", torch.float16, compute=compute).tolist())
        native [0.0, 0.0, 0.0, 0.0]
        upcast [1.0, 1.0, 1.0, 1.0]
    """
    if kind not in ("layernorm", "rmsnorm") or compute not in ("native", "upcast"):
        raise ValueError(
            f"kind must be layernorm/rmsnorm and compute native/upcast, got {kind!r}, {compute!r}."
        )
    d = x.shape[-1]
    xl = x.to(dtype)
    if compute == "upcast":
        xf = xl.float()
        if kind == "layernorm":
            y = F.layer_norm(xf, (d,), eps=eps)
        else:
            y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
        return y.to(dtype).double()
    xf = xl.double()
    if kind == "layernorm":
        mu = round_to(pairwise_sum(xf, dtype).double() / d, dtype)
        c = round_to(xf - mu[..., None], dtype)
    else:
        c = xf
    ms = round_to(pairwise_sum(round_to(c * c, dtype), dtype).double() / d, dtype)
    scale = round_to(torch.sqrt(round_to(ms + eps, dtype)), dtype)
    return round_to(c / scale[..., None], dtype).double()


def _exact_norm(x: torch.Tensor, kind: str, eps: float) -> torch.Tensor:
    xd = x.double()
    if kind == "layernorm":
        return F.layer_norm(xd, (xd.shape[-1],), eps=eps)
    return xd / torch.sqrt(xd.square().mean(-1, keepdim=True) + eps)


def condition_number(
    x: torch.Tensor, kind: str, *, bulk: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """``kappa_S = ||(|J| |x|)_S|| / ||f_S(x)||`` per row of ``x`` ``(..., d)``, in float64.

    Args:
        x: inputs.
        kind: "layernorm" or "rmsnorm".
        bulk: boolean mask ``(d,)`` of the channels ``S`` to measure (default: all).
        eps: the norm's epsilon.

    Examples:
        >>> x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        >>> x[:, 0] += 1e3  # a massive activation in channel 0; the bulk is the rest
        >>> kappa = condition_number(x, "rmsnorm", bulk=torch.arange(64) > 0)
        >>> kappa.shape, bool((kappa <= 2).all())  # RMSNorm: at most 2 whatever the outlier
        (torch.Size([4]), True)
    """
    xd = x.double()
    d = xd.shape[-1]
    if kind == "layernorm":
        c = xd - xd.mean(-1, keepdim=True)
        s = torch.sqrt(c.square().mean(-1, keepdim=True) + eps)
        eye = torch.eye(d, dtype=torch.float64) - 1.0 / d
        jac = (eye - c[..., :, None] * c[..., None, :] / (d * s[..., None] ** 2)) / s[..., None]
        f = c / s
    elif kind == "rmsnorm":
        r = torch.sqrt(xd.square().mean(-1, keepdim=True) + eps)
        eye = torch.eye(d, dtype=torch.float64)
        jac = (eye - xd[..., :, None] * xd[..., None, :] / (d * r[..., None] ** 2)) / r[..., None]
        f = xd / r
    else:
        raise ValueError(f"kind must be 'layernorm' or 'rmsnorm', got {kind!r}.")
    amp = (jac.abs() @ xd.abs()[..., None])[..., 0]
    mask = torch.ones(d, dtype=torch.bool) if bulk is None else bulk
    return amp[..., mask].norm(dim=-1) / f[..., mask].norm(dim=-1)


def error_bound(
    x: torch.Tensor,
    kind: str,
    dtype: torch.dtype,
    *,
    compute: str = "native",
    bulk: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """First-order bound on the bulk relative error of :func:`lowp_norm`, per row.

    ``u (kappa_S + 1)`` for upcast evaluation; for native evaluation
    ``u (kappa_S + [LN] (L mean|x| + |mu|) / rms_S(x - mu) + [LN] 2 + (L + 2) / 2 + 2)``
    with ``L = ceil(log2 d)`` (see the module docstring).

    Examples:
        >>> x = torch.randn(2, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        >>> u, kappa = unit_roundoff(torch.bfloat16), condition_number(x, "rmsnorm")
        >>> (error_bound(x, "rmsnorm", torch.bfloat16) / u - kappa).round(decimals=6).tolist()
        [6.0, 6.0]
        >>> up = error_bound(x, "rmsnorm", torch.bfloat16, compute="upcast")
        >>> (up / u - kappa).round(decimals=6).tolist()  # u (kappa + 1)
        [1.0, 1.0]
    """
    u = unit_roundoff(dtype)
    kappa = condition_number(x, kind, bulk=bulk, eps=eps)
    if compute == "upcast":
        return u * (kappa + 1)
    xd = x.double()
    d = xd.shape[-1]
    levels = math.ceil(math.log2(d))
    total = kappa + (levels + 2) / 2 + 2
    if kind == "layernorm":
        mask = torch.ones(d, dtype=torch.bool) if bulk is None else bulk
        mu = xd.mean(-1)
        rms = (xd - mu[..., None])[..., mask].square().mean(-1).sqrt()
        total = total + (levels * xd.abs().mean(-1) + mu.abs()) / rms + 2
    return u * total


@dataclass(frozen=True)
class NormError(Record):
    """Bulk forward error of one norm at one outlier size, averaged over rows.

    Attributes:
        kind: "layernorm" or "rmsnorm".
        dtype: "float16" or "bfloat16".
        compute: "native" or "upcast".
        outlier: the planted outlier's magnitude.
        error: mean over rows of ``||y_hat_S - y_S|| / ||y_S||`` (inf when not finite).
        kappa: mean over rows of :func:`condition_number` on the bulk.
        bound: mean over rows of :func:`error_bound`.

    Examples:
        >>> r = NormError("rmsnorm", "bfloat16", "native", 1e3, 0.0024, 2.0, 0.027)
        >>> r.error <= r.bound, r.to_dict()["outlier"]
        (True, 1000.0)
    """

    kind: str
    dtype: str
    compute: str
    outlier: float
    error: float
    kappa: float
    bound: float


def outlier_sweep(
    outliers: Sequence[float],
    *,
    d: int = 256,
    rows: int = 32,
    dtypes: Sequence[torch.dtype] = (torch.float16, torch.bfloat16),
    compute: str = "native",
    channels: int = 1,
    seed: int = 0,
    eps: float = 1e-5,
) -> list[NormError]:
    """LayerNorm and RMSNorm bulk error as one planted outlier channel grows.

    Rows are ``N(0, 1)`` in ``d`` channels plus ``outlier`` added to the first ``channels``
    channels (a massive activation in a fixed channel, Sun et al. 2024).

    Examples:
        >>> records = outlier_sweep([1.0, 1e3], d=16, rows=2, dtypes=(torch.bfloat16,))
        >>> [(r.kind, r.outlier) for r in records][:2], all(r.error <= r.bound for r in records)
        ([('layernorm', 1.0), ('rmsnorm', 1.0)], True)
        >>> outlier_sweep([1e3], d=16, rows=2, dtypes=(torch.float16,))[0].error  # x^2 overflows
        1.0
    """
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, d, generator=generator, dtype=torch.float64)
    bulk = torch.ones(d, dtype=torch.bool)
    bulk[:channels] = False
    records = []
    for m in outliers:
        x = base.clone()
        x[:, :channels] += m
        for dtype in dtypes:
            name = str(dtype).removeprefix("torch.")
            for kind in ("layernorm", "rmsnorm"):
                ref = _exact_norm(x, kind, eps)  # on the unrounded input: kappa covers rounding
                y = lowp_norm(x, kind, dtype, compute=compute, eps=eps)
                err = (y[:, bulk] - ref[:, bulk]).norm(dim=-1) / ref[:, bulk].norm(dim=-1)
                err_v = float(err.mean()) if bool(torch.isfinite(err).all()) else math.inf
                kappa = float(condition_number(x, kind, bulk=bulk, eps=eps).mean())
                bound = error_bound(x, kind, dtype, compute=compute, bulk=bulk, eps=eps)
                records.append(
                    NormError(kind, name, compute, float(m), err_v, kappa, float(bound.mean()))
                )
    return records


def norm_sweeps(
    outliers: Sequence[float],
    *,
    d: int,
    rows: int,
    dtypes: Sequence[torch.dtype] = (torch.float16, torch.bfloat16),
    seed: int = 0,
) -> list[NormError]:
    """:func:`outlier_sweep` evaluated natively and upcast, one list (native first).

    Examples:
        >>> records = norm_sweeps([1.0, 100.0], d=16, rows=2, dtypes=(torch.bfloat16,))
        >>> [(r.compute, r.kind, r.outlier) for r in records][:2]
        [('native', 'layernorm', 1.0), ('native', 'rmsnorm', 1.0)]
        >>> len(records)
        8
    """
    out: list[NormError] = []
    for compute in ("native", "upcast"):
        out += outlier_sweep(outliers, d=d, rows=rows, dtypes=dtypes, compute=compute, seed=seed)
    return out


#: fp16 native norms square the input: ``x^2`` overflows fp16 (max 65504) above this.
FP16_SQUARE_LIMIT = 256.0


def expected_overflow(record: dict) -> bool:
    """Whether a norm-sweep cell (:meth:`NormError.to_dict`) is the documented overflow:
    fp16 native evaluation squares the input, and the planted row (``N(0, 1)`` plus the
    outlier) has ``max |x| > outlier``, so ``x^2`` overflows above :data:`FP16_SQUARE_LIMIT`.

    Examples:
        >>> expected_overflow({"dtype": "float16", "compute": "native", "outlier": 1e3})
        True
        >>> expected_overflow({"dtype": "bfloat16", "compute": "native", "outlier": 1e3})
        False
    """
    return (
        record["dtype"] == "float16"
        and record["compute"] == "native"
        and record["outlier"] > FP16_SQUARE_LIMIT
    )


def bound_failures(records: Sequence[dict]) -> tuple[int, int, int]:
    """``(failures, counted, excluded)`` over norm-sweep cells (:meth:`NormError.to_dict`):
    a cell fails when its error exceeds its :func:`error_bound` or is non-finite or
    ``>= 0.5`` (an overflow: the first-order bound does not model it); the documented
    fp16-native overflow (:func:`expected_overflow`) is excluded, every other overflow
    counts.

    Examples:
        >>> ok = {"dtype": "bfloat16", "compute": "native", "outlier": 1e4, "error": 0.01,
        ...       "bound": 0.02}
        >>> bound_failures([ok, {**ok, "error": math.inf}, {**ok, "error": 0.03}])
        (2, 3, 0)
        >>> bound_failures([{**ok, "dtype": "float16", "error": math.inf}])
        (0, 0, 1)
    """
    failures = counted = excluded = 0
    for r in records:
        broken = not math.isfinite(r["error"]) or r["error"] >= 0.5
        if broken and expected_overflow(r):
            excluded += 1
            continue
        counted += 1
        failures += broken or r["error"] > r["bound"]
    return failures, counted, excluded


@torch.no_grad()
def residual_scaling_errors(
    model: torch.nn.Module, idx: torch.Tensor, scale: float, dtype: torch.dtype = torch.bfloat16
) -> dict[str, Any]:
    """Relative rounding error of every residual state of a pre-LN transformer evaluated in
    ``dtype``, with its residual projections (each block's ``attn.out`` and ``mlp.down``
    weights) multiplied by ``scale``: the seed paper's experiment on GPT-2 ("the scaling of
    residual-projection weights preserves the propagation of the relative rounding error
    unless it forces a qualitative transition in the dynamics of the residual stream").

    ``errors[l] = ||h_l(dtype) - h_l(fp64)|| / ||h_l(fp64)||`` over the states the model's
    ``trunk(idx)`` returns (0 = embedding), and ``growth = ||h_L|| / ||h_0||`` in float64,
    the stream's growth regime. The model (``blocks`` and ``trunk``, as
    :class:`~normlab.models.gpt.TinyGPT`) is copied, never changed.

    Examples:
        >>> from normlab.models.gpt import GPTConfig, TinyGPT
        >>> _ = torch.manual_seed(0)
        >>> model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=8))
        >>> rec = residual_scaling_errors(model, torch.randint(0, 256, (1, 8)), 4.0)
        >>> len(rec["errors"]), 0 < rec["errors"][-1] < 0.1, rec["growth"] > 1
        (3, True, True)
    """
    scaled = copy.deepcopy(model)
    for block in scaled.blocks:
        block.attn.out.weight.mul_(scale)
        block.mlp.down.weight.mul_(scale)
    ref, _ = scaled.double().trunk(idx)
    low, _ = scaled.to(dtype).trunk(idx)
    errors = [float((lo.double() - r).norm() / r.norm()) for lo, r in zip(low, ref, strict=True)]
    return {"errors": errors, "growth": float(ref[-1].norm() / ref[0].norm())}


def residual_scaling_table(
    model: torch.nn.Module,
    idx: torch.Tensor,
    scales: Sequence[float],
    named: Mapping[str, float] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, Any]]]:
    """:func:`residual_scaling_errors` in bf16 at every scale in ``scales`` and 1, as table
    rows and curves.

    Returns:
        ``(rows, curves)``: ``rows["gpt-s<s>"] = {"rel_err_final", "growth"}`` per scale
        (``<s>`` as ``f"{s:g}"``), ``rows["gpt-<name>"]`` the row of each ``named`` scale,
        and ``rows["gpt-s1-fp16"]``, the unscaled model in fp16 (a positive control: a
        known change of precision); ``curves[f"{s:g}"]`` the full record per scale.

    Examples:
        >>> from normlab.models.gpt import GPTConfig, TinyGPT
        >>> _ = torch.manual_seed(0)
        >>> model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=8))
        >>> rows, curves = residual_scaling_table(model, torch.randint(0, 256, (1, 8)),
        ...                                       [4.0], {"mild": 4.0})
        >>> sorted(rows), sorted(curves)
        (['gpt-mild', 'gpt-s1', 'gpt-s1-fp16', 'gpt-s4'], ['1', '4'])
    """
    rows: dict[str, dict[str, float]] = {}
    curves: dict[str, dict[str, Any]] = {}
    for s in sorted({1.0, *scales, *(named or {}).values()}):
        rec = curves[f"{s:g}"] = residual_scaling_errors(model, idx, s)
        rows[f"gpt-s{s:g}"] = {"rel_err_final": rec["errors"][-1], "growth": rec["growth"]}
    for name, s in (named or {}).items():
        rows[f"gpt-{name}"] = rows[f"gpt-s{s:g}"]
    control = residual_scaling_errors(model, idx, 1.0, torch.float16)
    rows["gpt-s1-fp16"] = {"rel_err_final": control["errors"][-1], "growth": control["growth"]}
    return rows, curves


def rank_correlation(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties); NaN for fewer than 3 pairs or a
    constant sequence.

    Examples:
        >>> round(rank_correlation([1, 2, 3, 4], [10, 20, 40, 30]), 12)
        0.8
        >>> math.isnan(rank_correlation([1, 1, 1], [1, 2, 3]))
        True
    """
    if len(a) != len(b) or len(a) < 3:
        return math.nan

    def ranks(v: Sequence[float]) -> torch.Tensor:
        x = torch.as_tensor(v, dtype=torch.float64)
        r = torch.empty_like(x)
        r[x.argsort(stable=True)] = torch.arange(len(x), dtype=torch.float64)
        for value in x.unique():  # average ranks of ties
            r[x == value] = r[x == value].mean()
        return r - r.mean()

    ra, rb = ranks(a), ranks(b)
    den = float(ra.norm() * rb.norm())
    return float(ra @ rb) / den if den > 0 else math.nan


def sweep_table(
    outliers: Sequence[float],
    sinks: Sequence[float],
    *,
    d: int,
    rows: int,
    n: int,
    dtypes: Sequence[torch.dtype] = (torch.float16, torch.bfloat16),
    seed: int = 0,
) -> dict[str, Any]:
    """The norm sweep (:func:`norm_sweeps`) and the softmax sweep (:func:`sink_sweep`) with
    the summary the numerics claim judges.

    Returns ``{"rows", "norm_sweep", "softmax_sweep"}``: ``rows`` holds, per
    ``<kind>-<dtype>-<compute>``, the bulk error and bound at the largest outlier, and
    ``"bounds"``: ``bound_error_spearman`` (the rank correlation of :func:`error_bound`
    with the measured error over norms and outliers, finite cells without the documented
    overflow, averaged over dtype x compute) and ``softmax_kappa_error_spearman`` (of the
    shifted bf16 softmax's argument condition number with its error, over sink logits).

    Examples:
        >>> out = sweep_table([1.0, 1e2, 1e4], [0.0, 10.0, 40.0], d=16, rows=2, n=16)
        >>> out["rows"]["rmsnorm-bfloat16-native"]["error"] < 0.1
        True
        >>> sorted(out["rows"]["bounds"])
        ['bound_error_spearman', 'softmax_kappa_error_spearman']
    """
    norms = [r.to_dict() for r in norm_sweeps(outliers, d=d, rows=rows, dtypes=dtypes, seed=seed)]
    table = {
        f"{r['kind']}-{r['dtype']}-{r['compute']}": {"error": r["error"], "bound": r["bound"]}
        for r in norms
        if r["outlier"] == outliers[-1]
    }
    rhos = []
    for key in dict.fromkeys((r["dtype"], r["compute"]) for r in norms):
        cells = [
            r
            for r in norms
            if (r["dtype"], r["compute"]) == key
            and math.isfinite(r["error"])
            and not expected_overflow(r)
        ]
        rho = rank_correlation([r["bound"] for r in cells], [r["error"] for r in cells])
        rhos += [rho] if math.isfinite(rho) else []
    soft = [r.to_dict() for r in sink_sweep(sinks, n=n, rows=rows, dtypes=dtypes, seed=seed)]
    shifted = [r for r in soft if r["shifted"] and r["dtype"] == "bfloat16"]
    table["bounds"] = {
        "bound_error_spearman": sum(rhos) / len(rhos) if rhos else math.nan,
        "softmax_kappa_error_spearman": rank_correlation(
            [r["kappa"] for r in shifted], [r["error"] for r in shifted]
        ),
    }
    return {"rows": table, "norm_sweep": norms, "softmax_sweep": soft}
