"""Claim "nsnquant": calibration-free NSN + Hadamard VQ holds up under a distribution shift.

NSNQuant (``paper("nsnquant")``) argues that VQ codebooks calibrated on data break when the
test data differ, while normalizing each token (Normalize-Shift-Normalize + Hadamard) to
look like N(0, I) lets one offline codebook serve any data. Here the keys and values of
the shared quick-scale TinyGPT (trained on stdlib code) are quantized with
:class:`~normlab.quant.NSNQuantizer`, with :class:`~normlab.quant.KMeansVQ` calibrated on
code windows, and with KIVI-style integers (:class:`~normlab.quant.IntKIVI`: keys per
channel, values per token, group 32), at 1 and 2 bits per value; evaluated on the prose
split (comments and docstrings: the shift) and on held-out code. Each window is a
prefilled cache: its first ``T - window`` tokens quantized as one chunk, the last
``window`` tokens in full precision and scored, as when generation continues from a
quantized prompt.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from normlab.claims.common import QUICK_GPT, cell, seed_everything
from normlab.claims.core import (
    Check,
    CheckOutcome,
    Claim,
    Effect,
    Margin,
    Precondition,
    register_claim,
)
from normlab.data.corpus import corpus, sample_batch
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.models.lm import LMTrainConfig, train_lm
from normlab.papers import paper
from normlab.quant import IntKIVI, KMeansVQ, NSNQuantizer
from normlab.quant.nsn import nsn_normalize

__all__ = ["CLAIM", "run"]

SCHEMES = ("nsn", "kmeans", "kivi")


def _model(config: Mapping[str, Any]) -> TinyGPT:
    """The shared trained TinyGPT (training seed 0; the same run other claims cache)."""
    arch = {k: config[k] for k in ("d_model", "n_layers", "n_heads", "context")}
    steps = config["steps"]
    tc = LMTrainConfig(
        steps=steps,
        batch=config["batch"],
        lr=config["lr"],
        warmup=max(1, steps // 10),
        eval_every=max(1, steps // 4),
        eval_batches=2,
    )
    return train_lm(GPTConfig(norm="layernorm", score="softmax", **arch), tc, 0)[0]


@torch.no_grad()
def _layer_kv(model: TinyGPT, idx: torch.Tensor):
    """Per block: (q, k, v) of shape (batch, heads, tokens, head_dim) and the block input."""
    states, _ = model.trunk(idx)
    out = []
    for block, h in zip(model.blocks, states, strict=False):
        q, k, v = block.attn._project(block.norm1(h) * block.norm_scale)
        out.append((q, k, v, h))
    return out


def _attend(q, k, v, scale: float) -> torch.Tensor:
    """Attention of the last ``q.shape[-2]`` positions over all ``k.shape[-2]`` keys (causal)."""
    n, w = k.shape[-2], q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * scale
    keep = torch.ones(w, n, dtype=torch.bool).tril(n - w)
    return scores.masked_fill(~keep, float("-inf")).softmax(-1) @ v


def _roundtrip(quantizers, k: torch.Tensor, v: torch.Tensor):
    qk, qv = quantizers
    ck, cv = qk.quantize(k), qv.quantize(v)
    return qk.dequantize(ck), qv.dequantize(cv), ck.bits + cv.bits


@torch.no_grad()
def _evaluate(model: TinyGPT, idx: torch.Tensor, y: torch.Tensor, pairs, window: int):
    """Attention-output error, tail bits per byte and stored bytes per token of one scheme.

    The prefix (all but the last ``window`` tokens) runs in full precision, as a prefill
    does; its keys/values are then quantized (``pairs[layer]`` = key and value quantizers,
    ``None`` for full precision) and the tail's queries attend over them.
    """
    p = idx.shape[1] - window
    num = den = 0.0
    bits = 0
    h = model.embed(idx) + model.pos(torch.arange(idx.shape[1]))
    for i, block in enumerate(model.blocks):
        attn = block.attn
        q, k, v = attn._project(block.norm1(h) * block.norm_scale)
        qt = q[..., p:, :]
        exact = _attend(qt, k, v, attn.scale)
        if pairs is None:
            kk, vv = k, v
        else:
            kq, vq, b = _roundtrip(pairs[i], k[..., :p, :], v[..., :p, :])
            bits += b
            kk, vv = torch.cat([kq, k[..., p:, :]], -2), torch.cat([vq, v[..., p:, :]], -2)
        tail = _attend(qt, kk, vv, attn.scale)
        num += float((tail - exact).pow(2).sum())
        den += float(exact.pow(2).sum())
        h_tail = h[:, p:] + attn.out(tail.transpose(1, 2).reshape(idx.shape[0], window, -1))
        h_tail = h_tail + block.mlp(block.norm2(h_tail) * block.norm_scale)
        h = torch.cat([block(h[:, :p])[0], h_tail], 1)  # the prefix: fp and causal
    nll = F.cross_entropy(model.readout(h[:, p:]).flatten(0, 1).float(), y[:, p:].flatten())
    tokens = idx.shape[0] * p
    return {
        "attn_err": math.sqrt(num / den),
        "bpb": float(nll) / math.log(2),
        "bytes_per_token": bits / 8 / tokens if pairs is not None else 0.0,
    }


def _windows(split: str, n: int, context: int, seed: int):
    return sample_batch(corpus(split), n, context, torch.Generator().manual_seed(seed))


def _kmeans_pairs(kv, bits: int, config: Mapping[str, Any], seed: int) -> list:
    return [
        tuple(
            KMeansVQ.calibrate(
                t.reshape(-1, t.shape[-1]), bits=bits, iters=config["kmeans_iters"], seed=seed
            )
            for t in (k, v)
        )
        for _, k, v, _ in kv
    ]


def _kivi_pairs(bits: int, layers: int) -> list:
    pair = (
        IntKIVI(bits=bits, axis="channel", group=32),
        IntKIVI(bits=bits, axis="token", group=32),
    )
    return [pair] * layers


def _calibration(model: TinyGPT, split: str, config: Mapping[str, Any], seed: int):
    calib, _ = _windows(split, config["calibration_windows"], model.config.context, seed)
    return _layer_kv(model, calib)


def _quantizers(model: TinyGPT, config: Mapping[str, Any], seed: int):
    """Per bits: NSN (no data), k-means calibrated on code windows, KIVI (no data)."""
    kv = _calibration(model, "train", config, 10_000 + seed)
    out: dict[str, dict[int, list]] = {s: {} for s in SCHEMES}
    for bits in config["bits"]:
        out["nsn"][bits] = [(NSNQuantizer(bits=bits, seed=seed),) * 2] * len(kv)
        out["kivi"][bits] = _kivi_pairs(bits, len(kv))
        out["kmeans"][bits] = _kmeans_pairs(kv, bits, config, seed)
    return out, kv


def _row(model, evals, pairs, window: int) -> dict[str, float]:
    row: dict[str, float] = {}
    for split, (x, y) in evals.items():
        name = "prose" if split == "prose" else "code"
        r = _evaluate(model, x, y, pairs, window)
        row[f"{name}_attn_err"] = r["attn_err"]
        row[f"{name}_bpb"] = r["bpb"]
        row["bytes_per_token"] = r["bytes_per_token"]
    row["codebook_bytes"] = float(pairs[0][0].codebook_bytes + pairs[0][1].codebook_bytes)
    return row


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Errors, bits per byte and stored bytes per token of each scheme, on prose and code.

    Rows ``<scheme>-<b>bit`` use ``b`` bits per value (the paper's setting); rows
    ``<scheme>-matched-<b>bit`` give k-means (more residual stages) and KIVI (more bits) the
    smallest setting whose measured bytes per token are at least NSNQuant's at ``b`` bits;
    ``kmeans-oracle-2bit`` is calibrated on prose (no shift: the control for the shift).
    """
    seed_everything(seed)
    torch.set_num_threads(1)
    model = _model(config)
    qs, kv = _quantizers(model, config, seed)
    window, ctx = config["window"], model.config.context
    evals = {
        split: _windows(split, config["eval_windows"], ctx, 20_000 + seed)
        for split in ("prose", "val")
    }
    table: dict[str, dict[str, float]] = {}
    fp = {s: _evaluate(model, x, y, None, window) for s, (x, y) in evals.items()}
    table["fp"] = {"prose_bpb": fp["prose"]["bpb"], "code_bpb": fp["val"]["bpb"]}
    for scheme in SCHEMES:
        for bits in config["bits"]:
            table[f"{scheme}-{bits}bit"] = _row(model, evals, qs[scheme][bits], window)
    layers = len(kv)
    for bits in config["bits"]:
        target = table[f"nsn-{bits}bit"]["bytes_per_token"]
        per_stage = table[f"kmeans-{bits}bit"]["bytes_per_token"] / bits
        stages = max(bits, math.ceil(target / per_stage - 1e-9))
        pairs = _kmeans_pairs(kv, stages, config, seed) if stages != bits else qs["kmeans"][bits]
        table[f"kmeans-matched-{bits}bit"] = {**_row(model, evals, pairs, window), "bits": stages}
        kbits = bits
        row = table[f"kivi-{bits}bit"]
        while row["bytes_per_token"] < target and kbits < 8:
            kbits += 1
            row = _row(model, evals, _kivi_pairs(kbits, layers), window)
        table[f"kivi-matched-{bits}bit"] = {**row, "bits": kbits}
    prose = _calibration(model, "prose", config, 30_000 + seed)
    table["kmeans-oracle-2bit"] = _row(model, evals, _kmeans_pairs(prose, 2, config, seed), window)
    return {"table": table}


