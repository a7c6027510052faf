"""Switching hyperplanes and local affine-region counts of ReLU MLPs with training-mode BN.

After the BN geometry paper (``normlab.papers.paper("bn-geometry")``). Conditioned on a
mini-batch, a BatchNorm layer in training mode is a fixed per-neuron affine map (the batch's
mean and variance are numbers), so the network is continuous piecewise affine (CPA). For a
first-layer neuron ``z = w.x + b`` followed by BN and ReLU, the breakpoint
``gamma (z - mu)/sigma + beta = 0`` with ``mu = w.xbar + b`` and
``sigma = sqrt(w^T Cov w + eps)`` is the hyperplane ``w.(x - xbar) = -sigma beta/gamma``:
a parallel translate of the *reference hyperplane* ``w.(x - xbar) = 0`` through the batch
centroid, whose offset in batch-standardized coordinates ``u = w.(x - xbar)/sigma`` is
``-beta/gamma``; the raw bias ``b`` cancels. A hyperplane ``w.x = t`` meets the l-inf window
``{x: ||x - c||_inf <= r}`` iff ``|w.c - t| <= r ||w||_1`` (exact criterion).

Region counts. :func:`count_regions_2d` is exact for 2-D inputs: starting from the window
(a square), each layer's neurons split every current convex polygon along the line where the
neuron's pre-activation (affine on that polygon) vanishes, by exact half-plane clipping in
float64; after a layer every piece has a constant activation pattern of that layer, so the
next layer is affine on it. The result is the number of activation regions (maximal convex
pieces with a constant activation pattern) meeting the window with positive area; pieces
thinner than ``1e-12`` of the window's area are dropped as round-off slivers.
:func:`estimate_regions` serves any input dimension: the number of distinct activation
patterns among uniform samples of the window, a lower bound that converges (from below) to
the number of regions of non-negligible volume. The local region density is the mean count
over anchor points divided by the window volume ``(2r)^d``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from normlab._records import Record

__all__ = [
    "RegionDensity",
    "SwitchingHyperplanes",
    "count_regions_2d",
    "estimate_regions",
    "hyperplane_hits_window",
    "piecewise_affine_layers",
    "region_density",
    "switching_hyperplanes",
]

Affine = tuple[np.ndarray, np.ndarray, bool]  # (W, b, followed by ReLU)


@torch.no_grad()
def piecewise_affine_layers(model: nn.Sequential, batch: torch.Tensor) -> list[Affine]:
    """The model conditioned on ``batch``: a list of ``(W, b, relu)`` affine maps (float64).

    ``model`` is an ``nn.Sequential`` of ``Linear``, ``BatchNorm1d``, ``ReLU`` and ``Identity``;
    a BatchNorm in training mode uses the batch's statistics (biased variance, as torch does
    in the forward pass), one in eval mode its running statistics. The model is not changed.
    """
    if not isinstance(model, nn.Sequential):
        raise TypeError("model must be an nn.Sequential of Linear/BatchNorm1d/ReLU/Identity.")
    h = batch.double()
    layers: list[Affine] = []
    w = np.eye(h.shape[1])
    b = np.zeros(h.shape[1])
    for module in model:
        if isinstance(module, nn.Linear):
            lw = module.weight.double().numpy()
            lb = module.bias.double().numpy() if module.bias is not None else 0.0
            w, b = lw @ w, lw @ b + lb
            h = h @ module.weight.double().T + (
                module.bias.double() if module.bias is not None else 0
            )
        elif isinstance(module, nn.BatchNorm1d):
            if module.training or module.running_mean is None:
                mu, var = h.mean(0), h.var(0, unbiased=False)
            else:
                mu, var = module.running_mean.double(), module.running_var.double()
            scale = 1.0 / torch.sqrt(var + module.eps)
            shift = -mu * scale
            if module.affine:
                scale, shift = scale * module.weight.double(), shift * module.weight.double()
                shift = shift + module.bias.double()
            w = scale.numpy()[:, None] * w
            b = scale.numpy() * b + shift.numpy()
            h = h * scale + shift
        elif isinstance(module, nn.ReLU):
            layers.append((w, b, True))
            w, b = np.eye(w.shape[0]), np.zeros(w.shape[0])
            h = h.clamp_min(0)
        elif isinstance(module, nn.Identity):
            continue
        else:
            raise TypeError(f"Unsupported module {type(module).__name__}; use Linear/BN1d/ReLU.")
    layers.append((w, b, False))
    return layers


@dataclass(frozen=True)
class SwitchingHyperplanes(Record):
    """First-layer breakpoint hyperplanes ``normals @ x = thresholds`` for one batch.

    Attributes:
        normals: ``(k, d)`` raw weight rows ``w_j``.
        thresholds: ``(k,)`` so that neuron ``j`` switches on ``w_j . x = t_j``.
        reference: ``(k,)`` the reference hyperplanes' ``w_j . xbar`` (through the centroid).
        standardized_offsets: ``(k,)`` offsets in batch-standardized units, ``-beta/gamma``
            with BN, ``None`` entries (NaN) without.
        centroid: ``(d,)`` the batch centroid.
    """

    normals: np.ndarray
    thresholds: np.ndarray
    reference: np.ndarray
    standardized_offsets: np.ndarray
    centroid: np.ndarray


@torch.no_grad()
def switching_hyperplanes(model: nn.Sequential, batch: torch.Tensor) -> SwitchingHyperplanes:
    """The first layer's switching hyperplanes in input space, conditioned on ``batch``.

    Computed from the closed form ``w.(x - xbar) = -sigma beta/gamma`` (BN in training mode
    after the first Linear) or ``w.x = -b`` (no BN), never from the raw bias with BN.
    """
    lin = model[0]
    if not isinstance(lin, nn.Linear):
        raise TypeError("The model's first module must be nn.Linear.")
    x = batch.double()
    w = lin.weight.double()
    xbar = x.mean(0)
    ref = w @ xbar
    nxt = model[1] if len(model) > 1 else None
    if isinstance(nxt, nn.BatchNorm1d):
        centred = (x - xbar) @ w.T
        sigma = torch.sqrt(centred.square().mean(0) + nxt.eps)
        gamma = nxt.weight.double() if nxt.affine else torch.ones_like(sigma)
        beta = nxt.bias.double() if nxt.affine else torch.zeros_like(sigma)
        offsets = -beta / gamma
        thresholds = ref + sigma * offsets
    else:
        b = lin.bias.double() if lin.bias is not None else torch.zeros(w.shape[0], dtype=x.dtype)
        thresholds, offsets = -b, torch.full_like(b, float("nan"))
    return SwitchingHyperplanes(
        w.numpy(), thresholds.numpy(), ref.numpy(), offsets.numpy(), xbar.numpy()
    )


def hyperplane_hits_window(
    normals: np.ndarray, thresholds: np.ndarray, center: np.ndarray, radius: float
) -> np.ndarray:
    """Exact test whether ``w.x = t`` meets ``{||x - c||_inf <= r}``: ``|w.c - t| <= r||w||_1``."""
    normals = np.atleast_2d(normals)
    return np.abs(normals @ center - thresholds) <= radius * np.abs(normals).sum(1)


def _clip(poly: np.ndarray, a: np.ndarray, c: float, keep_positive: bool) -> np.ndarray:
    """Sutherland-Hodgman: the part of a convex polygon where ``s(a.x + c) >= 0``."""
    vals = poly @ a + c
    if not keep_positive:
        vals = -vals
    out = []
    m = len(poly)
    for i in range(m):
        p, q, vp, vq = poly[i], poly[(i + 1) % m], vals[i], vals[(i + 1) % m]
        if vp >= 0:
            out.append(p)
        if (vp >= 0) != (vq >= 0):
            out.append(p + (q - p) * (vp / (vp - vq)))
    return np.array(out) if out else np.zeros((0, 2))


def _area(poly: np.ndarray) -> float:
    if len(poly) < 3:
        return 0.0
    x, y = poly[:, 0], poly[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def count_regions_2d(
    model: nn.Sequential, batch: torch.Tensor, center: Sequence[float], radius: float
) -> int:
    """Exact number of activation regions meeting the window ``||x - center||_inf <= radius``.

    Inputs must be 2-D; see the module docstring for the method (exact polygon splitting).
    """
    if batch.shape[1] != 2:
        raise ValueError("count_regions_2d needs 2-D inputs; use estimate_regions otherwise.")
    cx, cy = float(center[0]), float(center[1])
    square = np.array(
        [
            [cx - radius, cy - radius],
            [cx + radius, cy - radius],
            [cx + radius, cy + radius],
            [cx - radius, cy + radius],
        ]
    )
    min_area = 1e-12 * (2 * radius) ** 2
    # each piece: (polygon, affine map A (k x 2), offset c) of the current representation
    pieces = [(square, np.eye(2), np.zeros(2))]
    for w, b, relu in piecewise_affine_layers(model, batch):
        if not relu:
            break
        new = []
        for poly, a_in, c_in in pieces:
            a, c = w @ a_in, w @ c_in + b
            polys = [poly]
            for j in range(len(c)):
                split = []
                for p in polys:
                    vals = p @ a[j] + c[j]
                    if vals.min() >= 0 or vals.max() <= 0:
                        split.append(p)
                        continue
                    for side in (True, False):
                        q = _clip(p, a[j], c[j], side)
                        if _area(q) > min_area:
                            split.append(q)
                polys = split
            for p in polys:
                on = (p.mean(0) @ a.T + c) > 0
                new.append((p, a * on[:, None], c * on))
        pieces = new
    return len(pieces)


@torch.no_grad()
def estimate_regions(
    model: nn.Sequential,
    batch: torch.Tensor,
    center: Sequence[float],
    radius: float,
    *,
    samples: int = 4096,
    generator: torch.Generator | None = None,
) -> int:
    """Distinct activation patterns among uniform samples of the window (any dimension).

    A lower bound on the region count, converging to the number of regions with
    non-negligible volume as ``samples`` grows.
    """
    c = torch.as_tensor(center, dtype=torch.float64)
    x = c + radius * (
        2 * torch.rand(samples, c.numel(), generator=generator, dtype=torch.float64) - 1
    )
    h = x.numpy()
    codes = []
    for w, b, relu in piecewise_affine_layers(model, batch):
        if not relu:
            break
        z = h @ w.T + b
        codes.append(z > 0)
        h = np.maximum(z, 0)
    if not codes:
        return 1
    return len(np.unique(np.concatenate(codes, axis=1), axis=0))


@dataclass(frozen=True)
class RegionDensity(Record):
    """Local region density ``mean_i N(x_i, r) / (2r)^d`` over anchor points.

    Attributes:
        density: the mean count over anchors divided by the window volume.
        mean_count: mean region count per window.
        counts: per-anchor counts.
        radius: the window half-width.
        exact: whether the counts are exact (2-D) or sampled estimates.
    """

    density: float
    mean_count: float
    counts: tuple[int, ...]
    radius: float
    exact: bool


def region_density(
    model: nn.Sequential,
    batch: torch.Tensor,
    anchors: torch.Tensor,
    radius: float,
    *,
    samples: int = 4096,
    generator: torch.Generator | None = None,
) -> RegionDensity:
    """Local region density of ``model`` conditioned on ``batch`` around each anchor point.

    Exact counts for 2-D inputs (:func:`count_regions_2d`), sampled estimates otherwise.
    """
    d = anchors.shape[1]
    exact = d == 2
    counts = tuple(
        count_regions_2d(model, batch, a.tolist(), radius)
        if exact
        else estimate_regions(
            model, batch, a.tolist(), radius, samples=samples, generator=generator
        )
        for a in anchors.double()
    )
    mean = float(np.mean(counts))
    return RegionDensity(mean / (2 * radius) ** d, mean, counts, radius, exact)
