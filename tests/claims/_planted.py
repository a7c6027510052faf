"""Small planted claims for the runner and report tests (not registered at import).

The ``planted`` fixture (conftest.py) registers them for one test; worker processes find
them in this module's globals (``runner._find_claim``), so pooled runs work too.
"""

from __future__ import annotations

import math
import os
import time

from normlab.claims.core import (
    Check,
    CheckOutcome,
    Claim,
    Effect,
    FreeSetting,
    Margin,
    Precondition,
    Premise,
    cell,
)

CONFIGS = {
    "smoke": {"seeds": 1, "offset": 0.0},
    "quick": {"seeds": 3, "offset": 0.0},
    "full": {"seeds": 4, "offset": 0.0},
}
CHOICE = "normlab's choice: a planted test claim"


def _run_ok(config, seed):
    from normlab.probes.rank import numerical_rank  # a function-level import, followed too

    assert callable(numerical_rank)
    return {
        "table": {
            "method": {"rank": 3.0, "score": 1.0 + 0.1 * seed + config.get("offset", 0.0)},
            "baseline": {"rank": 2.0, "score": 0.0},
        },
        "curves": {"loss": [1.0, float("inf"), float("nan")]},
    }


def _figure(measurements):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [cell(m, "method", "score") for m in measurements][:1] * 3, "o-")
    return fig


def _check(config):
    return CheckOutcome(True, 0.0, "planted property holds exactly")


def _failing_check(config):
    return CheckOutcome(False, 1.0, "planted property fails")


def _score_gap(m):
    return cell(m, "method", "score") - cell(m, "baseline", "score")


def _rank_gap(m):
    return cell(m, "method", "rank") - cell(m, "baseline", "rank")


PRIMARY = Effect(
    "score_gap",
    "method minus baseline score",
    _score_gap,
    direction="greater",
    margin=Margin(0.5, CHOICE),
    baseline="baseline",
    method="method",
    unit="pts",
)
SECONDARY = Effect(
    "rank_gap",
    "method minus baseline rank",
    _rank_gap,
    direction="greater",
    margin=Margin(0.0, CHOICE),
    baseline="baseline",
)

OK = Claim(
    id="planted-ok",
    paper="A planted paper",
    hypothesis="the method scores higher",
    primary=PRIMARY,
    secondary=(SECONDARY,),
    headline="+1 point",
    configs=CONFIGS,
    run=_run_ok,
    checks=(Check("exact", "a planted exact property", _check),),
    premises=(
        Premise(
            "baseline_ranked",
            "the baseline's rank",
            lambda m: cell(m, "baseline", "rank"),
            "greater",
            Margin(1.0, CHOICE),
        ),
    ),
    free_settings=(FreeSetting("offset", -2.0, 0.5, CHOICE),),
    untuned="a planted claim trains nothing, so there is nothing to tune",
    preconditions=(
        Precondition(
            "has_rank",
            "the baseline's rank",
            lambda m: cell(m, "baseline", "rank"),
            op=">=",
            threshold=1.0,
            source=CHOICE,
        ),
    ),
    setup="planted",
    scale_note="the planted claim runs one variant at quick scale",
    figure=_figure,
    caption="look at the planted dots",
)

UNTESTABLE = Claim(
    id="planted-untestable",
    paper="A planted paper",
    hypothesis="the method scores higher where the baseline has rank 10",
    primary=PRIMARY,
    headline="+1 point",
    configs=CONFIGS,
    run=_run_ok,
    preconditions=(
        Precondition(
            "big_rank",
            "the baseline's rank",
            lambda m: cell(m, "baseline", "rank"),
            op=">=",
            threshold=10.0,
            source=CHOICE,
        ),
    ),
)

CHECK_FAILS = Claim(
    id="planted-check-fails",
    paper="A planted paper",
    hypothesis="the method scores higher",
    primary=PRIMARY,
    headline="+1 point",
    configs=CONFIGS,
    run=_run_ok,
    checks=(Check("broken", "a property that fails", _failing_check),),
)


def _run_slow(config, seed):
    marker = os.environ.get("PLANTED_SLOW_MARKERS")
    if marker:
        open(os.path.join(marker, f"started-{seed}"), "w").close()
    deadline = time.time() + float(os.environ.get("PLANTED_SLOW_SECONDS", "60"))
    while time.time() < deadline:
        time.sleep(0.05)
    return {"table": {"method": {"score": 1.0}, "baseline": {"score": 0.0}}}


