"""Scripts in the shapes of public training scripts nobody here wrote, through the user's path.

Each script in this folder has a few scalescope lines (marked ``# ssi``) and nothing
baseline-specific. It is copied into a fresh user directory and run there as a user would:
``scalescope sweep --baseline --np 1,2 --backend B --out exp -- python script.py`` (with
``--cwd run`` here; the scripts of ``test_foreign_shapes.py`` run in the default, shared,
directory). Asserted for every run: ``ok``; nothing shared between runs (each ran in its own ``<run>/work``,
nothing landed in the user's directory, no run resumed); every rank's threads recorded in
``run.json`` and set to the cores per rank; throughput > 0; and the what-if study computes.
About 30-50 s per script on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from _helpers import HVD_MISSING

pytest.importorskip("torch")

import analysis
from analysis import metrics as M
from instrumentation.experiment import cores_per_rank
from instrumentation.threads import THREAD_KEYS

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SCALESCOPE = Path(sys.executable).parent / "scalescope"


def _sweep(user_dir: Path, script: str, *args: str, backend: str, nps: str = "1,2",
           out: str = "exp", cwd: str = "run", script_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``scalescope sweep`` started in ``user_dir`` on its copy of ``script`` (``--cwd run``,
    isolated, unless ``cwd`` says otherwise)."""
    shutil.copy(HERE / script, user_dir / script)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [str(SCALESCOPE), "sweep", "--np", nps, "--backend", backend, "--baseline", "--sample-interval", "0.2",
           "--out", out, "--cwd", cwd, *args, "--", "python", script, *script_args]
    return subprocess.run(cmd, cwd=user_dir, env=env, capture_output=True, text=True, timeout=400)


def _check(user_dir: Path, proc: subprocess.CompletedProcess, *, out: str = "exp",
           own_files: tuple[str, ...] = ()) -> analysis.RunSet:
    exp_dir = user_dir / out
    exp = json.loads((exp_dir / "experiment.json").read_text())
    tails = {r["run_id"]: r.get("log_tail") for r in exp["runs"] if r["status"] != "ok"}
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:], tails)
    assert len(exp["runs"]) == 3 and all(r["status"] == "ok" for r in exp["runs"])
    workdirs = set()
    for entry in exp["runs"]:
        run_dir = exp_dir / entry["run_id"]
        m = json.loads((run_dir / "run.json").read_text())
        # each run executed in a working directory of its own, and what it wrote stayed there
        assert m["working_dir"] == {"mode": "run", "path": str(run_dir / "work"), "user_cwd": str(user_dir)}
        workdirs.add(m["working_dir"]["path"])
        for name in own_files:
            assert (run_dir / "work" / name).is_file(), (entry["run_id"], name)
        assert m["resumed_from_epoch"] is None
        # the threads every rank ran with, set to the cores per rank for every launcher
        assert len(m["ranks"]) == m["world_size"] == entry["config"]["np"]
        want = cores_per_rank(m["world_size"])
        for rank in m["ranks"]:
            t = rank["threads"]
            assert set(t) == set(THREAD_KEYS)
            assert t["torch_intra_op"] == want and t["omp_num_threads"] == str(want), (entry["run_id"], t)
            assert t["cpus_available"] >= 1 and t["host_cpus"] >= 1
        assert m["threads_per_rank"] == want and entry["config"]["threads"] == "auto"
        assert isinstance(m["n_params"], int) and m["n_params"] > 0 and m["grad_bytes"] > 0
        if m["framework"] == "none":  # a launcher-style script cannot run without its framework
            assert m["baseline_kind"] == "framework_one_process"
    assert len(workdirs) == 3
    for name in own_files:
        assert not (user_dir / name).exists(), f"{name} leaked into the user's directory"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sync times at one rank count: the what-if fixes the latency
        rs = analysis.RunSet.from_dirs([exp_dir])
        assert rs.damaged.empty, rs.damaged
        runs = rs.usable_runs()
        assert runs["threads_per_rank"].notna().all() and not runs["threads_mixed"].any()
        per_run = M.run_summary(rs)
        assert len(per_run) == 3 and (per_run["throughput_samples_per_s"] > 0).all(), per_run
        cost = M.sync_cost(M.sync_times(rs.events), runs=runs)
        what_if = M.what_if(cost, per_run, runs)
    assert len(what_if["fit"]) == 1 and len(what_if["prediction"]) > 0
    assert float(what_if["config"]["bytes_per_sync"].iloc[0]) == 4 * float(runs["n_params"].iloc[0])
    return rs


@pytest.mark.slow
def test_torchrun_script_with_a_snapshot_in_its_working_directory(tmp_path):
    proc = _sweep(tmp_path, "torchrun_snapshot.py", backend="ddp-gloo")
    rs = _check(tmp_path, proc, own_files=("snapshot.pt",))
    # every run trained all its epochs from 0: none resumed from another's snapshot
    for run_id, g in rs.epochs.groupby("run_id"):
        assert sorted(set(g["epoch"])) == [0, 1, 2], run_id
    # epoch_end got no samples=: counted from the loader's batches (256 split over the ranks)
    assert (rs.epochs["samples"] * rs.epochs["run_id"].map(rs.runs.set_index("run_id")["n_ranks"]) == 256).all()
    # the report says what the baseline was and shows the what-if study
    from analysis.report import build_report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        page = build_report(tmp_path / "exp", static=False).read_text()
    assert "initialised its framework at one process" in page
    assert "9. What-if: alpha-beta ring-allreduce model (skipped)" not in page


