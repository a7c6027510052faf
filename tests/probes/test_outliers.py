"""Outlier probes against values computed by hand, and a planted massive activation."""

from __future__ import annotations

import pytest
import torch

from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.probes import inf_norm, kurtosis, massive_activations, outlier_stats


def test_kurtosis_and_inf_norm_by_hand():
    # one sequence [1, -1, 1, -1]: mu 0, var 1, mu4 1 -> kurtosis 1
    # one sequence [0, 0, 0, 4]: mu 1, deviations (-1, -1, -1, 3), var 3, mu4 21 -> 21/9
    x = torch.tensor([[[1.0, -1.0], [1.0, -1.0]], [[0.0, 0.0], [0.0, 4.0]]])
    k = kurtosis(x)
    torch.testing.assert_close(k, torch.tensor([1.0, 21 / 9], dtype=torch.float64))
    torch.testing.assert_close(inf_norm(x), torch.tensor([1.0, 4.0], dtype=torch.float64))
    gauss = torch.randn(4, 256, 64, generator=torch.Generator().manual_seed(0))
    assert kurtosis(gauss).sub(3).abs().max() < 0.1


def test_kurtosis_is_scale_invariant_and_the_oasis_form_is_not():
    g = torch.randn(1, 100000, generator=torch.Generator().manual_seed(0))
    small = kurtosis(g * 0.03)
    assert abs(small.item() - 3) < 0.1  # issue 24: the +1e-6 form gave 1.36
    torch.testing.assert_close(small, kurtosis(g * 1000.0))
    oasis = kurtosis(g * 0.03, variant="oasis")  # Var^2 = 8.1e-7 is below the 1e-6 added
    c = (g.double() * 0.03) - (g.double() * 0.03).mean()
    by_hand = c.pow(4).mean() / (c.pow(2).mean().pow(2) + 1e-6)
    assert oasis.item() < 1.5 and oasis.item() == pytest.approx(by_hand.item(), rel=1e-3)
    with pytest.raises(ValueError, match="pearson"):
        kurtosis(g, variant="excess")


def test_massive_activation_criteria():
    h = torch.full((2, 5, 8), 0.05)
    h[1, 3, 6] = -150.0  # |a| > 100 and 3000x the median 0.05
    h[0, 2, 1] = 40.0  # 800x the median but below 100
    found = massive_activations(h)
    assert [(m.sequence, m.token, m.channel) for m in found] == [(1, 3, 6)]
    assert found[0].value == -150.0 and found[0].ratio == pytest.approx(3000.0)
    assert massive_activations(h, threshold=30, ratio=500)[1].value == 40.0
    assert massive_activations(torch.full((1, 4, 8), 200.0)) == []  # large, but typical


def small_model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(d_model=32, n_layers=2, n_heads=2, context=16)).eval()


def tokens() -> torch.Tensor:
    return torch.randint(0, 256, (3, 16), generator=torch.Generator().manual_seed(2))


def test_report_matches_direct_computation_and_model_is_unchanged():
    model = small_model()
    x = tokens()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    report = outlier_stats(model, [x[:2], x[2:]], sites="residual")
    assert model.training and all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    states, _ = model.eval().trunk(x)
    by_hand = [(inf_norm(h).mean().item(), kurtosis(h).mean().item()) for h in states[1:]]
    assert [s.name for s in report.sites] == ["residual.1", "residual.2"]
    for site, (inf, kurt) in zip(report.sites, by_hand, strict=True):
        assert site.inf_norm == pytest.approx(inf) and site.kurtosis == pytest.approx(kurt)
    assert report.max_inf_norm == pytest.approx(max(i for i, _ in by_hand))
    assert report.avg_kurtosis == pytest.approx(sum(k for _, k in by_hand) / 2)
    assert report.sequences == 3 and report.massive == ()
    d = report.to_dict()
    assert {"max_inf_norm", "avg_kurtosis", "sites", "massive", "largest", "by_kind"} <= set(d)
    norms = outlier_stats(model, x, sites="norm_inputs")
    assert len(norms.sites) == 5  # two per block and the final norm


def test_planted_massive_activation_is_detected():
    model = small_model()
    x = tokens()
    before = outlier_stats(model, x, sites="residual")
    with torch.no_grad():  # a bias that writes 500 into channel 3 of every token
        model.blocks[0].mlp.down.bias[3] = 500.0
    after = outlier_stats(model, x, sites="residual")
    assert after.massive and {m.channel for m in after.massive} == {3}
    assert after.massive[0].name == "residual.1" and abs(after.massive[0].value) > 400
    assert after.max_inf_norm > 100 * before.max_inf_norm / 10
    assert after.avg_kurtosis > 5 * before.avg_kurtosis
    with pytest.raises(ValueError, match="sites"):
        outlier_stats(model, x, sites="weights")


def test_token_kurtosis_mean_and_max_by_hand():
    model = small_model()
    x = tokens()
    report = outlier_stats(model, x, sites="residual")
    states, _ = model.eval().trunk(x)
    h = states[1].double()
    c = h - h.mean(-1, keepdim=True)
    per_token = c.pow(4).mean(-1) / c.pow(2).mean(-1).pow(2)  # (batch, tokens)
    site = report.sites[0]
    assert site.token_kurtosis == pytest.approx(per_token.mean(1).mean().item())
    assert site.max_token_kurtosis == pytest.approx(per_token.max().item())
    assert site.max_token_kurtosis > site.token_kurtosis
    assert report.max_token_kurtosis == max(s.max_token_kurtosis for s in report.sites)


def test_nan_model_is_reported_non_finite_in_strict_json():
    import json

    model = small_model()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    report = outlier_stats(model, tokens())
    assert len(report.nonfinite) == len(report.sites) > 0
    assert report.sites[0].finite() is False
    d = report.to_dict()
    json.dumps(d, allow_nan=False)  # no bare NaN
    assert d["max_inf_norm"] is None and d["sites"][0]["kurtosis"] is None
