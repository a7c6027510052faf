"""Claim "nsnquant": calibration-free NSN + Hadamard VQ degrades least under a distribution shift.

A code-trained TinyGPT's KV cache under NSNQuant, k-means VQ calibrated on code, KIVI and
HQQ / quanto, as prefilled caches (:mod:`normlab.probes.kv_quant`) on code, prose and
numeric tables (the shift). Primary: NSNQuant's 2-bit attention-error increase from code to
tables minus k-means'; premise: the shift hurts calibrated k-means.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from normlab.claims.catalogue._lm_settings import lm_free, lm_train_config
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
from normlab.data.tables import domain_windows
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.papers import paper
from normlab.probes import kv_quant as kvq
from normlab.quant import IntKIVI, NSNQuantizer
from normlab.quant.nsn import nsn_normalize
from normlab.quant.peers import peer_quantizers
from normlab.training.lm import train_lm

__all__ = ["CLAIM", "run"]

_DOMAINS = {"tables": "tables", "prose": "prose", "val": "code"}


def _model(config: Mapping[str, Any]) -> TinyGPT:
    """The shared trained TinyGPT (training seed 0; the same run other claims cache)."""
    arch = {k: config[k] for k in ("d_model", "n_layers", "n_heads", "context")}
    gpt = GPTConfig(norm="layernorm", score="softmax", **arch)
    return train_lm(gpt, lm_train_config(config), 0)[0]


def _kv(model: TinyGPT, split: str, config: Mapping[str, Any], seed: int):
    windows = domain_windows(split, config["calibration_windows"], config["context"], seed)
    return model.keys_values(windows[0])


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Per scheme: errors, bits per byte, bytes per token on tables, prose and code
    (:func:`normlab.probes.kv_quant.comparison_table`: NSNQuant, k-means calibrated on code,
    KIVI, each also at NSNQuant's storage; HQQ and quanto; k-means calibrated on tables)."""
    seed_everything(seed)
    torch.set_num_threads(1)
    model = _model(config)
    n, context = config["eval_windows"], config["context"]
    evals = {name: domain_windows(s, n, context, 20_000 + seed) for s, name in _DOMAINS.items()}
    peers = peer_quantizers(config["peers"], bits=2, group=config["peer_group"])
    sizes = {k: config[k] for k in ("bits", "window", "kmeans_iters")}
    calibration = _kv(model, "train", config, 10_000 + seed)
    oracle = _kv(model, "tables", config, 30_000 + seed)
    table = kvq.comparison_table(
        model, calibration, evals, **sizes, oracle=oracle, peers=peers, seed=seed
    )
    return {"table": table}


def _vs(name: str, bits: int, baseline: str, metric: str = "tables_attn_err", **kw) -> Effect:
    what, unit = f"{metric}: NSNQuant at {bits} bits minus {baseline}", _unit(metric)
    arms = (f"nsn-{bits}bit", baseline, metric)
    return difference(name, what, *arms, direction="less", unit=unit, **kw)


def _unit(metric: str) -> str:
    return "bpb" if metric.endswith("bpb") else ""


def _every(name: str, description: str, bits: int, tag: str, metric: str, margin: Margin):
    """NSNQuant below every data-calibrated baseline (intersection-union over the parts)."""
    parts = tuple(
        _vs(f"{name}_vs_{s}", bits, f"{s}-{tag}{bits}bit", metric, margin=margin)
        for s in ("kmeans", "kivi")
    )
    arms = {"method": f"nsn-{bits}bit", "baseline": "k-means VQ and KIVI int"}
    return Effect(name, description, None, "less", margin, **arms, unit=_unit(metric), parts=parts)


def _gap(m: Mapping[str, Any], row: str, other: str, metric: str, other_metric: str = "") -> float:
    """``row``'s ``metric`` minus ``other``'s ``other_metric`` (default: the same metric)."""
    return cell(m, row, metric) - cell(m, other, other_metric or metric)


