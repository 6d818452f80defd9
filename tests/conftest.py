"""Shared fixtures. Real corpus files live in ../shared/corpus (never copied here); tests
that need them skip cleanly when ../shared is absent, so a fresh clone still passes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import REAL_BACKENDS

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CORPUS = Path(os.environ.get("SCALESCOPE_CORPUS", ROOT.parent / "shared" / "corpus"))


# The suite runs as from a terminal. Started with Ctrl-C ignored (a background job of a script:
# its shell sets SIGINT to "ignore", and children inherit that across exec), every command a
# test interrupts would ignore the Ctrl-C as well (as scalescope does, like any Unix tool) and
# run to its end. A Python handler, unlike "ignore", is reset to the default at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


@pytest.fixture(scope="session")
def real_experiment(tmp_path_factory):
    """A real sweep of the thesis workload made once per test session: 1 and 2 ranks with
    every backend this machine has (DDP over Gloo; Horovod over Gloo and MPI), plus the
    one-process baseline; a tiny data set and one epoch (about a minute on 2 cores).
    Returns (experiment_dir, CompletedProcess)."""
    out = tmp_path_factory.mktemp("real") / "EXP"
    data = tmp_path_factory.mktemp("data")
    proc = subprocess.run(
        [sys.executable, "-m", "instrumentation.sweep", "--np", "1,2", "--batch-size", "50",
         "--backend", ",".join(REAL_BACKENDS), "--baseline", "--timeout", "180", "--sample-interval", "0.05",
         "--out", str(out), "--", "python", "examples/strain_stress.py", "--epochs", "1",
         "--samples", "800", "--data-dir", str(data), "--device", "cpu"],
        capture_output=True, text=True, cwd=ROOT, timeout=900,
    )
    return out, proc
