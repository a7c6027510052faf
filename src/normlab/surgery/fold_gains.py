"""Fold RMSNorm gains into the linear layers that read them, and centre the unembedding.

RMSNorm gain folding (Llama-style models, as TransformerLens's ``fold_ln`` does for them):
for an RMSNorm ``y = g * x / rms(x)`` whose output is read only by linear layers,
``W (g * u) = (W diag(g)) u``, so ``W <- W diag(g)`` and ``g <- 1``. The model keeps its
module classes (the norm stays, with unit gain), so the result is an ordinary checkpoint of
the same architecture.

Unembedding centring (TransformerLens's ``center_unembed``): ``W_U <- W_U - mean_v W_U``
(and ``b <- b - mean(b)``) subtracts the same number from every logit of a token, so the
softmax and every probability are unchanged while the logits become zero-mean over the
vocabulary. A tied head is untied first (the embedding keeps its rows).
(Foldable LayerNorm, seed paper "fold-ln".)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from normlab._marks import mark_changed
from normlab._records import Record
from normlab.surgery._fold_rules import _getitem_axis
from normlab.surgery.fold_detect import is_centering_norm, run_example
from normlab.surgery.fold_verify import FoldCheck, verify_transform
from normlab.surgery.replace import is_norm_layer

__all__ = ["GainFold", "center_unembed", "fold_rms_gains"]


@dataclass(frozen=True)
class GainFold(Record):
    """What :func:`fold_rms_gains` or :func:`center_unembed` did.

    Attributes:
        folded: per norm (or the head), the linear layers that absorbed it.
        refused: per norm, why its gain stayed.
        check: the verification against float64, or None.
    """

    folded: Mapping[str, tuple[str, ...]]
    refused: Mapping[str, str]
    check: FoldCheck | None = None


_METADATA = frozenset({"__get__", "size", "dim", "numel", "is_floating_point", "__len__"})
_KEEP = frozenset({"__getitem__", "contiguous", "detach", "clone"})


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
            elif _is_linear(module):
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
            if kept and out.shape[-1] == args[0].shape[-1]:  # rows selected, features kept
                self.outputs[id(out)] = source
                self.keep.append(out)
                return out
        for t in tree_leaves((args, kwargs)):
            name = self.outputs.get(id(t)) if isinstance(t, torch.Tensor) else None
            if name is not None:
                self.other.setdefault(name, f"its output is also used by {what}")
        return out

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.keep = []


def _untie(model: nn.Module, module: nn.Module) -> None:
    """Give ``module`` its own weight when another module shares it (a tied head)."""
    w = module.weight
    if any(m is not module and getattr(m, "weight", None) is w for m in model.modules()):
        module.weight = nn.Parameter(w.detach().clone(), w.requires_grad)
        config = getattr(model, "config", None)
        if config is not None and hasattr(config, "tie_word_embeddings"):
            config.tie_word_embeddings = False  # so a checkpoint does not tie them again


def _unit_gain_norms(model: nn.Module) -> dict[str, nn.Module]:
    out = {}
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        if name and is_norm_layer(m) and not is_centering_norm(m) and isinstance(w, nn.Parameter):
            out[name] = m
    return out


@torch.no_grad()
def fold_rms_gains(
    model: nn.Module, example: torch.Tensor | Mapping[str, Any], *, verify: bool = True
) -> GainFold:
    """Fold each RMSNorm gain into the linear layers that read its output, in place.

    Norms whose output something other than a linear layer reads, that carry a bias, or
    that store their gain as ``1 + w`` (Gemma) are left alone with the reason.

    Args:
        model: the model to change.
        example: an input the model accepts; it reveals who reads each norm.
        verify: check against the unfolded model evaluated in float64 (``result.check``).
    """
    import copy

    norms = _unit_gain_norms(model)
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    tracker = _Readers(model, norms)
    try:
        with tracker:
            run_example(model, example)
    finally:
        tracker.remove()
        for m, training in modes:
            m.training = training
    original = copy.deepcopy(model) if verify else None
    folded, refused = {}, {}
    named = dict(model.named_modules())
    for name, norm in norms.items():
        readers = sorted(tracker.readers[name])
        if "Gemma" in type(norm).__name__:
            refused[name] = "stores its gain as 1 + weight; not folded"
        elif getattr(norm, "bias", None) is not None:
            refused[name] = "has a bias (fold it as a LayerNorm-style beta instead)"
        elif name in tracker.other:
            refused[name] = tracker.other[name]
        elif not readers:
            refused[name] = "no linear layer reads its output"
        else:
            g = norm.weight.detach().double()
            for r in readers:
                _untie(model, named[r])
                w = named[r].weight
                w.copy_((w.double() * g[None, :]).to(w.dtype))
            norm.weight.fill_(1.0)
            folded[name] = tuple(readers)
    check = verify_transform(original, model, example) if verify and folded else None
    if folded:
        mark_changed(model, "fold_rms_gains")
    return GainFold(folded, refused, check)


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
    _untie(model, head)
    w = head.weight
    w.copy_((w.double() - w.double().mean(0, keepdim=True)).to(w.dtype))
    if head.bias is not None:
        head.bias.copy_((head.bias.double() - head.bias.double().mean()).to(head.bias.dtype))
    check = None
    if example is not None:
        check = verify_transform(original, model, example, compare="log_softmax")
    mark_changed(model, "center_unembed")
    return GainFold({name: (name,)}, {}, check)
