"""Claim "fold-ln": foldable LayerNorms convert to RMSNorm exactly, for an inference speedup.

The seed defines a LayerNorm as foldable when its centring can be moved into the linear
layers that write its input (column-centred weights), gives a graph-based detection
algorithm, finds many LayerNorms in common architectures foldable, and reports exact
conversion with a 2-12% end-to-end speedup.

Here :func:`~normlab.surgery.fold_detect.analyze_fold` runs on several architectures whose
foldable set follows from the structure (the *analysis*): every LayerNorm of a pre-LN
TinyGPT (dense or MoE) and of Hugging Face GPT-2 (tied head untied); the MLP norms but not
the attention norms of a gated-attention TinyGPT (the gate reads the normalized input
directly); none in a post-LN TinyGPT, a BERT, or a ConvNeXt-like block (depthwise-conv
writer). Each foldable model (LayerNorm gamma/beta randomised, and the trained TinyGPT of
"curse-of-depth") is folded and its logits compared in float32; the trained TinyGPT's CPU
forward time is measured before and after folding, interleaved, in the same process.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab.claims.catalogue._depth_models import SETTINGS, trained
from normlab.claims.common import cell, seed_everything
from normlab.claims.core import Claim, Effect, register_claim
from normlab.data.corpus import corpus, sample_batch
from normlab.layers.norms import LayerNorm as NormlabLayerNorm
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.papers import paper
from normlab.surgery.fold import fold_layernorms
from normlab.surgery.fold_detect import analyze_fold

__all__ = ["CLAIM"]


class _ConvNeXtLike(nn.Module):
    """Embedding -> depthwise conv -> LayerNorm -> MLP, residual, final LayerNorm, head."""

    def __init__(self, vocab: int = 64, d: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.dwconv = nn.Conv1d(d, d, 3, padding=1, groups=d)
        self.norm = nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.norm_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.embed(idx)
        y = self.norm(self.dwconv(h.transpose(1, 2)).transpose(1, 2))
        h = h + self.down(F.gelu(self.up(y)))
        return self.head(self.norm_f(h))


def _tiny(**kw: Any) -> TinyGPT:
    return TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=16, **kw))


def _hf(kind: str) -> nn.Module:
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    if kind == "gpt2":
        config = GPT2Config(
            n_layer=2,
            n_embd=16,
            n_head=2,
            vocab_size=64,
            n_positions=16,
            bos_token_id=0,
            eos_token_id=0,
        )
        return GPT2LMHeadModel(config)
    config = BertConfig(
        num_hidden_layers=2,
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=32,
        vocab_size=64,
        max_position_embeddings=16,
    )
    return BertForMaskedLM(config)


def _lns(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, nn.LayerNorm | NormlabLayerNorm)]


def _all(model: nn.Module) -> set[str]:
    return set(_lns(model))


#: name -> (builder, expected foldable set from the structural analysis, input kind)
_ARCHS: dict[str, tuple[Callable[[], nn.Module], Callable[[nn.Module], set[str]], str]] = {
    "tinygpt-pre": (lambda: _tiny(), _all, "ids"),
    "tinygpt-moe": (lambda: _tiny(moe_experts=3, moe_top_k=2), _all, "ids"),
    "tinygpt-gated": (
        lambda: _tiny(gated_attention=True),
        lambda m: {n for n in _lns(m) if not n.endswith("norm1")},
        "ids",
    ),
    "tinygpt-post": (lambda: _tiny(residual="post"), lambda m: set(), "ids"),
    "convnext-like": (_ConvNeXtLike, lambda m: set(), "ids"),
    "gpt2": (lambda: _hf("gpt2"), _all, "hf"),
    "bert": (lambda: _hf("bert"), lambda m: set(), "hf"),
}


@torch.no_grad()
def _randomise_norms(model: nn.Module, generator: torch.Generator) -> None:
    for name in _lns(model):
        ln = model.get_submodule(name)
        ln.weight.copy_(1 + 0.5 * torch.randn(ln.weight.shape, generator=generator))
        ln.bias.copy_(0.5 * torch.randn(ln.bias.shape, generator=generator))


@torch.no_grad()
def _forward_time(model: nn.Module, x: torch.Tensor) -> float:
    start = time.perf_counter()
    model(x)
    return time.perf_counter() - start


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Detection against the analysis, exactness of the fold, and CPU forward speedup."""
    generator = seed_everything(seed)
    table: dict[str, dict[str, float]] = {}
    reasons: dict[str, Any] = {}
    names = list(config["archs"])
    for name in names:
        build, expected_fn, kind = _ARCHS[name]
        torch.manual_seed(seed)
        model = build().eval()
        _randomise_norms(model, generator)
        ids = torch.randint(0, 64, (2, 16), generator=generator)
        example = {"input_ids": ids} if kind == "hf" else ids
        analysis = analyze_fold(model, example)
        expected = expected_fn(model)
        row = {
            "layernorms": float(len(analysis.sites)),
            "foldable": float(len(analysis.foldable)),
            "expected": float(len(expected)),
            "match": float(set(analysis.foldable) == expected),
        }
        if analysis.foldable:
            row["max_abs_change"] = float(fold_layernorms(model, example).max_abs_change or 0.0)
        table[name] = row
        reasons[name] = {k: list(v) for k, v in analysis.refused.items()}
    model, _ = trained(config, seed, "dense")
    x, _ = sample_batch(
        corpus("val"),
        config["eval_batch"],
        config["context"],
        torch.Generator().manual_seed(40_000 + seed),
    )
    folded, _ = trained(config, seed, "dense")
    result = fold_layernorms(folded, x)
    times: dict[str, list[float]] = {"layernorm": [], "folded": []}
    for _ in range(config["warmup_reps"]):
        _forward_time(model, x), _forward_time(folded, x)
    for _ in range(config["reps"]):  # interleaved so drifts in machine load hit both
        times["layernorm"].append(_forward_time(model, x))
        times["folded"].append(_forward_time(folded, x))
    t_ln, t_rms = (statistics.median(times[k]) for k in ("layernorm", "folded"))
    table["trained-tinygpt"] = {
        "layernorms": float(len(result.analysis.sites)),
        "foldable": float(len(result.folded)),
        "expected": float(len(result.analysis.sites)),
        "match": float(len(result.folded) == len(result.analysis.sites)),
        "max_abs_change": float(result.max_abs_change or 0.0),
        "forward_ms": 1000 * t_ln,
        "forward_ms_folded": 1000 * t_rms,
        "speedup": t_ln / t_rms,
    }
    return {"table": table, "reasons": reasons, "times": times}


