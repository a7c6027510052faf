"""Export a transformed Hugging Face model as plain files that load with no custom code.

Some transformations leave a model its family already has a class for: a Llama-style model
(Llama, Mistral, Qwen2/3, Gemma, Phi-3, OLMo-2, ...) whose RMSNorms were swapped for
normlab's ``rmsnorm`` computes ``x / sqrt(mean(x^2) + eps) * g``, which is the family's
own RMSNorm with weight ``g - c`` (``c = 1`` for Gemma's ``(1 + w)``, else 0). Gain folding
keeps the family's modules anyway (``save_pretrained`` then already writes plain files).
:func:`export_plain` puts the family's own norm module back at every such site, checks the
swap on a random input, and writes ordinary Hugging Face files (``config.json``,
``model.safetensors``, ``generation_config.json``) that ``AutoModelForCausalLM`` loads
without ``trust_remote_code``. A change with no plain equivalent (a LayerNorm folded into
RMSNorm in GPT-2, whose class has no RMSNorm; DyT; an added bias) is refused by name.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from normlab.layers.norms import RMSNorm
from normlab.surgery.fold_gains import _gain_offset
from normlab.surgery.hf_format import save_hf
from normlab.surgery.replace import norm_eps
from normlab.surgery.structure import capture_structure

__all__ = ["export_plain"]


def _native(ours: nn.Module, theirs: nn.Module) -> nn.Module | str:
    """The family's own norm ``theirs`` loaded to compute ``ours``, or why it cannot."""
    if not isinstance(ours, RMSNorm):
        return f"a {type(ours).__name__} (only normlab's RMSNorm has a plain equivalent)"
    if not isinstance(getattr(theirs, "weight", None), torch.Tensor):
        return f"the architecture's {type(theirs).__name__} has no weight to carry the gain"
    eps = norm_eps(theirs)
    if ours.eps is None or eps is None or abs(eps - float(ours.eps)) > 1e-12 * max(eps, 1.0):
        return f"eps {ours.eps} differs from the architecture's {type(theirs).__name__} ({eps})"
    like = ours.weight
    device = like.device if like is not None else torch.device("cpu")
    native = copy.deepcopy(theirs).to_empty(device=device)  # the fresh build is on meta
    native = native.to(dtype=like.dtype if like is not None else torch.float32)
    with torch.no_grad():
        native.weight.fill_(0.0)  # the gain form is measured on a real tensor
        c = _gain_offset(native)
        if c is None:
            return f"{type(theirs).__name__} is not of the form (weight + c) * rms-norm"
        gain = ours.weight.detach() if like is not None else torch.ones_like(native.weight)
        native.weight.copy_(gain.double() - c)
        x = torch.randn(4, gain.shape[-1], generator=torch.Generator().manual_seed(1))
        x = x.to(native.weight.dtype)
        diff = float((native(x).double() - ours(x).double()).abs().max())
    tol = 1e-2 if native.weight.dtype in (torch.float16, torch.bfloat16) else 1e-5
    if diff > tol:
        return f"{type(theirs).__name__} computes something else (max diff {diff:.2e})"
    return native


def export_plain(model: nn.Module, path: str | Path) -> Path:
    """Write ``model`` as plain Hugging Face files of its own architecture; return the folder.

    Args:
        model: a Hugging Face model, possibly changed by normlab.
        path: the output folder (created).

    Raises:
        ValueError: when a change has no plain equivalent; the message names the modules.
    """
    import transformers

    config = copy.deepcopy(model.config)
    record = getattr(config, "normlab", None) or {}
    arch = record.get("base_architecture", type(model).__name__).removeprefix("Normlab")
    with torch.device("meta"):
        fresh = getattr(transformers, arch)(copy.deepcopy(config))
    structure = capture_structure(model, copy.deepcopy(fresh))
    if structure["added_bias"]:
        raise ValueError(
            f"Cannot export {arch} as plain files: {structure['added_bias'][:3]} gained a bias "
            "(a folded LayerNorm beta) that the architecture does not have. Save it with "
            "normlab.save(model, folder) and load it with trust_remote_code=True."
        )
    plain = copy.deepcopy(model)
    problems = []
    for name in structure["modules"]:
        native = _native(plain.get_submodule(name), fresh.get_submodule(name))
        if isinstance(native, str):
            problems.append(f"'{name}' is {native}")
            continue
        parent, _, child = name.rpartition(".")
        setattr(plain.get_submodule(parent), child, native)
    if problems:
        raise ValueError(
            f"Cannot export {arch} as plain files: "
            + "; ".join(problems[:3])
            + (f" and {len(problems) - 3} more" if len(problems) > 3 else "")
            + ". Save it with normlab.save(model, folder) and load it with "
            "trust_remote_code=True."
        )
    plain.__dict__.pop("save_pretrained", None)
    plain.__dict__.pop("_normlab_changes", None)
    return save_hf(plain, path)
