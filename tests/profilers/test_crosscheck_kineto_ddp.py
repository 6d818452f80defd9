"""Cross-check 3: a real 2-rank DDP (gloo, CPU) sweep run under ``--torch-profiler``.

The gloo collectives Kineto records (``gloo:all_reduce`` user annotations on the gloo
threads, ``c10d::allreduce_`` ops where DDP launches them; FORMATS.md section 2) must match
our DDP comm-hook records bucket for bucket in every profiled step; each execution starts
after its launch and ends no earlier than the future's completion.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import analysis

pytest.importorskip("torch")
pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
PROFILED = [2, 3, 4]  # --profile-steps 1,1,3


@pytest.fixture(scope="module")
def ddp_run(run_sweep, tmp_path_factory):
    out = tmp_path_factory.mktemp("kineto_ddp") / "EXP"
    rc, _ = run_sweep(["--np", "2", "--backend", "ddp-gloo", "--torch-profiler", "--profile-steps", "1,1,3",
                       "--sample-interval", "0", "--out", str(out), "--",
                       "python", str(HERE / "ddp_buckets_prog.py"), "--steps", "7"])
    run_dir = out / "ddp-gloo_np2_r1"
    assert rc == 0, (run_dir / "stderr.log").read_text()[-3000:]
    return run_dir


def _own(run_dir: Path, rank: int):
    # each rank's own clock, the one its Kineto trace uses too (no offsets applied)
    return analysis.read(run_dir / f"rank-{rank:05d}.trace.json")


def _kineto(run_dir: Path, rank: int):
    return analysis.read(run_dir / "torch_profiler" / f"rank-{rank:05d}.pt.trace.json.gz")


def test_one_trace_per_rank_recorded_in_run_json(ddp_run):
    files = sorted(p.name for p in (ddp_run / "torch_profiler").iterdir())
    assert files == ["rank-00000.pt.trace.json.gz", "rank-00001.pt.trace.json.gz"]
    prof = json.loads((ddp_run / "run.json").read_text())["profilers"]["torch_profiler"]
    assert prof["profiled_steps"] == PROFILED
    assert prof["files"] == [f"torch_profiler/{f}" for f in files]
    assert "cpu" in prof["activities"]
    for rank in (0, 1):
        assert set(_kineto(ddp_run, rank)["rank"].dropna()) == {rank}  # distributedInfo.rank


@pytest.mark.parametrize("rank", [0, 1])
def test_collective_counts_match_the_hook_per_step(ddp_run, rank):
    k = _kineto(ddp_run, rank)
    hook = _own(ddp_run, rank)
    hook = hook[hook["cat"] == "ddp_hook"]
    names = k["name"].astype(str)
    gloo = k[names == "gloo:all_reduce"].groupby("step").size()
    c10d = k[names == "c10d::allreduce_"].groupby("step").size()
    per_step = hook.groupby("step").size()
    assert per_step.loc[PROFILED].min() >= 2  # several buckets: a count that can differ
    for step in PROFILED:
        assert gloo.get(step, 0) == c10d.get(step, 0) == per_step[step], (step, gloo, c10d, per_step)
    # nothing collective outside the profiled steps leaks into the trace
    assert set(gloo.index) == set(c10d.index) == set(PROFILED)


@pytest.mark.parametrize("rank", [0, 1])
def test_gloo_execution_follows_launch_and_precedes_recorded_completion(ddp_run, rank):
    """Hook record = launch to the first time the training side sees the bucket's future
    complete (a later bucket's hook, or the end-of-backward callback's wait: an upper bound of
    the completion, no Python on the gloo threads); gloo annotation = the collective's run on
    a gloo worker thread. Pairing the k-th earliest of each per step: the k-th execution
    starts after the k-th launch, and the k-th recorded completion after the k-th execution
    started (physical order; clocks: both are this host's wall clock, within ``tol_ns``).
    The recorded completion usually also comes after the annotation closed, but the future
    can complete (and a waiting callback see it) while gloo is still closing its
    annotation, and a gloo thread descheduled in between keeps it open for milliseconds
    more (up to 3.9 ms seen on 2 cores), so that is asserted for a majority of pairs, not
    all: 12-18 of 18 in each of 24 rank runs on the idle VM (12 runs of both ranks,
    2026-11-25, the code of sessions 6 and 7 alike), where the earlier bound of three in four
    failed 4 of them."""
    k = _kineto(ddp_run, rank)
    own = _own(ddp_run, rank)
    tol_ns = 50_000
    after, pairs = 0, 0
    for step in PROFILED:
        hook = own[(own["cat"] == "ddp_hook") & (own["step"] == step)]
        gloo = k[(k["name"].astype(str) == "gloo:all_reduce") & (k["step"] == step)]
        launch = np.sort(hook["start_ns"].to_numpy(np.int64))
        run_start = np.sort(gloo["start_ns"].to_numpy(np.int64))
        done = np.sort((hook["start_ns"] + hook["dur_ns"]).to_numpy(np.int64))
        run_end = np.sort((gloo["start_ns"] + gloo["dur_ns"]).to_numpy(np.int64))
        assert (run_start >= launch - tol_ns).all(), (step, (run_start - launch) / 1e3)
        assert (done >= run_start - tol_ns).all(), (step, (done - run_start) / 1e3)
        after += int((done >= run_end - tol_ns).sum())
        pairs += len(done)
        # and the comm time both give is of the same size: a collective's execution is no
        # longer than its bucket's launch-to-completion, compared as medians over the step's
        # buckets -- a distribution comparison that the minority of annotations a
        # descheduled gloo thread keeps open (the rule above) cannot decide. (The earlier
        # "execution union at least half inside the hook union" was that noise itself: one
        # annotation held open 35 ms by a loaded machine put a step at 23 %.)
        assert np.median(gloo["dur_ns"]) <= np.median(hook["dur_ns"]) + tol_ns, (
            step, np.sort(gloo["dur_ns"].to_numpy()) / 1e3, np.sort(hook["dur_ns"].to_numpy()) / 1e3)
    assert pairs >= 2 * len(PROFILED) and after > 0.5 * pairs, (after, pairs)
