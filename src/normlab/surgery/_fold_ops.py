"""The recorder behind :func:`normlab.surgery.fold_detect.analyze_fold`.

A :class:`Tracker` watches one forward pass and gives every tensor derived from a linear
writer a :class:`Status`, using the transfer rules of :mod:`normlab.surgery._fold_rules`.
Linear, embedding, convolution and norm modules are opaque leaves handled by module hooks.
Any operation without a rule consumes its inputs: the writers they
carry are *exposed* (their centring would be visible), and a LayerNorm output read that way
cannot absorb ``beta``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from normlab.layers.norms import LayerNorm
from normlab.surgery._fold_rules import ADD, METADATA, ZERO, ZERO_MAKERS, Status, merge, rule_for
from normlab.surgery.replace import is_norm_layer

__all__ = ["Tracker", "is_centering_norm"]


def is_centering_norm(module: nn.Module) -> bool:
    """Whether ``module`` is a LayerNorm that subtracts the mean (torch's or normlab's)."""
    return isinstance(module, nn.LayerNorm | LayerNorm)


def _linear_like(module: nn.Module) -> bool:
    if isinstance(module, nn.Linear):
        return True
    w = getattr(module, "weight", None)  # Hugging Face Conv1D: weight (in, out)
    return type(module).__name__ == "Conv1D" and isinstance(w, torch.Tensor) and w.dim() == 2


def _classify(module: nn.Module) -> str:
    if is_centering_norm(module):
        return "ln"
    if is_norm_layer(module):
        return "norm"
    if _linear_like(module):
        return "linear"
    if isinstance(module, nn.Embedding):
        return "embed"
    if isinstance(module, nn.modules.conv._ConvNd):
        return "conv"
    return ""


def _first_tensor(obj: Any) -> torch.Tensor | None:
    return next((t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)), None)


class Tracker(TorchFunctionMode):
    """Records statuses, readers and exposures during one forward pass of ``model``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.modules = dict(model.named_modules())
        self.names = {id(m): n for n, m in model.named_modules()}
        self.params = {id(p): n for n, p in model.named_parameters()}
        self.status: dict[int, Status] = {}
        self.keep: list[torch.Tensor] = []  # keeps ids unique while the pass runs
        self.stack: list[str] = []
        self.opaque = 0
        self.norm_inputs: dict[str, Status] = {}
        self.readers: dict[str, dict[str, float]] = {}
        self.reader_inputs: dict[str, set[tuple[Any, ...]]] = {}
        self.bad_readers: dict[str, list[str]] = {}
        self.exposed: dict[str, list[str]] = {}
        self.handles = []
        for module in model.modules():
            self.handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post, with_kwargs=True))

    def remove(self) -> None:
        """Remove every hook and drop the recorded tensors."""
        for handle in self.handles:
            handle.remove()
        self.handles, self.keep, self.status = [], [], {}

    # -- bookkeeping -------------------------------------------------------------------
    def ctx(self) -> str:
        return f"'{self.stack[-1]}'" if self.stack and self.stack[-1] else "the model"

    def get(self, t: Any) -> Status | None:
        return self.status.get(id(t)) if isinstance(t, torch.Tensor) else None

    def set(self, t: torch.Tensor, status: Status) -> None:
        self.status[id(t)] = status
        self.keep.append(t)

    def consume(self, status: Status | None, why: str) -> None:
        """``status`` is read by something that is neither a LayerNorm nor a kept-axis op."""
        if status is None:
            return
        for w in status.writers:
            self.exposed.setdefault(w, []).append(why)
        if status.kind == "lnout":
            self.bad_readers.setdefault(status.ln, []).append(why)

    def finish(self, output: Any) -> None:
        """The model's return value is read by the caller."""
        for t in tree_leaves(output):
            self.consume(self.get(t), "returned as the model's output")

    # -- module hooks ------------------------------------------------------------------
    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        name = self.names.get(id(module), "")
        self.stack.append(name)
        kind = _classify(module)
        if not kind:
            return
        self.opaque += 1
        if self.opaque > 1:
            return
        x = _first_tensor((args, kwargs))
        st = self.get(x)
        if kind == "ln":
            old = self.norm_inputs.get(name)
            self.norm_inputs[name] = st or Status("broken", reason="an input not from a writer")
            if old is not None and st is not None:
                self.norm_inputs[name] = merge([old, st], f"'{name}' called twice")
            if st is not None and st.kind == "lnout":
                self.consume(st, f"read by LayerNorm '{name}'")
        elif kind == "linear":
            if st is not None and st.kind == "lnout" and st.axis == -1:
                self.readers.setdefault(st.ln, {})[name] = st.scale
                self.reader_inputs.setdefault(name, set()).add(("ln", st.ln, st.scale))
            else:
                self.reader_inputs.setdefault(name, set()).add(("other",))
                self.consume(st, f"read by linear layer '{name}'")
        elif kind in ("norm", "conv"):
            self.consume(st, f"read by {type(module).__name__} '{name}'")

    def _post(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        name = self.stack.pop() if self.stack else ""
        kind = _classify(module)
        if not kind:
            return
        self.opaque -= 1
        out = _first_tensor(output)
        if self.opaque or out is None:
            return
        if kind == "ln":
            self.set(out, Status("lnout", ln=name))
        elif kind in ("linear", "embed"):
            self.set(out, Status("centred", frozenset({name})))
        elif kind == "norm":
            self.set(out, Status("broken", reason=f"output of {type(module).__name__} '{name}'"))
        else:
            reason = f"written by convolution '{name}', which cannot be column-centred here"
            self.set(out, Status("broken", reason=reason))

    # -- function mode -----------------------------------------------------------------
    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.opaque == 0:
            self._propagate(getattr(func, "__name__", repr(func)), args, kwargs, out)
        return out

    def _propagate(self, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        leaves = tree_leaves((args, kwargs))
        tracked = [self.get(t) for t in leaves if self.get(t) is not None]
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if name == "__setitem__" and tracked:
            self.consume(self.get(leaves[-1]), f"written into a tensor in {self.ctx()}")
            self.set(args[0], Status("broken", reason=f"item assignment in {self.ctx()}"))
            return
        if not outs:
            return
        if name not in ADD and name not in METADATA:  # a parameter used other than added
            for leaf in leaves:
                if isinstance(leaf, nn.Parameter) and id(leaf) in self.params:
                    why = f"the parameter is also used by {name} in {self.ctx()}"
                    self.exposed.setdefault(self.params[id(leaf)], []).append(why)
        if name in ZERO_MAKERS:
            for t in outs:
                self.set(t, ZERO)
            return
        if name in METADATA or not (tracked or (name in ADD and self._param_operand(args))):
            return
        rule = rule_for(name)
        result = rule(self, name, args, kwargs, outs) if rule else None
        if result is None:
            result = self._other(name, tracked)
        for t in outs:
            self.set(t, result)

    def _other(self, name: str, tracked: list[Status]) -> Status:
        why = f"{name} in {self.ctx()}"
        for st in tracked:
            self.consume(st, why)
        return Status("broken", reason=why)

    def _param_operand(self, args: tuple) -> bool:
        return any(isinstance(a, nn.Parameter) and id(a) in self.params for a in args[:2])

    def operand(self, x: Any) -> Status:
        """The status of one operand of a sum."""
        st = self.get(x)
        if st is not None:
            return st
        if isinstance(x, nn.Parameter) and id(x) in self.params:
            return Status("centred", frozenset({self.params[id(x)]}))
        if isinstance(x, int | float) and x == 0:
            return ZERO
        return Status(
            "broken", reason=f"adds a tensor not written by a linear map in {self.ctx()}"
        )
