"""The digits cache: every corrupt or wrong file is detected, warned about and rebuilt."""

from __future__ import annotations

import warnings

import pytest
import torch
from safetensors.torch import save

from normlab.data import toy

#: How a cache file can go bad: each maps the good file's bytes to the bad ones.
CORRUPTIONS = {
    "zero-filled": lambda b: bytes(len(b)),
    "text": lambda b: b"this is not a tensor file\n" * 10,
    "random bytes": lambda b: bytes(torch.randint(0, 256, (len(b),), dtype=torch.uint8).tolist()),
    "truncated": lambda b: b[: len(b) // 2],
    "empty": lambda b: b"",
    "wrong tensor": lambda b: save({"value": torch.zeros(2, 3, dtype=torch.uint8)}),
    "unrecorded tensor": lambda b: save(
        {"value": torch.zeros(toy.DIGITS_SHAPE, dtype=torch.uint8)}
    ),
    "one byte flipped": lambda b: b[:-1] + bytes([b[-1] ^ 1]),
}


def _path(root):
    return root / "data" / "digits-8x8-v2.safetensors"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMLAB_CACHE", str(root))
        raw = toy._raw_digits()
    return raw, _path(root).read_bytes()


def test_digits_are_cached_and_reread(tmp_path, monkeypatch, good):
    monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path))
    raw, data = good
    _path(tmp_path).parent.mkdir(parents=True)
    _path(tmp_path).write_bytes(data)
    assert torch.equal(toy._raw_digits(), raw)
    assert raw.shape == (1797, 64) and raw.dtype == torch.uint8 and int(raw.max()) == 16


@pytest.mark.parametrize("form", CORRUPTIONS)
def test_a_bad_digits_cache_is_rebuilt(tmp_path, monkeypatch, good, form):
    monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path))
    raw, data = good
    path = _path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(CORRUPTIONS[form](data))
    with pytest.warns(RuntimeWarning, match="digits-8x8-v2.safetensors"):
        again = toy._raw_digits()
    assert torch.equal(again, raw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rewritten file verifies
        assert torch.equal(toy._raw_digits(), raw)
    train, test = toy.digits(torch.Generator().manual_seed(0))
    assert train.shape == (1497, 64) and test.shape == (300, 64)