def _rows(m: Mapping[str, Any]) -> list[str]:
    return list(m["table"])


def _detection(m: Mapping[str, Any]) -> float:
    rows = _rows(m)
    return sum(cell(m, r, "match") for r in rows) / len(rows) - 0.99


def _exact(m: Mapping[str, Any]) -> float:
    worst = max(m["table"][r].get("max_abs_change", 0.0) for r in _rows(m))
    return math.log10(1e-5 / max(worst, 1e-30))


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    m = measurements[0]
    rows = [r for r in _rows(m) if "max_abs_change" in m["table"][r]]
    ax1.bar(rows, [max(m["table"][r]["max_abs_change"], 1e-12) for r in rows])
    ax1.axhline(1e-5, color="k", ls="--", lw=0.8)
    ax1.set(yscale="log", ylabel="max |delta logits| (fp32)")
    ax1.tick_params(axis="x", rotation=30, labelsize=7)
    ax2.bar(
        range(len(measurements)), [cell(x, "trained-tinygpt", "speedup") for x in measurements]
    )
    ax2.axhline(1.0, color="k", lw=0.8)
    ax2.set(xlabel="seed", ylabel="CPU forward speedup (LN time / folded time)")
    fig.tight_layout()
    return fig


_TIMING = {"reps": 30, "warmup_reps": 3}
_ARCH_NAMES = list(_ARCHS)

CLAIM = register_claim(
    Claim(
        id="fold-ln",
        paper=paper("fold-ln"),
        hypothesis=(
            "LayerNorms whose writers are column-centrable linear maps are detected and "
            "converted to RMSNorm without changing the logits (<= 1e-5 in fp32), making CPU "
            "inference faster."
        ),
        metrics=("layernorms", "foldable", "expected", "match", "max_abs_change", "speedup"),
        effects=(
            Effect(
                "detection_matches",
                "share of architectures whose detected foldable set equals the structural "
                "analysis, minus 0.99 (positive only when all match)",
                _detection,
            ),
            Effect(
                "exact",
                "log10(1e-5 / worst max |delta logits|) over the folded models (fp32)",
                _exact,
            ),
            Effect(
                "cpu_speedup",
                "trained TinyGPT CPU forward time, LayerNorm over folded, minus 1 (medians of "
                "interleaved runs; timing on a shared machine is noisy)",
                lambda m: cell(m, "trained-tinygpt", "speedup") - 1.0,
            ),
        ),
        headline="Many LayerNorms in common architectures are foldable: exact conversion, "
        "2-12% end-to-end speedup.",
        setup=(
            "Fold analysis on pre-LN / MoE / gated-attention / post-LN TinyGPT, HF GPT-2 and "
            "BERT (from configs) and a ConvNeXt-like block; fold with randomised gamma/beta and "
            "on the trained TinyGPT of curse-of-depth; CPU forward timing before/after."
        ),
        configs={
            "smoke": {
                "seeds": 1,
                **SETTINGS["smoke"],
                "eval_batch": 4,
                "reps": 5,
                "warmup_reps": 1,
                "archs": [a for a in _ARCH_NAMES if a not in ("gpt2", "bert")],
            },
            "quick": {
                "seeds": 3,
                **SETTINGS["quick"],
                "eval_batch": 16,
                **_TIMING,
                "archs": _ARCH_NAMES,
            },
            "full": {
                "seeds": 5,
                **SETTINGS["full"],
                "eval_batch": 32,
                "reps": 100,
                "warmup_reps": 10,
                "archs": _ARCH_NAMES,
            },
        },
        run=run,
        key=("max_abs_change", "trained-tinygpt", "gpt2"),
        figure=_figure,
    )
)
