"""Probes on Hugging Face models built from configs: padding, site kinds, SDPA, [SEP]."""

from __future__ import annotations

import pytest
import torch

from normlab.probes import outlier_stats, sink_stats
from tests._tiny_hf import build, tokens

pytest.importorskip("transformers")


def _padded(x: torch.Tensor, extra: int, *, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Row 0 keeps its length, row 1 is shortened by ``extra`` and padded."""
    ids, mask = x.clone(), torch.ones_like(x)
    if left:
        ids[1] = torch.cat([torch.zeros(extra, dtype=x.dtype), x[1, :-extra]])
        mask[1, :extra] = 0
    else:
        ids[1, -extra:] = 0
        mask[1, -extra:] = 0
    return ids, mask


@pytest.mark.parametrize(("family", "left"), [("gpt2", False), ("llama", True), ("bert", False)])
def test_padded_batch_gives_the_unpadded_statistics(family, left):
    model = build(family)
    x = tokens(2, 10)
    ids, mask = _padded(x, 3, left=left)
    short = x[1, :-3][None]
    full = [x[:1], short]  # the same sequences, unpadded, one per batch
    a = outlier_stats(model, ids, attention_mask=mask)
    b = outlier_stats(model, full)
    for sa, sb in zip(a.sites, b.sites, strict=True):
        assert sa.name == sb.name
        assert sa.inf_norm == pytest.approx(sb.inf_norm, rel=1e-4)
        assert sa.kurtosis == pytest.approx(sb.kurtosis, rel=1e-4)
        assert sa.token_kurtosis == pytest.approx(sb.token_kurtosis, rel=1e-4)
    assert [(m.token, m.channel) for m in a.largest[:3]] == [
        (m.token + (3 if left and m.sequence == 1 else 0), m.channel) for m in b.largest[:3]
    ]
    sa, sb = sink_stats(model, ids, attention_mask=mask), sink_stats(model, full)
    assert sa.first_token_mass == pytest.approx(sb.first_token_mass, rel=1e-5)
    torch.testing.assert_close(torch.tensor(sa.alpha), torch.tensor(sb.alpha), rtol=1e-5, atol=0)
    unmasked = sink_stats(model, ids)  # the test can fail: padding does move the numbers
    assert abs(unmasked.first_token_mass - sb.first_token_mass) > 1e-4


def test_bert_sites_are_labelled_and_the_norm_input_holds_the_planted_outlier():
    model = build("bert")
    with torch.no_grad():  # a large write into channel 5 of the first layer's MLP output
        model.bert.encoder.layer[0].output.dense.bias[5] = 300.0
    report = outlier_stats(model, tokens(2, 12))
    kinds = {s.kind for s in report.sites}
    assert kinds == {"block_output", "norm_input", "norm_output"}
    # post-LN: the block output is normalized, the LayerNorm's input is not
    assert report.by_kind["norm_input"]["max_inf_norm"] > 250
    assert report.by_kind["block_output"]["max_inf_norm"] < 50
    top = report.largest[0]
    assert top.channel == 5 and top.name.endswith("output.LayerNorm:input") and top.ratio > 100
    assert all(m.ratio > 1000 and abs(m.value) > 100 for m in report.massive)
    site = next(s for s in report.sites if s.name == top.name)
    assert site.layer == 0 and site.token_kurtosis > 10


def test_largest_lists_an_activation_below_the_ratio_rule():
    model = build("gpt2")
    with torch.no_grad():
        model.transformer.h[0].mlp.c_proj.bias[2] = 150.0
    report = outlier_stats(model, tokens(), sites="residual", ratio=1e6)
    assert report.massive == ()
    assert report.largest[0].channel == 2 and report.largest[0].value > 100


def test_sink_stats_switches_sdpa_to_eager_and_restores_it():
    model = build("gpt2")
    assert model.config._attn_implementation == "sdpa"
    report = sink_stats(model, tokens())
    assert model.config._attn_implementation == "sdpa"
    assert 0 < report.first_token_mass <= 1


def test_special_token_mass_and_the_last_key_on_bert():
    model = build("bert")
    cls_id, sep_id = 2, 3
    x = tokens(2, 10)
    x[:, 0], x[:, -1] = cls_id, sep_id
    report = sink_stats(model, x, key=-1, special_tokens={"[CLS]": cls_id, "[SEP]": sep_id})
    assert set(report.special_mass) == {"[CLS]", "[SEP]"}
    model.set_attn_implementation("eager")
    with torch.no_grad():
        probs = model(input_ids=x, output_attentions=True).attentions
    sep = torch.stack([p[..., -1].double().mean() for p in probs]).mean()
    assert report.special_mass["[SEP]"] == pytest.approx(float(sep), rel=1e-6)
    alpha_last = torch.stack([p[:, :, -1:, -1].double().mean(dim=(0, 2)) for p in probs])
    torch.testing.assert_close(torch.tensor(report.alpha, dtype=torch.float64), alpha_last)
