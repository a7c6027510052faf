"""Claim "complex-bn": Riemannian BN on HPD matrices speeds up a Riemannian network.

A small SPDNet-style network on HPD matrices (:mod:`normlab.models.spd_net`) classifies
sample covariance matrices of four radar-like clutter classes (Toeplitz covariances that
differ in correlation and Doppler frequency, compound-Gaussian texture), with and without
:class:`normlab.layers.HPDBatchNorm` after its BiMap layer, same initialisation, data order
and Adam learning rate. "Trains faster": the test accuracy averaged over the epochs (area
under the accuracy curve); the final test accuracy is a secondary effect.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from normlab.claims.common import cell, seed_everything
from normlab.claims.core import Check, CheckOutcome, Claim, Effect, Margin, register_claim
from normlab.functional import manifolds as MF
from normlab.layers.riemannian import HPDBatchNorm
from normlab.models.spd_net import SPDNet, clutter_covariances
from normlab.papers import paper

__all__ = ["CLAIM", "run"]


def _data(config: Mapping[str, Any], generator: torch.Generator, per_class: int):
    return clutter_covariances(
        per_class,
        config["n"],
        rhos=tuple(config["rhos"]),
        freqs=tuple(config["freqs"]),
        snapshots=config["snapshots"],
        power=config["power"],
        generator=generator,
    )


def _train(config: Mapping[str, Any], seed: int, bn: bool) -> list[float]:
    gen = seed_everything(seed)
    train, test = _data(config, gen, config["train_per_class"]), _data(config, gen, 60)
    torch.manual_seed(seed)
    net = SPDNet(config["n"], config["m"], len(config["rhos"]), bn=bn)
    opt = torch.optim.Adam(net.parameters(), lr=config["lr"])
    order = torch.Generator().manual_seed(seed)
    accs = []
    for _ in range(config["epochs"]):
        net.train()
        perm = torch.randperm(len(train.y), generator=order)
        for i in range(0, len(perm), config["batch"]):
            idx = perm[i : i + config["batch"]]
            loss = F.cross_entropy(net(train.x[idx]), train.y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        net.eval()
        with torch.no_grad():
            accs.append(float((net(test.x).argmax(1) == test.y).double().mean()))
    return accs


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Test-accuracy curves with and without the HPD BN layer."""
    table, curves = {}, {}
    for name, bn in (("bn", True), ("no-bn", False)):
        accs = _train(config, seed, bn)
        table[name] = {"mean_acc": sum(accs) / len(accs), "final_acc": accs[-1]}
        curves[name] = accs
    return {"table": table, "curves": curves}


def _check_manifold(config: Mapping[str, Any]) -> CheckOutcome:
    data = _data(config, torch.Generator().manual_seed(0), 8)
    bn = HPDBatchNorm(config["n"], complex_input=True, dtype=torch.float64)
    y = bn(data.x).detach()
    err = float((MF.hpd_frechet_mean(y) - torch.eye(config["n"], dtype=y.dtype)).abs().max())
    ok = MF.is_hpd(y) and err < 1e-8
    return CheckOutcome(ok, err, f"outputs HPD: {MF.is_hpd(y)}; |mean - I|_max {err:.1e} <= 1e-8")


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, color in (("bn", "C0"), ("no-bn", "C1")):
        for m in measurements:
            ax.plot(
                range(1, len(m["curves"][name]) + 1), m["curves"][name], color=color, alpha=0.5
            )
        ax.plot([], [], color=color, label=name)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy")
    ax.legend()
    fig.tight_layout()
    return fig


_BASE = {
    "n": 8,
    "m": 4,
    "rhos": [0.9, 0.9, 0.7, 0.7],
    "freqs": [0.05, 0.15, 0.05, 0.15],
    "snapshots": 16,
    "power": 1.0,
    "lr": 1e-2,
    "batch": 30,
}

CLAIM = register_claim(
    Claim(
        id="complex-bn",
        paper=paper("complex-bn"),
        hypothesis=(
            "On HPD covariance classification, a Riemannian network with the HPD BN layer "
            "trains faster (higher test accuracy over the epochs) than without it."
        ),
        primary=Effect(
            "mean_acc_gain",
            "BN network's test accuracy averaged over epochs minus the no-BN network's",
            lambda m: cell(m, "bn", "mean_acc") - cell(m, "no-bn", "mean_acc"),
            direction="greater",
            margin=Margin(
                0.02,
                "normlab's choice: 2 points of accuracy is about one "
                "standard error of a 240-sample test set",
            ),
            baseline="no-bn",
        ),
        secondary=(
            Effect(
                "final_acc_gain",
                "BN minus no-BN final test accuracy",
                lambda m: cell(m, "bn", "final_acc") - cell(m, "no-bn", "final_acc"),
                direction="no_less",
                margin=Margin(0.02, "normlab's choice: as for the primary"),
                baseline="no-bn",
            ),
        ),
        checks=(
            Check(
                "on_manifold",
                "BN outputs are HPD and their batch Frechet mean is I to 1e-8 (complex128)",
                _check_manifold,
            ),
        ),
        headline="Radar clutter classification: BN layers improve accuracy (abstract; no "
        "number given).",
        setup=(
            "4 Toeplitz clutter classes (rho 0.9/0.7 x Doppler 0.05/0.15), 8x8 sample "
            "covariances of 16 snapshots with Gamma(2) texture; SPDNet BiMap 8->4, [HPD BN], "
            "ReEig, LogEig, linear; Adam 1e-2, batch 30; 240 test matrices."
        ),
        configs={
            "smoke": {**_BASE, "seeds": 1, "epochs": 1, "train_per_class": 15},
            "quick": {**_BASE, "seeds": 6, "epochs": 10, "train_per_class": 60},
            "full": {**_BASE, "seeds": 10, "epochs": 40, "train_per_class": 200},
        },
        run=run,
        figure=_figure,
        caption="Test accuracy per epoch, each line a seed (blue: with HPD BN).",
    )
)
