"""Matrix functions on Hermitian positive-definite (HPD) matrices and on the Siegel disk.

Pure functions behind Riemannian batch normalization (:mod:`normlab.layers.riemannian`),
after the complex-domain BN paper (``normlab.papers.paper("complex-bn")``). Real symmetric
positive-definite (SPD) matrices are the real case of HPD; every function accepts real or
complex ``(..., n, n)`` tensors.

HPD manifold, affine-invariant metric: ``Log_M(X) = M^½ log(M^-½ X M^-½) M^½``; the Frechet
mean is found by step-controlled Karcher iterations
``M <- M^½ exp(t mean_i log(M^-½ X_i M^-½)) M^½`` (:func:`hpd_frechet_mean`); parallel
transport from ``M`` to the identity is the congruence ``X -> M^-½ X M^-½``.

Siegel disk ``D_n = {Z complex symmetric: I - Z^H Z > 0}``: the automorphism
``phi_W(Z) = (I - W W^H)^-½ (Z - W) (I - W^H Z)^-1 (I - W^H W)^½`` is an isometry taking ``W``
to the origin, with inverse ``phi_{-W}``; at the origin ``Exp_0(V) = V f(V^H V)`` with
``f(s) = tanh(sqrt s)/sqrt s`` and ``Log_0(Z) = Z g(Z^H Z)``, ``g(s) = artanh(sqrt s)/sqrt s``
(up to the metric's constant factor, which does not move a Frechet mean). The Karcher update
``M <- phi_{-M}(Exp_0(mean_i Log_0(phi_M(Z_i))))`` is an exact Riemannian gradient step.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch

__all__ = [
    "hermitian",
    "hpd_clamp",
    "hpd_exp",
    "hpd_fn",
    "hpd_frechet_mean",
    "hpd_geodesic",
    "hpd_log",
    "hpd_power",
    "hpd_sqrt",
    "hpd_transport",
    "in_siegel_disk",
    "is_hpd",
    "siegel_exp0",
    "siegel_frechet_mean",
    "siegel_from_origin",
    "siegel_log0",
    "siegel_to_origin",
]


def _check_square(x: torch.Tensor, name: str = "x") -> None:
    if x.dim() < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{name} must be (..., n, n) square matrices, got {tuple(x.shape)}.")


def hermitian(x: torch.Tensor) -> torch.Tensor:
    """The Hermitian part ``(X + X^H) / 2``.

    Examples:
        >>> import torch
        >>> hermitian(torch.tensor([[1.0, 2.0], [0.0, 1.0]]))
        tensor([[1., 1.],
                [1., 1.]])
    """
    _check_square(x)
    return 0.5 * (x + x.mH)


#: name -> (f(eigenvalues, p), f'(eigenvalues, p)) for the named matrix functions.
_FUNCS: dict[str, tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = {
    "sqrt": (lambda e, p: torch.sqrt(e), lambda e, p: 0.5 / torch.sqrt(e)),
    "log": (lambda e, p: torch.log(e), lambda e, p: 1.0 / e),
    "exp": (lambda e, p: torch.exp(e), lambda e, p: torch.exp(e)),
    "pow": (lambda e, p: e.pow(p), lambda e, p: p * e.pow(p - 1)),
}


class _EigFunction(torch.autograd.Function):
    """``U f(L) U^H`` with the Daleckii-Krein backward, stable for repeated eigenvalues.

    ``dX = U (L_f o herm(U^H dY U)) U^H`` with the divided differences
    ``L_f[i, j] = (f(l_i) - f(l_j)) / (l_i - l_j)``, replaced by ``f'(l_i)`` where the
    eigenvalues (nearly) coincide, where ``torch.linalg.eigh``'s own backward divides by 0.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, name: str, p: float) -> torch.Tensor:
        f, _ = _FUNCS[name]
        evals, evecs = torch.linalg.eigh(0.5 * (x + x.mH))
        fe = f(evals, p)
        ctx.save_for_backward(evals, evecs, fe)
        ctx.name, ctx.p = name, p
        return (evecs * fe.to(evecs.dtype).unsqueeze(-2)) @ evecs.mH

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        evals, evecs, fe = ctx.saved_tensors
        _, df = _FUNCS[ctx.name]
        diff = evals.unsqueeze(-1) - evals.unsqueeze(-2)
        fdiff = fe.unsqueeze(-1) - fe.unsqueeze(-2)
        scale = evals.abs().unsqueeze(-1).maximum(evals.abs().unsqueeze(-2)).clamp_min(1.0)
        close = diff.abs() <= 1e-10 * scale
        deriv = df(evals, ctx.p)
        mid = 0.5 * (deriv.unsqueeze(-1) + deriv.unsqueeze(-2))
        lf = torch.where(close, mid, fdiff / torch.where(close, torch.ones_like(diff), diff))
        g = evecs.mH @ grad @ evecs
        g = 0.5 * (g + g.mH)
        return evecs @ (g * lf.to(g.dtype)) @ evecs.mH, None, None


