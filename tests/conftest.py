"""Shared fixtures. Real corpus files live in ../shared/corpus (never copied here); tests
that need them skip cleanly when ../shared is absent, so a fresh clone still passes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CORPUS = Path(os.environ.get("SCALESCOPE_CORPUS", ROOT.parent / "shared" / "corpus"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """tests/data: tiny fixtures the project made itself (see tests/data/README.md)."""
    return DATA


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """../shared/corpus, or skip the test when it is absent."""
    if not CORPUS.is_dir():
        pytest.skip(f"real-file corpus not present at {CORPUS}")
    return CORPUS


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own parse cache so cached frames never leak between tests."""
    monkeypatch.setenv("SCALESCOPE_CACHE", str(tmp_path_factory.mktemp("cache")))
