"""Helpers for the instrumentation tests: run small scripts in fresh interpreters."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def child_env(**extra: str) -> dict:
    """Environment for a child Python that imports ``instrumentation`` from this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCALESCOPE_", "HOROVOD_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture
def fresh_state():
    """Reset the process-wide recording state around an in-process test."""
    from instrumentation import _env, phases, run

    yield
    run.finish(status="ok")
    run._RUN = None
    phases.S.reset()
    _env._reset_warnings()
