"""``normlab.compare``: which normalization for *my* model, judged by the claims engine.

:func:`compare` resolves MODEL and DATA, refuses up front an arm whose swap is impossible,
runs every (arm, seed) task through :mod:`normlab.compare.engine` (cached, resumable,
parallel), judges each arm against the reference with :mod:`normlab.compare.stats`, and
returns a :class:`Comparison` that writes ``index.html``, ``results.json`` and a terminal
table.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from normlab.compare.stats import ArmStats, judge_arms

__all__ = ["Arm", "Comparison", "assemble", "compare", "prepare"]

#: Default learning rates (the grid every arm is tuned over).
LRS = (1e-3, 3e-3, 1e-2)
#: Default margin, as a fraction of the reference's mean test metric.
RELATIVE_MARGIN = 0.01


@dataclass(frozen=True)
class Arm:
    """One arm over its seeds.

    Attributes:
        name: the arm (a norm spec, or a series normalizer / "none").
        lrs: the learning rate per seed (the first seed's tuned, the others' equal to it).
        tests: the test metric per seed (a diverged choice counts as the untrained model's).
        vals: the chosen validation score per seed.
        untrained: the untrained model's validation metric per seed.
        premise: every seed's tuned model beats its untrained model on validation.
        diverged: seeds whose chosen run diverged.
        on_edge: seeds whose tuning stayed on the edge of the grid after extending it
            (the first seed only: the others train at its choice).
        curves: the chosen run's validation curve per seed.
        train_seconds: the trainings' own time, all seeds.
    """

    name: str
    lrs: tuple[float, ...]
    tests: tuple[float, ...]
    vals: tuple[float | None, ...]
    untrained: tuple[float, ...]
    premise: bool
    diverged: tuple[int, ...]
    on_edge: tuple[int, ...]
    curves: tuple[tuple[tuple[int, float], ...], ...]
    train_seconds: float

    def mean_interval(self) -> tuple[float, float, float]:
        """``(mean, low, high)`` of the test metric: its 95% t-interval over seeds."""
        from normlab.claims.rule import interval

        mean, _, lo, hi = interval(self.tests)
        return mean, lo, hi


@dataclass
class Comparison:
    """The result of :func:`compare`.

    Attributes:
        setting: the plain setting (model, data, task, norms, lrs, steps, ...).
        reference: the arm every other is compared with.
        margin: the non-inferiority margin (metric units) and ``margin_source``.
        unit: the metric (lower is better).
        model: MODEL in words; ``splits``: DATA's splits as stated.
        seeds: the seeds.
        arms: arm -> :class:`Arm`.
        stats: arm -> :class:`~normlab.compare.stats.ArmStats` (every arm but the reference).
        seconds: wall time of the run; ``cached``: tasks reused from the cache.
    """

    setting: dict[str, Any]
    reference: str
    margin: float
    margin_source: str
    unit: str
    model: str
    splits: dict[str, Any]
    seeds: list[int]
    arms: dict[str, Arm]
    stats: dict[str, ArmStats]
    seconds: float = 0.0
    cached: int = 0
    tasks: list[dict[str, Any]] = field(default_factory=list)

    def recommendation(self) -> str:
        """One line: which norm to use, and the caveats that qualify it."""
        better = [a for a, s in self.stats.items() if s.verdict == "better"]
        worse = [a for a, s in self.stats.items() if s.verdict == "worse"]
        unsure = [a for a, s in self.stats.items() if s.verdict == "inconclusive"]
        if better:
            best = min(better, key=lambda a: self.stats[a].mean)
            line = f"Use {best}: lower test {self.unit} than {self.reference} on every check."
        elif worse and not unsure and len(worse) == len(self.stats):
            line = f"Keep {self.reference}: every other arm is worse."
        else:
            line = f"Keep {self.reference}: no arm is shown better."
        caveats = []
        if unsure:
            need = [self.stats[a].seeds_to_settle for a in unsure]
            more = max((n for n in need if n), default=None)
            caveats.append(
                f"{', '.join(unsure)} inconclusive at {len(self.seeds)} seeds"
                + (f" (about {more} would settle it)" if more else "")
            )
        failed = [a for a, arm in self.arms.items() if not arm.premise]
        if failed:
            caveats.append(f"{', '.join(failed)} did not beat the untrained model (premise)")
        div = [a for a, arm in self.arms.items() if arm.diverged]
        if div:
            caveats.append(f"{', '.join(div)} diverged on some seeds")
        edge = [a for a, arm in self.arms.items() if arm.on_edge]
        if edge:
            caveats.append(f"{', '.join(edge)}: tuned lr on the grid's edge")
        steps = self.setting["steps"]
        caveats.append(f"{steps} steps; the ranking can change with longer training")
        return line + " Caveats: " + "; ".join(caveats) + "."

    def to_dict(self) -> dict[str, Any]:
        """The ``results.json`` record (see :func:`normlab.compare.results.validate`)."""
        from normlab.compare.results import SCHEMA_VERSION, clean

        arms = {}
        for name, arm in self.arms.items():
            mean, lo, hi = arm.mean_interval()
            arms[name] = {
                "lrs": list(arm.lrs),
                "tests": list(arm.tests),
                "vals": list(arm.vals),
                "untrained": list(arm.untrained),
                "mean": mean,
                "low": lo,
                "high": hi,
                "premise": arm.premise,
                "diverged": list(arm.diverged),
                "on_edge": list(arm.on_edge),
                "curves": [[list(p) for p in c] for c in arm.curves],
                "train_seconds": arm.train_seconds,
            }
        return clean(
            {
                "schema_version": SCHEMA_VERSION,
                "kind": "normlab.compare",
                "setting": self.setting,
                "model": self.model,
                "splits": self.splits,
                "unit": self.unit,
                "reference": self.reference,
                "margin": self.margin,
                "margin_source": self.margin_source,
                "seeds": self.seeds,
                "arms": arms,
                "effects": {a: s.to_dict() for a, s in self.stats.items()},
                "recommendation": self.recommendation(),
                "seconds": self.seconds,
                "cached": self.cached,
                "tuning": [
                    {"arm": t["arm"], "seed": t["seed"], **t["tuning"]} for t in self.tasks
                ],
            }
        )

    def write(self, out: str | Path) -> Path:
        """Write ``index.html`` and ``results.json`` into ``out``; return the page's path."""
        from normlab._io import atomic_write_bytes, atomic_write_json
        from normlab.compare.page import render
        from normlab.compare.results import validate

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        data = self.to_dict()
        validate(data)
        atomic_write_json(out / "results.json", data)
        page = out / "index.html"
        atomic_write_bytes(page, render(self).encode())
        return page

    def table(self) -> Any:
        """A rich table: each arm's lr, test metric with interval, effect and verdict."""
        from rich.table import Table

        t = Table(title=f"normlab compare: test {self.unit} (lower is better)")
        for col in (
            "arm",
            "lr (per seed)",
            "test mean [95% CI]",
            "vs reference [t CI]",
            "bootstrap CI",
            "P(better)",
            "p Holm",
            "verdict",
            "MDE",
        ):
            t.add_column(col, no_wrap=col in ("arm", "verdict"))
        for name, arm in self.arms.items():
            mean, lo, hi = arm.mean_interval()
            lrs = ",".join(f"{x:.2g}" for x in sorted(set(arm.lrs)))
            s = self.stats.get(name)
            if s is None:
                t.add_row(
                    name, lrs, f"{mean:.4g} [{lo:.4g}, {hi:.4g}]", "reference", "", "", "", "", ""
                )
                continue
            t.add_row(
                name,
                lrs,
                f"{mean:.4g} [{lo:.4g}, {hi:.4g}]",
                f"{s.mean:+.3g} [{s.t_low:+.3g}, {s.t_high:+.3g}]",
                f"[{s.boot_low:+.3g}, {s.boot_high:+.3g}]",
                f"{s.p_better:.2f} (wins {s.wins}/{s.n})",
                f"{s.p_holm:.3g}",
                s.verdict,
                f"{s.mde:.3g}",
            )
        return t


def _setting(
    model: str,
    data: str,
    norms: Sequence[str],
    task: str,
    steps: int,
    lrs: Sequence[float],
    batch: int,
    context: int,
    columns: Sequence[str] | None,
    lookback: int,
    horizon: int,
    keep: Sequence[str] = (),
) -> dict[str, Any]:
    out = {
        "model": model,
        "data": data,
        "task": task,
        "norms": list(norms),
        "lrs": [float(x) for x in lrs],
        "steps": int(steps),
        "batch": int(batch),
        "context": int(context),
        "columns": list(columns) if columns else None,
        "lookback": int(lookback),
        "horizon": int(horizon),
        "extend": 1,
        "curve_points": 5,
    }
    if keep:  # absent when empty: the cache keys of earlier runs stay valid
        out["keep"] = list(keep)
    return out


def prepare(
    model: str,
    data: str,
    norms: Sequence[str],
    *,
    task: str | None = None,
    steps: int = 300,
    lrs: Sequence[float] = LRS,
    batch: int = 16,
    context: int = 64,
    columns: Sequence[str] | None = None,
    lookback: int = 96,
    horizon: int = 24,
    keep: Sequence[str] = (),
) -> tuple[dict[str, Any], dict[str, str], Any, Any]:
    """Resolve and check everything before any training: ``(setting, fingerprints, model
    source, data)``.

    Raises:
        ValueError: a bad MODEL, DATA, arm or option, with one line saying why.
    """
    from pathlib import Path as _Path

    from normlab.compare.models import REFERENCE_MODELS, check_arms, resolve_model
    from normlab.compare.tasks import metric, resolved

    if len(norms) < 2:
        raise ValueError("Give at least two --norms to compare (the reference among them).")
    if len(set(norms)) != len(norms):
        raise ValueError(f"--norms repeats an arm: {list(norms)}.")
    if steps < 1 or batch < 1 or context < 2:
        raise ValueError("--steps and --batch must be >= 1, --context >= 2.")
    if not lrs or any(not (x > 0 and math.isfinite(x)) for x in lrs):
        raise ValueError(f"--lr needs positive learning rates, got {list(lrs)}.")
    if task is None:
        text = str(data).lower()
        native = REFERENCE_MODELS.get(str(model).lower(), (None,))[0]
        task = native or ("forecast" if text.endswith((".csv", ".tsv")) else "lm")
    if task not in ("lm", "forecast", "classify"):
        raise ValueError(f"--task must be lm, forecast or classify, not {task!r}.")
    model = str(_Path(model).resolve()) if _Path(model).is_dir() else str(model)
    data = str(_Path(data).resolve()) if _Path(data).exists() else str(data)
    source = resolve_model(model, task)
    if task == "lm" and source.kind == "hf":
        context = min(context, _position_limit(source) or context)
    setting = _setting(
        model,
        data,
        norms,
        task,
        steps,
        sorted(lrs),
        batch,
        context,
        columns,
        lookback,
        horizon,
        keep,
    )
    source, dataset = resolved(setting)
    if source.task != dataset.task:
        raise ValueError(f"MODEL is a {source.task} model but DATA is for {dataset.task}.")
    if dataset.task == "lm":
        _check_vocab(source, dataset)

    def probe(m: Any) -> float:
        return metric(m, dataset, "val", setting)

    check_arms(source, list(norms), dataset.dims, probe, tuple(keep))
    fingerprints = {"model": source.fingerprint, "data": dataset.fingerprint}
    return setting, fingerprints, source, dataset


def _position_limit(source: Any) -> int | None:
    import transformers

    config = transformers.AutoConfig.from_pretrained(source.spec)
    for key in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 1:
            return value
    return None


def _check_vocab(source: Any, dataset: Any) -> None:
    from normlab.compare.models import build

    model = build(source, "none", 0, dataset.dims)
    embed = getattr(model, "get_input_embeddings", None)
    size = None
    if callable(embed) and embed() is not None:
        size = embed().num_embeddings
    elif hasattr(model, "embed"):
        size = getattr(model.embed, "num_embeddings", None)
    need = dataset.dims.get("vocab_needed", 0)
    if size is not None and need > size:
        raise ValueError(
            f"DATA needs {need} token ids but MODEL's embedding has {size}: give the model "
            "folder its tokenizer, or a vocabulary of at least 256 for byte-level text."
        )


def compare(
    model: str,
    data: str,
    norms: Sequence[str] = ("layernorm", "rmsnorm", "dyt"),
    *,
    reference: str | None = None,
    task: str | None = None,
    steps: int = 300,
    seeds: int | Sequence[int] = 5,
    lrs: Sequence[float] = LRS,
    margin: float | None = None,
    batch: int = 16,
    context: int = 64,
    columns: Sequence[str] | None = None,
    lookback: int = 96,
    horizon: int = 24,
    keep: Sequence[str] = (),
    out: str | Path | None = None,
    jobs: int = 1,
    backend: str = "local",
    address: str | None = None,
    on_done: Callable[[dict[str, Any], bool], None] | None = None,
) -> Comparison:
    """Compare normalizations in ``model`` on ``data`` with the claims protocol.

    Every arm is tuned over ``lrs`` on the first seed (the same trials, selected on
    validation, an edge choice extended), trained on every seed at that choice (tune
    once, as the claims engine does), scored once on test, and judged against
    ``reference`` by paired per-seed differences (see :mod:`normlab.compare.stats`).

    Args:
        model: a Hugging Face folder, a reference model (``tinygpt``, ``forecaster``) or
            ``module:function`` returning an ``nn.Module``.
        data: a text file/folder, a CSV (forecasting), or ``module:function`` returning
            ``(train, val, test)``.
        norms: the arms: registered norms (``"dyt:alpha_init=0.5"`` passes arguments), or
            for forecasting series normalizers and ``"none"``.
        reference: the arm the others are compared with (default: the first).
        task: "lm", "forecast" or "classify" (default: from MODEL and DATA).
        steps: optimizer steps per training run.
        seeds: how many seeds (0..K-1) or which.
        lrs: the learning-rate grid.
        margin: the non-inferiority margin in the metric's units (default: 1% of the
            reference's mean test metric).
        batch: the batch size.
        context: the sequence length (language modelling).
        columns: the CSV's columns (forecasting; default: every numeric one).
        lookback: the input window (forecasting).
        horizon: the forecast window (forecasting).
        keep: module-name globs of norm sites every arm leaves as they are (e.g.
            ``["norm_f"]``: TinyGPT's final norm before the head).
        out: folder for the task cache and, with :meth:`Comparison.write`, the page
            (default: ``compare-out``).
        jobs: parallel worker processes.
        backend: "local" or "ray" (with ``address``, a running cluster).
        on_done: ``(task record, cached) -> None`` after each task.

    Returns:
        The :class:`Comparison`.

    Raises:
        ValueError: bad input, before any training.
    """
    from normlab.compare.engine import run_tasks
    from normlab.compare.models import parse_norm

    start = time.perf_counter()
    setting, fingerprints, source, dataset = prepare(
        model,
        data,
        norms,
        task=task,
        steps=steps,
        lrs=lrs,
        batch=batch,
        context=context,
        columns=columns,
        lookback=lookback,
        horizon=horizon,
        keep=keep,
    )
    ref = reference or norms[0]
    if ref not in norms:
        names = [parse_norm(n)[0] for n in norms]
        if ref in names:
            ref = norms[names.index(ref)]
        else:
            raise ValueError(f"--reference {ref!r} is not among --norms {list(norms)}.")
    seed_list = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    if len(seed_list) < 2:
        raise ValueError("--seeds must be at least 2 (an interval needs two seeds).")
    if backend not in ("local", "ray"):
        raise ValueError(f"--backend must be local or ray, not {backend!r}.")
    if margin is not None and not (margin > 0 and math.isfinite(margin)):
        raise ValueError(f"--margin must be a positive number, got {margin}.")
    folder = Path(out or "compare-out")
    hits = [0]

    def done(record: dict[str, Any], was_cached: bool) -> None:
        hits[0] += was_cached
        if on_done is not None:
            on_done(record, was_cached)

    records = run_tasks(
        setting,
        fingerprints,
        seed_list,
        folder,
        jobs=jobs,
        backend=backend,
        address=address,
        on_done=done,
    )
    cached = hits[0]
    return assemble(
        setting,
        source.describe(),
        dataset,
        ref,
        margin,
        seed_list,
        records,
        time.perf_counter() - start,
        cached,
    )


def assemble(
    setting: dict[str, Any],
    model: str,
    dataset: Any,
    reference: str,
    margin: float | None,
    seeds: list[int],
    records: list[dict[str, Any]],
    seconds: float,
    cached: int = 0,
) -> Comparison:
    """Build the :class:`Comparison` from the task records (one per arm and seed)."""
    by = {(r["arm"], r["seed"]): r for r in records}
    arms = {}
    for name in setting["norms"]:
        rows = [by[name, s] for s in seeds]
        arms[name] = Arm(
            name=name,
            lrs=tuple(r["lr"] for r in rows),
            tests=tuple(float(r["test"]) for r in rows),
            vals=tuple(r["val"] for r in rows),
            untrained=tuple(float(r["untrained"]["val"]) for r in rows),
            premise=all(r["val"] is not None and r["val"] < r["untrained"]["val"] for r in rows),
            diverged=tuple(r["seed"] for r in rows if r["diverged"]),
            on_edge=tuple(r["seed"] for r in rows if r["tuning"].get("on_edge")),
            curves=tuple(tuple((int(a), float(b)) for a, b in r["curve"]) for r in rows),
            train_seconds=sum(r["train_seconds"] for r in rows),
        )
    if margin is None:
        margin = RELATIVE_MARGIN * abs(statistics.fmean(arms[reference].tests))
        source = f"normlab's choice: {RELATIVE_MARGIN:.0%} of {reference}'s mean test metric"
    else:
        source = "given (--margin)"
    values = {name: arm.tests for name, arm in arms.items()}
    stats = judge_arms(values, reference, margin)
    return Comparison(
        setting=setting,
        reference=reference,
        margin=margin,
        margin_source=source,
        unit=dataset.unit,
        model=model,
        splits=dataset.splits,
        seeds=seeds,
        arms=arms,
        stats=stats,
        seconds=seconds,
        cached=cached,
        tasks=records,
    )
