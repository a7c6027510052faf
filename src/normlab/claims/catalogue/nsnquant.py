"""Claim "nsnquant": calibration-free NSN + Hadamard VQ holds up under a distribution shift.

NSNQuant (``paper("nsnquant")``) argues that VQ codebooks calibrated on data break when the
test data differ, while normalizing each token (Normalize-Shift-Normalize + Hadamard) to
look like N(0, I) lets one offline codebook serve any data. Here the keys and values of a
TinyGPT with head dim 64 (one head of 64 at quick; the paper's models use 128, and at head
dim 16 the Hadamard step is a no-op and fp16 scales cost 2 bits a value), trained on stdlib
code, are quantized with :class:`~normlab.quant.NSNQuantizer`, with
:class:`~normlab.quant.KMeansVQ` calibrated on code windows, and with KIVI-style integers
(:class:`~normlab.quant.IntKIVI`: keys per channel, values per token, group 32), at 1 and 2
bits per value. They are evaluated on numeric tables (the shift: the CSV data files in
scikit-learn's wheel, :func:`~normlab.data.tables.table_bytes`), on prose (the code's
comments and docstrings: a mild shift) and on held-out code. Each window is a prefilled
cache: its first ``T - window`` tokens quantized as one chunk, the last ``window`` tokens in
full precision and scored, as when generation continues from a quantized prompt. The peers
are transformers' own quantized-cache backends (HQQ and optimum-quanto, per-channel keys and
values, group 64, through transformers' ``HQQQuantizedLayer`` / ``QuantoQuantizedLayer``,
wrapped as :class:`~normlab.quant.PeerQuantizer`) where they install. The cache is read and
substituted through the model's public API: :meth:`TinyGPT.keys_values
<normlab.models.gpt.TinyGPT.keys_values>` for calibration, and ``attn.project`` /
``attn.attend`` / ``attn.output`` of :class:`~normlab.attention.MultiheadAttention` for the
tail's queries over the quantized prefix.

The primary compares NSNQuant with the calibrated VQ it replaces (k-means, codebooks fitted
on code) on the tables at matched storage: the baseline gets the largest setting whose
measured bytes per token do not exceed NSNQuant's (discrete settings, so not exact: both
byte counts are in the table and the scale note). The one exception is KIVI at 1 bit, its
smallest setting, which stores more than NSNQuant at 1 bit (in KIVI's favour). "Lower than
every baseline" (k-means and KIVI) is an intersection-union secondary; the same comparison
on prose is a secondary. The premise (calibrating on code rather than on tables hurts
k-means on tables) gates only the shift effect. Nothing is trained per arm (``untuned``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from normlab.claims.catalogue._lm_settings import lm_free
from normlab.claims.common import QUICK_GPT, seed_everything
from normlab.claims.core import (
    Check,
    CheckOutcome,
    Claim,
    Effect,
    FreeSetting,
    Margin,
    Premise,
    cell,
    difference,
    register_claim,
)
from normlab.data.corpus import corpus, sample_batch
from normlab.data.tables import table_bytes
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.papers import paper
from normlab.quant import IntKIVI, KMeansVQ, NSNQuantizer
from normlab.quant.nsn import nsn_normalize
from normlab.quant.peers import PeerQuantizer
from normlab.training.lm import LMTrainConfig, train_lm

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
        x = block.norm1(h) * block.norm_scale
        q, k, v = attn.project(x)
        qt = q[..., p:, :]
        exact = attn.attend(qt, k, v)
        if pairs is None:
            kk, vv = k, v
        else:
            kq, vq, b = _roundtrip(pairs[i], k[..., :p, :], v[..., :p, :])
            bits += b
            kk, vv = torch.cat([kq, k[..., p:, :]], -2), torch.cat([vq, v[..., p:, :]], -2)
        tail = attn.attend(qt, kk, vv)  # the tail's queries over the substituted cache
        num += float((tail - exact).pow(2).sum())
        den += float(exact.pow(2).sum())
        h_tail = h[:, p:] + attn.output(tail, x[:, p:])
        h_tail = h_tail + block.mlp(block.norm2(h_tail) * block.norm_scale)
        h = torch.cat([block(h[:, :p])[0], h_tail], 1)  # the prefix: fp and causal
    nll = F.cross_entropy(model.readout(h[:, p:]).flatten(0, 1).float(), y[:, p:].flatten())
    tokens = idx.shape[0] * p
    return {
        "attn_err": math.sqrt(num / den),
        "bpb": float(nll) / math.log(2),
        "bytes_per_token": bits / 8 / tokens if pairs is not None else 0.0,
    }


#: Evaluation splits and the names their metrics carry.
_DOMAINS = {"tables": "tables", "prose": "prose", "val": "code"}


def _windows(split: str, n: int, context: int, seed: int):
    data = table_bytes() if split == "tables" else corpus(split)
    return sample_batch(data, n, context, torch.Generator().manual_seed(seed))


def _kmeans_pairs(kv, bits: int, config: Mapping[str, Any], seed: int) -> list:
    return [
        tuple(
            KMeansVQ.calibrate(
                t.reshape(-1, t.shape[-1]), bits=bits, iters=config["kmeans_iters"], seed=seed
            )
            for t in (k, v)
        )
        for k, v in kv
    ]


def _kivi_pairs(bits: int, layers: int) -> list:
    pair = (
        IntKIVI(bits=bits, axis="channel", group=32),
        IntKIVI(bits=bits, axis="token", group=32),
    )
    return [pair] * layers


def _calibration(model: TinyGPT, split: str, config: Mapping[str, Any], seed: int):
    calib, _ = _windows(split, config["calibration_windows"], model.config.context, seed)
    return model.keys_values(calib)


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
        name = _DOMAINS[split]
        r = _evaluate(model, x, y, pairs, window)
        row[f"{name}_attn_err"] = r["attn_err"]
        row[f"{name}_bpb"] = r["bpb"]
        row["bytes_per_token"] = r["bytes_per_token"]
    row["codebook_bytes"] = float(pairs[0][0].codebook_bytes + pairs[0][1].codebook_bytes)
    return row


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Errors, bits per byte and stored bytes per token of each scheme, on tables, prose
    and code.

    Rows ``<scheme>-<b>bit`` use ``b`` bits per value (the paper's setting); rows
    ``<scheme>-matched-<b>bit`` give k-means (residual stages) and KIVI (bits) the largest
    setting whose measured bytes per token do not exceed NSNQuant's at ``b`` bits (at
    least one stage or bit, even when that stores more);
    ``kmeans-oracle-2bit`` is calibrated on tables (no shift: the control for the shift).
    """
    seed_everything(seed)
    torch.set_num_threads(1)
    model = _model(config)
    qs, kv = _quantizers(model, config, seed)
    window, ctx = config["window"], model.config.context
    evals = {
        split: _windows(split, config["eval_windows"], ctx, 20_000 + seed) for split in _DOMAINS
    }
    table: dict[str, dict[str, float]] = {}
    fp = {s: _evaluate(model, x, y, None, window) for s, (x, y) in evals.items()}
    table["fp"] = {f"{_DOMAINS[s]}_bpb": r["bpb"] for s, r in fp.items()}
    for scheme in SCHEMES:
        for bits in config["bits"]:
            table[f"{scheme}-{bits}bit"] = _row(model, evals, qs[scheme][bits], window)
    layers = len(kv)
    for bits in config["bits"]:  # the largest setting storing no more than NSNQuant
        target = table[f"nsn-{bits}bit"]["bytes_per_token"]
        per_stage = table[f"kmeans-{bits}bit"]["bytes_per_token"] / bits
        stages = max(1, math.floor(target / per_stage + 1e-9))
        pairs = _kmeans_pairs(kv, stages, config, seed) if stages != bits else qs["kmeans"][bits]
        table[f"kmeans-matched-{bits}bit"] = {**_row(model, evals, pairs, window), "bits": stages}
        kbits = 1
        row = _row(model, evals, _kivi_pairs(kbits, layers), window)
        while kbits < 8:
            bigger = _row(model, evals, _kivi_pairs(kbits + 1, layers), window)
            if bigger["bytes_per_token"] > target:
                break
            kbits, row = kbits + 1, bigger
        table[f"kivi-matched-{bits}bit"] = {**row, "bits": kbits}
    for peer in config["peers"]:
        try:
            quantizer = PeerQuantizer(peer, bits=2, group=config["peer_group"])
        except ImportError:  # the peers extra is not installed: no value, not an error
            table[f"{peer}-2bit"] = dict.fromkeys(table["nsn-2bit"])
            continue
        table[f"{peer}-2bit"] = _row(model, evals, [(quantizer, quantizer)] * layers, window)
    tables = _calibration(model, "tables", config, 30_000 + seed)
    oracle = _kmeans_pairs(tables, 2, config, seed)
    table["kmeans-oracle-2bit"] = _row(model, evals, oracle, window)
    return {"table": table}


