"""The quadnorm claim at smoke scale, and the Darcy data it is built on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from normlab.claims import get_claim
from normlab.data.darcy import (
    darcy_dataset,
    gaussian_random_field,
    solve_darcy,
    subsample,
    threshold_coefficient,
)
from normlab.models.operator import operator_net

CLAIM = get_claim("quadnorm")


def _series_solution(n: int, terms: int = 199) -> np.ndarray:
    """-Laplace(u) = 1 on the unit square, u = 0 on the boundary, by its sine series:
    u = sum_{m, k odd} 16 / (pi^4 m k (m^2 + k^2)) sin(m pi x) sin(k pi y)."""
    x = np.linspace(0.0, 1.0, n)
    m = np.arange(1, terms + 1, 2)
    s = np.sin(np.pi * np.outer(x, m))
    c = 16 / (np.pi**4 * m[:, None] * m[None, :] * (m[:, None] ** 2 + m[None, :] ** 2))
    return s @ c @ s.T


def test_constant_coefficient_matches_the_series_solution_at_second_order():
    errors = [
        np.abs(solve_darcy(np.ones((n, n))) - _series_solution(n)).max() for n in (17, 33, 65)
    ]
    assert errors[1] < 1e-4
    assert 3.5 < errors[0] / errors[1] < 4.5 and 3.5 < errors[1] / errors[2] < 4.5
    assert solve_darcy(np.ones((65, 65)))[32, 32] == pytest.approx(0.07367, abs=2e-5)


def test_variable_coefficient_manufactured_solution_converges_at_second_order():
    def problem(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = np.linspace(0.0, 1.0, n)
        x, y = np.meshgrid(t, t, indexing="ij")
        a = 1 + x + y**2
        u = np.sin(np.pi * x) * np.sin(np.pi * y)
        f = (
            2 * np.pi**2 * a * u
            - np.pi * np.cos(np.pi * x) * np.sin(np.pi * y)
            - 2 * y * np.pi * np.sin(np.pi * x) * np.cos(np.pi * y)
        )
        return a, f, u

    errors = []
    for n in (17, 33, 65):
        a, f, u = problem(n)
        errors.append(np.abs(solve_darcy(a, f) - u).max())
    assert errors[2] < 1e-3
    assert 3.5 < errors[0] / errors[1] < 4.5 and 3.5 < errors[1] / errors[2] < 4.5


def test_symmetric_coefficient_gives_symmetric_solution_and_zero_boundary():
    field = gaussian_random_field(1, 33, seed=4)[0]
    a = threshold_coefficient(field + field.T)
    u = solve_darcy(a)
    np.testing.assert_allclose(u, u.T, atol=1e-12)
    assert np.all(u[0] == 0) and np.all(u[:, -1] == 0) and (u[1:-1, 1:-1] > 0).all()


def test_fields_and_data_are_resolution_consistent():
    fine = gaussian_random_field(3, 129, seed=7)
    np.testing.assert_allclose(
        subsample(fine, 33), gaussian_random_field(3, 33, seed=7), atol=1e-12
    )
    data = darcy_dataset(2, 33, seed=1, modes=8)
    a17, u17 = data.at(17)
    assert np.array_equal(a17, data.a[:, ::2, ::2]) and np.array_equal(u17, data.u[:, ::2, ::2])
    assert set(np.unique(data.a)) <= {3.0, 12.0}
    # a coarse solve of the same coefficient agrees with the subsampled fine one to O(h)
    coarse = solve_darcy(a17[0])
    assert np.abs(coarse - u17[0]).max() < 0.1 * np.abs(u17[0]).max()


def test_clear_errors():
    with pytest.raises(ValueError, match="multiple"):
        subsample(np.zeros((2, 33, 33)), 20)
    with pytest.raises(ValueError, match="square"):
        solve_darcy(np.ones((5, 6)))
    with pytest.raises(ValueError, match="positive"):
        solve_darcy(-np.ones((5, 5)))
    with pytest.raises(ValueError, match="channels-first norm"):
        operator_net("rmsnorm")


def test_operator_is_resolution_agnostic():
    torch.manual_seed(0)
    net = operator_net("quadnorm", width=8, modes=4, layers=2)
    for n in (9, 17, 33):
        assert net(torch.randn(2, 1, n, n)).shape == (2, 1, n, n)


def test_only_the_uniform_norm_makes_the_operator_resolution_dependent_at_first_order():
    def smooth_input(n: int) -> torch.Tensor:
        t = torch.linspace(0.0, 1.0, n, dtype=torch.float64)
        return (torch.exp(t)[:, None] * torch.cos(2 * t + 0.5)[None, :])[None, None]

    gaps = {}
    for rule in ("uniform", "trapezoid"):
        torch.manual_seed(0)
        net = operator_net("quadnorm", width=8, modes=6, layers=3, norm_kwargs={"rule": rule})
        net = net.double()
        with torch.no_grad():
            coarse, fine = net(smooth_input(33)), net(smooth_input(65))
        gaps[rule] = float((coarse - subsample(fine, 33)).abs().max())
    assert gaps["trapezoid"] < gaps["uniform"] / 3


def test_smoke_run_has_every_norm_and_resolution(smoke_measurement):
    m = smoke_measurement("quadnorm")
    config = CLAIM.config("smoke")
    for method in config["search"]["arms"]:
        row = m["table"][method]
        assert all(row[f"rel_err_{r}"] > 0 for r in config["test_res"]), method
    for rule in ("uniform", "trapezoid", "simpson"):
        assert len(m["curves"]["moments"][rule]["mismatch"]) == len(config["moment_sizes"])
    assert set(m["tuning"]) == set(m["curves"]["operator"]) == set(config["search"]["arms"])
    assert all(row["val_err"] > 0 and "lr" in row for row in m["table"].values())


def _table(quad, others):
    rows = {
        "quadnorm": {"rel_err_33": quad[0], "rel_err_65": quad[1], "growth": quad[1] / quad[0] - 1}
    }
    for name in ("instancenorm", "layernorm"):
        rows[name] = {
            "rel_err_33": others[0],
            "rel_err_65": others[1],
            "growth": others[1] / others[0] - 1,
        }
    return {"table": rows}


def test_effects_take_both_signs_on_constructed_tables():
    good, bad = _table((0.05, 0.06), (0.08, 0.12)), _table((0.1, 0.2), (0.08, 0.1))
    for effect in (e for top in CLAIM.effects for e in top.parts or (top,)):
        assert effect.fn(good) < 0 < effect.fn(bad), effect.name


def _seeds(growth: float, late_share: float = 0.0, n: int = 5):
    """QuadNorm 10% better than both baselines at 129^2; InstanceNorm's error grows by
    ``growth`` from 33^2 to 129^2; every arm's late share ``late_share``."""
    out = []
    for i in range(n):
        base = 0.1 + 0.001 * i
        rows = {name: {f"rel_err_{r}": base for r in (33, 65, 129)} for name in _BASELINES}
        rows["instancenorm"]["rel_err_129"] = base * (1 + growth)
        rows["quadnorm"] = {f"rel_err_{r}": 0.85 * base for r in (33, 65, 129)}
        rows = {
            k: {**v, "growth": v["rel_err_129"] / v["rel_err_33"] - 1} for k, v in rows.items()
        }
        tuning = {name: {"late_share": late_share} for name in rows}
        out.append({"table": rows, "tuning": tuning})
    return out


_BASELINES = ("instancenorm", "layernorm")


def test_the_degradation_premise_can_fail_and_then_the_primary_is_untestable():
    from normlab.claims.core import CheckOutcome
    from normlab.claims.rule import judge_claim

    ok = {c.name: CheckOutcome(True, 0.0) for c in CLAIM.checks}

    assert judge_claim(CLAIM, _seeds(0.2), ok).verdict == "supported"
    verdict = judge_claim(CLAIM, _seeds(0.01), ok)  # InstanceNorm barely degrades
    premise = next(p for p in verdict.premises if p.name == "baseline_degrades_across_resolution")
    assert not premise.held and verdict.verdict == "untestable"


def test_under_trained_arms_make_the_primary_untestable():
    from normlab.claims.core import CheckOutcome
    from normlab.claims.rule import judge_claim

    ok = {c.name: CheckOutcome(True, 0.0) for c in CLAIM.checks}

    verdict = judge_claim(CLAIM, _seeds(0.2, late_share=0.3), ok)
    assert verdict.verdict == "untestable" and "under-trained" in verdict.reason
