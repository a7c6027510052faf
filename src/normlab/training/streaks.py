"""Training :class:`~normlab.models.segnet.TinySegNet` to mark faint moving streaks
(:func:`~normlab.data.streaks.streak_frames`) behind each input scaling: the testbed of
the Adaptive Normalization claim.

The scalings (:data:`SCALINGS`) are the fixed "zscore", "minmax" and "asinh" of
:class:`~normlab.layers.scaling.AdaptiveScaling`, its "learned" mode, and "frozen": the
learned mode's initial curve, never trained (the control that separates what the learning
adds from what its starting curve gives). The learned and frozen curves start either as the
asinh stretch (``start="asinh"``: softening 1 robust unit, exactly the "asinh" scaling on
the fitted pixels) or nearly linear (``"linear"``: the softening at the larger clip bound).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from normlab.data.streaks import streak_frames
from normlab.models.segnet import TinySegNet, pixel_f1
from normlab.training.fit import FitResult, fit

__all__ = [
    "SCALINGS",
    "STARTS",
    "asinh_start_gap",
    "learned_curve",
    "neutral_start_bend",
    "segnet_f1",
    "streak_segnet",
    "train_streak_segnet",
]

#: The scalings :func:`streak_segnet` builds.
SCALINGS = ("zscore", "minmax", "asinh", "learned", "frozen")
#: Where the learned and frozen curves start.
STARTS = ("linear", "asinh")


def streak_segnet(
    scaling: str, train_x: torch.Tensor, *, frames: int, width: int, start: str = "linear"
) -> TinySegNet:
    """The segmentation net with ``scaling`` fitted to the training pixels ``train_x``.

    Args:
        scaling: one of :data:`SCALINGS`.
        train_x: the training frames (every pixel is one sample of the scaling's fit).
        frames: frames per sample (the net's channels).
        width: the net's conv channels.
        start: where the learned and frozen curves start (see :data:`STARTS`).
    """
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {SCALINGS}, got {scaling!r}.")
    if start not in STARTS:
        raise ValueError(f"start must be 'linear' or 'asinh', got {start!r}.")
    net = TinySegNet(frames, scaling="learned" if scaling == "frozen" else scaling, width=width)
    sc = net.scaling.fit(train_x.reshape(-1, 1))
    if scaling in ("learned", "frozen") and start == "linear":
        with torch.no_grad():
            sc.log_soft.copy_(torch.maximum(sc.log_lo, sc.log_hi))
    if scaling == "frozen":
        sc.requires_grad_(False)
    return net


def train_streak_segnet(
    scaling: str,
    train: tuple[torch.Tensor, torch.Tensor],
    lr: float,
    *,
    steps: int,
    batch: int,
    pos_power: float,
    frames: int,
    width: int,
    start: str = "linear",
    seed: int = 0,
) -> tuple[TinySegNet, FitResult]:
    """Train a :func:`streak_segnet` with Adam on random batches of ``train`` (frames,
    masks) under a binary cross-entropy whose rare streak pixels are up-weighted by
    ``((1 - p) / p) ** pos_power`` (``p`` the streak-pixel fraction; 1 is fully balanced).

    Returns:
        The net and its :class:`~normlab.training.fit.FitResult` (the training loss of every
        step in ``losses``; ``diverged`` None when it finished).
    """
    torch.manual_seed(seed)
    x, y = train
    net = streak_segnet(scaling, x, frames=frames, width=width, start=start)
    pos = float(y.mean())
    pos_weight = torch.tensor(((1 - pos) / max(pos, 1e-6)) ** pos_power)
    g = torch.Generator().manual_seed(seed)
    result = fit(
        net,
        lambda m, i: F.binary_cross_entropy_with_logits(m(x[i]), y[i], pos_weight=pos_weight),
        lambda step: torch.randint(0, len(x), (batch,), generator=g),
        steps,
        torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=lr),
    )
    return net, result


@torch.no_grad()
def segnet_f1(net: TinySegNet, frames: torch.Tensor, masks: torch.Tensor) -> float:
    """The net's pixel F1 (:func:`~normlab.models.segnet.pixel_f1`, logits above 0) on
    ``frames`` against ``masks``."""
    return pixel_f1(net(frames), masks)


def learned_curve(net: TinySegNet) -> dict[str, float]:
    """A learned (or frozen) scaling's clip bounds ``lo``, ``hi`` and softening in robust
    units of the training pixels; empty for a fixed scaling."""
    sc = net.scaling
    if sc.mode != "learned":
        return {}
    with torch.no_grad():
        lo, hi, soft = (float(p.exp()) for p in (sc.log_lo, sc.log_hi, sc.log_soft))
    return {"lo": -lo, "hi": hi, "softening": soft}


def _sample() -> tuple[torch.Tensor, torch.Tensor]:
    return streak_frames(4, torch.Generator().manual_seed(0), size=8, frames=3, stars=2)


def asinh_start_gap() -> float:
    """The largest ``|learned(asinh start) - asinh|`` over a small sample of frames: the
    learned scaling started at ``start="asinh"`` is the fixed asinh stretch (ideally 0)."""
    x, _ = _sample()
    outs = []
    for scaling in ("asinh", "learned"):
        torch.manual_seed(0)
        outs.append(streak_segnet(scaling, x, frames=3, width=4, start="asinh").scale(x))
    return float((outs[0] - outs[1]).detach().abs().max())


def neutral_start_bend() -> tuple[float, bool]:
    """How far the neutral (linear) start bends over its clip range, as
    ``max |asinh(u / s) - u / s| / max |u / s|``, and whether all three curve parameters
    get gradients from a segmentation loss (the curve can learn)."""
    x, y = _sample()
    net = streak_segnet("learned", x, frames=3, width=4, start="linear")
    curve = learned_curve(net)
    u = torch.linspace(curve["lo"], curve["hi"], 101) / curve["softening"]
    bend = float((torch.asinh(u) - u).abs().max() / u.abs().max())
    loss = F.binary_cross_entropy_with_logits(net(x), y)
    found = torch.autograd.grad(loss, list(net.scaling.parameters()), allow_unused=True)
    return bend, all(g is not None and bool(g.abs().sum() > 0) for g in found)
