"""Our phases must appear as NVTX ranges in the domain `scalescope` under the real Nsight
Systems CLI that `make test` fetches (see docs/nvtx.md for the nvtx >= 0.2.12 trap), and their
durations must match our own recorder's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _noise import paired_durations_agree

import analysis
from analysis.doctor import find_nsys

HERE = Path(__file__).parent
pytestmark = [pytest.mark.nsys, pytest.mark.slow]


@pytest.fixture(scope="module")
def nsys() -> str:
    path = find_nsys()
    if not path:
        pytest.skip("Nsight Systems CLI not available (scripts/install_nsys.sh fetches it)")
    return path


@pytest.fixture(scope="module")
def profiled(nsys, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nvtx")
    run_dir = tmp / "run"
    cmd = [nsys, "profile", "-t", "nvtx", "-o", str(tmp / "report"), "--force-overwrite", "true",
           "--export", "sqlite", sys.executable, str(HERE / "nvtx_prog.py"), str(run_dir)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    sqlite = tmp / "report.sqlite"
    assert sqlite.exists(), p.stdout[-2000:]
    return sqlite, run_dir


def test_scalescope_ranges_are_recorded(profiled):
    sqlite, _ = profiled
    events = analysis.read(sqlite, format="nsys_sqlite")
    ours = events[(events["cat"] == "scalescope")]
    assert len(ours), "no NVTX ranges in the scalescope domain: the nvtx gate is back (docs/nvtx.md)"
    counts = ours["name"].value_counts()
    for phase, n in (("data", 10), ("forward", 10), ("backward", 10), ("optimizer", 10), ("step", 10)):
        assert counts.get(phase, 0) == n, counts.to_dict()
    assert (ours["kind"] == "phase").all()


def test_manifest_records_the_nvtx_path(profiled):
    import json

    _, run_dir = profiled
    nvtx = json.loads((run_dir / "run.json").read_text())["nvtx"]
    assert nvtx["mode"] in ("domain", "handle", "global"), nvtx


def test_nvtx_durations_match_our_recorder(profiled):
    sqlite, run_dir = profiled
    nv = analysis.read(sqlite, format="nsys_sqlite")
    nv = nv[nv["cat"] == "scalescope"]
    own = analysis.read_many(run_dir)
    own = own[own["kind"] == "phase"]
    for phase in ("data", "forward", "backward", "optimizer", "step"):
        # paired in time order; the first range of a name registers its NVTX string
        a = nv.loc[nv["name"] == phase].sort_values("start_ns")["dur_ns"].to_numpy(np.int64)[1:]
        b = own.loc[own["name"] == phase].sort_values("start_ns")["dur_ns"].to_numpy(np.int64)[1:]
        assert len(a) == len(b) == 9 and b.sum() > 0, (phase, len(a), len(b))
        # per range: within 20 µs or 1 % of the phase, whichever is larger (the NVTX push and
        # pop around our clock reads cost ~10 µs each under nsys on a slow, loaded CPU)
        assert np.median(np.abs(a - b)) < max(20_000, 0.01 * np.median(b)), (phase, (a - b) / 1e3)
        # totals within 2 % plus what this run's noise explains (tests/_noise.py)
        paired_durations_agree(a, b, what=phase)
