"""Claim "swap-kl": replacement and interchange swap-KL need not agree.

The seed scores layer pairs by two output-grounded swap tests, replacement (one block's map
substituted for another's) and interchange (two blocks run at swapped depths): the gap can
change which layers look safe to prune (Qwen3-8B: removing 1/3/5 layers costs
+2.5/+10.3/+45.4% perplexity interchange-guided vs +11.3/+48.2/+116.5% replacement-guided;
Llama-3.1-8B ties).

Here both protocols (:func:`~normlab.probes.swap.swap_kl`, KL over all positions) are run on
every block pair of the dense TinyGPT of "curse-of-depth" (its trials shared through the
model cache, lr selected on the "val" windows), on one batch of the disjoint "test" split.
Each protocol's pruning order follows the reference rule (min-distance score, never
adjacent); :func:`~normlab.probes.swap.guided_pruning` removes the first ``k`` layers of
each order (and of random non-adjacent orders, the placebo) for every budget both reach,
the cost being the loss increase on a second test batch.

The primary is the abstract's "they need not agree": the protocols' disagreement (1 - the
Spearman correlation of their pair scores) beyond each protocol's disagreement with itself
on a third test batch (the probe's own text noise). (Before, a premise demanded rho < 0.9
after rho = 0.96 had been seen; at 250 steps 1 - rho was 0.049 [0.037, 0.061], growing
with training, as the abstract says.) The pruning costs are secondaries. Premise: each
protocol ranks pairs alike on two batches (the probe measures the model, not the batch).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from normlab.claims.arms import Trained, run_arms
from normlab.claims.catalogue._depth_models import SETTINGS, search, train_arm
from normlab.claims.catalogue._lm_settings import UNIFORM_BPB, lm_free, test_windows
from normlab.claims.common import seed_everything, spearman
from normlab.claims.core import (
    Claim,
    FreeSetting,
    Margin,
    Precondition,
    Premise,
    cell,
    difference,
    register_claim,
)
from normlab.papers import paper
from normlab.probes.swap import guided_pruning, swap_kl
from normlab.training.lm import evaluate_bpb

__all__ = ["CLAIM"]

_PROTOCOLS = ("replacement", "interchange")


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Swap-KL of the tuned dense model on one test batch, each order's cost on another."""
    seed_everything(seed)
    score_x, _ = test_windows(config["eval_batch"], config["context"], 30_000 + seed)
    again_x, _ = test_windows(config["eval_batch"], config["context"], 32_000 + seed)
    held_x, held_y = test_windows(config["eval_batch"], config["context"], 31_000 + seed)
    probed: dict[str, Any] = {}

    def test(arm: str, t: Trained) -> dict[str, float]:
        model, _ = t.model
        result = swap_kl(model, score_x, positions="all")
        again = swap_kl(model, again_x, positions="all")  # the probe's own text noise
        self_rho = [spearman(result.pairs(p), again.pairs(p)) for p in _PROTOCOLS]
        orders = {p: result.order(p) for p in _PROTOCOLS}
        placebo = {"rng": random.Random(seed), "random_orders": config["random_orders"]}
        rows, curves = guided_pruning(model, orders, held_x, held_y, **placebo)
        for p in _PROTOCOLS:
            rows[p]["mean_pair_kl"] = sum(result.pairs(p)) / len(result.pairs(p))
        rho = spearman(result.pairs("replacement"), result.pairs("interchange"))
        rows["protocols"] = {
            "spearman": rho,
            "disagreement": 1.0 - rho,
            "same_first_layer": float(orders["replacement"][0] == orders["interchange"][0]),
        }
        rows["resampled"] = {
            "disagreement": 1.0 - sum(self_rho) / len(self_rho),
            **{f"spearman_{p}": r for p, r in zip(_PROTOCOLS, self_rho, strict=True)},
        }
        probed.update(rows=rows, swap=result.to_dict(), curves=curves)
        return {"test_bpb": evaluate_bpb(model, "test", batches=2, batch=16, seed=seed)}

    # one arm: the pruned dense model; reference: the uniform byte predictor's 8 bpb
    m = run_arms(config, seed, train_arm(config), test, reference=UNIFORM_BPB, arms=["dense"])
    if "dense" in m["diverged"]:  # every order prunes the one diverged model
        m["diverged"].update({name: m["diverged"]["dense"] for name in (*_PROTOCOLS, "random")})
    m["table"].update(probed.pop("rows"))
    return {**m, **probed}


def _figure(measurements: Sequence[dict[str, Any]]):
    import matplotlib.pyplot as plt

    m = measurements[0]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, p in zip(axes[:2], _PROTOCOLS, strict=True):
        im = ax.imshow(m["swap"][p], cmap="viridis")
        ax.set(title=f"{p} swap-KL (nats, seed 0)", xlabel="layer j", ylabel="layer i")
        fig.colorbar(im, ax=ax, fraction=0.046)
    for k, p in enumerate((*_PROTOCOLS, "random")):
        for i, meas in enumerate(measurements):
            curves = meas["curves"][p]
            for j, c in enumerate(curves if isinstance(curves, list) else [curves]):
                loss = [v - c["loss"][0] for v in c["loss"]]
                label = f"{p}-guided" if i == j == 0 else None
                axes[2].plot(loss, "o-", color=f"C{k}", alpha=0.5, ms=3, label=label)
    axes[2].legend(fontsize=8)
    axes[2].set(xlabel="layers removed", ylabel="held-out loss increase (nats)")
    axes[2].xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    return fig


