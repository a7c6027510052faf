"""Fold foldable LayerNorms into RMSNorm exactly (Foldable LayerNorm, seed paper "fold-ln").

For each LayerNorm that :func:`~normlab.surgery.fold_detect.analyze_fold` finds foldable:

1. its ``gamma``/``beta`` move into every linear *reader* of its output: for a reader
   ``y = W (s * LN(x)) + b`` (``s`` a scalar applied on the way),
   ``W <- W diag(gamma)`` and ``b <- b + s W beta`` (a bias is added where there was none);
2. every *writer* to its input stream is column-centred, so the stream has zero mean:
   ``W <- W - 1 mean_out(W)`` and ``b <- b - mean(b)`` for a linear layer, each embedding
   row (or added parameter vector) minus its mean;
3. the LayerNorm becomes ``RMSNorm(d, eps)`` with the same eps and no weight (or with
   ``gamma`` as weight when there is no ``beta`` and the readers are not all linear).

With zero-mean input ``LN(x) = gamma * x / sqrt(mean(x^2) + eps) + beta``, so the model's
function is unchanged up to rounding. All arithmetic is done in float64 and cast back, and
the result is verified against the model's own float32 rounding noise
(:func:`~normlab.surgery.fold_verify.verify_transform`), not a fixed tolerance.
Weights shared between a writer and another module (tied input/output embeddings) are
untied first: the other module gets its own copy, reported in the result; where the two
copies end up equal they are tied again. The changed model is marked
(:func:`normlab._marks.mark_changed`), so its ``save_pretrained`` writes normlab's format.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab._marks import mark_changed
from normlab._records import Record
from normlab.layers.norms import RMSNorm
from normlab.surgery._folded import mark_folded, refuse_refold
from normlab.surgery.fold_detect import FoldAnalysis, analyze_fold, run_example
from normlab.surgery.fold_verify import FoldCheck, model_output, verify_transform
from normlab.surgery.structure import tag_build

__all__ = ["FoldResult", "apply_fold_structure", "fold_layernorms", "model_output"]


@dataclass(frozen=True)
class FoldResult(Record):
    """What :func:`fold_layernorms` changed.

    Attributes:
        analysis: the per-LayerNorm decisions it acted on.
        folded: LayerNorms replaced by RMSNorm.
        untied: ``(writer, other)`` pairs whose shared weight was copied into ``other``.
        added_bias: reader modules that received a bias to absorb ``beta``.
        rmsnorm: per folded name, ``{"size", "eps", "affine"}`` of its RMSNorm.
        max_abs_change: max ``|output_after - output_before|`` on the example, or None.
        check: the verification against float64 (:class:`FoldCheck`), or None.
    """

    analysis: FoldAnalysis
    folded: tuple[str, ...]
    untied: tuple[tuple[str, str], ...]
    added_bias: tuple[str, ...]
    rmsnorm: Mapping[str, Mapping[str, Any]]
    max_abs_change: float | None = None
    check: FoldCheck | None = None

    def structure(self) -> dict[str, Any]:
        """The module changes, enough to rebuild the folded model before loading weights."""
        return {
            "rmsnorm": {k: dict(v) for k, v in self.rmsnorm.items()},
            "added_bias": list(self.added_bias),
            "untied": [list(p) for p in self.untied],
        }

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), **self.structure()}


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    parent, _, child = name.rpartition(".")
    return model.get_submodule(parent), child


def _untie(model: nn.Module, holder_name: str, shared: torch.Tensor | None) -> None:
    holder = model.get_submodule(holder_name)
    for attr, p in list(holder.named_parameters(recurse=False)):
        if shared is None or p is shared:
            setattr(holder, attr, nn.Parameter(p.detach().clone(), p.requires_grad))


def _retie(model: nn.Module, untied: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """Share the weight again where the fold left both copies equal (to a few float
    rounding steps; the verification runs on the retied model); the pairs still untied.

    A tied head (GPT-2's ``lm_head`` and ``wte``) stays tied only when the fold changes
    neither copy or both the same way; folding ``ln_f`` scales the head's columns by
    ``gamma`` while the embedding rows are centred, so there the copies differ.
    """
    kept = []
    for writer, other in untied:
        w, holder = model.get_submodule(writer).weight, model.get_submodule(other)
        h = holder.weight
        ulp = torch.finfo(w.dtype).eps * float(w.detach().abs().max())
        if w.shape == h.shape and float((w - h).abs().max()) <= 4 * ulp:  # equal to rounding
            holder.weight = w
        else:
            kept.append((writer, other))
    return tuple(kept)


def _add_bias(module: nn.Module) -> None:
    out = module.weight.shape[0 if isinstance(module, nn.Linear) else 1]
    w = module.weight
    module.bias = nn.Parameter(torch.zeros(out, device=w.device, dtype=w.dtype))


def _rmsnorm(size: int, eps: float, affine: bool, like: torch.Tensor | None) -> RMSNorm:
    factory = {} if like is None else {"device": like.device, "dtype": like.dtype}
    norm = RMSNorm(size, eps=eps, elementwise_affine=affine, **factory)
    tag_build(norm, "rmsnorm", size, {"eps": eps, "elementwise_affine": affine})
    return norm


def apply_fold_structure(model: nn.Module, structure: Mapping[str, Any]) -> None:
    """Make ``model``'s modules match a folded model's, so its state dict loads.

    Args:
        model: a freshly built model of the original architecture.
        structure: :meth:`FoldResult.structure` of the fold.
    """
    for _writer, other in structure.get("untied", []):
        _untie(model, other, None)
    for name in structure.get("added_bias", []):
        module = model.get_submodule(name)
        if getattr(module, "bias", None) is None:
            _add_bias(module)
    for name, spec in structure.get("rmsnorm", {}).items():
        old = model.get_submodule(name)
        like = next(iter(old.parameters()), None)
        parent, child = _parent(model, name)
        setattr(parent, child, _rmsnorm(int(spec["size"]), spec["eps"], spec["affine"], like))
    mark_changed(model, "fold_layernorms")


@torch.no_grad()
def fold_layernorms(
    model: nn.Module,
    example: torch.Tensor | Mapping[str, Any],
    *,
    tied: str = "untie",
    only: Sequence[str] | None = None,
    verify: bool = True,
) -> FoldResult:
    """Replace every foldable LayerNorm of ``model`` by RMSNorm, in place, exactly.

    Args:
        model: the model to change.
        example: an input the model accepts (tensor or mapping of keyword inputs); it drives
            the analysis and, with ``verify``, the before/after comparison.
        tied: "untie" (copy shared writer weights into the other holder) or "refuse".
        only: fold only these LayerNorms (all foldable ones by default).
        verify: measure ``max |output_after - output_before|`` on ``example`` and check
            the folded model against the unfolded one evaluated in float64
            (``result.check``; this keeps a copy of the model while folding).

    Returns:
        A :class:`FoldResult`; ``result.analysis.refused`` holds the reasons for the rest.

    Raises:
        ValueError: when ``model`` was already folded by this function (config
            ``normlab_folded``; fold every LayerNorm you want in one call).

    Example:
        >>> result = fold_layernorms(model, tokens)
        >>> result.folded, result.max_abs_change
    """
    refuse_refold(model, "fold_layernorms")
    analysis = analyze_fold(model, example, tied=tied)
    sites = [s for s in analysis.sites if s.foldable and (only is None or s.name in only)]
    modes = [(m, m.training) for m in model.modules()]
    was_training = {id(m): t for m, t in modes}
    model.eval()
    before = model_output(run_example(model, example)).detach().clone() if verify else None
    original = copy.deepcopy(model) if verify else None
    writers = list(dict.fromkeys(w for s in sites for w in s.writers))
    untied = tuple(p for p in analysis.tied if p[0] in writers)
    for writer, other in untied:
        _untie(model, other, model.get_submodule(writer).weight)
    work: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def f64(p: torch.Tensor) -> torch.Tensor:
        if id(p) not in work:
            work[id(p)] = (p, p.detach().to(torch.float64))
        return work[id(p)][1]

    added = []
    for site in (s for s in sites if s.mode == "fold"):
        ln = model.get_submodule(site.name)
        d = ln.normalized_shape[0]
        gamma = f64(ln.weight) if ln.weight is not None else torch.ones(d, dtype=torch.float64)
        beta = f64(ln.bias) if ln.bias is not None else torch.zeros(d, dtype=torch.float64)
        for name, scale in zip(site.readers, site.scales, strict=True):
            reader = model.get_submodule(name)
            linear = isinstance(reader, nn.Linear)  # else Hugging Face Conv1D, weight (in, out)
            weight = f64(reader.weight)
            shift = scale * (weight @ beta if linear else beta @ weight)
            if reader.bias is None:
                _add_bias(reader)
                added.append(name)
            f64(reader.bias).add_(shift)
            weight.mul_(gamma[None, :] if linear else gamma[:, None])
    params = dict(model.named_parameters())
    for name in writers:
        if name in params:  # a learned vector added to the stream
            p = f64(params[name])
            p.sub_(p.mean(-1, keepdim=True))
            continue
        module = model.get_submodule(name)
        w = f64(module.weight)
        w.sub_(w.mean(0 if isinstance(module, nn.Linear) else 1, keepdim=True))
        if getattr(module, "bias", None) is not None:
            b = f64(module.bias)
            b.sub_(b.mean())
    for p, value in work.values():
        p.copy_(value.to(p.dtype))
    untied = _retie(model, untied)
    specs = {}
    for site in sites:
        ln = model.get_submodule(site.name)
        spec = {
            "size": ln.normalized_shape[0],
            "eps": float(ln.eps),
            "affine": site.mode == "weight",
        }
        new = _rmsnorm(spec["size"], spec["eps"], spec["affine"], ln.weight)
        if spec["affine"]:
            new.weight.copy_(ln.weight)
        new.train(was_training[id(ln)])
        parent, child = _parent(model, site.name)
        setattr(parent, child, new)
        specs[site.name] = spec
    change, check = None, None
    if before is not None:
        after = model_output(run_example(model, example))
        change = float((after.double() - before.double()).abs().max())
        if sites:
            check = verify_transform(original, model, example)
    for m, training in modes:
        m.training = training
    folded = tuple(s.name for s in sites)
    if folded:
        mark_changed(model, "fold_layernorms")
        mark_folded(model, "fold_layernorms")
    return FoldResult(analysis, folded, untied, tuple(added), specs, change, check)
