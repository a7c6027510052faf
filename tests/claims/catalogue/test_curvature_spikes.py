"""The curvature-spikes claim: smoke run, check, statistics on planted series, effect signs."""

from __future__ import annotations

import math

import numpy as np

from normlab.claims.catalogue.curvature_spikes import CLAIM, _coincidence


def test_smoke_run_checks_and_effect_signs(smoke_measurement):
    cfg = CLAIM.config("smoke")
    m = smoke_measurement(CLAIM.id)
    for e in CLAIM.effects:
        assert math.isfinite(e.fn(m)), e.name
    for c in CLAIM.checks:
        assert c.fn(cfg).passed, c.name
    assert CLAIM.figure([m]) is not None
    assert len(m["curves"]["loss"]) == len(m["curves"]["curvature"]) == cfg["steps"]
    margin = CLAIM.primary.margin.value
    assert m["table"]["observed"]["rho"] == m["table"]["modular"]["rho"]
    assert m["table"]["placebo"]["rho"] == m["table"]["modular"]["rho_placebo"]

    def table(rho: float, spiked: float) -> dict:
        rows = {"observed": {"rho": rho}, "placebo": {"rho": 0.0}}
        return {"table": {**rows, "modular": {"spiked": spiked}}}

    assert CLAIM.primary.fn(table(0.3, 1.0)) > margin and CLAIM.primary.fn(table(-0.2, 1)) < 0
    premise = CLAIM.premises[0]
    assert premise.fn(table(0.3, 1.0)) > premise.margin.value > premise.fn(table(0.3, 0.0))


def test_coincidence_detects_aligned_peaks_and_not_misaligned_ones():
    rng = np.random.default_rng(0)
    t = 400
    loss = np.exp(-np.linspace(0, 8, t)) * (1 + 0.01 * rng.random(t))
    curv = 10 + 0.01 * rng.random(t)
    cfg = {"window": 20, "tau": 3, "burn": 20, "shifts": 100, "spike_abs": 0.1}
    for s in (120, 260):
        loss[s : s + 5] = 1.0
    aligned = curv.copy()
    aligned[[119, 259]] = 20.0
    apart = curv.copy()
    apart[[60, 330]] = 20.0
    good, bad = _coincidence(loss, aligned, cfg), _coincidence(loss, apart, cfg)
    assert good["spikes"] == 2 and bad["spikes"] == 2
    assert good["rho"] - good["rho_placebo"] > CLAIM.primary.margin.value
    assert bad["rho"] - bad["rho_placebo"] < CLAIM.primary.margin.value
