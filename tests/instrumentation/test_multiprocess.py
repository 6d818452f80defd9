"""Real 2-process runs of a TINY model under torchrun (DDP, gloo) and horovodrun (gloo, MPI).

Each leaves a complete run directory that ``analysis.read_many`` loads.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import analysis
from analysis import rundir

from .conftest import ROOT, child_env

pytestmark = pytest.mark.slow

SCRIPT = ROOT / "tests" / "instrumentation" / "tiny_train.py"
BIN = Path(sys.executable).parent
EPOCHS, STEPS = 2, 3


def _run(cmd: list[str], env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def _check_run_dir(run_dir: Path, *, framework: str, backend: str) -> dict:
    m = rundir.read_manifest(run_dir)
    assert m["status"] == "ok" and m["end_time"]
    assert m["world_size"] == 2 and m["framework"] == framework and m["backend"] == backend
    assert sorted(r["rank"] for r in m["ranks"]) == [0, 1]
    assert set(m["clock"]["offsets_ns"]) == {"1"}
    assert m["batch_size"] == 8 and m["global_batch_size"] == 16
    assert m["tags"] == {"test": "tiny_train"}
    for rank in (0, 1):
        doc = json.loads((run_dir / f"rank-{rank:05d}.trace.json").read_text())  # closed
        assert doc[-1]["args"]["status"] == "ok"
    df = analysis.read_many(run_dir)
    ours = df[df["source"] == "scalescope_trace"]
    for rank in (0, 1):
        counts = ours[ours["rank"] == rank]["name"].value_counts()
        assert counts["step"] == EPOCHS * STEPS
        for name in ("data", "forward", "backward", "optimizer", "epoch"):
            assert counts[name] >= EPOCHS, name
    samples = analysis.read_many(run_dir, kind="samples")
    if m["sampler"]["kind"] == "cpu":
        assert sorted(samples["rank"].dropna().unique()) == [0, 1]  # both local processes
    assert len(samples) > 0
    epochs = rundir.read_epochs(run_dir)
    assert list(epochs["rank"]) == [0, 0, 1, 1] and list(epochs["epoch"]) == [0, 1, 0, 1]
    assert set(epochs["samples"]) == {STEPS * 8}
    return {"manifest": m, "events": df}


def test_torchrun_ddp_gloo_with_comm_hook(tmp_path):
    run_dir = tmp_path / "ddp"
    out = _run([str(BIN / "torchrun"), "--nproc-per-node", "2", str(SCRIPT), "--framework", "ddp",
                "--run-dir", str(run_dir), "--epochs", str(EPOCHS), "--steps", str(STEPS)],
               child_env())
    # the recording hook wraps the default allreduce: identical parameters without it
    assert out.stdout.count("PARAMS_EQUAL True") == 2, out.stdout
    res = _check_run_dir(run_dir, framework="ddp", backend="gloo")
    comm = res["events"][res["events"]["kind"] == "comm"]
    assert set(comm["cat"]) == {"ddp_hook"}
    assert (comm.groupby(["rank", "step"])["bytes"].sum() == 6928).all()  # 1732 float32 grads
    assert sorted(comm["step"].unique()) == list(range(EPOCHS * STEPS))
    assert comm.groupby(["rank", "step"]).size().max() >= 2  # several buckets (after the first step's rebuild)
    _check_ddp_wait(res["events"], EPOCHS * STEPS)


def _check_ddp_wait(ev, n_syncs: int) -> None:
    """DDP's wait: one `sync` phase per rank and synchronising step, from the last bucket's
    launch to after every bucket completed, and the breakdown counts it as exposed sync."""
    import analysis.metrics as M

    comm = ev[ev["kind"] == "comm"]
    sync = ev[(ev["kind"] == "phase") & (ev["name"] == "sync")]
    assert len(sync) == 2 * n_syncs
    for (rank, step), c in comm.groupby(["rank", "step"]):
        (s,) = sync[(sync["rank"] == rank) & (sync["step"] == step)].itertuples()
        assert s.start_ns >= c["start_ns"].max() - 1_000  # last bucket ready (µs rounding)
        assert s.start_ns + s.dur_ns >= (c["start_ns"] + c["dur_ns"]).max() - 1_000
    b = M.time_breakdown(ev, level="rank", warmup=0)
    assert (b["sync_exposed_s"] > 0).all() and (b["sync_total_s"] >= b["sync_exposed_s"]).all()


def test_torchrun_ddp_gradient_accumulation_no_sync(tmp_path):
    run_dir = tmp_path / "ddp-acc"
    out = _run([str(BIN / "torchrun"), "--nproc-per-node", "2", str(SCRIPT), "--framework", "ddp",
                "--run-dir", str(run_dir), "--epochs", str(EPOCHS), "--steps", "4", "--accumulate", "2"],
               child_env())
    assert out.stdout.count("PARAMS_EQUAL True") == 2, out.stdout
    ev = analysis.read_many(run_dir)
    ours = ev[ev["source"] == "scalescope_trace"]
    # a step is two micro-batches (the optimizer step closes it); only the second synchronises
    assert (ours[ours["rank"] == 0]["name"] == "step").sum() == EPOCHS * 2
    assert (ours[ours["rank"] == 0]["name"] == "backward").sum() == EPOCHS * 4
    _check_ddp_wait(ours, EPOCHS * 2)


def _horovod_or_skip() -> None:
    if importlib.util.find_spec("horovod") is None:
        pytest.skip("horovod is not installed (see `make setup-dev`)")
    try:
        import horovod.torch  # noqa: F401
    except Exception as exc:
        pytest.skip(f"horovod.torch does not import: {exc}")
    if not (BIN / "horovodrun").exists():
        pytest.skip("horovodrun is not in the venv")


def test_horovodrun_gloo_dynamic_timeline(tmp_path):
    _horovod_or_skip()
    run_dir = tmp_path / "hvd-gloo"
    env = child_env(HOROVOD_TIMELINE="DYNAMIC", HOROVOD_TIMELINE_MARK_CYCLES="1")
    _run([str(BIN / "horovodrun"), "-np", "2", "--gloo", sys.executable, str(SCRIPT),
          "--framework", "horovod", "--run-dir", str(run_dir), "--epochs", str(EPOCHS),
          "--steps", str(STEPS)], env)
    res = _check_run_dir(run_dir, framework="horovod", backend="gloo")
    tl = res["manifest"]["horovod_timeline"]
    assert tl["mode"] == "dynamic" and tl["started_by_scalescope"] and tl["mark_cycles"]
    assert (run_dir / "horovod_timeline.json").stat().st_size > 0
    assert b"CYCLE_START" in (run_dir / "horovod_timeline.json").read_bytes()
    ours = res["events"][res["events"]["source"] == "scalescope_trace"]
    assert (ours["name"] == "sync").sum() == 2 * EPOCHS * STEPS


def test_horovodrun_plain_step_records_sync_in_optimizer(tmp_path):
    _horovod_or_skip()
    import analysis.metrics as M

    run_dir = tmp_path / "hvd-auto"
    _run([str(BIN / "horovodrun"), "-np", "2", "--gloo", sys.executable, str(SCRIPT), "--framework", "horovod",
          "--plain-step", "--run-dir", str(run_dir), "--epochs", str(EPOCHS), "--steps", str(STEPS)], child_env())
    ev = analysis.read_many(run_dir)
    ours = ev[ev["source"] == "scalescope_trace"]
    for rank in (0, 1):
        r = ours[ours["rank"] == rank]
        sync, opt = r[r["name"] == "sync"], r[r["name"] == "optimizer"]
        assert len(sync) == len(opt) == EPOCHS * STEPS
        # step() synchronised itself: each sync lies inside that step's optimizer phase
        m = sync.merge(opt, on="step", suffixes=("", "_opt"))
        assert (m["start_ns"] >= m["start_ns_opt"]).all()
        assert (m["start_ns"] + m["dur_ns"] <= m["start_ns_opt"] + m["dur_ns_opt"]).all()
        hv = r[(r["kind"] == "comm") & (r["cat"] == "hvd_hook")]
        assert sorted(hv["step"]) == list(range(EPOCHS * STEPS))  # one in-flight record per step
    b = M.time_breakdown(ours, level="rank", warmup=0)
    assert (b["sync_exposed_s"] > 0).all() and (b["sync_total_s"] >= b["sync_exposed_s"]).all()


def test_horovodrun_mpi_launcher_timeline(tmp_path):
    _horovod_or_skip()
    import horovod.torch as hvd

    if not hvd.mpi_built():
        pytest.skip("horovod was built without MPI")
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not on PATH")
    run_dir = tmp_path / "hvd-mpi"
    run_dir.mkdir()
    env = child_env(HOROVOD_TIMELINE=str(run_dir / "horovod_timeline.json"))
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    _run([str(BIN / "horovodrun"), "-np", "2", "--mpi", sys.executable, str(SCRIPT),
          "--framework", "horovod", "--run-dir", str(run_dir), "--epochs", str(EPOCHS),
          "--steps", str(STEPS)], env)
    res = _check_run_dir(run_dir, framework="horovod", backend="mpi")
    tl = res["manifest"]["horovod_timeline"]
    assert tl["mode"] == "launcher" and tl["path"] == "horovod_timeline.json"
    assert (run_dir / "horovod_timeline.json").stat().st_size > 0
    assert res["manifest"]["versions"]["mpi"]
