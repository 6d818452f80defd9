"""Sweeps submitted to a real SLURM cluster (scripts/local_slurm.sh: one node, no GPU GRES).

Three experiments share the cluster (submitted first, then waited for, so they overlap):

* MAIN: the thesis workload at 1 and 2 ranks with every backend this machine has plus the
  baseline, submitted with ``--max-jobs 3`` and then resumed with ``--wait`` (the first three
  jobs are not submitted again, the rest are submitted as jobs end);
* LIMIT: a run that outlives its one-minute ``--time``: the scheduler kills it -> ``timeout``;
* CANCEL: a run cancelled with ``scancel`` once it runs -> ``killed`` with SLURM's CANCELLED;
* FAIL: two runs with ``--max-jobs 1 --wait``, the first failing: the second goes in when the
  first ends, and the failed one is not submitted again.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _helpers import REAL_BACKENDS

from instrumentation.experiment import Experiment, RunSpec

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("torch")
# real training jobs through a real scheduler, one of them held until its one-minute limit
# kills it: minutes of both cores (CI runs it; a local `make test` leaves it out)
pytestmark = pytest.mark.slow

# Records a run (instrumentation.init) and sleeps until the scheduler stops it.
SLEEPER = """
import sys, time
import instrumentation as ssi
if "--mode" in sys.argv and sys.argv[sys.argv.index("--mode") + 1] == "fail":
    print("boom: deliberate failure", file=sys.stderr)
    sys.exit(3)
ssi.init(config={"epochs": 1})
if "--mode" in sys.argv and sys.argv[sys.argv.index("--mode") + 1] == "ok":
    ssi.finish()
    sys.exit(0)
