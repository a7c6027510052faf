"""CPU timing of a LayerNorm model against its folded RMSNorm twin (seed paper "fold-ln").

A LayerNorm whose input is a sum of column-centrable linear writes equals RMSNorm followed by
its affine map (:mod:`normlab.surgery.fold_detect`); the seed reports that the folded model
runs 2-12% faster on a CPU end to end, since RMSNorm skips the mean ``mu = mean(x)`` and the
centring ``x - mu``. What a timing can show is bounded by the norms' share of the forward
time, ``1 - t(no norm) / t(LayerNorm)``, and by the machine: a timing taken while more
runnable tasks than cores compete measures the scheduler, not the arithmetic.
:func:`machine_load` records how many waited (:mod:`normlab._machine`) so that a claim can
refuse such a timing.

:func:`fold_arms` builds the timed models, :func:`interleaved_times` times them in rotating
order, :func:`paired_speedup` summarises the paired per-round ratio.
"""

from __future__ import annotations

import copy
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from normlab._machine import load_average, tasks_waiting_for_a_core
from normlab.layers.dyt import DyT
from normlab.layers.norms import LayerNorm as NormlabLayerNorm
from normlab.layers.norms import RMSNorm
from normlab.models.convnext import TinyConvNeXt
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.surgery import replace_norms
from normlab.surgery.fold import FoldResult, fold_layernorms
from normlab.surgery.fold_detect import analyze_fold

__all__ = [
    "FOLD_ZOO",
    "fold_arms",
    "fold_zoo",
    "interleaved_times",
    "layernorm_names",
    "machine_load",
    "paired_speedup",
    "randomise_norms",
    "time_fold",
    "timing_row",
    "width_sweep",
]


def layernorm_names(model: nn.Module) -> list[str]:
    """Qualified names of every LayerNorm (torch's or normlab's) of ``model``."""
    kinds = nn.LayerNorm | NormlabLayerNorm
    return [n for n, m in model.named_modules() if isinstance(m, kinds)]


@torch.no_grad()
def randomise_norms(model: nn.Module, generator: torch.Generator) -> None:
    """``gamma ~ 1 + 0.5 N(0, 1)``, ``beta ~ 0.5 N(0, 1)`` for every LayerNorm, so that a
    fold has an affine map to move (speed does not depend on trained values)."""
    for name in layernorm_names(model):
        ln = model.get_submodule(name)
        ln.weight.copy_(1 + 0.5 * torch.randn(ln.weight.shape, generator=generator))
        ln.bias.copy_(0.5 * torch.randn(ln.bias.shape, generator=generator))


def _tiny(**kw: Any) -> TinyGPT:
    return TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=16, **kw))


def _hf(kind: str) -> nn.Module:
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    shape = {"vocab_size": 64}
    if kind == "gpt2":
        ids = {"bos_token_id": 0, "eos_token_id": 0}
        return GPT2LMHeadModel(
            GPT2Config(n_layer=2, n_embd=16, n_head=2, n_positions=16, **shape, **ids)
        )
    return BertForMaskedLM(
        BertConfig(
            num_hidden_layers=2,
            hidden_size=16,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=16,
            **shape,
        )
    )


def _all(model: nn.Module) -> set[str]:
    return set(layernorm_names(model))


def _mlp_norms(model: nn.Module) -> set[str]:
    return {n for n in layernorm_names(model) if not n.endswith("norm1")}


