"""Full-batch gradient descent on the whitened BN linear model, and its spike summary.

The stylized setting of "Delayed Loss Spikes from Normalization's Effective Learning Rate":
whitened square-loss regression (:func:`normlab.models.bn_linear.whitened_regression`) and
the BN linear model :class:`~normlab.models.bn_linear.BNLinear`, trained by full-batch GD at
a fixed learning rate. The sharpness-scaled effective learning rate
``kappa_t = (lr / ||w_t||^2) |gamma_t| ||theta_hat||`` rises as the gain is learned; the
paper's mechanism is that once ``kappa`` passes 2 the converged direction destabilizes after
a waiting time and the loss spikes.

:func:`gd_trajectory` records the loss, ``kappa``, the effective lr and the angle between
``w`` and ``theta_hat`` before every step; :func:`spike_summary` reduces it to the spike's
height (before and after the first crossing of ``kappa = 2``), the directional onset and
the derived waiting-time window.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from normlab.models.bn_linear import BNLinear, waiting_time_bound, whitened_regression
from normlab.probes.dynamics import EffectiveLR
from normlab.training.fit import Divergence, fit

__all__ = ["angle_map_error", "gd_trajectory", "rise_above_running_min", "spike_summary"]


def gd_trajectory(
    *,
    n: int,
    d: int,
    signal: float,
    noise: float,
    gamma_init: float,
    lr: float,
    steps: int,
    seed: int,
    bn: bool = True,
) -> tuple[dict[str, list[float]], Divergence | None]:
    """Loss ``0.5 mean (y - f(x))^2``, kappa, effective lr and angle per step of full-batch
    GD at ``lr`` (SGD without momentum), measured before each step, and the divergence or
    None (a non-finite loss ends the run there). The data and the initial ``w`` depend on
    ``seed`` only, so runs at different ``lr`` or with ``bn=False`` start identically.

    Examples:
        >>> tr, diverged = gd_trajectory(
        ...     n=32, d=4, signal=1.0, noise=0.1, gamma_init=1.0, lr=0.1, steps=5, seed=0)
        >>> sorted(tr), len(tr["loss"]), diverged
        (['angle', 'eff_lr', 'kappa', 'loss'], 5, None)
        >>> tr["loss"][-1] < tr["loss"][0], tr["angle"][-1] < tr["angle"][0]
        (True, True)
    """
    gen = torch.Generator().manual_seed(seed)
    data = whitened_regression(n, d, signal=signal, noise=noise, generator=gen)
    torch.manual_seed(seed)
    model = BNLinear(d, bn=bn, gamma_init=gamma_init)
    groups = [
        {"params": [model.weight]},
        {"params": [p for name, p in model.named_parameters() if name != "weight"]},
    ]
    opt = torch.optim.SGD(groups, lr=lr)
    tracker = EffectiveLR(opt)
    th = data.theta_hat
    out: dict[str, list[float]] = {"loss": [], "kappa": [], "eff_lr": [], "angle": []}

    def loss_fn(m: torch.nn.Module, step: int) -> torch.Tensor:
        loss = 0.5 * (data.y - m(data.x)).square().mean()
        out["loss"].append(loss.item())
        out["kappa"].append(model.kappa(th, lr))
        out["angle"].append(model.angle(th))
        out["eff_lr"].append(tracker.record(step).effective_lr[0])
        return loss

    return out, fit(model, loss_fn, lambda step: step, steps, opt).diverged


def rise_above_running_min(loss: Sequence[float], start: int = 0) -> float:
    """``max_{t >= start} L_t / min_{s <= t} L_s - 1``: the largest relative rise of the
    loss above its running minimum (the minimum taken from step 0), over steps from
    ``start``; 0 for a monotone descent, inf once the loss turned non-finite.

    Examples:
        >>> rise_above_running_min([4.0, 2.0, 1.0, 3.0, 0.5])
        2.0
        >>> rise_above_running_min([4.0, 5.0, 1.0, 1.5], start=2)
        0.5
    """
    run_min, rise = math.inf, 0.0
    for t, value in enumerate(loss):
        if not math.isfinite(value):
            return math.inf if t >= start else rise
        run_min = min(run_min, value)
        if t >= start:
            rise = max(rise, value / run_min - 1)
    return rise


def spike_summary(tr: Mapping[str, Sequence[float]], phi_on: float) -> dict[str, float]:
    """One row of the claim's table from a :func:`gd_trajectory`.

    ``spike_height``: :func:`rise_above_running_min` over the whole run;
    ``spike_after_crossing``: the same over steps from the first ``t*`` with ``kappa > 2``
    (the whole run when kappa never crosses, so a run that stays below reads its own
    whole-run rise); ``spike_before_crossing``: over steps before ``t*`` (the no-rising-edge
    phase); ``descent_log2``: log2 of the initial loss over the lowest loss before the
    directional onset (the first step after the angle fell below ``phi_on`` at which it
    reaches ``phi_on`` again); ``delayed_onset``: 1 when that onset lies after ``t*`` and
    within normlab's derived waiting-time bound (``slack`` >= 1 steps inside the window).

    Examples:
        >>> tr = {"loss": [1.0, 0.5, 0.25, 1.0, 0.1], "kappa": [1.0, 1.5, 2.5, 2.5, 2.5],
        ...       "angle": [0.5, 0.1, 0.05, 0.3, 0.1]}
        >>> row = spike_summary(tr, phi_on=0.2)  # kappa crosses 2 at step 2, onset at step 3
        >>> row["spike_height"], row["crossing_step"], row["onset_step"], row["delayed_onset"]
        (3.0, 2.0, 3.0, 1.0)
    """
    loss, kappa, angle = list(tr["loss"]), list(tr["kappa"]), list(tr["angle"])
    nan = float("nan")
    cross = next((t for t, k in enumerate(kappa) if k > 2), None)
    below = next((t for t, a in enumerate(angle) if a < phi_on), None)
    onset = (
        None
        if below is None
        else next((t for t in range(below, len(angle)) if angle[t] >= phi_on), None)
    )
    finite = [k for k in kappa if math.isfinite(k)]
    before = loss[: onset if onset is not None else len(loss)]
    row = {
        "spike_height": rise_above_running_min(loss),
        "spike_after_crossing": rise_above_running_min(loss, 0 if cross is None else cross),
        "spike_before_crossing": rise_above_running_min(
            loss[: len(loss) if cross is None else cross]
        ),
        "min_loss": min(loss),
        "final_loss": loss[-1],
        "max_kappa": max(finite) if finite else nan,
        "descent_log2": math.log2(loss[0] / min(before)) if before else 0.0,
        "crossed": float(cross is not None),
        "spiked_onset": float(onset is not None),
        "onset_step": nan if onset is None else float(onset),
        "crossing_step": nan if cross is None else float(cross),
        "bound_upper": nan,
        "slack": nan,
    }
    if onset is not None and cross is not None:
        if onset > cross + 1:
            edge = kappa[cross + 1 : onset]
            bound = cross + 1 + waiting_time_bound(min(edge), angle[cross + 1], phi_on)
        else:
            bound = float(cross + 1)
        row["bound_upper"] = float(bound) if math.isfinite(bound) else 1e9
        row["slack"] = float(min(onset - cross, bound + 1 - onset))
    row["delayed_onset"] = float(math.isfinite(row["slack"]) and row["slack"] >= 1)
    return row


def angle_map_error(
    *, n: int, d: int, signal: float, noise: float, lr: float, steps: int = 5, seed: int = 0
) -> float:
    """Largest ``|phi_{t+1} - |phi_t - atan(kappa_t sin phi_t)||`` over ``steps`` GD steps of
    the BN model (gain 1, eps 0) on whitened data: the paper's exact angle map of one step
    (0 up to round-off when the model and its ``kappa`` are right). The map holds while the
    gain keeps its sign (the angle is taken against ``sign(gamma) theta_hat``); ``seed``
    draws the initial weight, independently of the global RNG.

    Examples:
        >>> angle_map_error(n=256, d=16, signal=4.0, noise=0.5, lr=0.26) < 1e-9
        True
    """
    gen = torch.Generator().manual_seed(0)
    data = whitened_regression(n, d, signal=signal, noise=noise, generator=gen)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = BNLinear(d, gamma_init=1.0, eps=0.0)
    th, params = data.theta_hat, [model.weight, model.gamma, model.beta]
    worst = 0.0
    for _ in range(steps):
        phi, k = model.angle(th), model.kappa(th, lr)
        loss = 0.5 * (data.y - model(data.x)).square().mean()
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(lr * g)
        predicted = abs(phi - math.atan(k * math.sin(phi)))
        worst = max(worst, abs(model.angle(th) - predicted))
    return worst