@pytest.mark.slow
def test_shared_working_directory_is_kept_on_request_and_a_resumed_run_is_flagged(tmp_path):
    """``--cwd shared`` (the default): the second sweep's run resumes from the first's
    snapshot in the user's directory, and the first epoch label says so."""
    first = _sweep(tmp_path, "torchrun_snapshot.py", backend="", nps="1", out="a", cwd="shared")
    assert first.returncode == 0, first.stderr[-2000:]
    assert (tmp_path / "snapshot.pt").is_file()
    shutil.copy(HERE / "torchrun_snapshot.py", tmp_path / "again.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    again = subprocess.run([str(SCALESCOPE), "sweep", "--np", "1", "--backend", "", "--baseline", "--cwd", "shared",
                            "--out", "b", "--", "python", "again.py", "--epochs", "5"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    m = json.loads((tmp_path / "b" / "baseline_np1_r1" / "run.json").read_text())
    assert m["config"]["cwd"] == "shared" and m["working_dir"]["path"] == str(tmp_path)
    assert m["resumed_from_epoch"] == 3
    assert "Resuming training from snapshot at Epoch 3" in (tmp_path / "b" / "baseline_np1_r1" / "stdout.log").read_text()
    from analysis.report import build_report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = analysis.RunSet.from_dirs([tmp_path / "b"]).runs
        page = build_report(tmp_path / "b", static=False).read_text()
    assert runs["resumed_from_epoch"].tolist() == [3]
    assert "its first epoch is labelled 3, not 0" in page


@pytest.mark.slow
@pytest.mark.horovod
@pytest.mark.skipif(HVD_MISSING is not None, reason=str(HVD_MISSING))
def test_timeit_benchmark_without_epochs(tmp_path):
    proc = _sweep(tmp_path, "timeit_benchmark.py", backend="horovod-gloo")
    rs = _check(tmp_path, proc)
    # no epoch_end: the steps became one implicit epoch per rank, with the samples counted
    assert (rs.epochs.groupby("run_id").size() == rs.epochs.groupby("run_id")["rank"].nunique()).all()
    steps = 3 + 4 * 3  # warm-up batches + timed batches
    assert set(rs.epochs["samples"]) == {16 * steps}


@pytest.mark.slow
@pytest.mark.horovod
@pytest.mark.skipif(HVD_MISSING is not None, reason=str(HVD_MISSING))
def test_horovod_script_with_distributed_optimizer_and_broadcasts(tmp_path):
    proc = _sweep(tmp_path, "horovod_train.py", backend="horovod-gloo")
    rs = _check(tmp_path, proc, own_files=("metrics.csv",))
    # each run's log has its own epochs only (an appended file shared between runs would not)
    for path in rs.runs["path"]:
        assert (Path(path) / "work" / "metrics.csv").read_text().count("\n") == 2
    hvd_runs = rs.runs[rs.runs["framework"] == "horovod"]
    assert set(hvd_runs["horovod_controller"]) == {"gloo"}


@pytest.mark.slow
def test_ddp_script_with_its_own_dataloader_workers(tmp_path):
    proc = _sweep(tmp_path, "loader_workers.py", backend="ddp-gloo")
    rs = _check(tmp_path, proc)
    # samples counted from the wrapped loader's batches: the sampler's share of 192 per rank
    per_rank = rs.epochs.groupby(["run_id", "rank"])["samples"].first()
    n_ranks = rs.runs.set_index("run_id")["n_ranks"]
    for (run_id, _rank), samples in per_rank.items():
        assert samples == 192 // int(n_ranks[run_id])


@pytest.mark.slow
@pytest.mark.horovod
@pytest.mark.skipif(HVD_MISSING is not None, reason=str(HVD_MISSING))
def test_threads_a_script_sets_after_init_are_recorded_and_a_mismatch_is_reported(tmp_path):
    """The script sets 4 // ranks threads after ``ssi.init``: the baseline 4, each of two
    ranks 2, against 2 and 1 cores per rank here. run.json says what the ranks really ran
    with, and the report names the comparison."""
    if cores_per_rank(1) != 2:
        pytest.skip("the expected thread counts are worked out for a 2-core machine")
    shutil.copy(HERE / "horovod_train.py", tmp_path / "horovod_train.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([str(SCALESCOPE), "sweep", "--np", "2", "--backend", "horovod-gloo", "--baseline",
                           "--out", "exp", "--", "python", "horovod_train.py", "--threads-total", "4"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = {}
    for run_id in ("baseline_np1_r1", "horovod-gloo_np2_r1"):
        m = json.loads((tmp_path / "exp" / run_id / "run.json").read_text())
        got[run_id] = [r["threads"]["torch_intra_op"] for r in m["ranks"]]
        assert all(r["threads_changed_after_init"] for r in m["ranks"])
        assert m["threads_per_rank"] == max(got[run_id]) and m["threads_per_rank_source"] == "ranks"
    assert got == {"baseline_np1_r1": [4], "horovod-gloo_np2_r1": [2, 2]}
    from analysis.report import build_report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        page = build_report(tmp_path / "exp", static=False).read_text()
    assert "ran with different threads per rank (baseline_np1_r1: 4, horovod-gloo_np2_r1: 2)" in page
