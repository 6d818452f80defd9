"""``analysis.scale.slurm_cluster`` for real: Dask workers as jobs of the local SLURM cluster.

Two one-core jobs (one worker each) on the one-node cluster of ``scripts/local_slurm.sh``;
the sample sweep is read and reduced on them and must give the serial tables. What the
local cluster needs: partition ``debug``; no ``--mem`` line (the node advertises
``RealMemory=1``, so sbatch refuses any ``--mem``: "Requested node configuration is not
available"); the scheduler on ``lo`` (one node); logs and the workers' parse cache under
this test's temporary directory. The workers run this interpreter (``sys.executable``).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("dask_jobqueue")
distributed = pytest.importorskip("distributed")
# Dask workers started as jobs of a real SLURM cluster (CI runs it; a local `make test`
# leaves it out)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "data" / "sample_sweep"
JOBS = 2


def _jobs(name: str) -> str:
    """``id state reason`` of the jobs called ``name``, one a line."""
    return subprocess.run(["squeue", "-h", "--states=all", "--name", name, "-o", "%i %T %r"],
                          capture_output=True, text=True, timeout=60).stdout.strip()


def _log_tails(logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-8:])
                     for p in sorted(logs.glob("*.err")))


@pytest.mark.timeout(240)
def test_slurm_cluster_workers_give_the_serial_tables(local_slurm, tmp_path):
    from analysis import RunSet, read, read_many, scale
    from analysis import metrics as M

    # the serial tables first (this process, its own parse cache)
    serial = RunSet.from_dirs([SWEEP], workers=1)
    want = {"step_times": M.step_times(serial), "time_breakdown": M.time_breakdown(serial),
            "sync_times": M.sync_times(serial)}
    assert len(want["step_times"]) > 1000 and len(want["time_breakdown"]) > 20
    traces = sorted((SWEEP / "horovod-gloo_np2_bs75_r1").glob("rank-*.trace.json"))
    timelines = sorted(SWEEP.glob("horovod-gloo_np2_*/horovod_timeline.json"))
    assert len(traces) == 2 and len(timelines) >= 2
    want_steps = M.step_times(read_many(traces))
    want_allreduce = [M.horovod_allreduce(read(p)) for p in timelines]

    name = f"ss-dask-{os.getpid()}"  # the jobs' name: what teardown cancels
    cache, logs = tmp_path / "worker-cache", tmp_path / "logs"
    cluster = scale.slurm_cluster(
        cores=1, memory="1GB", queue="debug", walltime="00:10:00", job_name=name,
        cache_dir=cache, log_directory=str(logs),
        job_directives_skip=["--mem"],  # the node advertises no memory: sbatch refuses --mem
        interface="lo", scheduler_options={"dashboard_address": ":0"},
    )
    client = None
    try:
        script = cluster.job_script()
        assert "#SBATCH -p debug" in script and "#SBATCH --mem" not in script
        assert f"export SCALESCOPE_CACHE={cache}" in script
        cluster.scale(jobs=JOBS)
        client = distributed.Client(cluster)
        try:  # a bound on a hang, not a timing assertion (they start in about a second here)
            client.wait_for_workers(JOBS, timeout=120)
        except (TimeoutError, distributed.TimeoutError) as e:  # the jobs' state says why
            raise AssertionError(f"no {JOBS} workers from SLURM: jobs {_jobs(name)!r}\n{_log_tails(logs)}") from e
        # every worker is a SLURM job of this cluster and sees the cache directory
        seen = client.run(lambda: (os.environ.get("SLURM_JOB_ID"), os.environ.get("SCALESCOPE_CACHE")))
        job_ids = {line.split()[0] for line in _jobs(name).splitlines()}
        assert len(seen) == JOBS and {j for j, _ in seen.values()} <= job_ids
        assert all(c == str(cache) for _, c in seen.values()), seen

        rs = RunSet.from_dirs([SWEEP], client=client)
        got = {"step_times": M.step_times(rs), "time_breakdown": M.time_breakdown(rs), "sync_times": M.sync_times(rs)}
        for key in want:
            pd.testing.assert_frame_equal(got[key], want[key], obj=key)
        # read_many(reduce=): one metric over a run's rank traces (cached by the workers), one per timeline
        pd.testing.assert_frame_equal(read_many(traces, reduce=M.step_times, client=client, cache=True), want_steps)
        assert any(cache.rglob("*.parquet")), "the workers wrote nothing to SCALESCOPE_CACHE"
        parts = [read_many([t], reduce=M.horovod_allreduce, client=client) for t in timelines]
        for part, table in zip(parts, want_allreduce, strict=True):
            pd.testing.assert_frame_equal(part, table)
    finally:
        if client is not None:
            client.close()
        try:
            cluster.close(timeout=30)
        except Exception:  # dask_jobqueue asserts on jobs that never started; scancel below
            pass
        subprocess.run(["scancel", "--name", name], capture_output=True, timeout=60)
        for _ in range(60):  # the jobs leave the running states within KillWait (5 s)
            if not any(s in _jobs(name) for s in ("PENDING", "RUNNING", "COMPLETING")):
                break
            time.sleep(0.5)
