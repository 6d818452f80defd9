"""Real 2-rank sweeps of the thesis workload: one per backend, plus the baseline.

Each run must leave a complete run directory (docs/run-directory.md). About a minute on
2 cores (tiny data set, one epoch).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from _helpers import HVD_MISSING
from _helpers import REAL_BACKENDS as BACKENDS

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("torch")




@pytest.fixture(scope="module")
def experiment(real_experiment):
    return real_experiment


def _trace(path: Path) -> list[dict]:
    text = path.read_text().rstrip()
    if not text.endswith("]"):
        text = text.rstrip(",") + "]"
    return json.loads(text)


@pytest.mark.slow
def test_sweep_succeeds(experiment):
    out, proc = experiment
    runs = json.loads((out / "experiment.json").read_text())["runs"]
    tails = {r["run_id"]: r.get("log_tail") for r in runs if r["status"] != "ok"}
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:], tails)
    expected = ["baseline_np1_bs50_r1"] + [f"{b}_np{n}_bs50_r1" for n in (1, 2) for b in BACKENDS]
    assert sorted(r["run_id"] for r in runs) == sorted(expected)
    assert all(r["status"] == "ok" and r["exit_code"] == 0 for r in runs)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["baseline", "ddp-gloo", "horovod-gloo", "horovod-mpi"])
def test_complete_run_directory(experiment, backend):
    if backend.startswith("horovod") and HVD_MISSING:
        pytest.skip(HVD_MISSING)
    out, _ = experiment
    n = 1 if backend == "baseline" else 2
    run_dir = out / f"{backend}_np{n}_bs50_r1"
    manifest = json.loads((run_dir / "run.json").read_text())
    framework = {"baseline": "none", "ddp-gloo": "ddp"}.get(backend, "horovod")
    assert manifest["status"] == "ok" and manifest["exit_code"] == 0
    assert manifest["world_size"] == n and manifest["framework"] == framework
    assert manifest["batch_size"] == 50 and manifest["n_params"] == 153_532
    assert manifest["config"]["backend"] == backend and manifest["config"]["np"] == n
    assert (run_dir / "stdout.log").stat().st_size > 0 and (run_dir / "stderr.log").exists()

    expected = {"data", "forward", "backward", "optimizer", "step", "epoch", "eval"}
    if framework == "horovod":
        expected.add("sync")
    train = 600  # 75 % of 800 curves
    for rank in range(n):
        events = _trace(run_dir / f"rank-{rank:05d}.trace.json")
        names = {e["name"] for e in events if e.get("cat") == "phase"}
        assert expected <= names, (rank, expected - names)
        steps = [e for e in events if e.get("name") == "step"]
        assert len(steps) == -(-train // n // 50)  # ceil(per-rank samples / batch)
        if framework == "ddp":  # the recording comm hook: at least one bucket per step
            comm = [e for e in events if e.get("cat") == "comm" and e.get("name") == "allreduce"]
            assert len(comm) >= len(steps)
        (line,) = [json.loads(x) for x in (run_dir / f"rank-{rank:05d}.epochs.jsonl").read_text().splitlines()]
        assert line["epoch"] == 0 and line["samples"] == train // n
        assert line["train_loss"] > 0 and line["val_loss"] > 0
    with open(next(run_dir.glob("samples-*.csv")), newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and {"ts_ns", "cpu_util_pct", "rss_mib"} <= set(rows[0])
    timeline = run_dir / "horovod_timeline.json"
    if framework == "horovod":
        text = timeline.read_text()
        assert text.startswith("[") and "allreduce" in text.lower()
    else:
        assert not timeline.exists()
