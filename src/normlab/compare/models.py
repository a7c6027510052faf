"""Resolving MODEL: a Hugging Face folder, a reference model, or ``module:function``.

A :class:`ModelSource` is a small picklable description; :func:`build` makes one arm's
model from it for one seed: the base model is built (seeded, so every arm of a seed starts
from the same weights outside its norms), then the arm's norm is swapped in with
:func:`~normlab.surgery.replace.replace_norms`. For forecasting the arm is a series
normalizer (``revin``, ``norin``, ..., or ``none``) around the reference backbone.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = [
    "REFERENCE_MODELS",
    "ModelSource",
    "build",
    "check_arms",
    "load_function",
    "parse_norm",
    "resolve_model",
]

#: Reference models MODEL may name, with their task and what they are.
REFERENCE_MODELS = {
    "tinygpt": ("lm", "normlab's TinyGPT at the claims' quick shape (d=64, 2 layers, 4 heads)"),
    "forecaster": ("forecast", "a linear backbone inside a reversible series normalizer"),
    "forecaster-mlp": ("forecast", "an MLP backbone inside a reversible series normalizer"),
}
#: Arm names that mean "no normalizer" (forecasting).
NONE = ("none", "identity")


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_norm(spec: str) -> tuple[str, dict[str, Any]]:
    """``"dyt:alpha_init=0.5,..."`` -> ``("dyt", {"alpha_init": 0.5})``.

    Examples:
        >>> parse_norm("dyt:alpha_init=0.5")
        ('dyt', {'alpha_init': 0.5})
        >>> parse_norm("rmsnorm")
        ('rmsnorm', {})
    """
    name, _, rest = spec.partition(":")
    kwargs: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"Cannot read {item!r} in norm {spec!r}: write NAME:key=value,...")
        kwargs[key.strip()] = _value(value.strip())
    return name.strip(), kwargs


def load_function(spec: str) -> Any:
    """The callable named by ``"module:function"`` (the module imported from sys.path)."""
    module, _, name = spec.partition(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise ValueError(f"Cannot import {module!r} for {spec!r}: {err}.") from None
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise ValueError(f"{module!r} has no callable {name!r} (from {spec!r}).")
    return fn


@dataclass(frozen=True)
class ModelSource:
    """What MODEL resolved to.

    Attributes:
        kind: "hf" (a Hugging Face folder), "reference" or "function".
        spec: the MODEL argument as given (a folder is made absolute).
        task: the task it serves ("lm", "forecast", "classify").
        weights: a Hugging Face folder holds weights: arms fine-tune them.
        tokenizer: the folder holds tokenizer files.
        fingerprint: a hash of what defines the model (config, weights' sizes, function).
    """

    kind: str
    spec: str
    task: str
    weights: bool = False
    tokenizer: bool = False
    fingerprint: str = ""

    def describe(self) -> str:
        """One line for the page and the terminal."""
        if self.kind == "hf":
            how = "fine-tuned from its weights" if self.weights else "trained from its config"
            return f"Hugging Face folder {self.spec} ({how})"
        if self.kind == "reference":
            return f"{self.spec}: {REFERENCE_MODELS[self.spec][1]}"
        return f"{self.spec}() (a module:function)"


_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")
_TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.is_file():
            h.update(f.name.encode())
            h.update(hashlib.sha256(f.read_bytes()).digest() if f.stat().st_size < 2**28 else b"")
    return h.hexdigest()[:20]


def resolve_model(spec: str, task: str | None = None) -> ModelSource:
    """Read MODEL: a local Hugging Face folder, a name of :data:`REFERENCE_MODELS`, or
    ``module:function`` returning an ``nn.Module``.

    Raises:
        ValueError: MODEL is none of these, or does not serve ``task``.
    """
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"{spec!r} is a folder without config.json: not a HF model.")
        if task not in (None, "lm"):
            raise ValueError(f"A Hugging Face folder is a causal LM; not --task {task}.")
        return ModelSource(
            "hf",
            str(path.resolve()),
            "lm",
            weights=any((path / w).is_file() for w in _WEIGHTS),
            tokenizer=any((path / t).is_file() for t in _TOKENIZER),
            fingerprint=_digest(path),
        )
    key = spec.lower()
    if key in REFERENCE_MODELS:
        native = REFERENCE_MODELS[key][0]
        if task not in (None, native):
            raise ValueError(f"{spec!r} is a {native} model; it cannot run --task {task}.")
        return ModelSource("reference", key, native, fingerprint=key)
    if ":" in spec and not path.exists():
        load_function(spec)
        return ModelSource("function", spec, task or "lm", fingerprint=spec)
    raise ValueError(
        f"MODEL {spec!r} is not a folder, a reference model ({', '.join(REFERENCE_MODELS)}) "
        "or module:function."
    )


def _tinygpt() -> nn.Module:
    from normlab.claims.common import QUICK_GPT
    from normlab.models.gpt import GPTConfig, TinyGPT

    return TinyGPT(GPTConfig(**QUICK_GPT))


def _hf(source: ModelSource) -> nn.Module:
    import transformers

    if source.weights:
        model = transformers.AutoModelForCausalLM.from_pretrained(source.spec)
    else:
        config = transformers.AutoConfig.from_pretrained(source.spec)
        model = transformers.AutoModelForCausalLM.from_config(config)
    return model.float()


def _base(source: ModelSource, dims: dict[str, Any]) -> nn.Module:
    if source.kind == "hf":
        return _hf(source)
    if source.kind == "function":
        model = load_function(source.spec)()
        if not isinstance(model, nn.Module):
            raise ValueError(f"{source.spec}() returned {type(model).__name__}, not an nn.Module.")
        return model
    if source.spec == "tinygpt":
        return _tinygpt()
    raise ValueError(f"{source.spec!r} is a forecasting model; build it with its normalizer.")


def build(
    source: ModelSource,
    arm: str,
    seed: int,
    dims: dict[str, Any],
    keep: tuple[str, ...] | list[str] = (),
) -> nn.Module:
    """One arm's fresh model for ``seed``.

    Args:
        source: the resolved MODEL.
        arm: a norm spec (``"dyt:alpha_init=0.5"``), or for forecasting a series normalizer
            or ``"none"``.
        seed: seeds the weights (a pretrained model's weights do not depend on it).
        dims: what the data fix: ``channels``, ``lookback``, ``horizon`` (forecasting).
        keep: module-name globs (``fnmatch``) of norm sites that keep their original norm,
            e.g. ``("norm_f",)`` or ``("*ln_f",)`` for the final norm before the head.
    """
    name, kwargs = parse_norm(arm)
    torch.manual_seed(seed)
    if source.task == "forecast" and source.kind == "reference":
        from normlab.models.forecast import build_backbone
        from normlab.models.forecaster import Forecaster, build_norm

        backbone = "mlp" if source.spec == "forecaster-mlp" else "linear"
        size = {"lookback": dims["lookback"], "horizon": dims["horizon"]}
        norm = None if name in NONE else build_norm(name, dims["channels"], **size, **kwargs)
        return Forecaster(norm, build_backbone(backbone, **size))
    from fnmatch import fnmatch

    from normlab.surgery.replace import is_norm_layer, replace_norms

    model = _base(source, dims)
    kept = {id(m) for n, m in model.named_modules() if any(fnmatch(n, k) for k in keep)}

    def match(module: nn.Module) -> bool:
        return is_norm_layer(module) and id(module) not in kept

    chosen = match if kept else is_norm_layer  # the default match checks the norm's layout
    if name not in NONE and not replace_norms(model, name, match=chosen, **kwargs):
        raise ValueError("the model has no LayerNorm/RMSNorm-like layer to replace")
    return model


def check_arms(
    source: ModelSource,
    arms: list[str],
    dims: dict[str, Any],
    probe: Any,
    keep: tuple[str, ...] | list[str] = (),
) -> None:
    """Build every arm once and run ``probe(model)`` (a forward pass); refuse, with the
    reason, an arm whose swap is impossible.

    Raises:
        ValueError: naming the arm and why it cannot be built or run.
    """
    from normlab._registry import get

    for arm in arms:
        name, _ = parse_norm(arm)
        if name not in NONE:
            try:
                kind = get(name).kind
            except (KeyError, ValueError) as err:
                raise ValueError(f"Arm {arm!r}: {str(err).strip(chr(39))}") from None
            want = "series" if source.task == "forecast" and source.kind == "reference" else "norm"
            if kind != want:
                raise ValueError(f"Arm {arm!r} is a {kind} method; this model needs a {want}.")
            layout = getattr(get(name), "layout", "features_last")
            if want == "norm" and layout != "features_last":
                raise ValueError(
                    f"Arm {arm!r} cannot be swapped in: it is a {layout} norm and the sites "
                    "normalize the last dimension (features_last)."
                )
        try:
            with torch.no_grad():
                out = probe(build(source, arm, 0, dims, keep))
        except Exception as err:  # the reason, not a traceback
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ValueError(f"Arm {arm!r} cannot be swapped in: {first}") from None
        if not math.isfinite(float(out)):
            raise ValueError(f"Arm {arm!r}: the untrained model gives a non-finite loss.")
