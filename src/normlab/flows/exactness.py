"""How exact the circulant-diagonal layer's log-det and inverse are, and that it composes in
a zuko flow: the measurements behind the cdflow claim's implementation checks.

CDFlow (``paper("cdflow")``) writes ``W = D_1 C_1 ... C_{m-1} D_m`` with diagonal ``D_i`` and
circulant ``C_i`` (diagonalised by the FFT), so ``log|det W| = sum_i sum_j log|d_ij| +
sum_i sum_k log|fft(c_i)_k|`` and ``W^{-1}`` is the product of the inverted factors in reverse
order. Each function returns the largest error found (0 up to rounding when exact).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from normlab.flows.circulant import CirculantDiagonalLinear
from normlab.flows.flow import cdflow, initialize_actnorm

__all__ = ["inverse_error", "logdet_error", "zuko_composition_error"]


def logdet_error(sizes: Sequence[int] = (7, 64, 256), m: int = 3) -> float:
    """The largest ``|log|det W| - slogdet|`` over ``n`` in ``sizes`` (float64, ``m``
    factors), against both the materialised matrix's ``slogdet`` and that of the layer's
    autograd Jacobian."""
    worst = 0.0
    for n in sizes:
        layer = CirculantDiagonalLinear(n, m=m, init_std=0.3, dtype=torch.float64)
        with torch.no_grad():
            dense = torch.linalg.slogdet(layer.matrix())[1]
        jac = torch.autograd.functional.jacobian(layer, torch.randn(n, dtype=torch.float64))
        ladj = layer.log_abs_det().detach()
        errors = (dense - ladj, torch.linalg.slogdet(jac)[1] - ladj)
        worst = max(worst, *(abs(float(e)) for e in errors))
    return worst


def inverse_error(sizes: Sequence[int] = (7, 64, 256), m: int = 3, seed: int = 0) -> float:
    """The largest ``|W^{-1} W x - x|`` over ``n`` in ``sizes`` (float64, 8 random ``x``)."""
    torch.manual_seed(seed)
    worst = 0.0
    for n in sizes:
        layer = CirculantDiagonalLinear(n, m=m, init_std=0.3, dtype=torch.float64)
        x = torch.randn(8, n, dtype=torch.float64)
        with torch.no_grad():
            worst = max(worst, float((layer.inverse(layer(x)) - x).abs().max()))
    return worst


def zuko_composition_error(dim: int = 6, seed: int = 0) -> float:
    """Inside a 2-step zuko CDFlow on ``dim`` dimensions: the largest of
    ``|log_prob(x) - (log N(z) + ladj)|`` and ``|T^{-1}(T(x)) - x|`` on 32 random points
    (float32)."""
    torch.manual_seed(seed)
    flow = cdflow(dim, steps=2, mixing="circulant", hidden=(16,))
    x = torch.randn(32, dim)
    initialize_actnorm(flow, x)
    with torch.no_grad():
        dist = flow()
        z, ladj = dist.transform.call_and_ladj(x)
        manual = torch.distributions.Normal(0.0, 1.0).log_prob(z).sum(-1) + ladj
        err = float((dist.log_prob(x) - manual).abs().max())
        return max(err, float((dist.transform.inv(z) - x).abs().max()))