def _shift(m: Mapping[str, Any], scheme: str) -> float:
    """The 2-bit attention-error increase of ``scheme`` from code (its calibration domain
    for k-means) to numeric tables."""
    row = f"{scheme}-2bit"
    return _gap(m, row, row, "tables_attn_err", "code_attn_err")


def _check_nsn(config: Mapping[str, Any]) -> CheckOutcome:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 40, 16, dtype=torch.float64, generator=g) * 5
    x = x + torch.linspace(-3, 3, 16, dtype=torch.float64)
    z, s1, s2, o = nsn_normalize(x)
    err = float((s1 * (s2 * z + o) - x).abs().max())
    worst = max(err, float((z.norm(dim=-1) - 4.0).abs().max()))
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
    "normlab's choice: one percentage point of relative error, well above "
    "the seed-to-seed spread of the error itself",
)
_SAME = Margin(0.01, "normlab's choice: as for the primary")
_ANY = Margin(0.0, "normlab's choice: any improvement in the loss")
_NO_SHIFT = "normlab's choice: without a shift that hurts the calibrated codebook, robustness to "
_NO_SHIFT = Margin(0.0, _NO_SHIFT + "it says nothing")
_KW = {"direction": "less", "margin": _MARGIN, "method": "nsn-2bit", "baseline": "kmeans-2bit"}
_SHIFT = "2-bit attention-error increase from code to tables: NSNQuant's minus k-means' "
_SHIFT += "(calibrated on code)"
_HURTS = "tables 2-bit attention error: k-means calibrated on code minus on tables (the shift's "
_HURTS += "cost to a calibrated codebook)"
_VS_EVERY = "tables attention-output relative error: NSNQuant at 2 bits minus k-means and minus "
_VS_EVERY += "KIVI at matched storage (intersection-union)"
_NOMINAL = "as attn_err_2bit_vs_every at 2 nominal bits per value (the paper's framing)"
_ONE_BIT = "as attn_err_2bit_vs_every with NSNQuant at 1 bit per value (KIVI's smallest setting, "
_ONE_BIT += "1 bit, stores more than NSNQuant)"
_PROSE_BPB = "prose tail bits per byte, 2-bit cache: NSNQuant minus each baseline at matched "
_PROSE_BPB += "storage (not tables: predicted near chance)"
_GPT = {**QUICK_GPT, "n_heads": 1, "steps": 400, "batch": 16, "lr": 3e-3}
_RUN = {"bits": (1, 2), "window": 16, "peers": ("hqq", "quanto"), "peer_group": 64}
_SMOKE = {"d_model": 64, "n_layers": 1, "context": 32, "steps": 4, "batch": 4, "window": 8}
_SMOKE |= {"calibration_windows": 16, "eval_windows": 4, "kmeans_iters": 3}
_QUICK = {"calibration_windows": 16, "eval_windows": 16, "kmeans_iters": 8}
_FULL = {"d_model": 256, "n_heads": 4, "n_layers": 4, "context": 128, "steps": 3000}
_FULL |= {"calibration_windows": 256, "eval_windows": 256, "kmeans_iters": 25}

