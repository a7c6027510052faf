"""The NSN codebook cache: every corrupt or wrong file is detected, warned about and rebuilt."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from safetensors.torch import save

from normlab.quant import nsn

STAGES, SEED, SAMPLES = 1, 3, 512
CORRUPTIONS = {
    "zero-filled": lambda b: bytes(len(b)),
    "text": lambda b: b"codebook\n" * 50,
    "random bytes": lambda b: bytes(torch.randint(0, 256, (len(b),), dtype=torch.uint8).tolist()),
    "truncated": lambda b: b[: len(b) - 100],
    "wrong tensor": lambda b: save({"value": torch.zeros(2, 3)}),
    "unrecorded tensor": lambda b: save({"value": torch.zeros(STAGES, 256, 8)}),
    "non-finite codeword": lambda b: b[:-4] + bytes([0xFF] * 4),
}


def _path(root):
    return root / "codebooks" / f"gaussian-{STAGES}-{SEED}-{SAMPLES}-v2.safetensors"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("books")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMLAB_CACHE", str(root))
        nsn._gaussian_codebooks.cache_clear()
        books = nsn._gaussian_codebooks(STAGES, SEED, SAMPLES)
    nsn._gaussian_codebooks.cache_clear()
    return books, _path(root).read_bytes()


@pytest.mark.parametrize("form", CORRUPTIONS)
def test_a_bad_codebook_cache_is_rebuilt(tmp_path, monkeypatch, good, form):
    monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path))
    books, data = good
    path = _path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(CORRUPTIONS[form](data))
    nsn._gaussian_codebooks.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=path.name):
            again = nsn._gaussian_codebooks(STAGES, SEED, SAMPLES)
    finally:
        nsn._gaussian_codebooks.cache_clear()
    assert torch.equal(again, books) and torch.isfinite(again).all()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the rewritten file verifies
            assert torch.equal(nsn._gaussian_codebooks(STAGES, SEED, SAMPLES), books)
    finally:
        nsn._gaussian_codebooks.cache_clear()


def test_a_good_codebook_cache_is_used_without_refitting(tmp_path, monkeypatch, good):
    monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path))
    books, data = good
    _path(tmp_path).parent.mkdir(parents=True)
    _path(tmp_path).write_bytes(data)

    def refit(*args):
        raise AssertionError("a verified cache must not be refitted")

    monkeypatch.setattr(nsn, "_fit_gaussian_codebooks", refit)
    nsn._gaussian_codebooks.cache_clear()
    try:
        assert torch.equal(nsn._gaussian_codebooks(STAGES, SEED, SAMPLES), books)
    finally:
        nsn._gaussian_codebooks.cache_clear()
    assert math.isfinite(float(books.abs().max()))
