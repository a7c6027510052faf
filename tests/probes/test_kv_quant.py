"""probes.kv_quant: the prefilled-cache evaluation, scheme rows, matching and rank."""

from __future__ import annotations

import torch

from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.probes import kv_quant as kvq


def _model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(d_model=16, n_heads=1, n_layers=2, context=24)).eval()


def test_full_precision_cache_reproduces_the_model():
    model = _model()
    x = torch.randint(0, 256, (2, 24))
    r = kvq.prefilled_cache_error(model, x, x, None, 8)
    assert r["attn_err"] == 0.0 and r["bytes_per_token"] == 0.0
    with torch.no_grad():
        logits = model(x)
    logits = logits[0] if isinstance(logits, tuple) else logits
    nll = torch.nn.functional.cross_entropy(logits[:, 16:].flatten(0, 1), x[:, 16:].flatten())
    assert abs(r["bpb"] - float(nll) / 0.6931471805599453) < 1e-4


def test_more_bits_less_error_and_more_bytes():
    model = _model()
    x = torch.randint(0, 256, (2, 24))
    evals = {"code": (x, x)}
    rows = {b: kvq.scheme_row(model, evals, kvq.kivi_pairs(b, 2, group=16), 8) for b in (1, 4)}
    assert rows[4]["code_attn_err"] < rows[1]["code_attn_err"]
    assert rows[4]["bytes_per_token"] > rows[1]["bytes_per_token"]
    kv = model.keys_values(torch.randint(0, 256, (16, 24)))
    nsn = kvq.scheme_row(model, evals, kvq.nsn_pairs(2, 2), 8)
    km = kvq.scheme_row(model, evals, kvq.kmeans_pairs(kv, 2, iters=2), 8)
    assert nsn["codebook_bytes"] > 0 and km["codebook_bytes"] > 0
    assert 0 < nsn["code_attn_err"] < 1 and 0 < km["code_attn_err"] < 1


def test_largest_within_and_effective_rank():
    row = kvq.largest_within(35.0, lambda b: {"bytes_per_token": 10.0 * b}, high=8)
    assert row == {"bytes_per_token": 30.0, "bits": 3}
    g = torch.Generator().manual_seed(0)
    low = torch.randn(2000, 2, generator=g) @ torch.randn(2, 16, generator=g)
    assert kvq.effective_rank(low) < 2.5 < 14 < kvq.effective_rank(torch.randn(4000, 16))


def test_the_comparison_table_matches_storage_and_marks_a_missing_peer():
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=32, n_heads=1, n_layers=1, context=32)).eval()
    x = torch.randint(0, 256, (4, 32))
    kv = model.keys_values(torch.randint(0, 256, (16, 32)))
    table = kvq.comparison_table(
        model,
        kv,
        {"a": (x, x), "b": (x.flip(0), x.flip(0))},
        bits=[1, 2],
        window=8,
        kmeans_iters=2,
        oracle=kv,
        peers={"absent": None},
    )
    for b in (1, 2):
        nsn = table[f"nsn-{b}bit"]["bytes_per_token"]
        for scheme in ("kmeans", "kivi"):
            matched = table[f"{scheme}-matched-{b}bit"]
            assert matched["bytes_per_token"] <= nsn or matched["bits"] == 1
    assert table["absent-2bit"] == dict.fromkeys(table["nsn-2bit"])
    assert table["kmeans-oracle-2bit"]["a_attn_err"] == table["kmeans-2bit"]["a_attn_err"]
    assert 1.0 <= table["fp"]["key_rank"] <= 32 and table["fp"]["a_bpb"] > 0
