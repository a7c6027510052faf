"""Large fresh CPU outputs are advised onto huge pages; resident memory is left alone."""

from __future__ import annotations

import mmap

import pytest
import torch

from normlab import kernels as K
from normlab.kernels import _pages


@pytest.fixture
def granted() -> None:
    if _pages._libc() is None:
        pytest.skip("huge pages are not granted on request here (THP mode is not madvise)")


def test_a_fresh_large_block_is_advised_and_a_resident_one_is_not(granted: None) -> None:
    block = mmap.mmap(-1, 48 << 20)  # a fresh anonymous mapping, as glibc gives large blocks
    fresh = torch.frombuffer(block, dtype=torch.uint8)
    assert _pages.advise_huge(fresh)
    fresh.fill_(1)  # writable and whole after the advice
    touched = torch.ones(48 << 20, dtype=torch.uint8)  # every page written: resident
    assert not _pages.advise_huge(touched)
    assert not _pages.advise_huge(torch.empty(1 << 20, dtype=torch.uint8))  # no aligned 2 MB
    assert int(fresh.sum()) == 48 << 20
    del fresh
    block.close()


def test_small_outputs_are_never_advised(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(_pages, "advise_huge", lambda t: calls.append(t.nbytes) or True)
    _pages.fresh_output(torch.empty(_pages.MIN_BYTES // 4 - 1))
    _pages.fresh_output(torch.empty(_pages.MIN_BYTES // 4))
    assert calls == [_pages.MIN_BYTES]


def test_outputs_on_advised_pages_equal_the_plain_path() -> None:
    x = torch.randn(4096, 1024) * 3 + 1  # 16 MB outputs: advised where granted
    w = torch.rand(1024) + 0.5
    b = torch.randn(1024)
    with K.disabled():
        ref = torch.nn.functional.layer_norm(x, (1024,), w, b)
    torch.testing.assert_close(K.layer_norm(x, (1024,), w, b), ref, rtol=1e-5, atol=1e-5)
