"""Numeric tables from scikit-learn's wheel: deterministic bytes, a domain unlike code."""

from __future__ import annotations

import torch

from normlab.data.corpus import corpus
from normlab.data.tables import domain_windows, table_bytes


def test_table_bytes_are_numeric_deterministic_and_unlike_code():
    data = table_bytes()
    assert data.dtype == torch.uint8 and data.numel() > 100_000
    assert torch.equal(data, table_bytes.__wrapped__())  # the same bytes when rebuilt
    hist = torch.bincount(data.long(), minlength=256).double()
    code = torch.bincount(corpus("val").long(), minlength=256).double()
    digits = hist[list(b"0123456789")].sum() / hist.sum()
    assert digits > 0.6 and code[list(b"0123456789")].sum() / code.sum() < 0.1
    # total variation between the byte histograms: a real domain shift for a byte model
    tv = 0.5 * (hist / hist.sum() - code / code.sum()).abs().sum()
    assert tv > 0.5


def test_domain_windows_are_seeded_and_from_their_domain():
    x, y = domain_windows("tables", 4, 16, seed=3)
    assert x.shape == y.shape == (4, 16) and torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal(x, domain_windows("tables", 4, 16, seed=3)[0])
    digits = torch.isin(x, torch.tensor(list(b"0123456789.,-\n"))).float().mean()
    assert digits > 0.8
    code, _ = domain_windows("val", 4, 16, seed=3)
    assert code.shape == (4, 16) and not torch.equal(code, x)
