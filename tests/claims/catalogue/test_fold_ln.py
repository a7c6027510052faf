"""The fold-ln claim: the kernel swap through replace_norms, the signs, the controls."""

from __future__ import annotations

import pytest
import torch

from normlab.claims import get_claim
from normlab.claims.rule import judge_claim
from normlab.layers.norms import RMSNorm
from normlab.surgery import replace_norms

CLAIM = get_claim("fold-ln")


def test_smoke_table(smoke_measurement):
    table = smoke_measurement("fold-ln")["table"]
    assert table["fold"]["max_abs_change"] <= 1e-5
    assert table["fold"]["folded"] == table["fold"]["layernorms"]
    for name in ("layernorm", "folded-normlab", "layernorm-torch", "folded-torch", "no-norm"):
        assert 0 < table[name]["forward_ms_min"] <= table[name]["forward_ms_median"]
    for key in ("speedup_normlab", "speedup_torch"):
        assert table[key]["q25"] <= table[key]["median"] <= table[key]["q75"]
    assert {"gpt2", "bert", "tinygpt-post"} <= set(CLAIM.config("quick")["archs"])
    assert CLAIM.config("quick")["time_d_model"] >= 512
    assert table["machine"]["tasks_waiting"] >= 0 and table["machine"]["cores"] >= 1
    widths = smoke_measurement("fold-ln")["curves"]["widths"]
    assert set(widths) == {str(w) for w in CLAIM.config("smoke")["time_widths"]}


def test_replace_norms_sets_the_backend_and_keeps_the_numbers():
    torch.manual_seed(0)
    model = torch.nn.Sequential(RMSNorm(8, eps=1e-6), torch.nn.Linear(8, 8), RMSNorm(8))
    with torch.no_grad():
        model[0].weight.uniform_(0.5, 1.5)
    x = torch.randn(4, 8)
    before = model(x)
    assert len(replace_norms(model, "rmsnorm", backend="torch")) == 2
    assert model[0].backend == model[2].backend == "torch" and model[0].eps == 1e-6
    torch.testing.assert_close(model(x), before)


def test_primary_is_negative_when_the_folded_model_is_faster():
    def m(ln_ms: float, folded_ms: float) -> dict:
        return {
            "table": {
                "layernorm": {"forward_ms_median": ln_ms},
                "folded-normlab": {"forward_ms_median": folded_ms},
            }
        }

    assert CLAIM.primary.fn(m(10.0, 9.0)) < 0 < CLAIM.primary.fn(m(9.0, 10.0))
    assert CLAIM.primary.fn(m(10.2, 10.0)) == pytest.approx(-CLAIM.primary.margin.value)


def test_figure_bars_span_the_quartiles_of_a_slower_fold():
    """The bars are the quartiles in percent, also when the folded model was slower (a
    negative median): the bars once mixed percent with fractions and broke there."""
    import matplotlib

    matplotlib.use("Agg")
    speed = {"median": -0.008, "q25": -0.076, "q75": 0.021}
    table = {"speedup_torch": speed, "speedup_normlab": speed, "norm_share": {"normlab": 0.04},
             "machine": {"quiet": 1.0}}  # fmt: skip
    fig = get_claim("fold-ln").figure([{"table": table}])
    bars = fig.axes[0].containers[0]
    low, high = (float(v) for v in bars.lines[2][0].get_segments()[0][:, 1])
    assert low == pytest.approx(-7.6) and high == pytest.approx(2.1)


def _measured(folded_ms: float, waiting: float, share: float = 0.1) -> dict:
    rows = {"layernorm": 10.0, "folded-normlab": folded_ms}
    rows |= {"layernorm-torch": 10.0, "folded-torch": folded_ms}
    table = {name: {"forward_ms_median": ms} for name, ms in rows.items()}
    table["norm_share"] = {"normlab": share}
    table["machine"] = {"tasks_waiting": waiting, "quiet": float(waiting <= 0.5)}
    table["fold"] = {"max_abs_change": 0.0}
    return {"table": table}


def test_a_loaded_machine_makes_the_timing_untestable():
    quiet = [_measured(9.0 + 0.01 * i, 0.0) for i in range(7)]
    assert judge_claim(CLAIM, quiet).primary.verdict == "supported"
    loaded = [_measured(9.0 + 0.01 * i, float(i % 2)) for i in range(7)]  # 1 waited in 3
    verdict = judge_claim(CLAIM, loaded)
    assert not next(p for p in verdict.premises if p.name == "machine_quiet").held
    assert verdict.primary.verdict == "untestable"
    assert {e.verdict for e in verdict.effects} == {"untestable"}


def test_a_small_norm_share_makes_the_timing_untestable():
    ms = [_measured(9.0 + 0.01 * i, 0.5, share=0.001 + 0.001 * i) for i in range(7)]
    verdict = judge_claim(CLAIM, ms)
    assert not next(p for p in verdict.premises if p.name == "norms_share_visible").held
    assert verdict.primary.verdict == "untestable"


def test_an_inexact_timed_fold_and_failed_checks(monkeypatch):
    from normlab.claims.catalogue import fold_ln

    ms = [_measured(9.0 + 0.01 * i, 0.5) for i in range(7)]
    for i, m in enumerate(ms):
        m["table"]["fold"]["max_abs_change"] = 1e-3 + 1e-5 * i
    verdict = judge_claim(CLAIM, ms)
    assert not next(p for p in verdict.premises if p.name == "timed_fold_exact").held
    rows = {"gpt2": {"layernorms": 5, "foldable": 4, "match": 0.0, "max_abs_change": 1e-3}}
    monkeypatch.setattr(fold_ln, "fold_zoo", lambda archs: rows)
    checks = {c.name: c for c in CLAIM.checks}
    assert not checks["detection_matches_rule"].fn({"archs": ["gpt2"]}).passed
    assert not checks["fold_exact"].fn({"archs": ["gpt2"]}).passed