SLOW = Claim(
    id="planted-slow",
    paper="A planted paper",
    hypothesis="waiting",
    primary=PRIMARY,
    headline="none",
    configs={s: {"seeds": 2} for s in CONFIGS},
    run=_run_slow,
)


def _boom(config, seed):
    raise RuntimeError(f"planted failure in seed {seed}")


FAILS = Claim(
    id="planted-fails",
    paper="A planted paper",
    hypothesis="never measured",
    primary=PRIMARY,
    headline="none",
    configs=CONFIGS,
    run=_boom,
)


def _run_timed(config, seed):
    """Records when it ran and in which process, for the exclusive-scheduling test."""
    return {
        "table": {
            "method": {"score": 1.0, "start": time.time(), "pid": float(os.getpid())},
            "baseline": {"score": 0.0},
        }
    }


def _check_where(config):
    """Passes, with the process it ran in as its value (the checks compute no timing)."""
    return CheckOutcome(True, float(os.getpid()), "records its process")


def _run_stamped(config, seed):
    time.sleep(0.2)
    return {"table": {"method": {"score": 1.0, "end": time.time()}, "baseline": {"score": 0.0}}}


STAMPED = Claim(
    id="planted-stamped",
    paper="A planted paper",
    hypothesis="records when its tasks end",
    primary=PRIMARY,
    headline="none",
    configs=CONFIGS,
    run=_run_stamped,
)

TIMED = Claim(
    id="planted-timed",
    paper="A planted paper",
    hypothesis="a timing claim, run alone",
    primary=PRIMARY,
    headline="none",
    configs=CONFIGS,
    run=_run_timed,
    checks=(Check("where", "records the process the checks ran in", _check_where),),
    exclusive=True,
)


BROKEN_EFFECT = Claim(
    id="planted-broken-effect",
    paper="A planted paper",
    hypothesis="its secondary effect reads a missing arm",
    primary=PRIMARY,
    secondary=(
        Effect(
            "broken",
            "a missing arm",
            lambda m: cell(m, "nobody", "x"),
            "greater",
            Margin(0.0, CHOICE),
        ),
    ),
    headline="none",
    configs=CONFIGS,
    run=_run_ok,
)


def _train_toy(arm, params, seed):
    """A noisy quadratic in log10(lr) with its optimum at 1e-2, the same for every arm."""
    import numpy as np

    from normlab.claims.arms import Trained

    rng = np.random.default_rng([seed, round(1e6 * params["lr"])])
    loss = (math.log10(params["lr"]) + 2) ** 2 + rng.normal(0, 0.05)
    return Trained(loss, model=(loss, seed))


def _test_toy(arm, trained):
    import numpy as np

    loss, seed = trained.model
    return {"score": -loss + np.random.default_rng([seed, 7]).normal(0, 0.3)}


def _run_handicap(config, seed):
    from normlab.claims.arms import run_arms

    return run_arms(config, seed, _train_toy, _test_toy, reference=10.0)


#: The baseline's grid stops two decades short of the optimum: a handicap its A/A placebo
#: (the baseline trained through the method's grid) exposes.
HANDICAP = Claim(
    id="planted-handicap",
    paper="A planted paper",
    hypothesis="the method scores higher, against a baseline tuned on a poor grid",
    primary=Effect(
        "score_gap",
        "method minus baseline score",
        _score_gap,
        direction="greater",
        margin=Margin(0.0, CHOICE),
        baseline="baseline",
        method="method",
    ),
    headline="none",
    configs={
        s: {
            "seeds": 5,
            "scale_lr": 1.0,
            "search": {
                "per_arm": {
                    "method": {"lr": [1e-3, 1e-2, 1e-1]},
                    "baseline": {"lr": [1e-5, 1e-4, 1e-3]},
                },
                "extend": 0,
            },
        }
        for s in CONFIGS
    },
    run=_run_handicap,
    premises=(
        Premise(
            "baseline_scores",
            "the baseline's score",
            lambda m: cell(m, "baseline", "score") + 10,
            "greater",
            Margin(0.0, CHOICE),
        ),
    ),
    free_settings=(FreeSetting.scaled("scale_lr", CHOICE),),
    decisive="scale_lr",
)

ALL = (BROKEN_EFFECT, OK, UNTESTABLE, CHECK_FAILS, SLOW, FAILS, STAMPED, TIMED, HANDICAP)
assert all(math.isfinite(c.primary.margin.value) for c in ALL)
