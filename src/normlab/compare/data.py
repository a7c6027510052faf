"""Resolving DATA: a text file or folder (language modelling), a CSV (forecasting), or
``module:function`` returning train/validation/test.

Splits are disjoint and contiguous, in this order: text is cut 80/10/10 by tokens (train,
validation, test); a series is cut 70/10/20 by time (the Time-Series-Library protocol of
:func:`normlab.data.series.split_windows`, standardized on the training rows). Text goes
through the model folder's tokenizer when it has one, else it is read as bytes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from normlab.compare.models import ModelSource, load_function

__all__ = ["BYTE_VOCAB", "Data", "resolve_data"]

#: Vocabulary of byte-level text: 256 bytes.
BYTE_VOCAB = 256
#: Fractions of text tokens for train and validation (the rest is test).
TEXT_SPLIT = (0.8, 0.1)


@dataclass
class Data:
    """What DATA resolved to.

    Attributes:
        task: "lm", "forecast" or "classify".
        train, val, test: the splits (token tensors; :class:`~normlab.data.series.Windows`;
            ``(x, y)`` tensors).
        unit: the metric's name and unit (lower is better).
        splits: the splits as stated on the page (sizes and where they come from).
        dims: what the model needs from the data (vocab, channels, lookback, horizon).
        fingerprint: a hash of the data's content.
    """

    task: str
    train: Any
    val: Any
    test: Any
    unit: str
    splits: dict[str, Any] = field(default_factory=dict)
    dims: dict[str, Any] = field(default_factory=dict)
    fingerprint: str = ""


def _text(path: Path) -> str:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*.txt") if p.is_file())
    if not files:
        raise ValueError(f"{path} holds no .txt files.")
    return "\n".join(f.read_text(encoding="utf-8", errors="replace") for f in files)


def _tokens(text: str, source: ModelSource) -> tuple[torch.Tensor, str]:
    if source.kind == "hf" and source.tokenizer:
        import transformers

        tok = transformers.AutoTokenizer.from_pretrained(source.spec)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        return torch.tensor(ids, dtype=torch.long), f"the model folder's tokenizer ({len(tok)})"
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long), "bytes (256 symbols)"


def _lm(tokens: torch.Tensor, how: str, origin: str, context: int) -> Data:
    n = len(tokens)
    a, b = int(n * TEXT_SPLIT[0]), int(n * (TEXT_SPLIT[0] + TEXT_SPLIT[1]))
    parts = {"train": tokens[:a], "val": tokens[a:b], "test": tokens[b:]}
    short = [k for k, v in parts.items() if len(v) <= context + 1]
    if short:
        raise ValueError(
            f"The text has {n} tokens: its {'/'.join(short)} split(s) are shorter than one "
            f"window of {context + 1} tokens; give more text or a smaller --context."
        )
    unit = "bits/byte" if how.startswith("bytes") else "bits/token"
    splits = {
        k: {"tokens": len(v), "from": lo, "to": lo + len(v)}
        for (k, v), lo in zip(parts.items(), (0, a, b), strict=True)
    }
    splits["how"] = f"{origin}, {how}; contiguous 80/10/10 token split, disjoint"
    digest = hashlib.sha256(tokens.numpy().tobytes()).hexdigest()[:20]
    vocab = int(tokens.max()) + 1 if n else 0
    return Data("lm", *parts.values(), unit, splits, {"vocab_needed": vocab}, digest)


def _csv(path: Path, columns: list[str] | None, lookback: int, horizon: int) -> Data:
    import csv

    from normlab.data.series import Series, split_windows

    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        raise ValueError(f"{path} has no data rows.")
    header, body = rows[0], rows[1:]
    numeric = []
    for i, name in enumerate(header):
        try:
            [float(r[i]) for r in body]
            numeric.append(name)
        except (ValueError, IndexError):
            continue
    chosen = columns or numeric
    missing = [c for c in chosen if c not in header]
    if missing:
        raise ValueError(f"{path.name} has no column(s) {missing}; it has {header}.")
    bad = [c for c in chosen if c not in numeric]
    if bad:
        raise ValueError(f"Column(s) {bad} of {path.name} are not numeric.")
    if not chosen:
        raise ValueError(f"{path.name} has no numeric column.")
    values = np.array([[float(r[header.index(c)]) for c in chosen] for r in body], np.float32)
    splits = split_windows(
        Series(path.stem, values, tuple(chosen)), lookback=lookback, horizon=horizon
    )
    stated = {
        k: {"windows": len(getattr(splits, k)), "rows_from": getattr(splits, k).start}
        for k in ("train", "val", "test")
    }
    stated["how"] = (
        f"{path.name}: {len(body)} rows x {len(chosen)} column(s) {chosen}; split by time "
        "70/10/20 (disjoint targets), standardized on the training rows; "
        f"lookback {lookback}, horizon {horizon}"
    )
    dims = {"channels": len(chosen), "lookback": lookback, "horizon": horizon}
    digest = hashlib.sha256(values.tobytes()).hexdigest()[:20]
    return Data("forecast", splits.train, splits.val, splits.test, "MSE", stated, dims, digest)


def _from_function(spec: str, task: str) -> Data:
    if task == "forecast":
        raise ValueError(
            f"DATA {spec!r}: module:function data serves --task lm and classify; for "
            "forecasting give a CSV file (columns are series, rows are time steps)."
        )
    out = load_function(spec)()
    if not (isinstance(out, (tuple, list)) and len(out) == 3):
        raise ValueError(f"{spec}() must return (train, validation, test); got {type(out)}.")
    parts = list(out)
    h = hashlib.sha256()
    for part in parts:
        for t in part if isinstance(part, (tuple, list)) else (part,):
            h.update(torch.as_tensor(t).numpy().tobytes())
    if task == "classify":
        sizes = {
            k: {"examples": len(p[0])}
            for k, p in zip(("train", "val", "test"), parts, strict=False)
        }
        sizes["how"] = f"{spec}(): (x, y) train/validation/test as returned"
        classes = int(max(int(torch.as_tensor(p[1]).max()) for p in parts)) + 1
        dims = {"classes": classes}
        return Data(task, *parts, "cross-entropy (nats)", sizes, dims, h.hexdigest()[:20])
    tokens = [torch.as_tensor(p, dtype=torch.long).flatten() for p in parts]
    sizes = {k: {"tokens": len(t)} for k, t in zip(("train", "val", "test"), tokens, strict=False)}
    sizes["how"] = f"{spec}(): token train/validation/test as returned"
    vocab = max(int(t.max()) for t in tokens) + 1
    return Data("lm", *tokens, "bits/token", sizes, {"vocab_needed": vocab}, h.hexdigest()[:20])


def resolve_data(
    spec: str,
    source: ModelSource,
    *,
    task: str,
    context: int = 64,
    columns: list[str] | None = None,
    lookback: int = 96,
    horizon: int = 24,
) -> Data:
    """Read DATA for ``task`` (see the module docstring).

    Raises:
        ValueError: the data cannot be read, or does not fit the task.
    """
    path = Path(spec).expanduser()
    if ":" in spec and not path.exists():
        return _from_function(spec, task)
    if not path.exists():
        raise ValueError(f"DATA {spec!r} does not exist (a file, a folder or module:function).")
    if path.suffix.lower() in (".csv", ".tsv"):
        if task != "forecast":
            raise ValueError(f"A CSV is a series for --task forecast, not --task {task}.")
        return _csv(path, columns, lookback, horizon)
    if task != "lm":
        raise ValueError(f"{spec!r} is text: use --task lm (or a CSV for forecasting).")
    tokens, how = _tokens(_text(path), source)
    return _lm(tokens, how, path.name, context)
