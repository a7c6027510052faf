"""Which LayerNorms of a model can be folded into RMSNorm, and why the others cannot.

A LayerNorm ``LN(x) = gamma * (x - mean(x)) / sqrt(var(x) + eps) + beta`` equals
``RMSNorm(x)`` (same eps, no weight) followed by the affine map whenever its input has zero
mean along the normalized axis. That holds exactly when every module that *writes* to the
normalized stream is a linear map whose output can be column-centred (a linear layer with
``W -= W.mean(out)``, an embedding with rows centred, a learned vector added to the stream)
and the stream is combined only by sums, scalar or per-token scaling, token mixing and
reshapes that keep the feature axis. Centring a writer subtracts a per-token constant from
the stream, which is invisible to every consumer that is itself a LayerNorm, so a writer may
be centred only when all its consumers are LayerNorms. The LayerNorm's ``gamma``/``beta``
move into the linear layers that *read* its output (``W <- W diag(gamma)``,
``b <- b + s W beta`` with ``s`` a scalar applied on the way), so all readers must be linear.
(Foldable LayerNorm, seed paper "fold-ln"; centring as in SliceGPT/QuaRot.)

The analysis is a dataflow pass over the graph of one concrete forward pass. ``torch.fx``
symbolic tracing cannot trace models that check their inputs' shapes (TinyGPT) or most
Hugging Face models, so normlab records the executed operations with a
:class:`~torch.overrides.TorchFunctionMode` and module hooks instead, and propagates one of
four states per tensor: *centred* (a sum of centrable writers, with the feature axis),
*LN output* (with the scalar applied since), *zero*, or *broken* (with the first reason).
Linear, embedding and norm modules are opaque leaves; everything else is seen op by op.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from normlab._records import Record
from normlab.surgery._fold_ops import Tracker, is_centering_norm
from normlab.surgery._fold_rules import Status

__all__ = ["FoldAnalysis", "FoldSite", "analyze_fold", "is_centering_norm", "run_example"]


@dataclass(frozen=True)
class FoldSite(Record):
    """The folding decision for one LayerNorm.

    Attributes:
        name: qualified module name.
        foldable: whether it can be replaced by RMSNorm exactly.
        reasons: why not (empty when foldable).
        writers: modules (or parameters) whose outputs sum to its input.
        readers: linear modules that read its output and absorb ``gamma``/``beta``.
        scales: the scalar each reader sees the output multiplied by.
        mode: "fold" (affine moved into readers), "weight" (no beta: gamma stays as the
            RMSNorm weight) or "plain" (no affine); "" when not foldable.
    """

    name: str
    foldable: bool
    reasons: tuple[str, ...] = ()
    writers: tuple[str, ...] = ()
    readers: tuple[str, ...] = ()
    scales: tuple[float, ...] = ()
    mode: str = ""


@dataclass(frozen=True)
class FoldAnalysis(Record):
    """Per-LayerNorm folding decisions for one model.

    Attributes:
        sites: one :class:`FoldSite` per centring LayerNorm, in module order.
        tied: ``(writer, other_holder)`` pairs whose weight is shared and must be untied.
        tied_policy: "untie" or "refuse".
    """

    sites: tuple[FoldSite, ...]
    tied: tuple[tuple[str, str], ...] = field(default=())
    tied_policy: str = "untie"

    @property
    def foldable(self) -> list[str]:
        """Names of the foldable LayerNorms."""
        return [s.name for s in self.sites if s.foldable]

    @property
    def refused(self) -> dict[str, tuple[str, ...]]:
        """Reasons per LayerNorm that cannot be folded."""
        return {s.name: s.reasons for s in self.sites if not s.foldable}

    def site(self, name: str) -> FoldSite:
        """The decision for LayerNorm ``name``."""
        for s in self.sites:
            if s.name == name:
                return s
        raise KeyError(f"No LayerNorm named {name!r}; known: {[s.name for s in self.sites]}.")


def run_example(model: nn.Module, example: torch.Tensor | Mapping[str, Any]) -> Any:
    """Call ``model`` on ``example``: a tensor (positional) or a mapping of keyword inputs."""
    if isinstance(example, Mapping):
        return model(**example)
    return model(example)


def _holders(model: nn.Module) -> dict[int, list[str]]:
    """``id(parameter)`` -> names of the modules that hold it directly."""
    out: dict[int, list[str]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        for p in module.parameters(recurse=False):
            out.setdefault(id(p), [])
            if name not in out[id(p)]:
                out[id(p)].append(name)
    return out


def _site(
    name: str, module: nn.Module, tracker: Tracker, holders: dict[int, list[str]], tied: str
) -> tuple[FoldSite, list[tuple[str, str]]]:
    reasons: list[str] = []
    untie: list[tuple[str, str]] = []
    status: Status | None = tracker.norm_inputs.get(name)
    shape = tuple(getattr(module, "normalized_shape", ()) or ())
    if len(shape) != 1:
        reasons.append(f"normalizes over {len(shape)} axes; folding handles one feature axis")
    if status is None:
        return FoldSite(name, False, ("not executed in the forward pass",)), untie
    if status.kind == "broken":
        reasons.append(f"input is not a sum of centrable linear writers: {status.reason}")
    elif status.kind == "lnout":
        reasons.append(f"input is the output of LayerNorm '{status.ln}' (post-LN)")
    elif status.kind == "centred" and status.axis != -1:
        reasons.append("the stream's feature axis is not the normalized (last) axis")
    writers = tuple(sorted(status.writers)) if status.kind == "centred" else ()
    for w in writers:
        for why in tracker.exposed.get(w, []):
            reasons.append(f"writer '{w}' is also read without a LayerNorm: {why}")
        module_w = tracker.modules.get(w)
        weight = getattr(module_w, "weight", None) if module_w is not None else None
        others = [] if weight is None else [h for h in holders.get(id(weight), []) if h != w]
        for other in others:
            if tied == "refuse":
                reasons.append(
                    f"tied weights: '{w}.weight' is also the weight of '{other}'; "
                    "pass tied='untie' to give the reader its own copy"
                )
            else:
                untie.append((w, other))
    readers = tracker.readers.get(name, {})
    gamma, beta = getattr(module, "weight", None), getattr(module, "bias", None)
    bad = tracker.bad_readers.get(name, [])
    conflicts = [r for r in readers if len(tracker.reader_inputs.get(r, set())) > 1]
    if gamma is None and beta is None:
        mode = "plain"
    elif not bad and not conflicts:
        mode = "fold"
    elif beta is None:
        mode = "weight"  # gamma stays on the RMSNorm; readers untouched
    else:
        mode = ""
        reasons += [f"output cannot absorb beta: {why}" for why in bad]
        reasons += [f"reader '{r}' also reads other inputs" for r in conflicts]
    site = FoldSite(
        name,
        not reasons,
        tuple(dict.fromkeys(reasons)),
        writers,
        tuple(readers) if mode == "fold" else (),
        tuple(readers.values()) if mode == "fold" else (),
        mode if not reasons else "",
    )
    return site, untie if not reasons else []


@torch.no_grad()
def analyze_fold(
    model: nn.Module, example: torch.Tensor | Mapping[str, Any], *, tied: str = "untie"
) -> FoldAnalysis:
    """Decide, per LayerNorm of ``model``, whether it folds into RMSNorm exactly.

    The model runs once on ``example`` in eval mode under a recording mode; its modes are
    restored and no hook is left behind. Only centring LayerNorms are judged (RMSNorm-like
    norms have nothing to fold).

    Args:
        model: any ``nn.Module``.
        example: an input the model accepts: a tensor, or a mapping of keyword inputs
            (e.g. ``{"input_ids": ids}`` for a Hugging Face model).
        tied: what to do when a writer's weight is shared with another module (tied input
            and output embeddings): "untie" gives the other module its own copy when
            folding; "refuse" leaves that LayerNorm unfolded with the reason.

    Returns:
        A :class:`FoldAnalysis`; ``analysis.refused`` says why each other LayerNorm is not
        foldable (post-LN, nonlinear writer, tied weights, non-linear reader, ...).

    Example:
        >>> analysis = analyze_fold(model, tokens)
        >>> analysis.foldable, analysis.refused
    """
    if tied not in ("untie", "refuse"):
        raise ValueError(f"tied must be 'untie' or 'refuse', got {tied!r}.")
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    tracker = Tracker(model)
    try:
        with tracker:
            out = run_example(model, example)
        tracker.finish(out)
    finally:
        tracker.remove()
        for m, training in modes:
            m.training = training
    holders = _holders(model)
    sites, pairs = [], []
    for name, module in model.named_modules():
        if name and is_centering_norm(module):
            site, untie = _site(name, module, tracker, holders, tied)
            sites.append(site)
            pairs += untie
    return FoldAnalysis(tuple(sites), tuple(dict.fromkeys(pairs)), tied)
