"""Fixtures for the outside-profiler tests: the sweep parser (which has the profiler options)
and a one-call sweep run into a temporary experiment directory, exactly as ``scalescope sweep``
runs it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from instrumentation import sweep


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    sweep.add_arguments(p)  # includes instrumentation.profilers.add_profiler_arguments
    return p


def _run(argv: list[str]) -> tuple[int, argparse.Namespace]:
    args = _parser().parse_args(argv)
    rc = sweep.run(args)  # wraps the ranks and records the profilers in run.json itself
    return rc, args


@pytest.fixture(scope="session")
def sweep_parser() -> Callable[[], argparse.ArgumentParser]:
    """The sweep's parser (``sweep.add_arguments``, profiler options included)."""
    return _parser


@pytest.fixture(scope="session")
def run_sweep() -> Callable[[list[str]], tuple[int, argparse.Namespace]]:
    """``run_sweep(argv) -> (exit code, args)``: run the sweep with the profiler wrappers and
    record the profilers in each run's ``run.json``."""
    return _run


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory) -> Path:
    """One cache of the example's generated data set for the session."""
    return tmp_path_factory.mktemp("strain_stress_data")
