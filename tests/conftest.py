"""Shared test setup: seeded, single-threaded torch under xdist, and a private model cache."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers on two cores: more torch threads would only oversubscribe them.
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed_and_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    torch.manual_seed(0)
    if "NORMLAB_CACHE" not in os.environ:
        monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    yield
