"""Numeric tables as a byte stream: the CSV data files inside scikit-learn's wheel.

scikit-learn ships its small datasets (iris, wine, breast cancer, digits, diabetes,
linnerud) as CSV files, some gzip-compressed, under ``sklearn/datasets/data``. Their bytes,
decompressed and joined in sorted file order (about 430 KB), are digits, decimal points
and commas: a different domain from source code or English prose for a byte-level model,
available offline on any machine with scikit-learn (the ``claims`` extra).
"""

from __future__ import annotations

import functools
import gzip
from pathlib import Path

import torch

from normlab.data.corpus import corpus, sample_batch

__all__ = ["domain_windows", "table_bytes"]


def _data_dir() -> Path:
    try:
        import sklearn
    except ImportError as err:  # pragma: no cover - the claims extra installs it
        raise ImportError(
            "normlab.data.tables needs scikit-learn: pip install 'normlab[claims]'."
        ) from err
    return Path(sklearn.__file__).parent / "datasets" / "data"


@functools.cache
def table_bytes() -> torch.Tensor:
    """The bytes of every ``*.csv`` and ``*.csv.gz`` file of scikit-learn's bundled datasets,
    decompressed and joined in sorted name order, as a uint8 tensor.

    Examples:
        >>> data = table_bytes()
        >>> data.dtype, data.numel() > 100_000
        (torch.uint8, True)
        >>> numeric = sum(data.eq(c).sum().item() for c in b"0123456789.,-")
        >>> numeric / data.numel() > 0.9  # digits, signs, decimal points and commas
        True
    """
    raw = bytearray()
    for path in sorted(_data_dir().iterdir()):
        if path.name.endswith(".csv"):
            raw += path.read_bytes()
        elif path.name.endswith(".csv.gz"):
            raw += gzip.decompress(path.read_bytes())
    if not raw:
        raise FileNotFoundError(
            f"no CSV data files under {_data_dir()}: reinstall scikit-learn (its wheel ships "
            "them)."
        )
    return torch.frombuffer(raw, dtype=torch.uint8).clone()


def domain_windows(
    split: str, n: int, context: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` byte windows of ``context`` tokens (inputs, next-byte targets) drawn by
    :func:`~normlab.data.corpus.sample_batch` with a generator seeded ``seed``, from the
    numeric tables (``split="tables"``, :func:`table_bytes`) or from a split of the code /
    prose corpus (:func:`~normlab.data.corpus.corpus`: "train", "val", "test", "prose")."""
    data = table_bytes() if split == "tables" else corpus(split)
    return sample_batch(data, n, context, torch.Generator().manual_seed(seed))
