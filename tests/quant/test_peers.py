"""PeerQuantizer: transformers' HQQ and optimum-quanto cache layers as quantizers."""

from __future__ import annotations

import os
import time

import pytest
import torch

from normlab.quant import PeerQuantizer, clear_stale_build_lock
from normlab.quant.peers import peer_quantizers


@pytest.mark.parametrize("backend,module", [("hqq", "hqq"), ("quanto", "optimum.quanto")])
def test_peer_quantizer_is_the_transformers_cache_layer(backend, module):
    pytest.importorskip(module)
    from transformers.cache_utils import HQQQuantizedLayer, QuantoQuantizedLayer

    x = torch.randn(2, 1, 48, 64, generator=torch.Generator().manual_seed(0))
    q = PeerQuantizer(backend, bits=2, group=64)  # quanto builds its CPU kernels once
    assert isinstance(q.layer, {"hqq": HQQQuantizedLayer, "quanto": QuantoQuantizedLayer}[backend])
    chunk = q.quantize(x)
    err = float((q.dequantize(chunk) - x).norm() / x.norm())
    assert 0.05 < err < 0.8  # 2-bit: lossy, but far better than zeros
    assert chunk.bits == x.numel() * 2 + 32 * x.numel() // 64  # 2 bits + fp16 scale, zero
    assert chunk.shape == tuple(x.shape) and q.codebook_bytes == 0


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="hqq"):
        PeerQuantizer("gptq")


def test_a_stale_build_lock_is_removed_and_a_fresh_one_kept(tmp_path):
    assert not clear_stale_build_lock(tmp_path)  # no lock: nothing to do
    lock = tmp_path / "lock"
    lock.touch()
    assert not clear_stale_build_lock(tmp_path) and lock.exists()  # a build in progress
    old = time.time() - 3600
    os.utime(lock, (old, old))
    with pytest.warns(RuntimeWarning, match="interrupted build"):
        assert clear_stale_build_lock(tmp_path)
    assert not lock.exists()


def test_peer_quantizers_give_none_for_a_missing_backend(monkeypatch):
    import normlab.quant.peers as peers

    class Missing:
        def __init__(self, backend, bits, group):
            if backend == "quanto":
                raise ImportError("optimum-quanto is not installed")
            self.args = (backend, bits, group)

    monkeypatch.setattr(peers, "PeerQuantizer", Missing)
    built = peer_quantizers(["hqq", "quanto"], bits=2, group=64)
    assert built["quanto"] is None and built["hqq"].args == ("hqq", 2, 64)