def _vs(name: str, bits: int, baseline: str, metric: str = "tables_attn_err", **kw) -> Effect:
    unit = "bpb" if metric.endswith("bpb") else ""
    return difference(
        name,
        f"{metric}: NSNQuant at {bits} bits minus {baseline}",
        f"nsn-{bits}bit",
        baseline,
        metric,
        direction="less",
        unit=unit,
        **kw,
    )


def _every(name: str, description: str, bits: int, tag: str, metric: str, margin: Margin):
    """NSNQuant below every data-calibrated baseline (intersection-union over the parts)."""
    parts = tuple(
        _vs(f"{name}_vs_{s}", bits, f"{s}-{tag}{bits}bit", metric, margin=margin)
        for s in ("kmeans", "kivi")
    )
    return Effect(
        name,
        description,
        None,
        direction="less",
        margin=margin,
        method=f"nsn-{bits}bit",
        baseline="k-means VQ and KIVI int",
        unit=parts[0].unit,
        parts=parts,
    )


def _shift(m: Mapping[str, Any], scheme: str) -> float:
    row = f"{scheme}-2bit"
    return cell(m, row, "tables_attn_err") - cell(m, row, "code_attn_err")


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
    # codes, s1, s2 per token; o (16 channels) and s1's int16 exponent per chunk and head
    expected = 4 * 32 * (2 * 2 * 8 + 2 * 16) + 4 * 16 * 16 + 4 * 16
    stored = sum(t.numel() * t.element_size() * 8 for t in nsn.data.values())
    kivi = IntKIVI(bits=2, axis="token", group=32).quantize(x)
    expected_kivi = x.numel() * 2 + 4 * 32 * 2 * 16  # one 16-channel group per token
    ok = nsn.bits == expected == stored and kivi.bits == expected_kivi
    return CheckOutcome(
        ok,
        float(nsn.bits - expected + kivi.bits - expected_kivi),
        "stored bits equal the count of codes and fp16 scales",
    )