print("sleeping", flush=True)
time.sleep(900)
"""
# A space and a % in the path: sbatch must take the quoted --output/--error lines whole
# (and not expand %1), or the log tail below is not where the run directory says.
LIMIT = "odd dir %1/LIMIT"
COMMON = ["--slurm", "--submit", "--gpus-per-node", "0", "--no-exclusive", "--poll", "2"]


def _sweep(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "instrumentation.sweep", *argv], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


def _entries(out: Path) -> dict[str, dict]:
    return {e["run_id"]: e for e in json.loads((out / "experiment.json").read_text())["runs"]}


def _submitted(stdout: str) -> list[str]:
    """Run ids the sweep printed as submitted."""
    return re.findall(r"^scalescope sweep: submitted (\S+) as job \d+$", stdout, flags=re.M)


def _start(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "instrumentation.sweep", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    try:
        stdout, stderr = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _running_job(out: Path, proc: subprocess.Popen) -> str:
    """The job id of the one run of ``out`` once SLURM runs it (the sweep ``proc`` submitted it)."""
    job = state = None
    for _ in range(600):  # up to 5 min: a bound on a hang, not a timing assertion
        if proc.poll() is not None:
            break
        if job is None and (out / "experiment.json").exists():
            job = next(iter(_entries(out).values())).get("slurm", {}).get("job_id")
        if job is not None:
            state = subprocess.run(["squeue", "-h", "--states=all", "-j", job, "-o", "%T"], capture_output=True,
                                   text=True, timeout=60).stdout.strip()
            if state == "RUNNING":
                return job
        time.sleep(0.5)
    raise AssertionError(f"job {job} of {out} never ran (last state {state!r}, sweep exit {proc.poll()})")


@pytest.fixture(scope="module")
def slurm_sweeps(local_slurm, tmp_path_factory):
    base = tmp_path_factory.mktemp("slurm-sweeps")
    sleeper = base / "sleeper.py"
    sleeper.write_text(SLEEPER)
    data = base / "data"
    # LIMIT and CANCEL wait in the background while MAIN is submitted, resumed and waited for
    limit = _start("--wait", *COMMON, "--backend", "", "--baseline", "--time", "1", "--out", str(base / LIMIT),
                   "--", "python", str(sleeper))
    cancel = _start("--wait", *COMMON, "--backend", "", "--baseline", "--out", str(base / "CANCEL"), "--",
                    "python", str(sleeper))
    fail = _start("--wait", *COMMON, "--backend", "", "--baseline", "--vary", "mode=fail,ok", "--max-jobs", "1",
                  "--out", str(base / "FAIL"), "--", "python", str(sleeper))
    main = [*COMMON, "--np", "1,2", "--batch-size", "50", "--backend", ",".join(REAL_BACKENDS), "--baseline",
            "--max-jobs", "3", "--sample-interval", "0.05", "--out", str(base / "MAIN"), "--",
            "python", "examples/strain_stress.py", "--epochs", "1", "--samples", "800", "--data-dir", str(data),
            "--device", "cpu"]
    submitted = _sweep(*main)
    first = _entries(base / "MAIN")
    scancel = subprocess.run(["scancel", _running_job(base / "CANCEL", cancel)], capture_output=True, text=True,
                             timeout=60)
    waited = {"MAIN": _sweep("--wait", *main), "CANCEL": _finish(cancel), "LIMIT": _finish(limit),
              "FAIL": _finish(fail)}
    status = subprocess.run([sys.executable, "-m", "analysis.cli", "status", str(base / LIMIT)],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    return {"base": base, "submitted": submitted, "first": first, "waited": waited, "scancel": scancel,
            "status": status}


def test_submission_records_job_ids_and_holds_back_beyond_max_jobs(slurm_sweeps):
    proc = slurm_sweeps["submitted"]
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert len(_submitted(proc.stdout)) == 3
    first = slurm_sweeps["first"]
    assert len(first) == 1 + 2 * len(REAL_BACKENDS)
    queued = [r for r, e in first.items() if e["status"] == "queued"]
    assert len(queued) == 3
    assert all(first[r]["slurm"]["job_id"].isdigit() for r in queued)
    assert {e["status"] for r, e in first.items() if r not in queued} == {"pending"}


def test_waited_sweep_is_resumed_and_every_run_ok(slurm_sweeps):
    proc = slurm_sweeps["waited"]["MAIN"]
    out = slurm_sweeps["base"] / "MAIN"
    entries = _entries(out)
    tails = {r: e.get("log_tail") for r, e in entries.items() if e["status"] != "ok"}
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:], tails)
    n = len(entries)
    assert f"scalescope sweep: {n}/{n} runs ok" in proc.stdout
    first = slurm_sweeps["first"]
    # the jobs queued by the first command were not submitted again; the others once each
    resubmitted = _submitted(proc.stdout)
    assert sorted(resubmitted) == sorted(r for r, e in first.items() if e["status"] == "pending")
    for run_id, e in first.items():
        if e["status"] == "queued":
            assert entries[run_id]["slurm"]["job_id"] == e["slurm"]["job_id"]
    job_ids = [e["slurm"]["job_id"] for e in entries.values()]
    assert len(set(job_ids)) == n


def test_runset_reads_the_slurm_sweep(slurm_sweeps):
    from analysis import RunSet

    rs = RunSet.from_dirs([slurm_sweeps["base"] / "MAIN"])
    runs = rs.runs.set_index("run_id")
    assert set(runs["status"]) == {"ok"}
    assert len(runs) == 1 + 2 * len(REAL_BACKENDS)
    assert sorted(runs["n_ranks"].unique()) == [1, 2]
    ranks = rs.events.groupby("run_id", observed=True)["rank"].unique()
    for run_id, row in runs.iterrows():
        assert sorted(ranks[run_id]) == list(range(row["n_ranks"])), run_id


def test_manifests_record_the_job_partition_and_cluster(slurm_sweeps):
    out = slurm_sweeps["base"] / "MAIN"
    for run_id, entry in _entries(out).items():
        job = entry["slurm"]
        assert (job["cluster"], job["partition"]) == ("scalescope-local", "debug") and job["nodes"]
        manifest = json.loads((out / run_id / "run.json").read_text())
        env = manifest["slurm"]  # the SLURM_* variables rank 0 saw
        assert env["SLURM_JOB_ID"] == job["job_id"]
        assert env["SLURM_CLUSTER_NAME"] == "scalescope-local"
        assert env["SLURM_JOB_PARTITION"] == "debug"
        assert env["SLURM_JOB_NODELIST"] == job["nodes"]
        assert env["SLURM_NTASKS"] == str(entry["config"]["np"])
    exp = json.loads((out / "experiment.json").read_text())
    assert exp["slurm"]["cluster"] == "scalescope-local" and exp["slurm"]["gpus_per_node"] == 0
    assert exp["slurm"]["gpu_request"] == "none"
    sbatch = (out / "slurm" / "baseline_np1_bs50_r1.sbatch").read_text()
    assert "--gres" not in sbatch and "--gpus" not in sbatch


def test_time_limit_kill_is_recorded_as_timeout(slurm_sweeps):
    out = slurm_sweeps["base"] / LIMIT
    proc = slurm_sweeps["waited"]["LIMIT"]
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "scalescope sweep: 0/1 runs ok; not ok: baseline_np1_r1" in proc.stdout
    (entry,) = _entries(out).values()
    assert (entry["status"], entry["slurm"]["state"]) == ("timeout", "TIMEOUT")
    assert "DUE TO TIME LIMIT" in entry["log_tail"]
    assert json.loads((out / "baseline_np1_r1" / "run.json").read_text())["status"] == "timeout"


def test_scancel_is_recorded_as_killed(slurm_sweeps):
    assert slurm_sweeps["scancel"].returncode == 0, slurm_sweeps["scancel"].stderr
    out = slurm_sweeps["base"] / "CANCEL"
    assert slurm_sweeps["waited"]["CANCEL"].returncode == 1
    (entry,) = _entries(out).values()
    assert (entry["status"], entry["slurm"]["state"]) == ("killed", "CANCELLED")
    assert "CANCELLED" in entry["log_tail"]
    from analysis import RunSet

    runs = RunSet.from_dirs([out]).runs
    assert list(runs["status"]) == ["killed"]


def test_status_command_shows_the_scheduler_state(slurm_sweeps):
    proc = slurm_sweeps["status"]
    assert proc.returncode == 0, proc.stderr
    (row,) = [line.split() for line in proc.stdout.splitlines() if line.startswith("baseline_np1_r1")]
    assert row[1:4] == ["timeout", _entries(slurm_sweeps["base"] / LIMIT)["baseline_np1_r1"]["slurm"]["job_id"],
                        "TIMEOUT"]
    assert "1 runs: 1 timeout" in proc.stdout


def test_max_jobs_feeds_the_queue_while_waiting_and_a_failure_is_not_retried(slurm_sweeps):
    proc = slurm_sweeps["waited"]["FAIL"]
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert _submitted(proc.stdout) == ["baseline_np1_modefail_r1", "baseline_np1_modeok_r1"]
    assert "scalescope sweep: 1/2 runs ok; not ok: baseline_np1_modefail_r1" in proc.stdout
    entries = _entries(slurm_sweeps["base"] / "FAIL")
    assert (entries["baseline_np1_modefail_r1"]["status"], entries["baseline_np1_modefail_r1"]["exit_code"]) == \
        ("failed", 3)
    assert "boom: deliberate failure" in entries["baseline_np1_modefail_r1"]["log_tail"]
    assert entries["baseline_np1_modeok_r1"]["status"] == "ok"


def test_a_job_the_scheduler_does_not_know_is_recorded_failed(local_slurm, tmp_path):
    """A queued entry whose job id squeue does not know (purged, another cluster) ends the wait."""
    out = tmp_path / "GONE"
    spec = RunSpec("baseline", 1, None, 1)
    exp = Experiment.open(out, command=["x"], script=["t.py"], plan=[spec], experiment="GONE")
    exp.set({**exp.entries[spec.run_id], "status": "queued", "slurm": {"job_id": "999999"}})
    proc = subprocess.run([sys.executable, "-m", "analysis.cli", "status", str(out)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (entry,) = _entries(out).values()
    assert (entry["status"], entry["slurm"]["state"]) == ("failed", "UNKNOWN")
    assert json.loads((out / spec.run_id / "run.json").read_text())["status"] == "failed"