def hpd_fn(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``U diag(fn(lambda)) U^H`` for the eigendecomposition of the Hermitian ``x``.

    Differentiates through ``torch.linalg.eigh`` (not stable for repeated eigenvalues); the
    named functions below use a backward that is.

    Examples:
        >>> import torch
        >>> x = torch.tensor([[2.0, 1.0], [1.0, 2.0]], dtype=torch.float64)
        >>> torch.allclose(hpd_fn(x, torch.sqrt), hpd_sqrt(x))
        True
    """
    _check_square(x)
    evals, evecs = torch.linalg.eigh(hermitian(x))
    return (evecs * fn(evals).to(evecs.dtype).unsqueeze(-2)) @ evecs.mH


def _named(x: torch.Tensor, name: str, p: float = 1.0) -> torch.Tensor:
    _check_square(x)
    return _EigFunction.apply(x, name, p)


def hpd_sqrt(x: torch.Tensor) -> torch.Tensor:
    """The principal square root of an HPD matrix.

    Examples:
        >>> import torch
        >>> x = torch.tensor([[2.0, 1.0], [1.0, 2.0]], dtype=torch.float64)
        >>> s = hpd_sqrt(x)
        >>> torch.allclose(s @ s, x), is_hpd(s)
        (True, True)
    """
    return _named(x, "sqrt")


def hpd_power(x: torch.Tensor, p: float | torch.Tensor) -> torch.Tensor:
    """``X^p`` of an HPD matrix; a tensor ``p`` (one per batch matrix, or a scalar) is
    differentiated through, as ``exp(p log X)``.

    Examples:
        >>> import torch
        >>> x = torch.tensor([[2.0, 1.0], [1.0, 2.0]], dtype=torch.float64)
        >>> torch.allclose(hpd_power(x, 2.0), x @ x)
        True
        >>> torch.allclose(hpd_power(x, torch.tensor(-1.0)), torch.linalg.inv(x))
        True
    """
    if isinstance(p, torch.Tensor):
        p = p.reshape(*p.shape, 1, 1) if p.dim() > 0 else p
        return hpd_exp(p.to(x.dtype) * hpd_log(x))
    return _named(x, "pow", float(p))


def hpd_log(x: torch.Tensor) -> torch.Tensor:
    """The principal matrix logarithm of an HPD matrix (a Hermitian matrix).

    Examples:
        >>> import torch
        >>> e = torch.diag(torch.tensor([1.0, 2.0], dtype=torch.float64).exp())
        >>> torch.allclose(hpd_log(e), torch.diag(torch.tensor([1.0, 2.0], dtype=torch.float64)))
        True
    """
    return _named(x, "log")


def hpd_exp(x: torch.Tensor) -> torch.Tensor:
    """The matrix exponential of a Hermitian matrix (an HPD matrix).

    Examples:
        >>> import torch
        >>> x = torch.tensor([[2.0, 1.0], [1.0, 2.0]], dtype=torch.float64)
        >>> torch.allclose(hpd_exp(hpd_log(x)), x), is_hpd(hpd_exp(-10 * x))
        (True, True)
    """
    return _named(x, "exp")


def is_hpd(x: torch.Tensor, *, tol: float = 0.0) -> bool:
    """Whether every matrix is Hermitian (to ``1e-8`` relative) with eigenvalues ``> tol``.

    Examples:
        >>> import torch
        >>> is_hpd(torch.tensor([[2.0, 1.0], [1.0, 2.0]]))
        True
        >>> is_hpd(torch.tensor([[1.0, 2.0], [2.0, 1.0]]))  # eigenvalues -1 and 3
        False
    """
    _check_square(x)
    scale = x.abs().amax().clamp_min(1e-300)
    if float((x - x.mH).abs().amax().detach() / scale.detach()) > 1e-8:
        return False
    return bool((torch.linalg.eigvalsh(hermitian(x)) > tol).all())


def hpd_transport(x: torch.Tensor, mean: torch.Tensor, target: torch.Tensor | None = None):
    """Parallel transport of ``x`` along the geodesic from ``mean`` to ``target``.

    Under the affine-invariant metric it is the congruence ``E X E^H`` with
    ``E = (T M^-1)^½``; for ``target = I`` (the default) ``X -> M^-½ X M^-½``.

    Examples:
        >>> import torch
        >>> x = torch.tensor([[2.0, 1.0], [1.0, 2.0]], dtype=torch.float64)
        >>> torch.allclose(hpd_transport(x, x), torch.eye(2, dtype=torch.float64))
        True
        >>> torch.allclose(hpd_transport(x, x, target=4 * x), 4 * x)
        True
    """
    inv_sqrt = hpd_power(mean, -0.5)
    if target is None:
        return hermitian(inv_sqrt @ x @ inv_sqrt)
    t_sqrt = hpd_sqrt(target)
    # E = T^½ (T^½ M^-1 T^½)^½ T^-½ satisfies E^2 = T M^-1 (the principal root)
    inner = hpd_sqrt(hermitian(t_sqrt @ hpd_power(mean, -1.0) @ t_sqrt))
    e = t_sqrt @ inner @ hpd_power(target, -0.5)
    return hermitian(e @ x @ e.mH)


def hpd_geodesic(a: torch.Tensor, b: torch.Tensor, t: float) -> torch.Tensor:
    """The point ``a #_t b = A^½ (A^-½ B A^-½)^t A^½`` on the geodesic from ``a`` to ``b``.

    Examples:
        >>> import torch
        >>> eye = torch.eye(2, dtype=torch.float64)
        >>> torch.allclose(hpd_geodesic(eye, 4 * eye, 0.5), 2 * eye)  # the geometric mean
        True
    """
    s, inv = hpd_sqrt(a), hpd_power(a, -0.5)
    return hermitian(s @ hpd_power(hermitian(inv @ b @ inv), t) @ s)


def _karcher_step(logs: torch.Tensor, w: torch.Tensor) -> float:
    """The Karcher step ``t`` from the spreads ``delta_i`` (largest minus smallest eigenvalue)
    of ``log(M^-½ X_i M^-½)``.

    The Hessian of ``F`` has eigenvalues in ``[1, L]``, ``L = sum_i w_i h(delta_i)``,
    ``h(d) = (d/2) coth(d/2)``. ``t = 2 / (1 + L)`` is the gradient step for those bounds
    (Bini & Iannazzo's Richardson step for the Karcher mean), a contraction at any spread;
    where ``L <= 1.5`` the classic ``t = 1`` (exact for commuting matrices) contracts by at
    least ``L - 1 <= 0.5`` a step and is used instead.
    """
    ev = torch.linalg.eigvalsh(logs.detach())
    half = (ev[..., -1] - ev[..., 0]).clamp_min(1e-8) / 2
    lip = float((w.detach() * half / torch.tanh(half)).sum())
    return 1.0 if lip <= 1.5 else 2.0 / (1.0 + lip)


def hpd_frechet_mean(
    x: torch.Tensor,
    *,
    weights: torch.Tensor | None = None,
    iters: int = 100,
    tol: float = 1e-12,
    init: torch.Tensor | None = None,
) -> torch.Tensor:
    """The affine-invariant Frechet (Karcher) mean of a batch ``x`` of shape ``(B, n, n)``.

    Riemannian gradient descent on ``F(M) = ½ sum_i w_i d(M, X_i)²`` from the arithmetic
    mean (or ``init``): ``M <- M^½ exp(t G) M^½`` with ``G = sum_i w_i log(M^-½ X_i M^-½)``
    and the step ``t`` of :func:`_karcher_step`. The undamped ``t = 1`` (the classic Karcher
    iteration) overshoots and does not converge on widely spread batches, because the cost's
    Hessian grows with the spread on this negatively curved manifold; ``t`` follows it.
    Stops when ``||G||_F < max(tol, 64 machine eps)`` or after ``iters`` steps.

    ``||G||_F`` bounds the affine-invariant distance from the result to the true mean (``F``
    is 1-strongly geodesically convex), so a ``RuntimeWarning`` is raised when it ends above
    ``max(tol, sqrt(machine eps))``: the mean is then inaccurate; raise ``iters``.

    Examples:
        >>> import torch
        >>> a = torch.diag(torch.tensor([1.0, 4.0], dtype=torch.float64))
        >>> m = hpd_frechet_mean(torch.stack([a, a.flip(0, 1)]))  # diag(1, 4) and diag(4, 1)
        >>> torch.allclose(m, 2 * torch.eye(2, dtype=torch.float64))  # arithmetic mean: 2.5 I
        True
    """
    _check_square(x)
    if x.dim() != 3:
        raise ValueError(f"x must be a batch (B, n, n), got {tuple(x.shape)}.")
    w = (
        torch.full((x.shape[0],), 1.0 / x.shape[0], dtype=x.real.dtype, device=x.device)
        if weights is None
        else weights / weights.sum()
    )
    eps = torch.finfo(x.real.dtype).eps
    m = hermitian((w.to(x.dtype)[:, None, None] * x).sum(0)) if init is None else init
    gnorm = math.inf
    for k in range(iters + 1):
        s, inv = hpd_sqrt(m), hpd_power(m, -0.5)
        logs = hpd_log(hermitian(inv @ x @ inv))
        g = (w.to(x.dtype)[:, None, None] * logs).sum(0)
        gnorm = float(torch.linalg.matrix_norm(g.detach()))
        if gnorm < max(tol, 64 * eps) or k == iters:
            break
        m = hermitian(s @ hpd_exp(_karcher_step(logs, w) * g) @ s)
    floor = max(tol, eps**0.5)
    if not gnorm <= floor:
        warnings.warn(
            f"hpd_frechet_mean did not converge in {iters} steps: the Riemannian gradient "
            f"norm is {gnorm:.3g} (> {floor:.1e}), which bounds the distance to the true mean. "
            "Raise iters (karcher_iters in HPDBatchNorm), or compute in float64.",
            RuntimeWarning,
            stacklevel=2,
        )
    return m


def in_siegel_disk(z: torch.Tensor, *, tol: float = 1e-10) -> bool:
    """Whether every ``Z`` is symmetric (``Z = Z^T``) with ``I - Z^H Z`` positive definite.

    Examples:
        >>> import torch
        >>> eye = torch.eye(2, dtype=torch.complex128)
        >>> in_siegel_disk(0.5j * eye), in_siegel_disk(2 * eye)
        (True, False)
    """
    _check_square(z, "z")
    z = z.detach()
    if float((z - z.mT).abs().amax()) > tol:
        return False
    eye = torch.eye(z.shape[-1], dtype=z.dtype, device=z.device)
    return bool((torch.linalg.eigvalsh(hermitian(eye - z.mH @ z)) > 0).all())


def siegel_to_origin(z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The automorphism ``phi_W`` of the Siegel disk that takes ``w`` to the origin.

    Examples:
        >>> import torch
        >>> w = torch.tensor([[0.3, 0.1j], [0.1j, -0.2]], dtype=torch.complex128)
        >>> bool(siegel_to_origin(w, w).abs().max() < 1e-12)
        True
        >>> in_siegel_disk(siegel_to_origin(0.9 * w.conj(), w))
        True
    """
    _check_square(z, "z")
    eye = torch.eye(z.shape[-1], dtype=z.dtype, device=z.device)
    left = hpd_power(eye - w @ w.mH, -0.5)
    right = hpd_sqrt(eye - w.mH @ w)
    out = left @ (z - w) @ torch.linalg.inv(eye - w.mH @ z) @ right
    return 0.5 * (out + out.mT)  # symmetric in exact arithmetic


def siegel_from_origin(z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`siegel_to_origin`: takes the origin to ``w`` (``phi_{-W}``).

    Examples:
        >>> import torch
        >>> w = torch.tensor([[0.3, 0.1j], [0.1j, -0.2]], dtype=torch.complex128)
        >>> z = torch.tensor([[0.1, 0.0], [0.0, 0.4j]], dtype=torch.complex128)
        >>> torch.allclose(siegel_from_origin(siegel_to_origin(z, w), w), z)
        True
    """
    return siegel_to_origin(z, -w)


def _small(s: torch.Tensor) -> torch.Tensor:
    return s.abs() < 1e-6


def _tanh_ratio(s: torch.Tensor, p: float) -> torch.Tensor:
    r = s.clamp_min(0).sqrt()
    return torch.where(_small(s), 1 - s / 3 + 2 * s * s / 15, torch.tanh(r) / r.clamp_min(1e-30))


def _tanh_ratio_d(s: torch.Tensor, p: float) -> torch.Tensor:
    r = s.clamp_min(0).sqrt().clamp_min(1e-30)
    big = (r / torch.cosh(r).square() - torch.tanh(r)) / (2 * r**3)
    return torch.where(_small(s), -1 / 3 + 4 * s / 15, big)


def _atanh_ratio(s: torch.Tensor, p: float) -> torch.Tensor:
    r = s.clamp(0, 1 - 1e-15).sqrt()
    return torch.where(_small(s), 1 + s / 3 + s * s / 5, torch.atanh(r) / r.clamp_min(1e-30))


def _atanh_ratio_d(s: torch.Tensor, p: float) -> torch.Tensor:
    r = s.clamp(0, 1 - 1e-15).sqrt().clamp_min(1e-30)
    big = (r / (1 - r * r) - torch.atanh(r)) / (2 * r**3)
    return torch.where(_small(s), 1 / 3 + 2 * s / 5, big)


_FUNCS["tanh_ratio"] = (_tanh_ratio, _tanh_ratio_d)
_FUNCS["clamp"] = (lambda e, p: e.clamp_min(p), lambda e, p: (e > p).to(e.dtype))


def hpd_clamp(x: torch.Tensor, floor: float) -> torch.Tensor:
    """Eigenvalues clamped from below at ``floor`` (SPDNet's ReEig), stable backward.

    Examples:
        >>> import torch
        >>> x = torch.diag(torch.tensor([0.01, 2.0], dtype=torch.float64))
        >>> torch.linalg.eigvalsh(hpd_clamp(x, 0.1)).tolist()
        [0.1, 2.0]
    """
    return _named(x, "clamp", float(floor))


_FUNCS["atanh_ratio"] = (_atanh_ratio, _atanh_ratio_d)


def siegel_exp0(v: torch.Tensor) -> torch.Tensor:
    """Exponential map at the origin: ``V f(V^H V)``, ``f(s) = tanh(sqrt s) / sqrt s``.

    Examples:
        >>> import torch
        >>> eye = torch.eye(2, dtype=torch.complex128)
        >>> z = siegel_exp0(3 * eye)  # far outside the disk, mapped into it
        >>> in_siegel_disk(z), torch.allclose(z, torch.tanh(torch.tensor(3.0)).item() * eye)
        (True, True)
    """
    return v @ _named(v.mH @ v, "tanh_ratio")


def siegel_log0(z: torch.Tensor) -> torch.Tensor:
    """Logarithm map at the origin: ``Z g(Z^H Z)``, ``g(s) = artanh(sqrt s) / sqrt s``.

    Examples:
        >>> import torch
        >>> v = torch.tensor([[0.5, 1.0j], [1.0j, -0.3]], dtype=torch.complex128)
        >>> torch.allclose(siegel_log0(siegel_exp0(v)), v)
        True
    """
    return z @ _named(z.mH @ z, "atanh_ratio")


def siegel_frechet_mean(
    z: torch.Tensor, *, iters: int = 100, tol: float = 1e-12, init: torch.Tensor | None = None
) -> torch.Tensor:
    """The Frechet mean of a batch ``(B, n, n)`` of Siegel-disk points by Karcher iterations.

    ``M <- phi_{-M}(Exp_0(a mean_i Log_0(phi_M(Z_i))))``, damped by ``a = 1/mean(r coth r)``
    with ``r = ||Log_0(phi_M(Z_i))||``, from the arithmetic mean (or ``init``) until the mean
    tangent vector's Frobenius norm falls below ``tol``.

    Examples:
        >>> import torch
        >>> w = torch.tensor([[0.3, 0.1j], [0.1j, -0.2]], dtype=torch.complex128)
        >>> a = torch.tensor([[0.4, 0.2], [0.2, 0.1j]], dtype=torch.complex128)
        >>> z = torch.stack([siegel_from_origin(a, w), siegel_from_origin(-a, w)])
        >>> torch.allclose(siegel_frechet_mean(z), w)  # the midpoint, moved by an isometry
        True
    """
    _check_square(z, "z")
    if z.dim() != 3:
        raise ValueError(f"z must be a batch (B, n, n), got {tuple(z.shape)}.")
    m = z.mean(0) if init is None else init
    for _ in range(iters):
        logs = siegel_log0(siegel_to_origin(z, m))
        t = logs.mean(0)
        # The disk is negatively curved: the Frechet function's Hessian grows like
        # r coth(r) with the spread r, so a unit step overshoots far-apart batches; damp it.
        r = torch.linalg.matrix_norm(logs).detach().clamp_min(1e-12)
        step = 1.0 / float((r / torch.tanh(r)).mean())
        m = siegel_from_origin(siegel_exp0(step * t), m)
        if float(torch.linalg.matrix_norm(t.detach())) < tol:
            break
    return m
