"""MACRO: a momentum optimizer that keeps weight matrices on a sphere or oblique manifold.

For each weight matrix ``W`` (a parameter of two or more dimensions, flattened to
``(rows, -1)``) with gradient ``G``, one step is::

    M <- mu M + G                                  (momentum)
    D <- P_W(G + mu M) if nesterov else P_W(M)      (tangent projection)
    O <- P_W(msign(D))                             (Newton-Schulz orthogonalisation)
    W <- R(W - lr * O)                             (retraction)

Manifolds: ``"oblique"`` (every row of norm ``radius``): ``P_W(X) = X - diag(<w_i, x_i>)
W / radius^2``, ``R`` renormalises each row; ``"sphere"`` (Frobenius norm ``radius``):
``P_W(X) = X - <W, X> W / radius^2``, ``R`` rescales the whole matrix. For the sphere the
step is scaled by ``radius / sqrt(min(rows, cols))`` so that ``lr`` is roughly an angle, as
it is for unit rows on the oblique manifold (each row of ``msign`` has norm <= 1).

``msign(X) = U V^T`` for ``X = U S V^T``, computed by Muon's quintic Newton-Schulz iteration
``X <- a X + (b A + c A^2) X`` with ``A = X X^T`` and ``(a, b, c) = (3.4445, -4.7750,
2.0315)`` after ``X <- X / ||X||_F``; five steps bring the singular values into roughly
[0.7, 1.2] (not exactly 1, by design of the coefficients). ``msign`` does not depend on the
scale of ``X``, and ``X`` is divided by its largest entry first, so gradients of 1e19 or
1e-30 get the same direction as gradients of 1 (no overflow of ``||X||_F``).

Bad gradients: a parameter whose gradient holds NaN or inf, or whose momentum direction
overflows, is not stepped (weight and momentum unchanged) and a ``RuntimeWarning`` names it;
the other parameters are stepped as usual, so one bad entry never turns a matrix NaN.
Empty parameters are left alone; non-contiguous ones are stepped through a contiguous copy.

Which parameters: MACRO takes only matrices. As with Muon, put hidden weight matrices in
MACRO and give embeddings, the output head, biases, gains and other scalars to AdamW::

    hidden = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    rest = [p for p in model.parameters() if all(p is not q for q in hidden)]
    opts = [MACRO(hidden, lr=0.05), torch.optim.AdamW(rest, lr=1e-3)]

Paper: {macro}.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch

from normlab._registry import Method, register
from normlab.optim._closure import closure_loss
from normlab.papers import paper

__all__ = ["MACRO", "MANIFOLDS", "MUON_COEFFICIENTS", "msign", "project_", "retract_", "tangent"]

#: Manifolds MACRO keeps weights on.
MANIFOLDS: tuple[str, ...] = ("sphere", "oblique")
#: Muon's quintic Newton-Schulz coefficients (a, b, c).
MUON_COEFFICIENTS: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)

__doc__ = __doc__.format(macro=paper("macro"))


def msign(
    x: torch.Tensor,
    *,
    steps: int = 5,
    coefficients: tuple[float, float, float] = MUON_COEFFICIENTS,
    eps: float = 1e-7,
) -> torch.Tensor:
    """The matrix sign ``U V^T`` of a matrix (or batch of matrices), by Newton-Schulz.

    ``X <- X / (||X||_F + eps)``, then ``steps`` times ``X <- a X + (b A + c A^2) X`` with
    ``A = X X^T`` (on the transpose when there are more rows than columns). Muon's
    coefficients give singular values near, not at, 1; ``(1.5, -0.5, 0.0)`` is the classic
    cubic iteration, which converges to ``U V^T`` exactly with enough steps.
    """
    if x.dim() < 2:
        raise ValueError(f"msign needs a matrix, got shape {tuple(x.shape)}.")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}.")
    a, b, c = coefficients
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    y = x.to(dtype)
    wide = y.shape[-2] <= y.shape[-1]
    if not wide:
        y = y.mT
    amax = y.abs().amax(dim=(-2, -1), keepdim=True)
    y = y / torch.where(amax > 0, amax, 1)  # scale-free: no overflow in the Frobenius norm
    y = y / (torch.linalg.matrix_norm(y, keepdim=True) + eps)
    for _ in range(steps):
        gram = y @ y.mT
        y = a * y + (b * gram + c * gram @ gram) @ y
    return (y if wide else y.mT).to(x.dtype)


def _dot(w: torch.Tensor, x: torch.Tensor, manifold: str) -> torch.Tensor:
    if manifold == "oblique":
        return (w * x).sum(dim=1, keepdim=True)
    return (w * x).sum()


def tangent(
    w: torch.Tensor, x: torch.Tensor, *, manifold: str, radius: float = 1.0
) -> torch.Tensor:
    """Project ``x`` onto the tangent space at ``w`` (both ``(rows, cols)``)."""
    return x - _dot(w, x, manifold) * w / radius**2


@torch.no_grad()
def retract_(w: torch.Tensor, *, manifold: str, radius: float = 1.0) -> torch.Tensor:
    """Put ``w`` back on the manifold in place: unit rows (oblique) or unit matrix (sphere),
    times ``radius``."""
    if manifold == "oblique":
        w.mul_(radius / w.norm(dim=1, keepdim=True).clamp_min(1e-30))
    else:
        w.mul_(radius / w.norm().clamp_min(1e-30))
    return w


def _matrix(p: torch.Tensor) -> torch.Tensor:
    """``p`` as ``(rows, -1)``: a view when its layout allows, else a contiguous copy."""
    return p.reshape(p.shape[0], math.prod(p.shape[1:]))


def _write_back(p: torch.Tensor, w: torch.Tensor) -> None:
    if w.data_ptr() != p.data_ptr():  # _matrix copied a non-contiguous parameter
        p.copy_(w.view(p.shape))


@torch.no_grad()
def project_(
    params: Iterable[torch.Tensor], *, manifold: str = "oblique", radius: float = 1.0
) -> None:
    """Retract every given non-empty weight matrix onto the manifold (e.g. before training)."""
    for p in params:
        if p.numel():
            w = _matrix(p)
            _write_back(p, retract_(w, manifold=manifold, radius=radius))


def _on_manifold(p: torch.Tensor, group: dict[str, Any], tol: float = 1e-6) -> bool:
    if not p.numel():
        return True
    w = _matrix(p.detach())
    norms = w.norm(dim=1) if group["manifold"] == "oblique" else w.norm().reshape(1)
    return bool(((norms - group["radius"]).abs() <= tol * group["radius"]).all())


class MACRO(torch.optim.Optimizer):
    """Riemannian momentum with msign directions on the sphere or oblique manifold.

    See the module docstring for the update. Weights off the manifold (by more than 1e-6
    relative) are retracted onto it when the optimizer is built, so training starts on it;
    weights already on it are left bit for bit (so a resumed run is not perturbed).

    Args:
        params: weight matrices (``dim() >= 2``; conv kernels are flattened per output
            channel) or param groups.
        lr: step size (roughly the rotation angle per step).
        momentum: momentum coefficient ``mu``.
        nesterov: use the Nesterov form ``G + mu M`` (Muon's default).
        manifold: ``"sphere"`` or ``"oblique"``.
        radius: norm of each row (oblique) or of the matrix (sphere).
        ns_steps: Newton-Schulz steps.

    Paper: {macro}.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        *,
        lr: float,
        momentum: float = 0.95,
        nesterov: bool = True,
        manifold: str = "sphere",
        radius: float = 1.0,
        ns_steps: int = 5,
    ) -> None:
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}.")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}.")
        if manifold not in MANIFOLDS:
            raise ValueError(f"manifold must be one of {MANIFOLDS}, got {manifold!r}.")
        if not radius > 0:
            raise ValueError(f"radius must be > 0, got {radius}.")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "nesterov": nesterov,
            "manifold": manifold,
            "radius": radius,
            "ns_steps": ns_steps,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() < 2:
                    raise ValueError(
                        f"MACRO takes weight matrices only; got a parameter of shape "
                        f"{tuple(p.shape)}. Give biases, gains and scalars to AdamW in a second "
                        "optimizer (see the module docstring)."
                    )
            if group["manifold"] not in MANIFOLDS:
                raise ValueError(
                    f"manifold must be one of {MANIFOLDS}, got {group['manifold']!r}."
                )
            off = [p for p in group["params"] if not _on_manifold(p, group)]
            project_(off, manifold=group["manifold"], radius=group["radius"])

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One MACRO step on every parameter with a gradient."""
        loss = closure_loss(closure)
        for i, group in enumerate(self.param_groups):
            manifold, radius, mu = group["manifold"], group["radius"], group["momentum"]
            for j, p in enumerate(group["params"]):
                if p.grad is None or not p.numel():
                    continue
                where = f"param_groups[{i}]['params'][{j}] (shape {tuple(p.shape)})"
                w = _matrix(p)
                g = p.grad.reshape(w.shape).to(w.dtype)
                bad = int((~torch.isfinite(g)).sum())
                if bad:
                    _skip(f"its gradient holds {bad} NaN/inf entries", where)
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(w)
                buf = state["momentum_buffer"].mul(mu).add_(g)
                d = g + mu * buf if group["nesterov"] else buf
                d = tangent(w, d, manifold=manifold, radius=radius)
                if not bool(torch.isfinite(d).all()):
                    _skip(f"its momentum direction overflows {w.dtype}", where)
                    continue
                state["momentum_buffer"] = buf
                o = tangent(w, msign(d, steps=group["ns_steps"]), manifold=manifold, radius=radius)
                scale = radius / math.sqrt(min(w.shape)) if manifold == "sphere" else radius
                w.add_(o, alpha=-group["lr"] * scale)
                _write_back(p, retract_(w, manifold=manifold, radius=radius))
        return loss


def _skip(why: str, where: str) -> None:
    warnings.warn(
        f"MACRO skipped the step of {where}: {why}; its weight and momentum are unchanged. "
        "Find the bad loss or gradient (torch.autograd.set_detect_anomaly), or scale the "
        "loss down.",
        RuntimeWarning,
        stacklevel=3,
    )


MACRO.__doc__ = (MACRO.__doc__ or "").format(macro=paper("macro"))

register(
    Method(
        "macro",
        "optim",
        MACRO,
        paper("macro"),
        "momentum + tangent projection + Newton-Schulz msign + retraction on sphere/oblique",
        layout="other",
    )
)
