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
    assert m["curves"]["interchange"]["loss"][0] == m["curves"]["replacement"]["loss"][0]
    assert len(m["curves"]["random"]) == CLAIM.config("smoke")["random_orders"]
    assert CLAIM.config("quick")["seeds"] >= 5


def test_primary_sign():
    def m(inter: float) -> dict:
        return {"table": {"interchange": {"removal_cost": inter},
                          "replacement": {"removal_cost": 0.2}}}  # fmt: skip

    assert CLAIM.primary.fn(m(0.1)) < 0 < CLAIM.primary.fn(m(0.3))


def test_agreeing_protocols_make_the_primary_untestable():
    from normlab.claims.rule import judge_claim

    def m(inter: float, rho: float) -> dict:
        costs = (("interchange", inter), ("replacement", 0.2), ("random", 0.3))
        rows = {p: {"removal_cost": c} for p, c in costs}
        return {"table": {**rows, "protocols": {"spearman": rho}, "dense": {"test_bpb": 3.0}}}

    safer = [0.10, 0.11, 0.09, 0.12, 0.10]
    assert judge_claim(CLAIM, [m(c, 0.5) for c in safer]).verdict == "supported"
    assert judge_claim(CLAIM, [m(c, 0.99) for c in safer]).verdict == "untestable"


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
