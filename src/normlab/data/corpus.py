"""A byte-level text corpus that exists on every machine: the CPython standard library.

The ``*.py`` files of the running interpreter's standard library (test suites and
site-packages excluded) are split by file, deterministically, into ``train`` and a held-out
twentieth, which is split by file again into ``val`` (selection: tuning, early stopping)
and ``test`` (the reported numbers): no file, so no window, is in both. A fourth split,
``prose``, holds only the comments and docstrings of the held-out files: English text in
the same files, a distribution shift for claims that calibrate on code and test on
something else.
"""

from __future__ import annotations

import functools
import hashlib
import io
import sysconfig
import tokenize
from pathlib import Path

import torch

__all__ = ["BOS", "SPLITS", "VOCAB", "corpus", "corpus_fingerprint", "sample_batch"]

#: Byte values 0..255 plus one beginning-of-sequence token.
VOCAB = 257
BOS = 256
SPLITS = ("train", "val", "test", "prose")
_EXCLUDED_DIRS = {"site-packages", "test", "tests", "idle_test", "__pycache__"}


@functools.cache
def _files() -> tuple[Path, ...]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return tuple(sorted(p for p in root.rglob("*.py") if not _EXCLUDED_DIRS.intersection(p.parts)))


def _split_of(path: Path) -> str:
    """``"train"``, ``"val"`` or ``"test"``: a hash of the file's name and folder, so the
    assignment is the same on every machine and never splits a file."""
    digest = hashlib.sha256(path.name.encode() + str(path.parent.name).encode()).digest()
    if digest[0] % 20:
        return "train"
    return "val" if digest[1] % 2 == 0 else "test"


def _prose(source: bytes) -> bytes:
    """Comments and docstring-like string literals of a Python source file."""
    parts: list[str] = []
    try:
        tokens = list(tokenize.tokenize(io.BytesIO(source).readline))
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError):
        return b""
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            parts.append(tok.string.lstrip("#").strip())
        elif tok.type == tokenize.STRING and tok.string.endswith(('"""', "'''")):
            parts.append(tok.string.strip("\"'rbuRBU").strip())
    return "\n".join(p for p in parts if p).encode("utf-8", "replace") + b"\n"


@functools.cache
def corpus(split: str = "train") -> torch.Tensor:
    """The bytes of one split as a uint8 tensor.

    Args:
        split: ``"train"``, ``"val"``, ``"test"`` or ``"prose"``.
    """
    if split not in SPLITS:
        raise ValueError(f"Unknown corpus split {split!r}; expected one of {SPLITS}.")
    wanted = ("val", "test") if split == "prose" else (split,)
    files = [p for p in _files() if _split_of(p) in wanted]
    if not files:
        raise RuntimeError("Found no standard-library source files to build the corpus from.")
    raw = [p.read_bytes() for p in files]
    data = b"".join(_prose(r) for r in raw) if split == "prose" else b"".join(raw)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def corpus_fingerprint() -> str:
    """A short hash of the corpus file list and sizes, part of every cache key."""
    h = hashlib.sha256()
    for p in _files():
        h.update(f"{p.name}:{p.stat().st_size}:{_split_of(p)};".encode())
    return h.hexdigest()[:16]


def sample_batch(
    data: torch.Tensor,
    batch: int,
    context: int,
    generator: torch.Generator,
    *,
    limit: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch of ``(inputs, targets)`` of shape ``(batch, context)``.

    Inputs start with :data:`BOS` followed by ``context - 1`` bytes; targets are the
    ``context`` bytes that follow BOS, so every byte is predicted and BOS never is.

    Args:
        data: a corpus split.
        batch: sequences per batch.
        context: tokens per sequence.
        generator: the source of the random offsets.
        limit: sample only from the first ``limit`` bytes (a smaller dataset).
    """
    n = len(data) if limit is None else min(limit, len(data))
    if n <= context:
        raise ValueError(f"Need more than context={context} bytes to sample from, got {n}.")
    starts = torch.randint(0, n - context, (batch,), generator=generator)
    offsets = starts[:, None] + torch.arange(context)
    targets = data[offsets].long()
    bos = torch.full((batch, 1), BOS, dtype=torch.long)
    return torch.cat([bos, targets[:, :-1]], dim=1), targets
