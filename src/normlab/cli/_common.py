"""What every subcommand shares: argument types, errors, input and output checks."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import struct
import sys
from pathlib import Path

__all__ = [
    "CliError",
    "Formatter",
    "check_model_folder",
    "check_output",
    "fail",
    "jobs_type",
    "positive_int",
]


class CliError(Exception):
    """Bad input or output: reported as ``normlab CMD: error: ...`` with exit status 2."""


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help that shows every default once and keeps the description's line breaks.

    An option whose help already says its default in words (``(default: on at --scale
    full, off otherwise)``) does not get argparse's ``(default: None)`` too.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default:" in text:
            return text
        return super()._get_help_string(action)


def fail(command: str, message: str) -> int:
    """Print ``message`` to stderr as an error of ``command``; return exit status 2."""
    print(f"normlab {command}: error: {message}", file=sys.stderr)
    return 2


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def jobs_type(text: str) -> int:
    """argparse type: a positive integer, or ``auto`` for one job per CPU core."""
    if text == "auto":
        return os.cpu_count() or 1
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{err} (or 'auto' for one per core)") from None


def _check_safetensors(path: Path) -> None:
    """Raise :class:`CliError` unless ``path`` is a complete safetensors file (header and
    every tensor's bytes present), without loading it."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ValueError("shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise ValueError(f"the header claims {n} bytes but the file has {size}")
            header = json.loads(f.read(n))
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        ends = [int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"]
        need = 8 + n + max(ends, default=0)
        if need > size:
            raise ValueError(f"truncated: the tensors need {need} bytes but the file has {size}")
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as err:
        raise CliError(f"{path} is not a valid safetensors file: {err}") from None


def check_model_folder(path: str | Path) -> Path:
    """Check a model folder before loading it: a folder, a ``config.json`` holding a JSON
    object, and weight files that are complete. Raises :class:`CliError` naming the file."""
    path = Path(path)
    if not path.is_dir():
        raise CliError(f"{path} is not a folder (expected a model folder with config.json)")
    config = path / "config.json"
    if not config.is_file():
        raise CliError(
            f"{path} is not a model folder: no config.json (a normlab checkpoint or a Hugging "
            "Face model saved with save_pretrained)"
        )
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CliError(f"{config} is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise CliError(f"{config} is not a JSON object (it holds a {type(data).__name__})")
    weights = sorted(path.glob("*.safetensors"))
    for file in weights:
        _check_safetensors(file)
    if not weights and not any(path.glob("*.bin")):
        raise CliError(f"{path} holds no weights (model.safetensors or pytorch_model.bin)")
    return path


def _writable_folder(folder: Path) -> bool:
    """Whether ``folder`` can be created and written, found by doing it and undoing it:
    permission bits say yes to root on read-only or virtual file systems (``/proc``)."""
    missing = []
    existing = folder
    while not existing.exists():
        missing.append(existing)
        existing = existing.parent
    if not existing.is_dir():
        return False
    try:
        for part in reversed(missing):
            part.mkdir()
        probe = folder / ".normlab-write-test"
        probe.write_bytes(b"")
        probe.unlink()
        return True
    except OSError:
        return False
    finally:
        for part in missing:  # the deepest first; only the folders made here
            if part.is_dir():
                with contextlib.suppress(OSError):
                    part.rmdir()


def check_output(
    out: str | Path,
    *,
    inputs: tuple[Path, ...] = (),
    empty: bool = False,
    overwrite: bool = False,
) -> Path:
    """Check an output folder before any work, leaving nothing behind (a folder that did
    not exist is created to test it, then removed).

    Args:
        out: the folder.
        inputs: input folders ``out`` must not be, unless ``overwrite``.
        empty: refuse a non-empty folder unless ``overwrite``.
        overwrite: the user allowed replacing.

    Raises:
        CliError: ``out`` is a file, not writable, an input, or not empty.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CliError(f"the output {out} is a file, not a folder; choose another path")
    blocker = next((p for p in out.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise CliError(f"cannot write to {out}: {blocker} is a file, not a folder")
    if not _writable_folder(out):
        raise CliError(
            f"cannot write to {out}: the folder cannot be created or written there; choose "
            "another folder"
        )
    for source in inputs:
        if out.resolve() == Path(source).resolve() and not overwrite:
            raise CliError(
                f"the output {out} is the input folder; writing there would replace the "
                "input model (pass --overwrite to do it anyway)"
            )
    if empty and out.is_dir() and any(out.iterdir()) and not overwrite:
        raise CliError(
            f"the output folder {out} is not empty; stale files would be mixed with the new "
            "model (pass --overwrite to replace its weights, or choose an empty folder)"
        )
    return out
