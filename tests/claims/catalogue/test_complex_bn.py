"""The complex-bn claim at smoke scale and its data."""

from __future__ import annotations

import itertools
import math

import torch

from normlab.claims import get_claim
from normlab.functional import manifolds as MF
from normlab.models.spd_net import SPDNet, clutter_covariances

CLAIM = get_claim("complex-bn")


def test_smoke_run_check_and_effect_signs():
    torch.set_num_threads(1)
    cfg = CLAIM.config("smoke")
    m = CLAIM.run(cfg, 0)
    assert all(math.isfinite(e.fn(m)) for e in CLAIM.effects)
    assert all(c.fn(cfg).passed for c in CLAIM.checks)
    assert set(m["tuning"]) == set(m["table"])

    def table(bn: float, gain: float = 0.0) -> dict:
        rows = {"bn": bn, "no-bn": 0.6, "bn-dispersion": bn + gain}
        rows |= {"siegel-bn": bn + gain, "siegel-no-bn": bn}
        return {"table": {k: {"mean_acc": v, "final_acc": v} for k, v in rows.items()}}

    good, bad = table(0.9), table(0.5)
    for effect in CLAIM.secondary[1:]:
        assert effect.fn(table(0.7, 0.1)) > effect.margin.value > 0 > effect.fn(table(0.7, -0.1))
    assert CLAIM.primary.fn(good) > CLAIM.primary.margin.value
    assert CLAIM.primary.fn(bad) < 0 and CLAIM.secondary[0].fn(bad) < -0.02


def test_clutter_matrices_are_hpd_and_net_runs():
    d = clutter_covariances(
        3,
        6,
        rhos=(0.9, 0.5),
        freqs=(0.1, 0.2),
        snapshots=12,
        generator=torch.Generator().manual_seed(0),
    )
    assert d.x.shape == (6, 6, 6) and MF.is_hpd(d.x) and sorted(d.y.tolist()) == [0] * 3 + [1] * 3
    net = SPDNet(6, 3, 2)
    w = net.bimap_weight()
    assert torch.allclose(w.mH @ w, torch.eye(3, dtype=w.dtype), atol=1e-12)
    out = net(d.x)
    out.sum().backward()
    assert out.shape == (6, 2) and torch.isfinite(net.bimap_real.grad).all()


def test_siegel_clutter_lies_in_the_disk_and_its_net_trains_every_part():
    from normlab.models.spd_net import SiegelNet, siegel_clutter

    d = clutter_covariances(
        3,
        4,
        rhos=(0.9, 0.5),
        freqs=(0.1, 0.2),
        snapshots=12,
        generator=torch.Generator().manual_seed(0),
    )
    z = siegel_clutter(d)
    assert MF.in_siegel_disk(z.x) and torch.equal(z.y, d.y)
    assert float(z.x.imag.abs().max()) > 1e-3  # complex, not a real contraction
    net = SiegelNet(4, 2, dispersion=True)
    net(z.x).sum().backward()
    assert all(p.grad is not None for p in net.parameters())


def test_every_arm_is_tuned_with_the_same_grid():
    from normlab.claims.protocol import searches

    spaces = searches(CLAIM.config("quick"))
    arms = {"bn", "no-bn", "bn-dispersion", "siegel-bn", "siegel-no-bn"}
    assert set(spaces) == arms and len({s.trials for s in spaces.values()}) == 1


