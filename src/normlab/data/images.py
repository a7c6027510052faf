"""Small image data sets that ship with the installed libraries (no download)."""

from __future__ import annotations

import functools
import io
from typing import NamedTuple

import numpy as np
import torch

__all__ = ["ImageSplit", "forget_retain_split", "load_digits_tensors"]


class ImageSplit(NamedTuple):
    """A train/test split of an image classification set; unpacks as a 4-tuple.

    Attributes:
        train_x: training images ``(n, 1, H, W)``, float32 in [0, 1].
        train_y: training labels ``(n,)``, int64.
        test_x: test images.
        test_y: test labels.
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor

    @property
    def classes(self) -> int:
        """Number of classes (largest label + 1)."""
        return int(max(self.train_y.max(), self.test_y.max())) + 1


def _digits_from_sklearn() -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "load_digits_tensors needs scikit-learn: pip install 'normlab[claims]'."
        ) from err
    data = load_digits()
    return np.asarray(data.images, dtype=np.float32) / 16.0, np.asarray(data.target, np.int64)


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    """The digits arrays, read from a small .npz under the cache folder once written.

    Importing scikit-learn costs about a second of CPU per process; the cached copy (about
    0.1 MB compressed) is read in milliseconds. A torn or stale file is rebuilt.
    """
    from normlab._io import atomic_write_bytes, cache_dir

    path = cache_dir() / "data" / "sklearn_digits_v1.npz"
    images = labels = None
    if path.is_file():
        try:
            with np.load(path) as z:
                images, labels = z["images"], z["labels"]
        except (OSError, ValueError, KeyError):
            images = labels = None
    if images is None or labels is None or images.shape != (1797, 8, 8):
        images, labels = _digits_from_sklearn()
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez_compressed(buffer, images=images, labels=labels)
        atomic_write_bytes(path, buffer.getvalue())
    images = np.asarray(images, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def load_digits_tensors(seed: int = 0, *, test_fraction: float = 0.25) -> ImageSplit:
    """scikit-learn's 8x8 handwritten digits (1,797 images, 10 classes) as tensors.

    Pixels (integers 0-16) are scaled to [0, 1]. The split is stratified by class and fixed
    by ``seed``: the same seed always gives the same split.

    Args:
        seed: seed of the random split.
        test_fraction: share of each class held out for testing.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}.")
    images, labels = _digits()
    rng = np.random.default_rng(seed)
    test = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        test[members[: round(test_fraction * len(members))]] = True
    x = torch.from_numpy(images[:, None].copy())
    y = torch.from_numpy(labels.copy())
    mask = torch.from_numpy(test)
    return ImageSplit(x[~mask], y[~mask], x[mask], y[mask])


def forget_retain_split(
    data: ImageSplit, target: int, *, batch: int, attacker_images: int, generator: torch.Generator
) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], dict[str, list[tuple[torch.Tensor]]]]:
    """The class-unlearning split of the BatchNorm unlearning paper (``paper("bn-unlearning")``).

    Returns ``(sets, loaders)``: ``sets["forget"]`` the training images of class ``target``,
    ``sets["retain"]`` the other training images, ``sets["test"]`` the test images of the
    other classes; ``loaders["retain"]`` the retain images in order, ``batch`` at a time
    (unlabelled: one-tuples), and ``loaders["attacker"]`` one batch of ``attacker_images``
    test images of any class drawn by ``generator`` (the paper's unlabelled attacker).

    Examples:
        >>> import torch
        >>> split = load_digits_tensors(0)
        >>> sets, loaders = forget_retain_split(
        ...     split, 3, batch=64, attacker_images=10, generator=torch.Generator())
        >>> bool((sets["forget"][1] == 3).all()), bool((sets["retain"][1] != 3).all())
        (True, True)
        >>> len(loaders["attacker"][0][0]), sum(len(b[0]) for b in loaders["retain"])
        (10, 1210)
    """
    pick = torch.randperm(len(data.test_y), generator=generator)[:attacker_images]
    is_forget, test_keep = data.train_y == target, data.test_y != target
    sets = {
        "forget": (data.train_x[is_forget], data.train_y[is_forget]),
        "retain": (data.train_x[~is_forget], data.train_y[~is_forget]),
        "test": (data.test_x[test_keep], data.test_y[test_keep]),
    }
    retain_x = sets["retain"][0]
    loaders = {
        "retain": [(retain_x[i : i + batch],) for i in range(0, len(retain_x), batch)],
        "attacker": [(data.test_x[pick],)],
    }
    return sets, loaders
