"""Real runs of the example for issue 13: `scalescope sweep --scaling weak` grows the dataset
with the ranks, `--find-max` finds where the example runs out of memory under
`--mem-limit-mb` (a real MemoryError, recorded oom), and `--time-budget` stops training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import metrics as M
from analysis.runset import RunSet

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ["python", "examples/strain_stress.py", "--samples", "200", "--epochs", "1", "--device", "cpu"]

pytestmark = pytest.mark.slow


def _run(args, **kw):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=600, **kw)


def _sweep(out, data, *options, script=()):
    p = _run(["-m", "instrumentation.sweep", "--timeout", "180", "--out", str(out), *options, "--", *EXAMPLE,
              "--data-dir", str(data), *script])
    return p


def test_weak_scaling_grows_the_dataset(tmp_path):
    p = _sweep(tmp_path / "weak", tmp_path / "data", "--np", "1,2", "--backend", "ddp-gloo", "--scaling", "weak",
               "--label", "partition=alpha")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rs = RunSet.from_dirs(tmp_path / "weak")
    r = rs.runs.set_index("run_id")
    assert r.loc["ddp-gloo_np1_weak_r1", "dataset_size"] == 200
    assert r.loc["ddp-gloo_np2_weak_r1", "dataset_size"] == 400
    assert set(r["scaling"]) == {"weak"} and set(r["partition"]) == {"alpha"}
    assert r.loc["ddp-gloo_np2_weak_r1", "data_scale"] == 2
    # each rank trains on its half of the 300 training curves of 400 (75 %)
    e = rs.epochs[rs.epochs["run_id"] == "ddp-gloo_np2_weak_r1"]
    assert e["samples"].sum() == 300


def _base_rss(tmp_path) -> float:
    """This machine's peak resident memory of an instrumented run at the default size (MiB),
    and that a limit below it is a real MemoryError."""
    env = {**os.environ, "SCALESCOPE_RUN_DIR": str(tmp_path / "rss")}
    args = ["examples/strain_stress.py", "--samples", "200", "--epochs", "1", "--device", "cpu",
            "--data-dir", str(tmp_path / "data")]
    p = _run([*args, "--mem-limit-mb", "1"], env=env)
    assert p.returncode != 0 and "MemoryError: out of memory: peak resident memory" in p.stderr
    p = _run(args, env={**env, "SCALESCOPE_RUN_DIR": str(tmp_path / "rss2")})
    assert p.returncode == 0, p.stderr[-2000:]
    return float(RunSet.from_dirs(tmp_path / "rss2").epochs["peak_mem_mib"].max())


def test_find_max_brackets_the_memory_limit(tmp_path):
    limit = _base_rss(tmp_path) + 60  # about 1000 more points per curve fit (the dense layer and the data grow)
    out = tmp_path / "size"
    p = _sweep(out, tmp_path / "data", "--np", "1", "--backend", "", "--baseline", "--find-max", "curve-length=800",
               script=("--mem-limit-mb", str(limit)))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "largest curve-length that fits" in p.stdout
    rec = json.loads((out / "experiment.json").read_text())["find_max"][0]
    assert rec["stopped"] is None and rec["name"] == "curve-length"
    assert rec["largest_ok"] < rec["smallest_oom"] <= rec["largest_ok"] * 17 / 16 + 1
    statuses = {t["value"]: t["status"] for t in rec["tries"]}
    assert statuses[rec["largest_ok"]] == "ok" and statuses[rec["smallest_oom"]] == "oom"
    rs = RunSet.from_dirs(out)
    oom = rs.failed_runs()
    assert set(oom["status"]) == {"oom"} and oom["log_tail"].str.contains("MemoryError").all()
    t = M.input_size_table(rs.runs, M.run_summary(rs), size="vary_curve-length")
    lim = M.memory_limit(t, find_max=[rec]).iloc[0]
    assert lim["largest_ok"] == rec["largest_ok"] == lim["find_max_largest_ok"]


def test_time_budget_stops_training(tmp_path):
    run_dir = tmp_path / "run"
    p = _run(["examples/strain_stress.py", "--samples", "200", "--epochs", "50", "--device", "cpu",
              "--data-dir", str(tmp_path / "data"), "--time-budget", "0.001"],
             env={**os.environ, "SCALESCOPE_RUN_DIR": str(run_dir)})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "time budget of 0.001 s used up after 1 epoch(s)" in p.stdout
    rs = RunSet.from_dirs(run_dir)
    assert len(rs.epochs) == 1 and rs.runs["time_budget_s"].iloc[0] == 0.001