def test_quick_training_means_converge_without_warnings():
    """At quick's size and its top lr the batch means reach their 1e-6 tolerance within the
    default Karcher budget (10 iterations warned here, at gradient norm 1.4e-6)."""
    import warnings

    from normlab.claims.common import seed_everything
    from normlab.training.curves import accuracy_curves

    torch.set_num_threads(1)
    cfg = CLAIM.config("quick")
    gen = seed_everything(0)
    data = {k: cfg[k] for k in ("snapshots", "power")}
    data |= {"rhos": tuple(cfg["rhos"]), "freqs": tuple(cfg["freqs"]), "generator": gen}
    hpd = [clutter_covariances(k, cfg["n"], **data) for k in (cfg["train_per_class"], 30, 60)]
    torch.manual_seed(0)
    net = SPDNet(cfg["n"], cfg["m"], len(cfg["rhos"]), bn=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        curves = accuracy_curves(
            net, *hpd, lr=0.1, epochs=cfg["epochs"], batch=cfg["batch"], seed=0
        )
    assert all(math.isfinite(a) for a in curves["test"])
    assert curves["diverged"] is None and len(curves["val"]) == cfg["epochs"]


def _seeds(no_bn: float, n: int = 6) -> list[dict]:
    out = []
    for k in range(n):
        rows = {"bn": 0.85 + 0.01 * k, "no-bn": no_bn + 0.005 * k, "bn-dispersion": 0.86}
        rows |= {"siegel-bn": 0.85 + 0.01 * k, "siegel-no-bn": 0.8}
        out.append({"table": {a: {"mean_acc": v, "final_acc": v} for a, v in rows.items()}})
    return out


def test_the_premises_and_an_under_trained_arm_gate_the_primary():
    from normlab.claims.core import CheckOutcome
    from normlab.claims.rule import judge_claim

    passed = {c.name: CheckOutcome(True, 0.0) for c in CLAIM.checks}
    assert judge_claim(CLAIM, _seeds(0.7), passed).verdict == "supported"
    for no_bn, name in ((0.97, "baseline_has_room"), (0.26, "baseline_learns")):
        verdict = judge_claim(CLAIM, _seeds(no_bn), passed)
        premise = next(p for p in verdict.premises if p.name == name)
        assert not premise.held and verdict.verdict == "untestable", name
    slow = _seeds(0.7)
    for m in slow:
        m["tuning"] = {"no-bn": {"late_share": 0.25}}
    verdict = judge_claim(CLAIM, slow, passed)
    assert not next(p for p in verdict.premises if p.name == "no-bn_converged").held
    assert verdict.verdict == "untestable" and "under-trained" in verdict.effects[0].reason


def test_accuracy_curves_give_the_training_losses():
    from normlab.models.spd_net import clutter_covariances
    from normlab.training.curves import accuracy_curves

    gen = torch.Generator().manual_seed(0)
    data = [
        clutter_covariances(6, 4, rhos=(0.9, 0.5), freqs=(0.1, 0.2), snapshots=12, generator=gen)
        for _ in range(3)
    ]
    torch.manual_seed(0)
    out = accuracy_curves(SPDNet(4, 2, 2), *data, lr=3e-2, epochs=2, batch=6, seed=0)
    assert len(out["losses"]) == 4 and len(out["val"]) == 2  # 12 matrices, batches of 6
    assert all(math.isfinite(v) for v in out["losses"])


def test_convergence_is_read_from_the_best_so_far_validation_error_per_epoch(monkeypatch):
    """The curve handed to the engine's convergence premise: one point per epoch, the best
    validation error so far (never rising, in [0, 1]), not the per-step minibatch loss."""
    from normlab.claims.catalogue import complex_bn

    torch.set_num_threads(1)
    curves = []
    original = complex_bn.run_arms

    def recording(config, seed, train, test, **kw):
        def train_and_keep(arm, params, training_seed):
            trained = train(arm, params, training_seed)
            curves.append(trained.curve)
            return trained

        return original(config, seed, train_and_keep, test, **kw)

    monkeypatch.setattr(complex_bn, "run_arms", recording)
    cfg = {**CLAIM.config("smoke"), "epochs": 5}
    CLAIM.run(cfg, 0)
    assert curves and all(len(c) == 5 for c in curves)
    for c in curves:
        assert all(0.0 <= v <= 1.0 for v in c)
        assert all(b <= a for a, b in itertools.pairwise(c))
