"""Verify an exact model transformation against the model's own float32 rounding noise.

A fixed absolute tolerance cannot judge an exact rewrite: a model whose logits reach 50 is
already ``~4e-5`` away from its own float64 evaluation in float32, so any rewrite that
reorders a single sum moves its logits by that much. :func:`verify_transform` therefore
evaluates the untouched model in float64 as the reference and compares two float32 errors
against it:

- ``reference_error = max |f32(original) - f64(original)|``: the rounding noise the model
  has anyway;
- ``folded_error = max |f32(transformed) - f64(original)|``: the transformed model's error.

The check passes when ``folded_error <= slack * max(reference_error, u * max |f64|)`` with
``u = 2^-24`` (float32's unit roundoff), i.e. the rewrite is no less accurate than the
model itself, up to a small factor. ``float64_change`` (the transformed model evaluated in
float64) separates arithmetic from the float32 rounding of the rewritten weights. A model
in bf16 or fp16 is compared the same way, in its own dtype: the bound is then four times
its own half-precision error against float64.

Some kernels have no float64 version (transformers' grouped-GEMM experts call
``torch._grouped_mm``, which takes float32, bf16 and fp16 only). The reference is then the
untouched model in float32 and the bound is stated instead of measured:
``|f(transformed) - f32(original)| <= max(FALLBACK_RELATIVE * max |f32(original)|,
slack * |f(original) - f32(original)|)`` (the second term only for a half-precision model;
``reference`` says so and why).
(Foldable LayerNorm, seed paper "fold-ln".)
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab._records import Record
from normlab.surgery.fold_detect import run_example

__all__ = ["FoldCheck", "model_output", "verify_transform"]

UNIT_ROUNDOFF_FP32 = 2.0**-24
#: The stated relative bound when the model cannot run in float64.
FALLBACK_RELATIVE = 1e-4


@dataclass(frozen=True)
class FoldCheck(Record):
    """The verification of one transformation (all maxima of absolute differences).

    Attributes:
        change: ``|f32(transformed) - f32(original)|``.
        folded_error: ``|f32(transformed) - f64(original)|``.
        reference_error: ``|f32(original) - f64(original)|``, the model's own noise.
        float64_change: ``|f64(transformed) - f64(original)|``.
        scale: ``max |f64(original)|`` (the logit scale).
        tolerance: the bound ``folded_error`` must meet.
        compare: "logits" or "log_softmax" (for rewrites that shift logits per token).
        passed: ``folded_error <= tolerance``.
        reference: "float64", or "float32 (...)" with why float64 could not run.
    """

    change: float
    folded_error: float
    reference_error: float
    float64_change: float
    scale: float
    tolerance: float
    compare: str
    passed: bool
    reference: str = "float64"


def model_output(out: Any) -> torch.Tensor:
    """The main tensor of a model's return value: logits, last hidden state or first item."""
    for attr in ("logits", "last_hidden_state"):
        value = getattr(out, attr, None)
        if isinstance(value, torch.Tensor):
            return value
    if isinstance(out, tuple | list):
        return model_output(out[0])
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"Cannot find an output tensor in a {type(out).__name__}.")
    return out


@torch.no_grad()
def _evaluate(model: nn.Module, example: Any, dtype: torch.dtype, compare: str) -> torch.Tensor:
    work = model if dtype is None else copy.deepcopy(model).to(dtype)
    modes = [(m, m.training) for m in model.modules()]
    work.eval()
    try:
        out = model_output(run_example(work, example)).double()
    finally:
        for m, training in modes:
            m.training = training
    return out.log_softmax(-1) if compare == "log_softmax" else out


def verify_transform(
    original: nn.Module,
    transformed: nn.Module,
    example: torch.Tensor | Mapping[str, Any],
    *,
    compare: str = "logits",
    slack: float = 4.0,
) -> FoldCheck:
    """Check that ``transformed`` computes what ``original`` computes, to rounding.

    Args:
        original: the untouched model (it is copied to float64, not changed).
        transformed: the rewritten model, in its working dtype.
        example: an input both accept.
        compare: "logits", or "log_softmax" where the rewrite may add a per-token constant
            to the logits (centring the unembedding).
        slack: how many times the model's own rounding noise the rewrite may add.
    """
    if compare not in ("logits", "log_softmax"):
        raise ValueError(f"compare must be 'logits' or 'log_softmax', got {compare!r}.")
    before = _evaluate(original, example, None, compare)
    after = _evaluate(transformed, example, None, compare)
    try:
        ref = _evaluate(original, example, torch.float64, compare)
        after64 = _evaluate(transformed, example, torch.float64, compare)
    except RuntimeError as err:  # a kernel without float64 (grouped-GEMM experts)
        work = torch.float32
        ref = _evaluate(original, example, work, compare)
        after32 = _evaluate(transformed, example, work, compare)
        scale = float(ref.abs().max())
        error = float((after - ref).abs().max())
        noise = float((before - ref).abs().max())  # nonzero for a half-precision model
        tolerance = max(FALLBACK_RELATIVE * scale, slack * noise)
        return FoldCheck(
            change=float((after - before).abs().max()),
            folded_error=error,
            reference_error=noise,
            float64_change=float((after32 - ref).abs().max()),
            scale=scale,
            tolerance=tolerance,
            compare=compare,
            passed=error <= tolerance,
            reference=f"float32 (float64 failed: {str(err).splitlines()[0][:120]}; "
            f"bound {FALLBACK_RELATIVE:g} x max |logit|)",
        )
    scale = float(ref.abs().max())
    noise = float((before - ref).abs().max())
    error = float((after - ref).abs().max())
    tolerance = slack * max(noise, UNIT_ROUNDOFF_FP32 * scale)
    return FoldCheck(
        change=float((after - before).abs().max()),
        folded_error=error,
        reference_error=noise,
        float64_change=float((after64 - ref).abs().max()),
        scale=scale,
        tolerance=tolerance,
        compare=compare,
        passed=error <= tolerance,
    )