CLAIM = register_claim(
    Claim(
        id="nsnquant",
        paper=paper("nsnquant"),
        hypothesis="Under a distribution shift (calibrate on code, test on numeric tables), "
        "NSNQuant's calibration-free VQ loses less attention-output accuracy at 2 bits per value "
        "than k-means VQ calibrated on code.",
        quote="This alignment enables robust, calibration-free vector quantization using a single "
        "reusable codebook.",
        primary=Effect(
            "shift_degradation", _SHIFT, lambda m: _shift(m, "nsn") - _shift(m, "kmeans"), **_KW
        ),
        secondary=(
            _vs("attn_err_2bit_tables", 2, "kmeans-matched-2bit", margin=_SAME),  # former primary
            _every("attn_err_2bit_vs_every", _VS_EVERY, 2, "matched-", "tables_attn_err", _SAME),
            _every("attn_err_2bit_nominal", _NOMINAL, 2, "", "tables_attn_err", _SAME),
            _every("attn_err_1bit_tables", _ONE_BIT, 1, "matched-", "tables_attn_err", _SAME),
            _every("bpb_2bit_prose", _PROSE_BPB, 2, "matched-", "prose_bpb", _ANY),
            _vs("vs_hqq", 2, "hqq-2bit", margin=_SAME),
            _vs("vs_quanto", 2, "quanto-2bit", margin=_SAME),
            _vs("attn_err_2bit_prose", 2, "kmeans-matched-2bit", "prose_attn_err", margin=_SAME),
            _vs("attn_err_2bit_code", 2, "kmeans-matched-2bit", "code_attn_err", margin=_SAME),
        ),
        checks=(
            Check("nsn_exact", "Normalize-Shift-Normalize is exact in fp64", _check_nsn),
            Check("bytes_counted", "storage equals the stored codes and scales", _check_bytes),
        ),
        premises=(
            Premise(
                "shift_hurts_calibration",
                _HURTS,
                lambda m: _gap(m, "kmeans-2bit", "kmeans-oracle-2bit", "tables_attn_err"),
                direction="greater",
                margin=_NO_SHIFT,
                gates=("shift_degradation",),
            ),
        ),
        untuned="nothing is trained per arm: one shared LM, quantizers with fixed settings",
        free_settings=(
            FreeSetting.scaled("window", "normlab's choice: full-precision tail tokens"),
            FreeSetting.scaled("kmeans_iters", "normlab's choice: k-means iterations"),
            FreeSetting.scaled("calibration_windows", "normlab's choice: k-means's code windows"),
            FreeSetting.scaled("eval_windows", "normlab's choice: scored windows per domain"),
            FreeSetting.scaled("peer_group", "normlab's choice: HQQ / quanto group size"),
            FreeSetting("peers", ("hqq",), ("quanto",), "normlab's choice: the peer caches"),
            FreeSetting("n_heads", 2, 8, "normlab's choice: one head of 64 at quick (paper: 128)"),
            *lm_free("n_layers", "context", "steps", "batch", "lr"),
            *lm_free(d_model="normlab's choice: head dim 64 (the paper's 128) at one head"),
        ),
        sourced={"bits": "paper: abstract (the 1-bit and 2-bit settings)"},
        decisive="d_model",  # the width sets how low-rank the keys are: the regime
        headline="NSNQuant outperforms prior KV-cache quantizers at 1 and 2 bits and generalizes "
        "without calibration data; up to 3x throughput (abstract).",
        setup="TinyGPT (d 64, 2 layers, 1 head of 64, 400 steps on stdlib code, training seed 0). "
        "Per seed: k-means codebooks (256 words per 8 values per stage, per layer, K and V) "
        "fitted on code; NSN's from N(0, I); KIVI group 32; HQQ / quanto group 64. The last "
        "`window` tokens of each window are scored over the quantized cache of the others.",
        scale_note="Regime: code keys of effective rank ~14 of 64 (values ~21; fp row), where a "
        "codebook calibrated on the data fits their subspace: NSNQuant's 2-bit error exceeds "
        "k-means' on every domain (code ~0.19 vs ~0.05, tables ~0.10 vs ~0.08), and degrades "
        "less under the shift because it does not depend on calibration data, not because it is "
        "lower. Wider keys close the gap: 2 heads of 64 at d 128 (key rank ~26) gave tables "
        "0.077 vs 0.100 (seed 0, 400 steps); full (d 256, 4 heads of 64, 3000 steps) measures "
        "that regime. Matched bytes per token: NSN 90.8 / 58.8 (2 / 1 bits), k-means 64.0 / "
        "32.0, KIVI 69.3 at 1 bit. The shift is code -> numeric tables (~430 KB of scikit-learn "
        "CSV).",
        configs={
            "smoke": {"seeds": 1, **_GPT, **_RUN, **_SMOKE},
            # 7 seeds: at 5, attn_err_2bit_tables's null had a 6.6% opposite rate (limit 5%)
            "quick": {"seeds": 7, **_GPT, **_RUN, **_QUICK},
            "full": {"seeds": 10, **_GPT, **_RUN, **_FULL},
        },
        run=run,
    )
)
