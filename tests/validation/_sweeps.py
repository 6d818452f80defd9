"""Run real sweeps of the example for the validation tests (module-scoped fixtures)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Tiny epochs: 1 epoch of 1200 training samples, batch 50 (24 steps at 1 rank, 12 at 2).
EXAMPLE = ["python", "examples/strain_stress.py", "--epochs", "1", "--samples", "1600", "--device", "cpu"]


def sweep(out: Path, *options: str, script: list[str] | None = None, data: Path | None = None) -> Path:
    """``python -m instrumentation.sweep OPTIONS --out OUT -- SCRIPT``; asserts it succeeded."""
    cmd = script or [*EXAMPLE, *(["--data-dir", str(data)] if data else [])]
    p = subprocess.run([sys.executable, "-m", "instrumentation.sweep", "--batch-size", "50", "--timeout", "180",
                        "--out", str(out), *options, "--", *cmd],
                       capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return out


def runset(*dirs: Path):
    from analysis.runset import RunSet

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rs = RunSet.from_dirs(list(dirs))
        rs.events, rs.epochs, rs.samples  # noqa: B018  (loaded once, warnings silenced)
    return rs
