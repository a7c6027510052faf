"""The stdlib byte corpus: splits, determinism and batches."""

from __future__ import annotations

import pytest
import torch

from normlab.data.corpus import BOS, VOCAB, corpus, corpus_fingerprint, sample_batch


def test_splits_are_disjoint_nonempty_and_deterministic():
    train, val, prose = corpus("train"), corpus("val"), corpus("prose")
    assert train.dtype == torch.uint8 and len(train) > 10 * len(val) > 0
    assert 0 < len(prose) < len(val)
    assert corpus_fingerprint() == corpus_fingerprint()
    probe = bytes(val[:2000].tolist())
    assert probe not in bytes(train[:2_000_000].tolist())


def test_validation_and_test_share_no_file_and_no_window():
    from normlab.data.corpus import _files, _split_of

    splits = [_split_of(p) for p in _files()]
    assert splits.count("val") > 20 and splits.count("test") > 20  # both are real splits
    val, test = corpus("val"), corpus("test")
    assert len(val) > 200_000 and len(test) > 200_000
    g = torch.Generator().manual_seed(0)
    test_bytes = bytes(test.tolist())
    for start in torch.randint(0, len(val) - 200, (20,), generator=g).tolist():
        window = bytes(val[start : start + 200].tolist())
        if len(set(window)) > 30:  # skip boilerplate (licence headers repeat across files)
            assert window not in test_bytes


def test_prose_is_comments_and_docstrings_not_code():
    text = bytes(corpus("prose")[:50_000].tolist()).decode("utf-8", "replace")
    code = bytes(corpus("val")[:50_000].tolist()).decode("utf-8", "replace")
    assert text.count("def ") < code.count("def ") / 5
    assert text.count(" the ") > code.count(" the ")


def test_batches_start_with_bos_and_shift_by_one():
    data = torch.arange(200, dtype=torch.uint8)
    x, y = sample_batch(data, 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16)
    assert (x[:, 0] == BOS).all() and (y < VOCAB - 1).all()
    assert torch.equal(x[:, 1:], y[:, :-1])
    x2, _ = sample_batch(data, 4, 16, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)


def test_limit_restricts_the_sampled_bytes():
    data = torch.arange(250, dtype=torch.uint8)
    _, y = sample_batch(data, 64, 8, torch.Generator().manual_seed(1), limit=20)
    assert y.max() < 20
    with pytest.raises(ValueError, match="Need more than context"):
        sample_batch(data, 1, 8, torch.Generator(), limit=8)
    with pytest.raises(ValueError, match="Unknown corpus split"):
        corpus("holdout")
