"""QuadNorm's moments of a smooth non-periodic field converge at O(h^2); uniform at O(h).

Field: ``f(t) = a t + b t^2 + c sin(omega t + phi)`` on [0, 1], sampled on endpoint-inclusive
grids of N = 17..257 points. The moment errors have the asymptotic expansions
``E_trap = C2 h^2 + C4 h^4 + ...`` (Euler-Maclaurin) and ``E_unif = C1 / N + E_trap / N``,
so the fitted log-log slopes are 2 and 1 once N is in the asymptotic range. Hypothesis
draws fields and keeps those whose leading coefficients are not accidentally near zero
and whose higher-order terms are small at N = 17 (checked from the closed forms).
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from normlab import functional as NF

SIZES = (17, 33, 65, 129, 257)


def _field(t: np.ndarray, a: float, b: float, c: float, w: float, p: float) -> np.ndarray:
    return a * t + b * t**2 + c * np.sin(w * t + p)


def _derivatives(t, a, b, c, w, p):
    d1 = a + 2 * b * t + c * w * np.cos(w * t + p)
    d2 = 2 * b - c * w**2 * np.sin(w * t + p)
    d3 = -c * w**3 * np.cos(w * t + p)
    return d1, d2, d3


def _slope(rule: str, exact: tuple[float, float], params) -> tuple[float, float]:
    errs = []
    for n in SIZES:
        t = np.linspace(0.0, 1.0, n)
        x = torch.from_numpy(_field(t, *params))[None, None]
        mu, var = NF.quad_moments(x, rule)  # type: ignore[arg-type]
        errs.append((abs(float(mu) - exact[0]), abs(float(var) - exact[1])))
    h = np.log(1.0 / (np.array(SIZES) - 1.0))
    e = np.log(np.array(errs))
    return float(np.polyfit(h, e[:, 0], 1)[0]), float(np.polyfit(h, e[:, 1], 1)[0])


@settings(max_examples=25, deadline=None)
@given(
    a=st.floats(-2, 2),
    b=st.floats(-2, 2),
    c=st.floats(0.3, 2),
    w=st.floats(0.5, 5),
    p=st.floats(0, 2 * np.pi),
)
def test_moment_errors_converge_at_second_order_for_trapezoid_first_for_uniform(a, b, c, w, p):
    params = (a, b, c, w, p)
    tf = np.linspace(0.0, 1.0, 8193)
    wf = NF.quadrature_weights_1d(8193, "simpson").numpy()
    f = _field(tf, *params)
    mu = float(wf @ f)
    var = float(wf @ (f - mu) ** 2)
    g = (f - mu) ** 2
    d1, d2, d3 = _derivatives(tf, *params)
    g1 = 2 * (f - mu) * d1
    g3 = 2 * ((f - mu) * d3 + 3 * d1 * d2)
    scale = max(float(np.abs(f - mu).max()), 1e-3)
    h0 = 1 / (SIZES[0] - 1)
    for val, fn, d_1, d_3, s in ((mu, f, d1, d3, scale), (var, g, g1, g3, scale**2)):
        c1 = (fn[0] + fn[-1]) / 2 - val  # uniform: E ~ c1 / N
        c2 = (d_1[-1] - d_1[0]) / 12  # trapezoid: E ~ c2 h^2
        c4 = (d_3[-1] - d_3[0]) / 720  # next trapezoid term: - c4 h^4
        assume(abs(c1) > 0.05 * s and abs(c2) > 0.02 * s)
        assume(abs(c4) * h0**2 < 0.2 * abs(c2) and abs(c2) * h0 < 0.2 * abs(c1))
    trap_mu, trap_var = _slope("trapezoid", (mu, var), params)
    unif_mu, unif_var = _slope("uniform", (mu, var), params)
    assert 1.7 < trap_mu < 2.3 and 1.7 < trap_var < 2.3
    assert 0.7 < unif_mu < 1.3 and 0.7 < unif_var < 1.3
