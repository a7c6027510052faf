"""The swap-kl claim: matrices and orders, the placebo orders, the primary's sign."""

from __future__ import annotations

from normlab.claims import get_claim

CLAIM = get_claim("swap-kl")


def test_smoke_run(smoke_measurement):
    m = smoke_measurement("swap-kl")
    n = CLAIM.config("smoke")["n_layers"]
    assert len(m["swap"]["replacement"]) == n
    for order in (m["swap"]["order_replacement"], m["swap"]["order_interchange"]):
        assert all(abs(a - b) > 1 for a in order for b in order if a != b)
    assert -1 <= m["table"]["protocols"]["spearman"] <= 1
    assert 0 <= m["table"]["resampled"]["disagreement"] <= 2
    assert m["curves"]["interchange"]["loss"][0] == m["curves"]["replacement"]["loss"][0]
    assert len(m["curves"]["random"]) == CLAIM.config("smoke")["random_orders"]
    assert CLAIM.config("quick")["seeds"] >= 5


def _m(rho: float, self_rho: float = 0.99, inter: float = 0.1, bpb: float = 3.0) -> dict:
    costs = (("interchange", inter), ("replacement", 0.2), ("random", 0.3))
    rows = {p: {"removal_cost": c} for p, c in costs}
    rows["protocols"] = {"spearman": rho, "disagreement": 1 - rho}
    rows["resampled"] = {"disagreement": 1 - self_rho}
    return {"table": {**rows, "dense": {"test_bpb": bpb}}}


def _primary(measurements: list) -> str:
    from normlab.claims.rule import judge_claim

    return judge_claim(CLAIM, measurements).effects[0].verdict


def test_primary_sign_and_the_controls_can_fail():
    assert CLAIM.primary.fn(_m(0.9)) > 0 > CLAIM.primary.fn(_m(0.995))
    rhos = [0.95, 0.94, 0.96, 0.93, 0.95]
    assert _primary([_m(r) for r in rhos]) == "supported"
    # protocols agree more closely than one protocol with itself on other text
    assert (
        _primary([_m(r, r - 0.02 + 0.001 * (-1) ** i) for i, r in enumerate(rhos)])
        == "contradicted"
    )
    # a probe that does not reproduce on other text: untestable
    assert _primary([_m(r, 0.3) for r in rhos]) == "untestable"
    # an untrained model: untestable
    assert _primary([_m(r, bpb=5.0) for r in rhos]) == "untestable"
    inter = CLAIM.secondary[0]
    assert inter.fn(_m(0.9, inter=0.1)) < 0 < inter.fn(_m(0.9, inter=0.3))


def test_shares_curse_of_depths_dense_trials():
    """Same architecture, training and lr grid as curse-of-depth's dense arm at every scale,
    so the model cache trains each dense trial once for both claims."""
    from normlab.claims.catalogue._depth_models import gpt_config, train_config
    from normlab.claims.protocol import searches

    depth = get_claim("curse-of-depth")
    for scale in ("smoke", "quick", "full"):
        mine, theirs = CLAIM.config(scale), depth.config(scale)
        assert searches(mine)["dense"] == searches(theirs)["dense"]
        assert gpt_config(mine) == gpt_config(theirs)
        for lr in searches(mine)["dense"].space["lr"]:
            assert train_config(mine, lr=lr) == train_config(theirs, lr=lr)