_COST_MARGIN = Margin(
    0.005,
    "normlab's choice: 0.005 nats (0.5% perplexity) per removal budget, well below the "
    "seed's Qwen3-8B gap (+2.5% vs +11.3% at one layer) and about a quick model's "
    "seed-to-seed loss spread",
)
_IF_DIVERGED = {"removal_cost": 0.0}  # a diverged model: no order can be told from another

CLAIM = register_claim(
    Claim(
        id="swap-kl",
        paper=paper("swap-kl"),
        hypothesis=(
            "Replacement and interchange swap-KL rank a trained TinyGPT's layer pairs "
            "differently, beyond the probe's own batch noise; removing the layers "
            "interchange deems safe costs less than removing those replacement deems safe."
        ),
        quote="Both are output-grounded swap-KL probes, but they need not agree",
        primary=difference(
            "protocols_disagree",
            "1 - Spearman correlation of replacement and interchange swap-KL over layer "
            "pairs, minus 1 - each protocol's correlation with itself on a second test batch",
            "protocols",
            "resampled",
            "disagreement",
            direction="greater",
            margin=Margin(
                0.0,
                "normlab's choice: any disagreement beyond the probe's own batch-to-batch "
                "noise (the abstract gives no size)",
            ),
        ),
        secondary=(
            difference(
                "interchange_safer",
                "interchange-guided minus replacement-guided held-out loss increase, mean "
                "over budgets k = 1..K",
                "interchange",
                "replacement",
                "removal_cost",
                direction="less",
                margin=_COST_MARGIN,
                unit="nats",
                if_diverged=_IF_DIVERGED,
            ),
            *(
                difference(
                    f"{p}_vs_random",
                    f"{p}-guided minus random-order held-out loss increase (placebo)",
                    p,
                    "random",
                    "removal_cost",
                    direction="less",
                    margin=_COST_MARGIN,
                    unit="nats",
                    if_diverged=_IF_DIVERGED,
                )
                for p in ("interchange", "replacement")
            ),
        ),
        premises=(
            Premise(
                "probe_reproducible",
                "each protocol's Spearman correlation of pair scores between two test "
                "batches (mean over the two protocols)",
                lambda m: 1.0 - cell(m, "resampled", "disagreement"),
                direction="greater",
                margin=Margin(
                    0.5,
                    "normlab's choice: a probe whose pair ranking keeps rho < 0.5 on other "
                    "text measures the batch, not the model",
                ),
            ),
        ),
        free_settings=(
            *lm_free("d_model", "n_layers", "n_heads", "context", "batch", "warmup"),
            *lm_free(lr="normlab's choice: an untuned trial's rate (the dense lr is tuned)"),
            *lm_free(steps="normlab's choice: curse-of-depth's budget (250 at quick)"),
            *lm_free(eval_batch="normlab's choice: sequences per scoring and held-out batch"),
            FreeSetting.scaled("weight_decay", "curse-of-depth's setting, unused: dense has none"),
            FreeSetting.scaled("random_orders", "normlab's choice: placebo orders per seed"),
        ),
        # the seed's gap grows with training (Pythia, initialization to convergence)
        decisive="steps",
        preconditions=(
            Precondition(
                "model_trained",
                "the pruned model's test bits per byte",
                lambda m: cell(m, "dense", "test_bpb"),
                op="<=",
                threshold=3.8,
                source="normlab's choice: well below byte-unigram entropy (about 5 bpb), so "
                "its layers have distinct roles to compare",
            ),
        ),
        headline="Qwen3-8B, removing 1/3/5 layers: +2.5/+10.3/+45.4% perplexity "
        "interchange-guided vs +11.3/+48.2/+116.5% replacement-guided; Llama-3.1-8B ties.",
        setup=(
            "Trained Pre-LN TinyGPT (8 layers, d=32, 250 steps quick; 12 layers, d=64, 3000 "
            "steps full; the dense model of curse-of-depth, lr selected on validation over "
            "the same grid); swap-KL over all positions of one test batch (and of a second "
            "one, the probe's noise); "
            "pruning by each protocol's order (min-distance score, never adjacent) and by "
            "random non-adjacent orders, cost on a second test batch."
        ),
        scale_note=(
            "The seed's gap appears on converged 8B models and grows with training (Pythia); "
            "the quick model is trained for 250 steps (curse-of-depth's budget), where the "
            "disagreement is small (1 - rho about 0.05) and the pruning orders often "
            "coincide; full scale (3000 steps, 12 layers) is the real test."
        ),
        configs={
            scale: {
                "seeds": seeds,
                **SETTINGS[scale],
                "eval_batch": batch,
                "random_orders": orders,
                "search": search(scale, ["dense"]),
            }
            for scale, seeds, batch, orders in (
                ("smoke", 1, 4, 2),
                ("quick", 5, 16, 4),
                ("full", 5, 32, 8),
            )
        },
        run=run,
        figure=_figure,
        caption=(
            "Seed 0's swap-KL matrices (left, middle) and the held-out loss increase as "
            "layers are removed by each order (right, every seed): the interchange curve "
            "(orange) should lie below the replacement one (blue) and the random ones (green)."
        ),
    )
)
