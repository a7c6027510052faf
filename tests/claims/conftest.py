"""Shared claim fixtures: one smoke run per claim for the whole session, and the planted claims.

``smoke_measurement(claim_id)`` runs a claim's smoke config (seed 0) once per test session,
even across xdist workers: the first worker to ask writes the measurement to a JSON file
under pytest's shared base temp folder, holding a file lock; the others read it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from filelock import FileLock

from normlab.claims import Claim
from normlab.claims import core as claims_core
from normlab.claims.core import get_claim


def _shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker has its own basetemp; their parent is shared.
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / "smoke-measurements"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def smoke_measurement(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str], dict[str, Any]]:
    folder = _shared_folder(tmp_path_factory)
    memo: dict[str, dict[str, Any]] = {}

    def get(claim_id: str) -> dict[str, Any]:
        if claim_id not in memo:
            path = folder / f"{claim_id}.json"
            with FileLock(str(path) + ".lock"):
                if path.exists():
                    memo[claim_id] = json.loads(path.read_text())
                else:
                    claim = get_claim(claim_id)
                    threads = torch.get_num_threads()
                    torch.set_num_threads(1)
                    try:
                        measurement = claim.run(claim.config("smoke"), 0)
                    finally:
                        torch.set_num_threads(threads)
                    text = json.dumps(measurement)  # JSON-serialisable or this raises
                    path.write_text(text)
                    memo[claim_id] = json.loads(text)
        return memo[claim_id]

    return get


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> dict[str, Claim]:
    """The planted claims of ``tests/claims/_planted.py``, registered for one test only."""
    from tests.claims import _planted

    for claim in _planted.ALL:
        monkeypatch.setitem(claims_core._CATALOGUE.claims, claim.id, claim)
    return {c.id: c for c in _planted.ALL}
