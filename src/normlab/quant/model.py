"""Run a model's linear layers in low precision: wrap, calibrate, evaluate, unwrap.

:func:`quantize_model` replaces every ``nn.Linear`` (and Hugging Face GPT-2's ``Conv1D``) by
a :class:`QuantLinear` that fake-quantizes its weight and its input before the matmul;
:func:`dequantize_model` puts the original layers back, so the model is exactly as before.
With ``backward=True`` the two gradient matmuls are quantized as well (the NVFP4 training
recipe quantizes all three GEMMs of a linear layer): ``dX = Q(dY) Q(W)`` and
``dW = Q(dY^T) Q(X^T)``, each operand rounded in blocks along the reduction axis.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab._marks import mark_changed
from normlab.quant.spec import QuantFormat, preset

__all__ = ["QuantLinear", "calibrate", "dequantize_model", "quantize_model", "quantized"]


def _is_conv1d(module: nn.Module) -> bool:
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf")


class _QuantMatmul(torch.autograd.Function):
    """``y = x W^T + b`` with all three GEMMs (forward, input grad, weight grad) quantized.

    As in hardware FP4 training, each GEMM quantizes the high-precision operands afresh,
    blocked along its own reduction axis: ``Q(x) Q(W)^T`` (over inputs), ``dX = Q(dY) Q(W)``
    (over outputs) and ``dW = Q(dY^T) Q(x^T)^T`` (over tokens).
    """

    @staticmethod
    def forward(ctx: Any, x, w, b, fx, fw, fg):  # type: ignore[override]
        ctx.save_for_backward(x, w)
        ctx.formats, ctx.has_bias = (fx, fw, fg), b is not None
        return F.linear(fx(x, ste=False), fw(w, ste=False), b)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor):  # type: ignore[override]
        x, w = ctx.saved_tensors
        fx, fw, fg = ctx.formats
        dy2, x2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
        dx = fg(dy2, ste=False) @ fw(w.t().contiguous(), ste=False).t()
        dw = fg(dy2.t().contiguous(), ste=False) @ fx(x2.t().contiguous(), ste=False).t()
        db = dy2.sum(0) if ctx.has_bias else None
        return dx.reshape(x.shape), dw, db, None, None, None


class QuantLinear(nn.Module):
    """A linear layer whose weight and input are fake-quantized: ``Q_a(x) Q_w(W)^T + b``.

    Gradients pass straight through the rounding, so a model can train through it.

    Args:
        inner: the ``nn.Linear`` (or GPT-2 ``Conv1D``) to wrap; kept as ``self.inner``.
        weights: the weight format, or ``None`` to keep weights in full precision.
        activations: the input format, or ``None``.
        backward: also quantize the two gradient GEMMs with ``grads`` (training).
        grads: the gradient format (per-tensor amax); ``None`` for ``activations``.
    """

    def __init__(
        self,
        inner: nn.Module,
        *,
        weights: QuantFormat | None,
        activations: QuantFormat | None,
        backward: bool = False,
        grads: QuantFormat | None = None,
    ) -> None:
        super().__init__()
        self.inner, self.weights, self.activations = inner, weights, activations
        self.backward_quant = backward
        self.grads = grads or activations
        if backward and (weights is None or activations is None or self.grads is None):
            raise ValueError("backward=True needs weight, activation and gradient formats.")
        self.register_buffer("lo", None, persistent=False)
        self.register_buffer("hi", None, persistent=False)
        self.observing = False

    def weight_matrix(self) -> torch.Tensor:
        """The weight as ``(out, in)``."""
        w = self.inner.weight
        return w.t() if _is_conv1d(self.inner) else w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.observing:
            lo, hi = x.detach().amin().float(), x.detach().amax().float()
            self.lo = lo if self.lo is None else torch.minimum(self.lo, lo)
            self.hi = hi if self.hi is None else torch.maximum(self.hi, hi)
        w, b = self.weight_matrix(), self.inner.bias
        if self.backward_quant and torch.is_grad_enabled():
            return _QuantMatmul.apply(x, w, b, self.activations, self.weights, self.grads)
        if self.activations is not None:
            static = self.lo is not None and not self.observing
            x = self.activations(x, bounds=(self.lo, self.hi) if static else None)
        if self.weights is not None:
            w = self.weights(w)
        return F.linear(x, w, b)

    def extra_repr(self) -> str:
        static = ", static ranges" if self.lo is not None else ""
        grads = f", grads={self.grads}" if self.backward_quant else ""
        return f"weights={self.weights}, activations={self.activations}{grads}{static}"


def quantize_model(
    model: nn.Module,
    scheme: str | None = None,
    *,
    weights: QuantFormat | None = None,
    activations: QuantFormat | None = None,
    backward: bool = False,
    grads: QuantFormat | None = None,
    skip: Callable[[str, nn.Module], bool] | None = None,
) -> list[str]:
    """Wrap every linear layer of ``model`` in a :class:`QuantLinear`, in place.

    Args:
        model: the model.
        scheme: a preset name from :data:`~normlab.quant.spec.PRESETS` ("w8a8", "w4a4",
            "w8a8-tensor", "nvfp4", ...), or ``None`` to give the formats explicitly.
        weights: the weight format (overrides the preset's).
        activations: the activation format (overrides the preset's).
        backward: quantize the gradient GEMMs too (see :class:`QuantLinear`).
        grads: the gradient format; ``None`` for the activation format.
        skip: ``skip(name, module) -> True`` leaves that layer in full precision.

    Returns:
        The qualified names of the wrapped layers. Undo with :func:`dequantize_model`.

    Raises:
        ValueError: if ``model`` already holds QuantLinear layers.
    """
    if any(isinstance(m, QuantLinear) for m in model.modules()):
        raise ValueError("The model is already quantized; call dequantize_model first.")
    if scheme is not None:
        w, a = preset(scheme)
        weights, activations = weights or w, activations or a
    targets = [
        (name, m)
        for name, m in model.named_modules()
        if (isinstance(m, nn.Linear) or _is_conv1d(m)) and not (skip and skip(name, m))
    ]
    for name, module in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        wrapper = QuantLinear(
            module, weights=weights, activations=activations, backward=backward, grads=grads
        )
        setattr(parent, attr, wrapper)
    if targets:  # save_pretrained then refuses instead of writing weights that load wrong
        mark_changed(model, "quantize_model")
    return [name for name, _ in targets]


def dequantize_model(model: nn.Module) -> int:
    """Put back the original layers of every :class:`QuantLinear`; return how many."""
    wrapped = [(n, m) for n, m in model.named_modules() if isinstance(m, QuantLinear)]
    for name, module in wrapped:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, module.inner)
    return len(wrapped)


@contextlib.contextmanager
def quantized(model: nn.Module, scheme: str | None = None, **kwargs: Any) -> Iterator[list[str]]:
    """``quantize_model`` for the duration of a ``with`` block, then undone."""
    names = quantize_model(model, scheme, **kwargs)
    try:
        yield names
    finally:
        dequantize_model(model)


@torch.no_grad()
def calibrate(model: nn.Module, run: Callable[[nn.Module], Any]) -> int:
    """Fix static per-tensor activation ranges: min/max over the inputs seen in ``run(model)``.

    Every :class:`QuantLinear` records the range of its inputs while ``run`` executes (e.g.
    a loop over calibration batches); afterwards its activation format uses that range
    (values outside are clipped), as in Bondarenko et al.'s static W8A8. Returns the number
    of layers calibrated. The train/eval mode is restored.
    """
    layers = [m for m in model.modules() if isinstance(m, QuantLinear)]
    if not layers:
        raise ValueError("No QuantLinear layers: call quantize_model before calibrate.")
    was_training = model.training
    model.eval()
    for layer in layers:
        layer.lo = layer.hi = None
        layer.observing = True
    try:
        run(model)
    finally:
        for layer in layers:
            layer.observing = False
        model.train(was_training)
    return sum(layer.lo is not None for layer in layers)
