"""Claim "swap-kl": interchange-guided layer removal is safer than replacement-guided.

The seed scores layer pairs by two output-grounded swap tests, replacement (one block's
map substituted for another's) and interchange (two blocks run at swapped depths), and
shows that they need not agree: the protocol gap changes which layers look safe to prune
(Qwen3-8B: removing 1/3/5 layers costs +2.5/+10.3/+45.4% perplexity interchange-guided vs
+11.3/+48.2/+116.5% replacement-guided), while on Llama-3.1-8B the two tie.

Here both protocols (:func:`~normlab.probes.swap.swap_kl`, KL over all positions) are run on
every block pair of a trained deep TinyGPT: the dense model of "curse-of-depth" (the same
architecture, steps and lr grid, its lr selected by the engine on the trainer's "val"
windows as curse-of-depth selects its dense arm, so the trials are shared through the
model cache), on one batch of the disjoint "test" split. Each protocol's pruning order
follows the reference rule (min-distance score, ascending, never adjacent), and the first
``k`` layers of each order are removed for every budget ``k`` both orders reach; the cost
is the next-token loss increase on a second test batch. The placebo: random non-adjacent
orders of the same length.

Premise: the protocols disagree on this model (Spearman correlation of their pair scores
below 0.9); where they rank pairs alike, their orders cannot differ enough for the
comparison to mean anything (measured on the quick model before this premise: rho 0.96,
identical orders in 3 of 5 seeds). The only search is the dense model's lr.
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
from normlab.probes.swap import pruning_curve, random_pruning_order, swap_kl
from normlab.training.lm import evaluate_bpb

__all__ = ["CLAIM"]

_PROTOCOLS = ("replacement", "interchange")


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Swap-KL of the tuned dense model on one test batch, each order's cost on another."""
    seed_everything(seed)
    score_x, _ = test_windows(config["eval_batch"], config["context"], 30_000 + seed)
    held_x, held_y = test_windows(config["eval_batch"], config["context"], 31_000 + seed)
    probed: dict[str, Any] = {}

    def test(arm: str, t: Trained) -> dict[str, float]:
        model, _ = t.model
        result = swap_kl(model, score_x, positions="all")
        orders = {p: result.order(p) for p in _PROTOCOLS}
        budget = min(len(o) for o in orders.values())

        def prune(order: list[int]) -> Any:
            return pruning_curve(model, held_x, order[:budget], targets=held_y)

        rng = random.Random(seed)
        curves = {p: prune(orders[p]) for p in _PROTOCOLS}
        randoms = [prune(random_pruning_order(result.n_layers, budget, rng))
                   for _ in range(config["random_orders"])]  # fmt: skip
        rows: dict[str, dict[str, float]] = {
            p: {
                "removal_cost": c.mean_cost(budget),
                "cost_remove_1": c.loss[1] - c.loss[0],
                "cost_remove_max": c.loss[-1] - c.loss[0],
                "mean_pair_kl": sum(result.pairs(p)) / len(result.pairs(p)),
                "budget": float(budget),
            }
            for p, c in curves.items()
        }
        rows["random"] = {
            "removal_cost": sum(c.mean_cost(budget) for c in randoms) / len(randoms),
            "budget": float(budget),
        }
        rows["protocols"] = {
            "spearman": spearman(result.pairs("replacement"), result.pairs("interchange")),
            "same_first_layer": float(orders["replacement"][0] == orders["interchange"][0]),
        }
        probed.update(
            rows=rows,
            swap=result.to_dict(),
            curves={p: c.to_dict() for p, c in curves.items()}
            | {"random": [c.to_dict() for c in randoms]},
        )
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
                axes[2].plot(range(len(loss)), loss, "o-", color=f"C{k}", alpha=0.5, ms=3,
                             label=f"{p}-guided" if i == j == 0 else None)  # fmt: skip
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

#: The pruned model diverged: no order can be told from another, every difference is 0.
_IF_DIVERGED = {"removal_cost": 0.0}

CLAIM = register_claim(
    Claim(
        id="swap-kl",
        paper=paper("swap-kl"),
        hypothesis=(
            "Removing the layers interchange swap-KL deems safe costs less held-out loss "
            "than removing those replacement swap-KL deems safe, at the same layer budgets."
        ),
        primary=difference(
            "interchange_safer",
            "interchange-guided minus replacement-guided held-out loss increase, mean over "
            "budgets k = 1..K",
            "interchange",
            "replacement",
            "removal_cost",
            direction="less",
            margin=_COST_MARGIN,
            unit="nats",
            if_diverged=_IF_DIVERGED,
        ),
        secondary=(
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
                "protocols_disagree",
                "1 minus the Spearman correlation of replacement and interchange swap-KL "
                "over layer pairs",
                lambda m: 1.0 - cell(m, "protocols", "spearman"),
                direction="greater",
                margin=Margin(
                    0.1,
                    "normlab's choice: at rho >= 0.9 the two protocols rank pairs alike "
                    "enough to be interchangeable",
                ),
                gates=("interchange_safer",),
            ),
        ),
        free_settings=(
            *lm_free("d_model", "n_layers", "n_heads", "context", "batch", "warmup"),
            *lm_free(lr="normlab's choice: an untuned trial's rate (the dense lr is tuned)"),
            *lm_free(steps="normlab's choice: curse-of-depth's budget (150 at quick)"),
            *lm_free(eval_batch="normlab's choice: sequences per scoring and held-out batch"),
            FreeSetting.scaled("weight_decay", "curse-of-depth's setting, unused: dense has none"),
            FreeSetting.scaled("random_orders", "normlab's choice: placebo orders per seed"),
        ),
        # the premise needs a trained model whose protocols disagree (the gap grows with it)
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
            "Trained Pre-LN TinyGPT (8 layers, d=32, 150 steps quick; 12 layers, d=64, 3000 "
            "steps full; the dense model of curse-of-depth, lr selected on validation over "
            "the same grid); swap-KL over all positions of one test batch; "
            "pruning by each protocol's order (min-distance score, never adjacent) and by "
            "random non-adjacent orders, cost on a second test batch."
        ),
        scale_note=(
            "The seed's gap appears on converged 8B models and grows with training; the "
            "quick model is trained for 150 steps (curse-of-depth's budget cut), so the "
            "protocols are expected to agree (premise) and full scale is the real test."
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