_MARGIN = Margin(
    0.01,
    "normlab's choice: one percentage point of relative error, well above the seed-to-seed "
    "spread of the error itself",
)
_SAME = Margin(0.01, "normlab's choice: as for the primary")
_GPT = {**QUICK_GPT, "n_heads": 1, "steps": 400, "batch": 16, "lr": 3e-3}


CLAIM = register_claim(
    Claim(
        id="nsnquant",
        paper=paper("nsnquant"),
        hypothesis=(
            "Under a distribution shift (calibrate on code, test on numeric tables), NSNQuant's "
            "calibration-free VQ gives a lower attention-output error than k-means VQ "
            "calibrated on code and storing no more bytes, at 2 bits per value."
        ),
        primary=_vs(
            "attn_err_2bit_tables",
            2,
            "kmeans-matched-2bit",
            margin=_MARGIN,
        ),
        secondary=(
            _every(
                "attn_err_2bit_vs_every",
                "tables attention-output relative error: NSNQuant at 2 bits minus k-means VQ "
                "and minus KIVI-style int, each at the largest setting storing no more bytes "
                "per token than NSNQuant (intersection-union)",
                2,
                "matched-",
                "tables_attn_err",
                _SAME,
            ),
            _every(
                "attn_err_2bit_nominal",
                "as the primary but every scheme at 2 nominal bits per value (the paper's "
                "framing; NSNQuant's scales then cost it more bytes)",
                2,
                "",
                "tables_attn_err",
                _SAME,
            ),
            _every(
                "attn_err_1bit_tables",
                "as the primary with NSNQuant at 1 bit per value (matched storage; KIVI's "
                "smallest setting, 1 bit, stores more than NSNQuant)",
                1,
                "matched-",
                "tables_attn_err",
                _SAME,
            ),
            _every(
                "bpb_2bit_prose",
                "prose bits per byte of the tail tokens with a 2-bit cache: NSNQuant minus "
                "each baseline at matched storage (on prose, not tables: the code-trained "
                "model predicts tables at ~6.6 bpb, near chance, where cache noise can lower "
                "the loss; KIVI at 1 bit gave 5.9)",
                2,
                "matched-",
                "prose_bpb",
                Margin(0.0, "normlab's choice: any improvement in the loss"),
            ),
            _vs("vs_hqq", 2, "hqq-2bit", margin=_SAME),
            _vs("vs_quanto", 2, "quanto-2bit", margin=_SAME),
            _vs(
                "attn_err_2bit_prose",
                2,
                "kmeans-matched-2bit",
                "prose_attn_err",
                margin=_SAME,
            ),  # the former primary: prose is a mild shift (it did not hurt k-means at quick)
            Effect(
                "shift_degradation",
                "2-bit error increase from code to tables: NSNQuant's minus k-means'",
                lambda m: _shift(m, "nsn") - _shift(m, "kmeans"),
                direction="less",
                margin=Margin(0.0, "normlab's choice: NSNQuant degrades less under the shift"),
                method="nsn-2bit",
                baseline="kmeans-2bit",
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
        premises=(
            Premise(
                "shift_hurts_calibration",
                "tables 2-bit attention error: k-means calibrated on code minus k-means "
                "calibrated on tables (the shift's cost to a calibrated codebook)",
                lambda m: (
                    cell(m, "kmeans-2bit", "tables_attn_err")
                    - cell(m, "kmeans-oracle-2bit", "tables_attn_err")
                ),
                direction="greater",
                margin=Margin(
                    0.0,
                    "normlab's choice: without a shift that hurts the calibrated codebook "
                    "the shift effect says nothing about robustness to shift",
                ),
                gates=("shift_degradation",),
            ),
        ),
        untuned=(
            "nothing is trained per arm: one shared LM, calibration-free quantizers, and "
            "k-means codebooks fitted with fixed settings"
        ),
        free_settings=(
            FreeSetting.scaled("window", "normlab's choice: full-precision tail tokens"),
            FreeSetting.scaled("kmeans_iters", "normlab's choice: k-means iterations"),
            FreeSetting.scaled("calibration_windows", "normlab's choice: k-means's code windows"),
            FreeSetting.scaled("eval_windows", "normlab's choice: scored windows per domain"),
            FreeSetting.scaled("peer_group", "normlab's choice: HQQ / quanto group size"),
            FreeSetting("peers", ("hqq",), ("quanto",), "normlab's choice: the peer caches"),
            FreeSetting(
                "n_heads", 2, 8, "normlab's choice: one head of 64 at quick (the paper's 128)"
            ),
            *lm_free("n_layers", "context", "steps", "batch", "lr"),
            *lm_free(d_model="normlab's choice: head dim 64 (the paper's 128) at one head"),
        ),
        sourced={"bits": "paper: abstract (the 1-bit and 2-bit settings)"},
        # the head dimension sets NSN's per-token scale overhead at matched storage (0.5 bits
        # a value at 64, the paper's 128 halves it); window and kmeans_iters were robust
        decisive="d_model",
        headline=(
            "NSNQuant outperforms prior KV-cache quantizers at 1 and 2 bits and generalizes "
            "without calibration data; up to 3x throughput (abstract)."
        ),
        setup=(
            "TinyGPT (d 64, 2 layers, 1 head of 64, context 64, trained 400 steps on stdlib "
            "code, training seed 0). Per seed: k-means codebooks (256 words per 8 values per "
            "stage, per layer, K and V) fitted on code windows; NSN codebook from N(0, I) "
            "samples; KIVI keys per channel / values per token, group 32; HQQ / quanto "
            "through transformers' quantized-cache layers (group 64). Evaluated on windows of "
            "numeric tables (scikit-learn's bundled CSV files), prose and held-out code: "
            "first T - window tokens quantized, the last `window` in "
            "full precision and scored."
        ),
        scale_note=(
            "The shift is code -> numeric tables (about 430 KB of CSV: digits, decimal "
            "points, commas), not the paper's text corpora; prose (the same files' comments "
            "and docstrings) is a milder shift, kept as a secondary; head dim 64 (the "
            "paper's 128) puts NSN's fp16 scales at 0.5 "
            "bits a value. Matched storage at quick, bytes per token (K and V, 2 layers): "
            "NSN 90.8 at 2 bits, 58.8 at 1 bit; k-means 64.0 (2 stages) and 32.0 (1); KIVI "
            "69.3 (1 bit) for both, more than NSN's 58.8 at 1 bit (no smaller KIVI setting). "
            "The HQQ and quanto rows need the peers extra; quanto builds its CPU kernels on "
            "first use (~40 s here, once per environment)."
        ),
        configs={
            "smoke": {
                "seeds": 1,
                **_GPT,
                "d_model": 64,
                "n_layers": 1,
                "context": 32,
                "steps": 4,
                "batch": 4,
                "bits": (1, 2),
                "window": 8,
                "calibration_windows": 16,
                "eval_windows": 4,
                "kmeans_iters": 3,
                "peers": ("hqq", "quanto"),
                "peer_group": 64,
            },
            "quick": {
                # 7 seeds: at 5, the primary's within-seed exchange null on the tables gave an
                # opposite-direction rate of 6.6% (32 sign patterns), above the 5% limit
                "seeds": 7,
                **_GPT,
                "bits": (1, 2),
                "window": 16,
                "calibration_windows": 16,
                "eval_windows": 16,
                "kmeans_iters": 8,
                "peers": ("hqq", "quanto"),
                "peer_group": 64,
            },
            "full": {
                "seeds": 10,
                **_GPT,
                "d_model": 256,
                "n_heads": 4,
                "n_layers": 4,
                "context": 128,
                "steps": 3000,
                "bits": (1, 2),
                "window": 16,
                "calibration_windows": 256,
                "eval_windows": 256,
                "kmeans_iters": 25,
                "peers": ("hqq", "quanto"),
                "peer_group": 64,
            },
        },
        run=run,
    )
)