#: The detection zoo, name -> (builder, expected foldable set, input kind). The structural
#: rule: a LayerNorm is foldable when every path that writes its input is a sum of outputs
#: of linear maps whose columns can be centred and nothing but foldable LayerNorms reads the
#: raw sum: all of a pre-LN TinyGPT (dense, MoE) and GPT-2; the MLP norms of a
#: gated-attention TinyGPT (its gate reads the stream raw); none of a post-LN TinyGPT, BERT
#: or a ConvNeXt-like block (depthwise-conv writer).
FOLD_ZOO: dict[str, tuple[Callable[[], nn.Module], Callable[[nn.Module], set[str]], str]] = {
    "tinygpt-pre": (lambda: _tiny(), _all, "ids"),
    "tinygpt-moe": (lambda: _tiny(moe_experts=3, moe_top_k=2), _all, "ids"),
    "tinygpt-gated": (lambda: _tiny(gated_attention=True), _mlp_norms, "ids"),
    "tinygpt-post": (lambda: _tiny(residual="post"), lambda m: set(), "ids"),
    "convnext-like": (TinyConvNeXt, lambda m: set(), "ids"),
    "gpt2": (lambda: _hf("gpt2"), _all, "hf"),
    "bert": (lambda: _hf("bert"), lambda m: set(), "hf"),
}