def _best_baseline(m: Mapping[str, Any], bits: int, metric: str, matched: bool) -> float:
    tag = "matched-" if matched else ""
    return min(cell(m, f"{s}-{tag}{bits}bit", metric) for s in ("kmeans", "kivi"))


def _vs_best(bits: int, metric: str, *, matched: bool = True):
    return lambda m: cell(m, f"nsn-{bits}bit", metric) - _best_baseline(m, bits, metric, matched)


def _shift(m: Mapping[str, Any], scheme: str) -> float:
    return cell(m, f"{scheme}-2bit", "prose_attn_err") - cell(m, f"{scheme}-2bit", "code_attn_err")


def _check_nsn(config: Mapping[str, Any]) -> CheckOutcome:
    x = torch.randn(2, 4, 40, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = x * 5 + torch.linspace(-3, 3, 16, dtype=torch.float64)
    z, s1, s2, o = nsn_normalize(x)
    err = float((s1 * (s2 * z + o) - x).abs().max())
    norm_err = float((z.norm(dim=-1) - 4.0).abs().max())
    worst = max(err, norm_err)
    return CheckOutcome(
        worst < 1e-10,
        worst,
        f"x = s1 (s2 z + o) and |z| = sqrt(d): max error {worst:.1e} <= 1e-10",
    )


def _check_bytes(config: Mapping[str, Any]) -> CheckOutcome:
    x = torch.randn(1, 4, 32, 16)
    nsn = NSNQuantizer(bits=2).quantize(x)
    expected = 4 * 32 * (2 * 2 * 8 + 2 * 16) + 4 * 16 * 16  # codes, s1, s2; o per chunk
    kivi = IntKIVI(bits=2, axis="token", group=32).quantize(x)
    expected_kivi = x.numel() * 2 + 4 * 32 * 2 * 16  # one 16-channel group per token
    ok = nsn.bits == expected and kivi.bits == expected_kivi
    return CheckOutcome(
        ok,
        float(nsn.bits - expected + kivi.bits - expected_kivi),
        "stored bits equal the count of codes and fp16 scales",
    )


CLAIM = register_claim(
    Claim(
        id="nsnquant",
        paper=paper("nsnquant"),
        hypothesis=(
            "Under a distribution shift (calibrate on code, test on prose), NSNQuant's "
            "calibration-free VQ gives a lower attention-output error than calibrated k-means "
            "VQ and KIVI-style integers at 2 bits per value."
        ),
        primary=Effect(
            "attn_err_2bit_prose",
            "prose attention-output relative error: NSNQuant at 2 bits minus the better of "
            "k-means VQ (calibrated on code) and KIVI-style int each given at least "
            "NSNQuant's stored bytes per token (k-means: more stages; KIVI: more bits)",
            _vs_best(2, "prose_attn_err"),
            direction="less",
            margin=Margin(
                0.01,
                "normlab's choice: one percentage point of relative error, "
                "well above the seed-to-seed spread of the error itself",
            ),
            baseline="best of calibrated k-means VQ and KIVI int at matched storage",
        ),
        secondary=(
            Effect(
                "attn_err_2bit_nominal",
                "as the primary but every scheme at 2 nominal bits per value (the paper's "
                "framing; the baselines then store fewer bytes than NSNQuant here)",
                _vs_best(2, "prose_attn_err", matched=False),
                direction="less",
                margin=Margin(0.01, "normlab's choice: as for the primary"),
                baseline="best of calibrated k-means VQ and KIVI int (2 nominal bits)",
            ),
            Effect(
                "attn_err_1bit_prose",
                "as the primary with NSNQuant at 1 bit per value (matched storage)",
                _vs_best(1, "prose_attn_err"),
                direction="less",
                margin=Margin(0.01, "normlab's choice: as for the primary"),
                baseline="best of k-means and KIVI at matched storage (NSN 1 bit)",
            ),
            Effect(
                "bpb_2bit_prose",
                "prose bits per byte of the tail tokens with a 2-bit cache: NSNQuant minus "
                "the better baseline at matched storage",
                _vs_best(2, "prose_bpb"),
                direction="less",
                margin=Margin(0.0, "normlab's choice: any improvement in the loss"),
                baseline="best of k-means and KIVI at matched storage",
                unit="bpb",
            ),
            Effect(
                "shift_degradation",
                "2-bit error increase from code to prose: NSNQuant's minus k-means'",
                lambda m: _shift(m, "nsn") - _shift(m, "kmeans"),
                direction="less",
                margin=Margin(0.0, "normlab's choice: NSNQuant degrades less under the shift"),
                baseline="calibrated k-means VQ",
            ),
        ),
        checks=(
            Check(
                "nsn_exact",
                "the Normalize-Shift-Normalize decomposition is exact in fp64",
                _check_nsn,
            ),
            Check(
                "bytes_counted",
                "reported storage equals the stored codes and scales",
                _check_bytes,
            ),
        ),
        preconditions=(
            Precondition(
                "shift_hurts_calibration",
                "prose 2-bit attention error: k-means calibrated on code minus k-means "
                "calibrated on prose (the shift's cost to a calibrated codebook)",
                lambda m: (
                    cell(m, "kmeans-2bit", "prose_attn_err")
                    - cell(m, "kmeans-oracle-2bit", "prose_attn_err")
                ),
                op=">=",
                threshold=0.0,
                source="normlab's choice: without a shift that hurts the calibrated codebook "
                "the test says nothing about robustness to shift",
            ),
        ),
        headline=(
            "NSNQuant outperforms prior KV-cache quantizers at 1 and 2 bits and generalizes "
            "without calibration data; up to 3x throughput (abstract)."
        ),
        setup=(
            "Shared quick TinyGPT (d 64, 2 layers, 4 heads of 16, context 64, trained 400 "
            "steps on stdlib code, training seed 0). Per seed: k-means codebooks (256 words "
            "per 8 values per stage, per layer, K and V) fitted on code windows; NSN codebook "
            "from N(0, I) samples; KIVI keys per channel / values per token, group 32 (16 = a "
            "head). Evaluated on prose and held-out code windows: first T - window tokens "
            "quantized, the last `window` in full precision and scored."
        ),
        scale_note=(
            "Head dim 16 makes NSN's per-token fp16 scales cost 2 bits per value (the "
            "paper's head dim 128: 0.25), so at equal nominal bits NSNQuant stores ~2x the "
            "bytes of k-means; the primary compares at matched measured storage instead."
        ),
        configs={
            "smoke": {
                "seeds": 1,
                **QUICK_GPT,
                "d_model": 32,
                "n_layers": 1,
                "n_heads": 2,
                "context": 32,
                "steps": 4,
                "batch": 4,
                "lr": 3e-3,
                "bits": (1, 2),
                "window": 8,
                "calibration_windows": 16,
                "eval_windows": 4,
                "kmeans_iters": 3,
            },
            "quick": {
                "seeds": 5,
                **QUICK_GPT,
                "steps": 400,
                "batch": 16,
                "lr": 3e-3,
                "bits": (1, 2),
                "window": 16,
                "calibration_windows": 16,
                "eval_windows": 16,
                "kmeans_iters": 8,
            },
            "full": {
                "seeds": 10,
                **QUICK_GPT,
                "steps": 400,
                "batch": 16,
                "lr": 3e-3,
                "bits": (1, 2),
                "window": 16,
                "calibration_windows": 256,
                "eval_windows": 256,
                "kmeans_iters": 25,
            },
        },
        run=run,
        version=2,
    )
)
