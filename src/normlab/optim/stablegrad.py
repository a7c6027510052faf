"""StableGrad: optimizer-level control of each layer's weight-gradient scale.

After backpropagation and before the optimizer step, every weight gradient ``G_l`` (a
parameter with two or more dimensions) is rescaled so that its standard deviation equals a
reference scale ``s``::

    G_l <- G_l * s / (std(G_l) + eps)

The forward model, its outputs, its input derivatives and the loss are untouched: only the
update direction of each layer changes (cf. LARS/LAMB trust ratios, which rescale the
update by weight norms instead). Two references:

- ``"output"``: ``s = std(dL/dy_hat)``, the std of the loss gradient with respect to the
  network output ``y_hat`` (the paper's choice). The output tensor is registered with
  :meth:`StableGrad.watch` before ``backward``; a tensor hook records its gradient.
- ``"last"``: ``s = std(G_L)``, the std of the last weight gradient in the optimizer's
  parameter order (normally the output layer). For PINNs, whose loss also depends on input
  derivatives of ``y_hat``, ``dL/dy_hat`` misses part of the signal, so this reference is
  the robust one there.

``eps`` (default 1e-12, absolute, in gradient units) is added to ``std(G_l)``; a gradient
whose std is exactly 0 (zero or constant) is left as it is rather than blown up by ``1/eps``.
Biases and other one-dimensional parameters are not rescaled.

Paper: {stablegrad}.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

from normlab._registry import Method, register
from normlab.optim._closure import closure_loss
from normlab.papers import paper

__all__ = ["REFERENCES", "StableGrad", "rescale_weight_grads_"]

#: Reference scales StableGrad understands.
REFERENCES: tuple[str, ...] = ("output", "last")

__doc__ = __doc__.format(stablegrad=paper("stablegrad"))


def _std(t: torch.Tensor) -> torch.Tensor:
    return (
        t.detach().double().std(correction=0)
        if t.numel() > 1
        else t.new_zeros((), dtype=torch.float64)
    )


@torch.no_grad()
def rescale_weight_grads_(
    params: Iterable[torch.Tensor], reference: float | torch.Tensor, *, eps: float = 1e-12
) -> list[float]:
    """Rescale, in place, every weight gradient among ``params`` to std ``reference``.

    ``G <- G * reference / (std(G) + eps)`` for each parameter with ``dim() >= 2`` and a
    gradient; the function form of StableGrad for users who keep their own optimizer (call
    it between ``backward`` and ``step``, after ``GradScaler.unscale_``).

    Args:
        params: parameters whose gradients to rescale.
        reference: the target std ``s``.
        eps: added to ``std(G)`` so a zero gradient stays zero.

    Returns:
        The factor applied to each rescaled gradient, in order.
    """
    ref = float(reference)
    if not ref >= 0:
        raise ValueError(f"reference must be a finite std >= 0, got {ref}.")
    factors = []
    for p in params:
        if p.grad is None or p.dim() < 2:
            continue
        std = float(_std(p.grad))
        factor = ref / (std + eps) if std > 0 else 1.0  # a constant gradient has no scale
        p.grad.mul_(factor)
        factors.append(factor)
    return factors


class StableGrad(torch.optim.Optimizer):
    """Wrap any optimizer so each step first equalises per-layer weight-gradient std.

    ``step()`` rescales every weight gradient to the reference std (see the module
    docstring), then calls the wrapped optimizer's ``step``. ``param_groups``, ``state``,
    ``state_dict``/``load_state_dict``, ``add_param_group`` and ``zero_grad`` are the wrapped
    optimizer's, so learning-rate schedulers and ``torch.amp.GradScaler`` work on the wrapper.

    With a ``GradScaler``: call ``scaler.unscale_(opt)`` before ``scaler.step(opt)`` (or let
    ``scaler.step`` do it) and pass ``grad_scaler=scaler`` here when ``reference="output"``,
    so the recorded output gradient (seen by the hook while still scaled) is unscaled too.
    Gradient accumulation: every watched output since the last ``zero_grad`` contributes to
    the reference, so ``k`` micro-batches give the std of the full batch's output gradient.

    Args:
        optimizer: the optimizer to wrap.
        reference: ``"output"`` or ``"last"`` (see :data:`REFERENCES`).
        eps: added to each gradient std.
        grad_scaler: the ``torch.amp.GradScaler`` in use, if any.

    Paper: {stablegrad}.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        reference: str = "output",
        eps: float = 1e-12,
        grad_scaler: Any | None = None,
    ) -> None:
        # no super().__init__: the wrapped optimizer owns the groups and the state
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"StableGrad wraps a torch.optim.Optimizer, got {type(optimizer)}.")
        if reference not in REFERENCES:
            raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}.")
        if not eps >= 0:
            raise ValueError(f"eps must be >= 0, got {eps}.")
        self.optimizer = optimizer
        self.reference = reference
        self.eps = float(eps)
        self.grad_scaler = grad_scaler
        self._stats = [0.0, 0.0, 0]  # sum, sum of squares, count of watched output grads
        self.last_factors: list[float] = []
        self._optimizer_step_pre_hooks: dict = {}
        self._optimizer_step_post_hooks: dict = {}

    # the wrapped optimizer's records, shared (not copied)
    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    def __repr__(self) -> str:
        return f"StableGrad(reference={self.reference!r}, eps={self.eps:g}, {self.optimizer!r})"

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero the gradients (``set_to_none`` as in torch) and forget the watched outputs."""
        self.optimizer.zero_grad(set_to_none=set_to_none)
        self._stats = [0.0, 0.0, 0]

    def watch(self, output: torch.Tensor) -> torch.Tensor:
        """Record the gradient reaching ``output`` in the next backward; returns ``output``.

        Needed for ``reference="output"``; call it on the network output before the loss.
        """
        if not output.requires_grad:
            raise ValueError(
                "watch() needs an output that requires grad (call it before .detach())."
            )

        def hook(grad: torch.Tensor) -> None:
            g = grad.detach().double()
            self._stats[0] += float(g.sum())
            self._stats[1] += float(g.square().sum())
            self._stats[2] += g.numel()

        output.register_hook(hook)
        return output

    def reference_std(self) -> float:
        """The reference std ``s`` the next step will use."""
        if self.reference == "last":
            weights = [
                p
                for g in self.param_groups
                for p in g["params"]
                if p.grad is not None and p.dim() >= 2
            ]
            if not weights:
                raise ValueError("reference='last' found no weight (dim >= 2) with a gradient.")
            return float(_std(weights[-1].grad))
        total, squares, n = self._stats
        if n == 0:
            raise ValueError(
                "reference='output' needs the network output: call opt.watch(output) before "
                "backward, or use reference='last'."
            )
        scale = float(self.grad_scaler.get_scale()) if self.grad_scaler is not None else 1.0
        mean = total / n
        return max(squares / n - mean * mean, 0.0) ** 0.5 / scale

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Rescale the weight gradients, then step the wrapped optimizer."""
        loss = closure_loss(closure)
        params = [p for g in self.param_groups for p in g["params"]]
        reference = self.reference_std()
        if not math.isfinite(reference):  # the gradient is at fault, not the setting
            source = "dL/d(output)" if self.reference == "output" else "the last weight's gradient"
            raise ValueError(
                f"The gradient is not finite: the std of {source} is {reference}, so the "
                "backward pass produced NaN or inf (a diverged loss or an overflow). Check the "
                "loss for NaN, lower the learning rate, or with mixed precision pass a "
                "GradScaler (grad_scaler=...), whose step skips such batches."
            )
        self.last_factors = rescale_weight_grads_(params, reference, eps=self.eps)
        self.optimizer.step()
        return loss


StableGrad.__doc__ = (StableGrad.__doc__ or "").format(stablegrad=paper("stablegrad"))

register(
    Method(
        "stablegrad",
        "optim",
        StableGrad,
        paper("stablegrad"),
        "wraps an optimizer; rescales each weight gradient to the std of dL/d(output)",
        aliases=("stable-grad",),
        layout="other",
    )
)
