"""Model adapters: one view of blocks, norms, residual stream and attention across models.

:func:`adapt` wraps a Hugging Face model of any family with a layout in
:data:`normlab._layouts.LAYOUTS` (GPT-2, BERT, Llama, Mistral, Qwen2/3, Qwen3-MoE, Mixtral,
Gemma 1-3, Phi-3, OLMo-2, GPT-NeoX, Cohere, OPT, Falcon, T5's encoder, StableLM; add one with
:func:`register_layout`), or any model whose code registered an adapter with
:func:`register_adapter` (normlab's TinyGPT does so when :mod:`normlab.models.gpt` is
imported), in a :class:`ModelAdapter`. Probes never import a model class. They use the
adapter to read, without changing the model:

- the residual stream: ``residual[0]`` is the input of the first run block (the embedding
  output) and ``residual[i + 1]`` the output of the ``i``-th run block, so
  ``adapter.readout(residual[-1])`` reproduces the model's own output;
- the inputs and outputs of every norm, named by :class:`NormSite` with its position
  ("pre": the norm reads the residual stream before a sublayer, GPT-2 / Llama; "post": it
  normalizes the stream after the residual add, BERT; "post_sublayer": it normalizes a
  sublayer's output before the add, Gemma-2 / OLMo-2; "qk": queries and keys, Qwen3;
  "final": the last norm before the head; "embed": BERT's embedding norm);
- attention probabilities ``(batch, heads, tokens, tokens)`` per layer (Hugging Face models
  must be built with ``attn_implementation="eager"``, the only kernel that returns them).

Running a subset or reordering of blocks (``layers=``) swaps the model's block list for the
duration of the call and puts it back afterwards; it is not thread-safe on a shared model.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from normlab._layouts import LAYOUTS, ModelLayout, base_model_type, register_layout

__all__ = [
    "FAMILIES",
    "ModelAdapter",
    "ModelLayout",
    "NormSite",
    "Trace",
    "adapt",
    "base_model_type",
    "families",
    "register_adapter",
    "register_layout",
]

#: Hugging Face model families (``model_type``) :func:`adapt` understands by layout; a
#: view of the table, so families added with :func:`register_layout` appear here too.
FAMILIES = LAYOUTS.keys()


@dataclass(frozen=True)
class NormSite:
    """One normalization module of a model and where it acts.

    Attributes:
        name: qualified module name, as in ``model.named_modules()``.
        layer: block index, or -1 for a norm outside the blocks (final or embedding).
        position: "pre", "post", "post_sublayer", "qk", "final" or "embed".
        module: the norm module itself (left out of :meth:`to_dict`).
    """

    name: str
    layer: int
    position: str
    module: nn.Module = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "layer": self.layer, "position": self.position}


@dataclass
class Trace:
    """What one forward pass wrote, captured by :meth:`ModelAdapter.trace`.

    Attributes:
        residual: ``n_run + 1`` tensors ``(batch, tokens, d)``: the first run block's input,
            then each run block's output.
        norm_inputs: per :attr:`NormSite.name`, the norm's input (last call if called twice).
        norm_outputs: per :attr:`NormSite.name`, the norm's output.
        attention: per run layer, probabilities ``(batch, heads, tokens, tokens)``; empty
            unless asked.
        logits: the model's output: LM logits where there is an LM head, else the last
            hidden state.
    """

    residual: list[torch.Tensor] = field(default_factory=list)
    norm_inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    norm_outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    attention: list[torch.Tensor] = field(default_factory=list)
    logits: torch.Tensor | None = None


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, (tuple, list)) else output


def _get(root: nn.Module, path: str) -> nn.Module | None:
    module: Any = root
    for part in path.split("."):
        module = getattr(module, part, None)
        if module is None:
            return None
    return module


@contextlib.contextmanager
def _inference(model: nn.Module) -> Iterator[None]:
    """Eval mode and no grad for the block; every module's own mode is restored after."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for module, training in modes:
            module.training = training