def fold_zoo(archs: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per architecture of ``archs`` (keys of :data:`FOLD_ZOO`): its LayerNorms, how many
    :func:`~normlab.surgery.fold_detect.analyze_fold` finds foldable, whether that set is the
    structural rule's (``match`` 1.0), and the fold's max logit change (fp32, random affines)."""
    generator = torch.Generator().manual_seed(0)
    rows: dict[str, dict[str, float]] = {}
    for name in archs:
        build, expected_fn, kind = FOLD_ZOO[name]
        torch.manual_seed(0)
        model = build().eval()
        randomise_norms(model, generator)
        ids = torch.randint(0, 64, (2, 16), generator=generator)
        example = {"input_ids": ids} if kind == "hf" else ids
        analysis = analyze_fold(model, example)
        row = {
            "layernorms": len(analysis.sites),
            "foldable": len(analysis.foldable),
            "match": float(set(analysis.foldable) == expected_fn(model)),
        }
        if analysis.foldable:
            row["max_abs_change"] = float(fold_layernorms(model, example).max_abs_change or 0.0)
        rows[name] = row
    return rows


def machine_load() -> dict[str, float]:
    """The runnable tasks beyond the cores now (``tasks_waiting``; above 0 the timed process
    waits for a core), the 1-minute load average (which remembers the last minute) and the
    core count."""
    return {
        "tasks_waiting": tasks_waiting_for_a_core(),
        "load_1min": load_average(),
        "cores": float(os.cpu_count() or 1),
    }


def _set_backend(model: nn.Module, backend: str) -> nn.Module:
    for module in model.modules():
        if isinstance(module, NormlabLayerNorm | RMSNorm | DyT):
            module.backend = backend
    return model


def _strip_norms(model: nn.Module) -> nn.Module:
    for name in layernorm_names(model):
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, nn.Identity())
    return model


def fold_arms(
    arch: GPTConfig, batch: int, seed: int
) -> tuple[dict[str, nn.Module], torch.Tensor, FoldResult]:
    """A pre-LN TinyGPT ``arch`` (random weights and norm affines) and its twins:
    ``layernorm`` / ``folded-normlab`` on normlab's kernels, ``layernorm-torch`` /
    ``folded-torch`` on the plain torch path, ``no-norm`` with every norm replaced by
    identity; with the timed input (``batch`` sequences) and the fold's record."""
    torch.manual_seed(seed)
    base = TinyGPT(arch).eval()
    generator = torch.Generator().manual_seed(50_000 + seed)
    randomise_norms(base, generator)
    x = torch.randint(0, arch.vocab, (batch, arch.context), generator=generator)
    folded = copy.deepcopy(base)
    result = fold_layernorms(folded, x)
    replace_norms(folded, "rmsnorm", backend="kernel")
    folded_torch = copy.deepcopy(folded)
    replace_norms(folded_torch, "rmsnorm", backend="torch")
    arms = {
        "layernorm": base,
        "folded-normlab": folded,
        "layernorm-torch": _set_backend(copy.deepcopy(base), "torch"),
        "folded-torch": folded_torch,
        "no-norm": _strip_norms(copy.deepcopy(base)),
    }
    return arms, x, result


def interleaved_times(
    arms: Mapping[str, nn.Module], x: torch.Tensor, reps: int, warmup: int
) -> dict[str, list[float]]:
    """Forward seconds of each arm per round, the arms in a rotating order each round
    (ABC, BCA, CAB, ...) after ``warmup`` untimed rounds."""
    names = list(arms)
    times: dict[str, list[float]] = {name: [] for name in names}
    with torch.no_grad():
        for _ in range(warmup):
            for model in arms.values():
                model(x)
        for rep in range(reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                start = time.perf_counter()
                arms[name](x)
                times[name].append(time.perf_counter() - start)
    return times


def paired_speedup(slow: list[float], fast: list[float]) -> dict[str, float]:
    """Median and quartiles over rounds of the paired ratio ``slow / fast - 1``."""
    ratios = [a / b - 1.0 for a, b in zip(slow, fast, strict=True)]
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios * 3)
    return {"median": statistics.median(ratios), "q25": q1, "q75": q3}


def timing_row(times: Mapping[str, list[float]]) -> dict[str, Any]:
    """Medians per arm, both paired speed-ups and the norms' share of the forward time."""
    median = {name: statistics.median(t) for name, t in times.items()}
    return {
        "median_s": median,
        "speedup_normlab": paired_speedup(times["layernorm"], times["folded-normlab"]),
        "speedup_torch": paired_speedup(times["layernorm-torch"], times["folded-torch"]),
        "norm_share": {
            "normlab": 1.0 - median["no-norm"] / median["layernorm"],
            "torch": 1.0 - median["no-norm"] / median["layernorm-torch"],
        },
    }


def time_fold(
    arch: GPTConfig, batch: int, reps: int, warmup: int, seed: int
) -> tuple[dict[str, dict[str, float]], dict[str, list[float]]]:
    """Build :func:`fold_arms` and time them: a table with each arm's median and fastest
    forward milliseconds, both paired speed-ups (LayerNorm over folded, minus 1), the norms'
    share of the forward time and the fold's record (``max_abs_change`` of the logits over
    the folded arms, fp32); and the per-round seconds."""
    arms, x, result = fold_arms(arch, batch, seed)
    with torch.no_grad():
        reference = arms["layernorm"](x)
        change = max(float((arms[k](x) - reference).abs().max()) for k in arms if "folded" in k)
    times = interleaved_times(arms, x, reps, warmup)
    row = timing_row(times)
    table: dict[str, dict[str, float]] = {
        name: {"forward_ms_median": 1000 * t, "forward_ms_min": 1000 * min(times[name])}
        for name, t in row["median_s"].items()
    }
    table |= {k: row[k] for k in ("speedup_normlab", "speedup_torch", "norm_share")}
    table["fold"] = {
        "folded": len(result.folded),
        "layernorms": len(result.analysis.sites),
        "max_abs_change": change,
    }
    return table, times


def width_sweep(
    archs: Mapping[str, GPTConfig], seed: int, **timing: Any
) -> tuple[dict[str, dict[str, float]], list[dict[str, float]]]:
    """Per model of ``archs`` (name -> config; e.g. one per width), timed by :func:`time_fold`
    with ``timing`` (``reps``, ``warmup``, ``batch``): the median speedups of the folded model
    over LayerNorm on normlab's kernels and on the torch path (``normlab``, ``torch``) and the
    norms' share of the forward time (``norm_share``); with :func:`machine_load` taken before
    each model is timed."""
    rows: dict[str, dict[str, float]] = {}
    loads = []
    for name, arch in archs.items():
        loads.append(machine_load())
        row, _ = time_fold(arch, seed=seed, **timing)
        rows[name] = {k: row[f"speedup_{k}"]["median"] for k in ("normlab", "torch")}
        rows[name]["norm_share"] = row["norm_share"]["normlab"]
    return rows, loads
