"""Record and replay the module changes surgery made, so a checkpoint can rebuild them.

Folding and norm replacement change a model's *modules*, not only its weights: LayerNorms
become RMSNorms (or any registered norm), linear layers gain a bias that absorbs a folded
``beta``. A state dict alone then no longer fits the original architecture. Every module
that surgery builds carries a *build spec* (:func:`tag_build`): the registered method, the
feature size and the keyword arguments. :func:`capture_structure` compares a transformed
model against a freshly built one of the original architecture and returns a JSON-ready
record of the differences; :func:`apply_structure` replays it on a fresh model, after which
the transformed state dict loads strictly. Changes that cannot be recorded (a module built
by an arbitrary callable, an extra tensor that is not an added bias) make
:func:`capture_structure` refuse, so nothing is ever saved that would reload differently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from normlab._registry import get

__all__ = ["BUILD_ATTR", "apply_structure", "build_spec", "capture_structure", "tag_build"]

#: Attribute on a module that surgery built: ``{"method", "size", "kwargs"}``.
BUILD_ATTR = "_normlab_build"


def tag_build(module: nn.Module, method: str, size: Any, kwargs: Mapping[str, Any]) -> None:
    """Record on ``module`` how to rebuild it: ``get(method).builder(size, **kwargs)``.

    Nothing is recorded when ``kwargs`` is not JSON (the module then cannot be saved).
    """
    size = [int(s) for s in size] if isinstance(size, list | tuple) else [int(size)]
    spec = {"method": method, "size": size, "kwargs": dict(kwargs)}
    try:
        json.dumps(spec)
    except TypeError:
        return
    object.__setattr__(module, BUILD_ATTR, spec)


def build_spec(module: nn.Module) -> dict[str, Any] | None:
    """The build spec :func:`tag_build` put on ``module``, or None."""
    return getattr(module, BUILD_ATTR, None)


def _build(spec: Mapping[str, Any]) -> nn.Module:
    size = spec["size"]
    module = get(spec["method"]).builder(
        size[0] if len(size) == 1 else tuple(size), **spec["kwargs"]
    )
    tag_build(module, spec["method"], size, spec["kwargs"])
    return module


def _linear_bias_size(module: nn.Module) -> int | None:
    w = getattr(module, "weight", None)
    if isinstance(module, nn.Linear):
        return int(w.shape[0])
    if type(module).__name__ == "Conv1D" and isinstance(w, torch.Tensor):
        return int(w.shape[1])  # Hugging Face Conv1D: weight (in, out)
    return None


def apply_structure(model: nn.Module, structure: Mapping[str, Any]) -> nn.Module:
    """Replay a :func:`capture_structure` record on a freshly built ``model``, in place.

    New modules take the device and dtype of the parameters they replace (or of the
    model), so this also works inside a meta-device or dtype context.
    """
    for name, spec in structure.get("modules", {}).items():
        old = model.get_submodule(name)
        like = next(iter(old.parameters()), None)
        like = next(iter(model.parameters()), None) if like is None else like
        new = _build(spec)
        if like is not None:
            new = new.to(device=like.device, dtype=like.dtype)
        new.train(old.training)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, new)
    for name in structure.get("added_bias", []):
        module = model.get_submodule(name)
        size = _linear_bias_size(module)
        if size is None:
            raise ValueError(f"'{name}' is not a linear layer; cannot add a bias to it.")
        if getattr(module, "bias", None) is None:
            w = module.weight
            module.bias = nn.Parameter(torch.zeros(size, device=w.device, dtype=w.dtype))
    return model


def capture_structure(model: nn.Module, fresh: nn.Module) -> dict[str, Any]:
    """The module changes of ``model`` relative to ``fresh`` (same architecture, untouched).

    ``fresh`` may live on the meta device. Returns ``{"modules": {name: spec}, "added_bias":
    [...]}`` (both empty for an unchanged model).

    Raises:
        ValueError: when a change cannot be recorded: a module of another class without a
            build spec (replaced by a callable instead of a registered norm name), or
            tensors that differ in a way no record explains. The message names them.
    """
    ours = dict(model.named_modules())
    theirs = dict(fresh.named_modules())
    modules: dict[str, Any] = {}
    problems = []
    for name, module in ours.items():
        if not name or any(name.startswith(m + ".") for m in modules):
            continue
        other = theirs.get(name)
        if other is not None and type(other) is type(module):
            continue
        spec = build_spec(module)
        if spec is None:
            problems.append(
                f"'{name}' is a {type(module).__name__} where the architecture has "
                f"{type(other).__name__ if other is not None else 'nothing'}, and normlab has no "
                "record of how it was built (replace norms with a registered name, e.g. "
                "replace_norms(model, 'dyt'), not a callable, so a checkpoint can rebuild them)"
            )
        else:
            modules[name] = spec
    structure: dict[str, Any] = {"modules": modules, "added_bias": []}
    if problems:
        raise ValueError("Cannot save this model's structure: " + "; ".join(problems) + ".")
    apply_structure(fresh, structure)
    expected = {k: tuple(v.shape) for k, v in fresh.state_dict().items()}
    actual = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    named = dict(fresh.named_modules())
    for key in sorted(set(actual) - set(expected)):
        owner, _, attr = key.rpartition(".")
        size = _linear_bias_size(named[owner]) if attr == "bias" and owner in named else None
        if size is not None and actual[key] == (size,):
            structure["added_bias"].append(owner)
    apply_structure(fresh, {"added_bias": structure["added_bias"]})
    expected = {k: tuple(v.shape) for k, v in fresh.state_dict().items()}
    if expected != actual:
        extra = sorted(set(actual) - set(expected))
        missing = sorted(set(expected) - set(actual))
        shaped = sorted(k for k in set(actual) & set(expected) if actual[k] != expected[k])
        raise ValueError(
            "Cannot save this model's structure: its tensors differ from the architecture's "
            f"in ways normlab does not record (extra {extra[:5]}, missing {missing[:5]}, "
            f"reshaped {shaped[:5]})."
        )
    return structure