class ModelAdapter:
    """A uniform view of one model family; build it with :func:`adapt`.

    Model code adapts its own models by subclassing this class (pass a
    :class:`ModelLayout`, override :meth:`readout`, :meth:`norm_position`, :meth:`_call` or
    :meth:`_states` where the model has a faster or more exact path) and registering the
    subclass with :func:`register_adapter`.

    Args:
        model: the model.
        family: the family name, e.g. "gpt2".
        layout: where its parts are; ``None`` for the built-in layout of ``family``.
        causal: attention is causal; ``None`` for the layout's.

    Attributes:
        model: the wrapped model.
        family: the family name.
        has_lm_head: the output is vocabulary logits (else the last hidden state).
        causal: attention is causal.
    """

    def __init__(
        self,
        model: nn.Module,
        family: str,
        *,
        layout: ModelLayout | None = None,
        causal: bool | None = None,
    ) -> None:
        self.model, self.family = model, family
        self.layout = layout = LAYOUTS[family] if layout is None else layout
        self.root = next(r for r in layout.roots if _get(model, r + layout.blocks) is not None)
        head = _get(model, layout.head) if layout.head else None
        self.has_lm_head = isinstance(head, nn.Module)
        self.causal = layout.causal if causal is None else causal

    def norm_position(self) -> str:
        """The position of the block norms, "pre" or "post" (the layout's by default)."""
        return self.layout.norm_position(getattr(self.model, "config", None))

    def blocks(self) -> list[nn.Module]:
        """The transformer blocks, in order."""
        return list(_get(self.model, self.root + self.layout.blocks))  # type: ignore[arg-type]

    @property
    def n_layers(self) -> int:
        return len(self.blocks())

    def norm_sites(self) -> list[NormSite]:
        """Every norm module with its layer and position (absent ones are skipped)."""
        lay, root = self.layout, self.root
        position = self.norm_position()
        wanted = [(root + lay.embed, -1, "embed")] if lay.embed else []
        roles = (
            (lay.block_norms, position), (lay.post_norms, "post_sublayer"), (lay.qk_norms, "qk"),
        )  # fmt: skip
        for i in range(self.n_layers):
            for names, where in roles:
                wanted += [(f"{root}{lay.blocks}.{i}.{n}", i, where) for n in names]
        if lay.final:
            wanted.append((root + lay.final, -1, "final"))
        if lay.head_norm:
            wanted.append((lay.head_norm, -1, "final"))
        named = dict(self.model.named_modules())
        return [NormSite(n, i, p, named[n]) for n, i, p in wanted if n in named]

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        """The model's output computed from a last residual state: final norm, head, then
        the family's logit scale ``s`` and soft cap ``c`` (``c * tanh(s * z / c)``)."""
        lay, config = self.layout, getattr(self.model, "config", None)
        if lay.final:
            h = _get(self.model, self.root + lay.final)(h)  # type: ignore[misc]
        if not self.has_lm_head:
            return h
        logits = _get(self.model, lay.head)(h)  # type: ignore[misc]
        scale = getattr(config, lay.logit_scale, None) if lay.logit_scale else None
        if scale is not None:
            logits = logits * scale
        cap = getattr(config, lay.logit_softcap, None) if lay.logit_softcap else None
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    def _states(
        self, tokens: torch.Tensor, layers: list[int] | None, attention: bool
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
        """``(residual states, attention probabilities)`` from the model itself, or ``None``.

        An adapter whose model returns its residual stream overrides this; the default
        ``None`` makes :meth:`trace` capture the stream with hooks on the blocks.
        """
        return None

    def _call(
        self,
        tokens: torch.Tensor,
        layers: list[int] | None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        kwargs: dict[str, Any] = {"use_cache": False} if self.causal else {}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        module = _get(self.model, self.layout.call) if self.layout.call else self.model
        with self._order(layers):
            out = module(input_ids=tokens, **kwargs)  # type: ignore[misc]
        return out.logits if self.has_lm_head else out.last_hidden_state

    def _check_layers(self, layers: Sequence[int] | None) -> list[int] | None:
        if layers is None:
            return None
        n = self.n_layers
        out = [int(i) for i in layers]
        bad = [i for i in out if not 0 <= i < n]
        if bad:
            raise ValueError(f"layers {bad} out of range: the model has {n} blocks (0..{n - 1}).")
        return out

    @contextlib.contextmanager
    def _order(self, layers: list[int] | None) -> Iterator[None]:
        """Swap the block list for ``layers`` for the duration of the block."""
        if layers is None:
            yield
            return
        owner_path, _, attr = (self.root + self.layout.blocks).rpartition(".")
        owner = _get(self.model, owner_path) if owner_path else self.model
        original = getattr(owner, attr)
        config, key = getattr(self.model, "config", None), self.layout.count
        count = getattr(config, key, None) if key else None
        setattr(owner, attr, nn.ModuleList([original[i] for i in layers]))
        if count is not None:  # Llama-style models run ``layers[: config.num_hidden_layers]``
            setattr(config, key, len(layers))
        try:
            yield
        finally:
            setattr(owner, attr, original)
            if count is not None:
                setattr(config, key, count)

    def _masked_call(
        self, tokens: torch.Tensor, layers: list[int] | None, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """:meth:`_call` with a padding mask: passed to models that take one; for a causal
        model that does not, right padding is harmless (no valid token sees it)."""
        if mask is None or bool(mask.bool().all()):
            return self._call(tokens, layers)
        if "attention_mask" in inspect.signature(self._call).parameters:
            return self._call(tokens, layers, attention_mask=mask)
        _check_right_padded(mask, type(self.model).__name__, self.causal)
        return self._call(tokens, layers)

    def run(self, tokens: torch.Tensor, *, layers: Sequence[int] | None = None) -> torch.Tensor:
        """The model's output, running only ``layers`` (block indices, in that order).

        Repeats are allowed (a block run twice). The model runs in eval mode without
        gradients, and its block list and modes are restored afterwards.
        """
        order = self._check_layers(layers)
        with _inference(self.model):
            return self._call(tokens, order)

    def trace(
        self,
        tokens: torch.Tensor,
        *,
        norms: bool = False,
        attention: bool = False,
        layers: Sequence[int] | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> Trace:
        """Run the model once and capture the residual stream (and norms, attention if asked).

        ``attention_mask`` (1 real, 0 padding; ``tokens``' shape) goes to the model; the
        captured tensors still hold every position, so statistics must drop the padding.
        Hooks are removed and every module's train/eval mode restored afterwards.
        """
        order = self._check_layers(layers)
        trace = Trace()
        handles: list[Any] = []
        blocks = self.blocks()
        run = list(range(len(blocks))) if order is None else order

        def pre_hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            if not trace.residual:
                trace.residual.append(args[0] if args else kwargs["hidden_states"])

        def block_hook(module: nn.Module, args: Any, output: Any) -> None:
            trace.residual.append(_first(output))

        def attn_hook(module: nn.Module, args: Any, output: Any) -> None:
            k = self.layout.probs_index
            probs = output[k] if isinstance(output, (tuple, list)) and len(output) > k else None
            if probs is None:
                raise ValueError(
                    f"{type(module).__name__} returned no attention probabilities; build the "
                    'model with attn_implementation="eager" to trace attention.'
                )
            trace.attention.append(probs)

        def norm_hook(name: str) -> Callable[..., None]:
            def hook(module: nn.Module, args: Any, output: Any) -> None:
                trace.norm_inputs[name] = args[0]
                trace.norm_outputs[name] = _first(output)

            return hook

        try:
            if norms:
                for site in self.norm_sites():
                    handles.append(site.module.register_forward_hook(norm_hook(site.name)))
            with _inference(self.model):
                partial = attention_mask is not None and not bool(attention_mask.bool().all())
                if partial and not self._accepts_mask():
                    _check_right_padded(attention_mask, type(self.model).__name__, self.causal)
                own = (
                    None
                    if partial and self._accepts_mask()
                    else self._states(tokens, order, attention)
                )
                if own is not None:  # the model returns its states for any block order
                    trace.residual, trace.attention = list(own[0]), list(own[1])
                    trace.logits = self.readout(trace.residual[-1])
                    return trace
                first = blocks[run[0]]
                handles.append(first.register_forward_pre_hook(pre_hook, with_kwargs=True))
                for i in dict.fromkeys(run):
                    handles.append(blocks[i].register_forward_hook(block_hook))
                    if attention:
                        attn = _get(blocks[i], self.layout.attention)
                        handles.append(attn.register_forward_hook(attn_hook))  # type: ignore[union-attr]
                trace.logits = self._masked_call(tokens, order, attention_mask)
        finally:
            for handle in handles:
                handle.remove()
        return trace

    def _accepts_mask(self) -> bool:
        return "attention_mask" in inspect.signature(self._call).parameters


def _check_right_padded(mask: torch.Tensor, model: str, causal: bool) -> None:
    """Padding a model cannot be told about is harmless only at the end of causal rows."""
    m = mask.bool()
    right = bool((m.int().cummin(dim=1).values == m.int()).all())
    if not (causal and right):
        raise ValueError(
            f"{model} takes no attention mask here: pad on the right (1s then 0s) for a "
            "causal model, or pass unpadded batches."
        )


Matcher = type | str | Callable[[nn.Module], bool]
AdapterFactory = Callable[[nn.Module], ModelAdapter]
_ADAPTERS: list[tuple[Matcher, AdapterFactory]] = []


def register_adapter(match: Matcher, factory: AdapterFactory) -> None:
    """Teach :func:`adapt` a model family: models that ``match`` get ``factory(model)``.

    Model code calls this at import, so probes learn the model's layout without importing
    it (normlab's TinyGPT registers its adapter in :mod:`normlab.models.gpt`).

    Args:
        match: a class (``isinstance``), a class name (any class in the model's MRO), or a
            predicate ``match(model) -> bool``.
        factory: builds the adapter, e.g. a :class:`ModelAdapter` subclass.

    Raises:
        TypeError: when ``match`` is none of these or ``factory`` is not callable.
    """
    if not (isinstance(match, (type, str)) or callable(match)):
        raise TypeError(f"match must be a class, a class name or a predicate, got {match!r}.")
    if not callable(factory):
        raise TypeError(f"factory must be callable, got {type(factory).__name__}.")
    _ADAPTERS.append((match, factory))


def _matches(match: Matcher, model: nn.Module) -> bool:
    if isinstance(match, type):
        return isinstance(model, match)
    if isinstance(match, str):
        return any(cls.__name__ == match for cls in type(model).__mro__)
    return bool(match(model))


def families() -> tuple[str, ...]:
    """The families :func:`adapt` understands: registered adapters' matchers, then the
    Hugging Face families with a layout."""
    names = [m if isinstance(m, str) else getattr(m, "__name__", repr(m)) for m, _ in _ADAPTERS]
    return (*dict.fromkeys(names), *FAMILIES)


def adapt(model: nn.Module) -> ModelAdapter:
    """A :class:`ModelAdapter` for ``model``.

    Tries the adapters registered with :func:`register_adapter` (the latest first), then
    the layout of the model's Hugging Face ``model_type`` (for a model normlab transformed,
    config ``model_type = "normlab_<type>"``, the base type recorded in its config).

    Raises:
        TypeError: for any other model; the message lists the known families and how to
            declare a layout.
    """
    for match, factory in reversed(_ADAPTERS):
        if _matches(match, model):
            return factory(model)
    kind = base_model_type(model)
    layout = LAYOUTS.get(kind) if isinstance(kind, str) else None
    roots = layout.roots if layout is not None else ()
    if any(_get(model, r + layout.blocks) is not None for r in roots):  # type: ignore[union-attr]
        return ModelAdapter(model, kind)  # type: ignore[arg-type]
    what = f"model_type {kind!r}" if kind else "no Hugging Face model_type"
    raise TypeError(
        f"Cannot adapt a {type(model).__name__} ({what}): known families are "
        f"{', '.join(families())}. Declare its layout with normlab.probes.register_layout("
        "model_type, ModelLayout(roots, blocks, attention, block_norms, position, final, ...)) "
        "(one record: where its blocks, norms and head are), or register an adapter with "
        "normlab.probes.register_adapter."
    )
