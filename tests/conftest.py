"""Shared test setup: deterministic, single-threaded torch and a temporary model cache."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_and_threads(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    torch.manual_seed(0)
    monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path_factory.getbasetemp() / "normlab-cache"))
    yield
