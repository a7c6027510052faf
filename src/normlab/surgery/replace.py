"""Swap the normalization layers of a model for any registered norm."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab._marks import mark_changed
from normlab._records import Record
from normlab._registry import get, methods
from normlab.layers.norms import LayerNorm, RMSNorm
from normlab.surgery.structure import tag_build

__all__ = ["Replacement", "is_norm_layer", "norm_eps", "norm_size", "replace_norms"]

_NORM_TYPES: tuple[type[nn.Module], ...] = (nn.LayerNorm, nn.RMSNorm, LayerNorm, RMSNorm)


@dataclass(frozen=True)
class Replacement(Record):
    """One norm that :func:`replace_norms` swapped.

    Attributes:
        name: qualified module name in the model.
        old: class name of the module that was there.
        new: class name of the module put there.
        size: its normalized shape.
    """

    name: str
    old: str
    new: str
    size: tuple[int, ...]


def is_norm_layer(module: nn.Module) -> bool:
    """Whether ``module`` is a norm layer, a LayerNorm *or* an RMSNorm: torch's, normlab's,
    or a model library's own class (``LlamaRMSNorm``, ``T5LayerNorm``, ...), recognised by
    name. For LayerNorms that subtract the mean only, see
    :func:`normlab.surgery.is_centering_norm`."""
    if isinstance(module, _NORM_TYPES):
        return True
    name = type(module).__name__
    return name.endswith(("LayerNorm", "RMSNorm")) and norm_size(module) is not None


def norm_size(module: nn.Module) -> tuple[int, ...] | None:
    """The normalized shape of a norm module, from ``normalized_shape`` or its weight."""
    shape = getattr(module, "normalized_shape", None)
    if shape is not None:
        return (shape,) if isinstance(shape, int) else tuple(shape)
    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor):
        return tuple(weight.shape)
    size = getattr(module, "hidden_size", None)
    return (size,) if isinstance(size, int) else None


def norm_eps(module: nn.Module) -> float | None:
    """The epsilon of a norm module (``eps`` or Hugging Face's ``variance_epsilon``)."""
    for attr in ("eps", "variance_epsilon"):
        value = getattr(module, attr, None)
        if isinstance(value, float | int):
            return float(value)
    return None


def _factory(module: nn.Module, model: nn.Module) -> dict[str, Any]:
    for source in (module, model):
        for t in (*source.parameters(), *source.buffers()):
            return {"device": t.device, "dtype": t.dtype}
    return {}


def _accepts(builder: Callable[..., Any], name: str) -> bool:
    target = getattr(builder, "func", builder)
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


@torch.no_grad()
def _copy_affine(old: nn.Module, new: nn.Module) -> None:
    for attr in ("weight", "bias"):
        src, dst = getattr(old, attr, None), getattr(new, attr, None)
        tensors = isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)
        if tensors and src.shape == dst.shape:
            dst.copy_(src)


