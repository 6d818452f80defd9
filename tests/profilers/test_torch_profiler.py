"""The PyTorch profiler window of one process: file, steps, manifest, partial and bad windows.

Each test runs tests/profilers/torch_prog.py (a tiny instrumented torch loop) in a fresh
process with ``SCALESCOPE_TORCH_PROFILER`` set, as ``sweep --torch-profiler`` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import analysis
from analysis.readers.rundir import read_run_dir

pytest.importorskip("torch")
HERE = Path(__file__).parent


def _run(run_dir: Path, steps: int, window: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SCALESCOPE_TORCH_PROFILER": window}
    p = subprocess.run([sys.executable, str(HERE / "torch_prog.py"), str(run_dir), str(steps)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.fixture(scope="module")
def full_window(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("tp") / "run"
    _run(run_dir, 8, "1,1,3")
    return run_dir


def test_trace_of_the_window(full_window):
    path = full_window / "torch_profiler" / "rank-00000.pt.trace.json.gz"
    assert path.exists(), list(full_window.rglob("*"))
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # temp file renamed
    ev = analysis.read(path)
    assert set(ev["source"]) == {"kineto"}
    steps = ev[ev["name"].astype(str).str.match(r"^ProfilerStep#\d+$")]
    assert sorted(steps["step"].tolist()) == [2, 3, 4]  # wait 1, warmup 1, active 3
    # Kineto's ProfilerStep#N is our step N: it contains our step window (same host clock)
    own = analysis.read(full_window / "rank-00000.trace.json")
    own_steps = own[(own["kind"] == "phase") & (own["name"] == "step")].set_index("step")
    for _, row in steps.iterrows():
        s = own_steps.loc[row["step"]]
        assert row["start_ns"] <= s["start_ns"] + 1000
        assert row["start_ns"] + row["dur_ns"] >= s["start_ns"] + s["dur_ns"] - 1000
    ops = ev[ev["kind"] == "cpu_op"]
    assert set(ops["step"].dropna()) == {2, 3, 4}
    assert ops["name"].astype(str).str.contains("aten::addmm").any()


def test_manifest_records_the_window(full_window):
    tp = json.loads((full_window / "run.json").read_text())["profilers"]["torch_profiler"]
    assert tp["schedule"] == {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}
    assert tp["profiled_steps"] == [2, 3, 4]
    assert tp["activities"] == ["cpu"] or tp["activities"] == ["cpu", "cuda"]
    assert tp["record_shapes"] is False and tp["error"] is None


def test_run_dir_reader_includes_profiler_traces(full_window):
    plain = read_run_dir(full_window)
    both = read_run_dir(full_window, include_profilers=True)
    assert set(plain["source"]) == {"scalescope_trace"}
    assert set(both["source"]) == {"scalescope_trace", "kineto"}
    assert len(both) > len(plain)


def test_run_ending_inside_the_window_keeps_what_was_recorded(tmp_path):
    run_dir = tmp_path / "run"
    _run(run_dir, 3, "1,1,5")  # steps 2..6 wanted, the run stops after step 2
    ev = analysis.read(run_dir / "torch_profiler" / "rank-00000.pt.trace.json.gz")
    steps = ev[ev["name"].astype(str).str.match(r"^ProfilerStep#\d+$")]
    # step 2, then the open ProfilerStep#3: the tail after the last step_end (epoch_end,
    # finish) that no step of ours matches
    assert sorted(steps["step"].tolist()) == [2, 3]
    own = analysis.read(run_dir / "rank-00000.trace.json")
    assert sorted(own.loc[(own["kind"] == "phase") & (own["name"] == "step"), "step"].tolist()) == [0, 1, 2]


def test_bad_window_warns_and_training_goes_on(tmp_path):
    run_dir = tmp_path / "run"
    p = _run(run_dir, 2, "1,x,3")
    assert "SCALESCOPE_TORCH_PROFILER='1,x,3'" in p.stderr
    assert not (run_dir / "torch_profiler").exists()
    assert (run_dir / "rank-00000.trace.json").exists()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "ok"
