"""Tiny inputs for ``normlab compare``: a text file, a series CSV, HF folders with real
tokenizer files (tests/_tiny_hf.py, no hub)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

#: The tiny budget every end-to-end test runs at.
TINY = [
    "--steps",
    "6",
    "--seeds",
    "2",
    "--lr",
    "3e-3",
    "1e-2",
    "--batch",
    "4",
    "--context",
    "16",
    "--quiet",
]


@pytest.fixture(scope="session")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from normlab.data.corpus import corpus

    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_bytes(bytes(corpus("train")[:12000].tolist()))
    return path


@pytest.fixture(scope="session")
def series_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("series") / "load.csv"
    rows = ["time,load,temperature"]
    for t in range(400):
        load = 10 + 3 * math.sin(2 * math.pi * t / 24) + 0.01 * t + 0.3 * math.sin(t * 1.7)
        rows.append(f"{t},{load:.4f},{20 + 5 * math.cos(2 * math.pi * t / 24):.4f}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="session")
def gpt2_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests._tiny_hf import save_with_tokenizer

    folder = tmp_path_factory.mktemp("gpt2")
    save_with_tokenizer("gpt2", folder)
    return folder


@pytest.fixture(scope="session")
def llama_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Llama config and tokenizer without weights: compare trains it from the config."""
    from tests._tiny_hf import save_with_tokenizer

    folder = tmp_path_factory.mktemp("llama")
    save_with_tokenizer("llama", folder)
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    return folder