def replace_norms(
    model: nn.Module,
    to: str | Callable[..., nn.Module],
    *,
    match: Callable[[nn.Module], bool] = is_norm_layer,
    site_kwargs: Callable[[str], dict[str, Any]] | None = None,
    copy_affine: bool = True,
    **kwargs: Any,
) -> list[Replacement]:
    """Replace every norm of ``model`` in place and return what was replaced.

    Each new module is built as ``builder(size, **kwargs, **site_kwargs(name))`` with the
    old module's normalized shape, device and dtype; the old ``eps`` carries over when the
    new norm takes one and ``kwargs`` does not set it. With ``copy_affine`` a weight/bias
    of matching shape is copied (norms stored as ``1 + weight``, as in Gemma, need
    ``copy_affine=False``).

    Changed layers of torch's ``nn.TransformerEncoderLayer`` / ``nn.TransformerEncoder``
    are taken off their fused eval-mode fast path, which assumes LayerNorms
    (:func:`_disable_fast_path`). The model is marked as changed
    (:func:`normlab._marks.mark_changed`): a Hugging Face model's ``save_pretrained`` then
    writes normlab's format, which the original class refuses to load.

    Norms built from a registered name carry a build record, so
    :func:`normlab.models.checkpoint.save_model` persists the replacement and
    :func:`~normlab.models.checkpoint.load_model` (or, for Hugging Face models, the Auto
    classes normlab registers) rebuilds it; a model changed with a callable ``to`` cannot
    be saved that way and :func:`~normlab.models.checkpoint.save_model` refuses it.

    Args:
        model: the model to change in place.
        to: a registered norm name (e.g. ``"dyt"``, ``"rmsnorm"``) or a module builder;
            required. With the default ``match``, a registered norm must normalize the last
            dimension (layout "features_last"), like the LayerNorm/RMSNorm sites it
            replaces; a custom ``match`` takes responsibility for the layout.
        match: which modules to replace; LayerNorm/RMSNorm-like modules by default.
        site_kwargs: per-site extra arguments from the qualified module name, e.g.
            ``lambda name: {"alpha_init": llm_alpha_init(name)}`` for DyT.
        copy_affine: copy the old weight and bias into the new module.
        **kwargs: arguments for every new module.

    Raises:
        ValueError: when ``to`` is not a registered norm, or is one whose layout does not
            fit a features-last site (e.g. QuadNorm, which reads ``(batch, C, *grid)``).

    Example:
        >>> replaced = replace_norms(model, "dyt", alpha_init=0.5)
    """
    if isinstance(to, str):
        method = get(to)
        if method.kind != "norm":
            raise ValueError(f"{to!r} is a {method.kind} method; replace_norms needs a norm.")
        if method.layout != "features_last" and match is is_norm_layer:
            fits = ", ".join(m.name for m in methods("norm") if m.layout == "features_last")
            raise ValueError(
                f"{to!r} is a {method.layout} norm, but the LayerNorm/RMSNorm sites "
                "replace_norms swaps normalize the last dimension of (..., features); "
                f"use a features_last norm: {fits}."
            )
        builder: Callable[..., nn.Module] = method.builder
        registered = method.name
    else:
        builder, registered = to, None
    targets = [(name, module) for name, module in model.named_modules() if name and match(module)]
    replaced = []
    for name, old in targets:
        size = norm_size(old)
        if size is None:
            raise ValueError(f"Cannot tell the feature size of {name} ({type(old).__name__}).")
        kw = {**kwargs, **(site_kwargs(name) if site_kwargs else {})}
        eps = norm_eps(old)
        if eps is not None and "eps" not in kw and _accepts(builder, "eps"):
            kw["eps"] = eps
        new = builder(size if len(size) > 1 else size[0], **kw).to(**_factory(old, model))
        if registered is not None:  # save_model rebuilds it from this record
            tag_build(new, registered, size, kw)
        if copy_affine:
            _copy_affine(old, new)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, new)
        replaced.append(Replacement(name, type(old).__name__, type(new).__name__, size))
    if replaced:
        _disable_fast_path(model, [r.name for r in replaced])
        mark_changed(model, "replace_norms")
    return replaced


def _disable_fast_path(model: nn.Module, names: list[str]) -> None:
    """Keep torch's transformer layers whose norms changed off their fused fast path.

    In eval mode ``nn.TransformerEncoderLayer`` (and ``nn.TransformerEncoder``, also inside
    ``nn.Transformer``) run a fused kernel that reads ``norm1``/``norm2`` as LayerNorms
    (``eps``, ``weight``, ``bias``): with another norm it fails or computes a LayerNorm.
    The layer checks ``activation_relu_or_gelu`` before it reads the norms, so that
    attribute is set to 0 ("not ReLU/GELU", which only the fast path reads) on each changed
    layer, and ``use_nested_tensor`` to False on encoders holding one; the ordinary path
    then runs the new norms, in train and eval mode alike.
    """
    changed = set()
    for name in names:
        parent, _, _ = name.rpartition(".")
        layer = model.get_submodule(parent)
        if isinstance(layer, nn.TransformerEncoderLayer):
            layer.activation_relu_or_gelu = 0
            changed.add(id(layer))
    for module in model.modules():
        layers = module.layers if isinstance(module, nn.TransformerEncoder) else ()
        if any(id(layer) in changed for layer in layers):
            module.use_nested_tensor = False
