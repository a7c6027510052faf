"""Fold RMSNorm gains into the linear layers that read them, and centre the unembedding.

RMSNorm gain folding (Llama-style models, as TransformerLens's ``fold_ln`` does for them):
for a norm ``y = g * n(x)`` whose output is read only by linear maps,
``W (g * u) = (W diag(g)) u``, so ``W <- W diag(g)`` and ``g <- 1``. The gain is measured,
not assumed: a norm computes ``(w + c) * n(x)`` with ``c = 0`` (Llama, T5, Cohere) or
``c = 1`` (Gemma's ``1 + w``, computed here in float64 from the stored weight, so a bf16
``w`` never rounds ``1 + w`` to 1), and folding sets ``w <- 1 - c``. Linear maps are
``nn.Linear``, Hugging Face ``Conv1D`` and the weights of Mixture-of-Experts routers and
fused experts (:data:`READERS`), so a router's logits keep their balance. The model keeps
its module classes (the norm stays, with unit gain), so the result is an ordinary
checkpoint of the same architecture, marked as folded (:mod:`normlab.surgery._folded`).

Unembedding centring (TransformerLens's ``center_unembed``): ``W_U <- W_U - mean_v W_U``
(and ``b <- b - mean(b)``) subtracts the same number from every logit of a token, so the
softmax and every probability are unchanged while the logits become zero-mean over the
vocabulary. A tied head is untied first (the embedding keeps its rows).
(Foldable LayerNorm, seed paper "fold-ln".)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from normlab._layouts import ROLE_REASONS, norm_roles
from normlab._marks import mark_changed
from normlab._records import Record
from normlab.surgery._fold_rules import _getitem_axis
from normlab.surgery._folded import mark_folded, refuse_refold
from normlab.surgery.fold_detect import is_centering_norm, run_example
from normlab.surgery.fold_verify import FoldCheck, verify_transform
from normlab.surgery.replace import is_norm_layer

__all__ = ["READERS", "GainFold", "center_unembed", "fold_rms_gains"]


@dataclass(frozen=True)
class GainFold(Record):
    """What :func:`fold_rms_gains` or :func:`center_unembed` did.

    Attributes:
        folded: per norm (or the head), the linear layers that absorbed it.
        refused: per norm, why its gain stayed.
        check: the verification against float64, or None.
        untied: per module given its own copy of a tied weight, the parameters added.
    """

    folded: Mapping[str, tuple[str, ...]]
    refused: Mapping[str, str]
    check: FoldCheck | None = None
    untied: Mapping[str, int] = field(default_factory=dict)


_METADATA = frozenset({"__get__", "size", "dim", "numel", "is_floating_point", "__len__"})
#: Operations that pass a norm's output on to a reader unchanged up to a scalar: row
#: selection and reshapes that keep the feature axis, copies, casts, eval-mode dropout.
_KEEP = frozenset(
    {"__getitem__", "contiguous", "detach", "clone", "view", "reshape", "flatten", "to"}
    | {"float", "type", "dropout", "__mul__", "__rmul__", "mul", "__truediv__"}
)
_SCALING = frozenset({"__mul__", "__rmul__", "mul", "__truediv__"})

#: Modules that read their input through a weight: class-name suffix -> (parameter, input
#: axis). nn.Linear is matched by type. Fused experts store ``(E, 2I, d)``, or ``(E, d, 2I)``
#: when their ``is_transposed`` is set.
READERS: dict[str, tuple[str, int]] = {
    "Conv1D": ("weight", 0),
    "TopKRouter": ("weight", -1),
    "Router": ("weight", -1),
    "Experts": ("gate_up_proj", -1),
}


def _reader(module: nn.Module) -> tuple[str, int] | None:
    """``(parameter, input axis)`` of a module that reads its input linearly, else None."""
    if isinstance(module, nn.Linear):
        return "weight", -1
    name = type(module).__name__
    for suffix, (param, axis) in READERS.items():
        if name.endswith(suffix) and isinstance(getattr(module, param, None), torch.Tensor):
            transposed = getattr(module, "is_transposed", False)
            return param, (-2 if transposed else axis)
    return None


def _is_linear(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear)


class _Readers(TorchFunctionMode):
    """Which linear layers read each norm's output, and whether anything else does."""

    def __init__(self, model: nn.Module, norms: dict[str, nn.Module]) -> None:
        super().__init__()
        self.outputs: dict[int, str] = {}
        self.keep: list[torch.Tensor] = []
        self.readers: dict[str, set[str]] = {n: set() for n in norms}
        self.other: dict[str, str] = {}
        self.depth = 0
        self.handles = []
        for name, module in model.named_modules():
            if name in norms:
                self.handles.append(module.register_forward_hook(self._norm_out(name)))
            elif _reader(module) is not None:
                self.handles.append(
                    module.register_forward_pre_hook(self._linear_in(name), with_kwargs=True)
                )
                self.handles.append(module.register_forward_hook(self._leave))

    def _norm_out(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                self.outputs[id(output)] = name
                self.keep.append(output)

        return hook

    def _linear_in(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            x = args[0] if args else next(iter(kwargs.values()), None)
            source = self.outputs.get(id(x)) if isinstance(x, torch.Tensor) else None
            if source is not None and self.depth == 0:
                self.readers[source].add(name)
            self.depth += 1

        return hook

    def _leave(self, module: nn.Module, args: Any, output: Any) -> None:
        self.depth -= 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        what = getattr(func, "__name__", repr(func))
        if self.depth or what in _METADATA:
            return out
        source = (
            self.outputs.get(id(args[0])) if args and isinstance(args[0], torch.Tensor) else None
        )
        if source is not None and what in _KEEP and isinstance(out, torch.Tensor):
            kept = what != "__getitem__" or _getitem_axis(args[1], args[0].dim()) == -1
            if what in _SCALING:  # by a number only: a tensor factor would scale per channel
                kept = len(args) > 1 and isinstance(args[1], int | float)
            if kept and out.shape[-1] == args[0].shape[-1]:  # rows selected, features kept
                self.outputs[id(out)] = source
                self.keep.append(out)
                return out
        for t in tree_leaves((args, kwargs)):
            name = self.outputs.get(id(t)) if isinstance(t, torch.Tensor) else None
            if name is not None:
                self.other.setdefault(name, f"its output is also used by {what}")
        return out

    def returned(self, out: Any) -> None:
        """The model's return value is read by the caller (T5's encoder output)."""
        values = out.values() if isinstance(out, Mapping) else [out]
        for t in tree_leaves(list(values)):
            name = self.outputs.get(id(t)) if isinstance(t, torch.Tensor) else None
            if name is not None:
                self.other.setdefault(name, "its output is also returned by the model")

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.keep = []


def _untie(model: nn.Module, module: nn.Module, param: str) -> int:
    """Give ``module`` its own ``param`` when another module shares it (a tied head);
    returns the number of parameters added."""
    w = getattr(module, param)
    if not any(m is not module and getattr(m, "weight", None) is w for m in model.modules()):
        return 0
    setattr(module, param, nn.Parameter(w.detach().clone(), w.requires_grad))
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "tie_word_embeddings"):
        config.tie_word_embeddings = False  # so a checkpoint does not tie them again
    return w.numel()


@torch.no_grad()
def _gain_offset(norm: nn.Module) -> float | None:
    """``c`` such that ``norm(x) = (weight + c) * n(x)`` with ``n`` free of the weight
    (0 for Llama's RMSNorm, 1 for Gemma's ``1 + w``); None when the norm is not of that form.

    Measured on a fixed input with the weight set to 0 and to 1, then checked at the
    model's own weight (restored afterwards).
    """
    w = norm.weight
    saved = w.detach().clone()
    x = torch.randn(3, w.shape[-1], generator=torch.Generator().manual_seed(0))
    x = x.to(device=w.device, dtype=w.dtype)
    try:
        w.zero_()
        y0 = norm(x).double()
        w.fill_(1.0)
        n = norm(x).double() - y0
        c = float((y0 * n).sum() / (n * n).sum().clamp_min(1e-30))
        w.copy_(saved)
        y = norm(x).double()
    finally:
        w.copy_(saved)
    tol = 1e-2 if w.dtype in (torch.float16, torch.bfloat16) else 1e-4
    scale = float(y.abs().max()) + 1.0
    c = float(round(c))
    if float((y0 - c * n).abs().max()) > tol * scale:
        return None
    if float((y - (saved.double() + c) * n).abs().max()) > tol * scale:
        return None
    return c


def _unit_gain_norms(model: nn.Module) -> dict[str, nn.Module]:
    out = {}
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        if name and is_norm_layer(m) and not is_centering_norm(m) and isinstance(w, nn.Parameter):
            out[name] = m
    return out


def _refusal(model: nn.Module, name: str, norm: nn.Module, readers: list, tracker) -> str:
    """Why ``name``'s gain cannot fold ("" when it can); a role's reason comes first."""
    if getattr(norm, "bias", None) is not None:
        why = "has a bias (fold it as a LayerNorm-style beta instead)"
    elif name in tracker.other:
        why = tracker.other[name]
    elif not readers:
        why = "no linear layer reads its output"
    elif _gain_offset(norm) is None:
        why = "its output is not (weight + c) * n(x): no gain to fold"
    else:
        return ""
    role = norm_roles(model).get(name)
    return f"{ROLE_REASONS[role]} ({why})" if role else why


@torch.no_grad()
def fold_rms_gains(
    model: nn.Module,
    example: torch.Tensor | Mapping[str, Any],
    *,
    verify: bool = True,
    tied: str = "untie",
) -> GainFold:
    """Fold each RMSNorm gain into the linear maps that read its output, in place.

    Norms whose output something other than a linear map reads (post-sublayer norms,
    QK-norm, an output the model returns), or that carry a bias, are left alone with the
    reason. A tied head that must absorb a gain is untied (``result.untied`` gives the
    parameters added) or, with ``tied="keep"``, its norm is left alone with the reason.

    Args:
        model: the model to change (any dtype; gains are applied in float64 and rounded
            once to the weights' dtype).
        example: an input the model accepts; it reveals who reads each norm.
        verify: check against the unfolded model evaluated in float64 (``result.check``).
        tied: "untie" or "keep" (see above).

    Raises:
        ValueError: when ``model`` was already gain-folded (config ``normlab_folded``), or
            ``tied`` is neither "untie" nor "keep".
    """
    import copy

    if tied not in ("untie", "keep"):
        raise ValueError(f"tied must be 'untie' or 'keep', got {tied!r}.")
    refuse_refold(model, "fold_rms_gains")
    norms = _unit_gain_norms(model)
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    tracker = _Readers(model, norms)
    try:
        with tracker:
            tracker.returned(run_example(model, example))
    finally:
        tracker.remove()
        for m, training in modes:
            m.training = training
    original = copy.deepcopy(model) if verify else None
    folded, refused, untied = {}, {}, {}
    named = dict(model.named_modules())
    for name, norm in norms.items():
        readers = sorted(tracker.readers[name])
        why = _refusal(model, name, norm, readers, tracker)
        shared = [r for r in readers if _shared(model, named[r])]
        if not why and shared and tied == "keep":
            why = f"its reader {shared[0]} is tied to the input embedding (pass tied='untie')"
        if why:
            refused[name] = why
            continue
        c = _gain_offset(norm)
        g = norm.weight.detach().double() + c
        for r in readers:
            param, axis = _reader(named[r])  # type: ignore[misc]
            added = _untie(model, named[r], param)
            if added:
                untied[r] = added
            w = getattr(named[r], param)
            shape = [1] * w.dim()
            shape[axis] = -1
            w.copy_((w.double() * g.view(shape)).to(w.dtype))
        norm.weight.fill_(1.0 - c)
        folded[name] = tuple(readers)
    check = verify_transform(original, model, example) if verify and folded else None
    if folded:
        mark_changed(model, "fold_rms_gains")
        mark_folded(model, "fold_rms_gains")
    return GainFold(folded, refused, check, untied)


def _shared(model: nn.Module, module: nn.Module) -> bool:
    w = getattr(module, "weight", None)
    return any(m is not module and getattr(m, "weight", None) is w for m in model.modules())


@torch.no_grad()
def center_unembed(
    model: nn.Module, example: torch.Tensor | Mapping[str, Any] | None = None
) -> GainFold:
    """Centre the output embedding over the vocabulary, in place (probabilities unchanged).

    Args:
        model: a model with ``get_output_embeddings()`` (Hugging Face) or an ``lm_head`` /
            ``head`` linear layer.
        example: when given, verify log-probabilities against float64 (``result.check``).

    Raises:
        ValueError: when the model has no linear output head.
    """
    import copy

    head, name = None, ""
    getter = getattr(model, "get_output_embeddings", None)
    if callable(getter):
        head = getter()
        name = next((n for n, m in model.named_modules() if m is head), "")
    for attr in ("lm_head", "head"):
        if head is None and _is_linear(getattr(model, attr, None) or nn.Identity()):
            head, name = getattr(model, attr), attr
    if not _is_linear(head):
        raise ValueError(f"{type(model).__name__} has no linear output head (lm_head) to centre.")
    original = copy.deepcopy(model) if example is not None else None
    _untie(model, head, "weight")
    w = head.weight
    w.copy_((w.double() - w.double().mean(0, keepdim=True)).to(w.dtype))
    if head.bias is not None:
        head.bias.copy_((head.bias.double() - head.bias.double().mean()).to(head.bias.dtype))
    check = None
    if example is not None:
        check = verify_transform(original, model, example, compare="log_softmax")
    mark_changed(model, "center_unembed")
    return GainFold({name: (name,)}, {}, check)
