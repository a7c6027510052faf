"""Cached tensors that are verified on every load and rebuilt when anything is off.

A cached artefact is one safetensors file holding the tensor ``"value"`` and, in the
file's metadata, its shape, dtype and the SHA-256 of its bytes, recorded when it was
written (atomically, :func:`normlab._io.atomic_write_bytes`). :func:`cached_tensor` uses it
only when it parses, its tensor has the expected shape and dtype, the bytes hash to the
recorded digest and the caller's own check passes; otherwise (zero-filled, truncated, text,
random bytes, another tensor) it warns, naming the file, and rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from normlab._io import atomic_write_bytes

__all__ = ["cached_tensor", "tensor_digest"]


def tensor_digest(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's dtype, shape and bytes (C order)."""
    h = hashlib.sha256(f"{t.dtype}:{tuple(t.shape)}:".encode())
    h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _encode(t: torch.Tensor) -> bytes:
    from safetensors.torch import save

    meta = {"shape": str(tuple(t.shape)), "dtype": str(t.dtype), "sha256": tensor_digest(t)}
    return save({"value": t.detach().cpu().contiguous()}, metadata=meta)


def _decode(data: bytes, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The verified tensor of a cache file's bytes; ValueError saying what is wrong."""
    from safetensors.torch import load

    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes, too short for a safetensors file")
    n = int.from_bytes(data[:8], "little")
    if not 0 < n <= len(data) - 8:
        raise ValueError(f"header length {n} does not fit a {len(data)}-byte file")
    meta = json.loads(data[8 : 8 + n]).get("__metadata__") or {}
    value = load(data).get("value")
    if value is None:
        raise ValueError("no tensor named 'value'")
    if tuple(value.shape) != shape or value.dtype != dtype:
        raise ValueError(
            f"holds a {value.dtype} tensor of shape {tuple(value.shape)}, expected {dtype} "
            f"of shape {shape}"
        )
    if meta.get("sha256") != tensor_digest(value):
        raise ValueError("its bytes do not match the digest recorded when it was written")
    return value


def cached_tensor(
    path: Path,
    build: Callable[[], torch.Tensor],
    *,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    check: Callable[[torch.Tensor], str | None] | None = None,
) -> torch.Tensor:
    """The tensor cached at ``path``, verified, or ``build()`` written there.

    Args:
        path: the cache file (safetensors).
        build: makes the tensor when the cache is missing or fails verification.
        shape: the tensor's expected shape.
        dtype: its expected dtype.
        check: optional content check returning a problem description, or None if fine
            (e.g. "values outside 0..16").

    Raises:
        ValueError: when ``build()`` itself returns a tensor that fails verification.
    """
    path = Path(path)
    if path.exists():
        try:
            value = _decode(path.read_bytes(), shape, dtype)
            problem = check(value) if check is not None else None
            if problem:
                raise ValueError(problem)
            return value
        except Exception as err:  # any unreadable or wrong file is a cache miss
            warnings.warn(
                f"normlab: the cached file {path} is unusable ({type(err).__name__}: {err}); "
                "rebuilding it.",
                RuntimeWarning,
                stacklevel=3,
            )
    value = build()
    if tuple(value.shape) != shape or value.dtype != dtype:
        raise ValueError(
            f"built a {value.dtype} tensor of shape {tuple(value.shape)} for {path.name}, "
            f"expected {dtype} of shape {shape}."
        )
    atomic_write_bytes(path, _encode(value))
    return value
