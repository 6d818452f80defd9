"""Cross-checks 1 and 2 on one real 2-rank Horovod (gloo) sweep run of the thesis workload.

1. Under ``--nsys`` (``-t nvtx``): the phases Nsight Systems records as NVTX ranges in the
   ``scalescope`` domain (one SQLite export per rank) agree with our own recorder, phase by
   phase and rank by rank: same names, same counts, totals within 2 % plus the run's noise.
2. Our exposed ``sync`` phase against the Horovod timeline of the same steps: one wait per
   step and rank, one allreduce per gradient tensor per step, and the causal relations
   between the wait and the allreduce activity (docs/profilers.md).

About 20 s on the 2-core VM (1856 curves, 1392 for training, batch 32: 22 steps per rank,
so that the per-range checks below judge 20-21 ranges per phase, not 8-9: with 9, one range
delayed by the loaded CI machine already decided the 80 % criterion, and the 5 % allowance
for descheduled ranges allowed none).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _helpers import HVD_MISSING
from _noise import paired_durations_agree

import analysis
from analysis.metrics import _intervals as iv
from analysis.metrics.breakdown import step_times
from instrumentation.profilers import find_nsys

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.horovod,
              pytest.mark.skipif(HVD_MISSING is not None, reason=str(HVD_MISSING))]
ROOT = Path(__file__).resolve().parents[2]
N_GRAD_TENSORS = 8  # 2 Conv1d + 2 Linear layers, weight and bias each
SAMPLES = 1856  # 75 % for training, shared by 2 ranks, batch 32
STEPS = -(-(3 * SAMPLES // 4 // 2) // 32)  # per rank: 22
PHASES = ("data", "forward", "backward", "sync", "optimizer", "step", "epoch", "eval")
NSYS = find_nsys()
no_nsys = pytest.mark.skipif(NSYS is None, reason="Nsight Systems CLI not found (scripts/install_nsys.sh)")


@pytest.fixture(scope="module")
def hvd_run(run_sweep, data_cache, tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("SCALESCOPE_DATA_DIR", str(data_cache))
    out = tmp_path_factory.mktemp("hvd_nsys") / "EXP"
    nsys = ["--nsys", "--nsys-trace", "nvtx"] if NSYS else []
    rc, _ = run_sweep(["--np", "2", "--backend", "horovod-gloo", "--batch-size", "32", *nsys,
                       "--sample-interval", "0", "--out", str(out), "--",
                       "python", str(ROOT / "examples" / "strain_stress.py"), "--epochs", "1",
                       "--samples", str(SAMPLES), "--threads", "1"])
    run_dir = out / "horovod-gloo_np2_bs32_r1"
    assert rc == 0, (run_dir / "stderr.log").read_text()[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _nvtx(run_dir: Path, rank: int) -> pd.DataFrame:
    [f] = sorted((run_dir / "nsys").glob(f"rank-{rank}-*.sqlite"))
    ev = analysis.read(f, format="nsys_sqlite")
    assert set(ev["rank"].dropna()) == {rank}  # HOROVOD_RANK in the captured environment
    return ev[ev["cat"] == "scalescope"]


def _own(run_dir: Path, rank: int) -> pd.DataFrame:
    ev = analysis.read(run_dir / f"rank-{rank:05d}.trace.json")  # the rank's own clock, as nsys
    return ev[ev["kind"] == "phase"]


@pytest.mark.nsys
@no_nsys
def test_one_report_per_rank_named_by_rank_and_host(hvd_run):
    names = sorted(p.name for p in (hvd_run / "nsys").iterdir())
    hosts = {r["host"] for r in json.loads((hvd_run / "run.json").read_text())["ranks"]}
    assert len(hosts) == 1
    host = hosts.pop().split(".")[0]
    assert names == [f"rank-{r}-{host}.{ext}" for r in (0, 1) for ext in ("nsys-rep", "sqlite")]
    nsys = json.loads((hvd_run / "run.json").read_text())["profilers"]["nsys"]
    assert nsys["version"].startswith("20") and nsys["trace"] == ["nvtx"]
    assert nsys["rank_variable"] == "HOROVOD_RANK" and nsys["output"] == "nsys/rank-%q{HOROVOD_RANK}-%h"
    assert nsys["files"] == [f"nsys/{n}" for n in names]
    with sqlite3.connect(hvd_run / "nsys" / names[1]) as con:  # a real export
        assert con.execute("SELECT count(*) FROM NVTX_EVENTS").fetchone()[0] > 0


@pytest.mark.nsys
@no_nsys
@pytest.mark.parametrize("rank", [0, 1])
def test_nvtx_phases_match_our_recorder(hvd_run, rank):
    """Counts equal except ``step``: the final ``next()`` that ends the epoch opens an NVTX
    ``step`` range (and closes it) that our recorder does not keep as a step.

    Ranges matched in time order: at least 80 % of each phase's ranges agree within 2 % of
    the range or 12 µs, the median difference is under 20 µs, and the per-phase totals agree
    within 2 % plus the noise of this run (``_noise.paired_durations_agree``: the nesting
    overhead, NVTX pushes before our clock read and pops after it, and three standard errors
    from the spread of the per-range differences). Measured on a quiet machine: 0.01-0.6 %
    apart, ``data`` the largest; with other work on the machine a range or two where the rank
    was descheduled between the two clocks put ``data`` (0.2-0.4 ms per range) 2.8 % apart:
    such spikes, judged against the spread of the other ranges, are left out of the totals
    and may be at most 20 % of them. ``epoch``/``eval``, one range each, are allowed 5 ms.
    """
    nv, own = _nvtx(hvd_run, rank), _own(hvd_run, rank)
    # names present (the categorical name column also counts, as 0, the categories of the
    # trace's other kinds, e.g. Horovod's in-flight `allreduce` record)
    counts_nv = nv["name"].value_counts().loc[lambda c: c > 0]
    counts_own = own["name"].value_counts().loc[lambda c: c > 0]
    assert set(counts_nv.index) == set(counts_own.index) == set(PHASES)
    end_of_data = int(own["step"].isna().sum() - own["name"].isin(["epoch", "eval"]).sum())
    assert end_of_data == 1
    for phase in PHASES:
        assert counts_nv[phase] == counts_own[phase] + (end_of_data if phase == "step" else 0), phase
        x = nv[nv["name"] == phase].sort_values("start_ns")
        y = own[own["name"] == phase].sort_values("start_ns")
        if phase == "step":  # drop the end-of-data step range (the shortest, at the epoch's end)
            x = x.drop(index=x["dur_ns"].idxmin())
        dx, dy = x["dur_ns"].to_numpy(np.int64), y["dur_ns"].to_numpy(np.int64)
        if len(dx) < 5:  # epoch, eval: one range each, a stall cannot be outvoted
            assert (np.abs(dx - dy) <= np.maximum(0.02 * dy, 5_000_000)).all(), (phase, (dx - dy) / 1e3)
            continue
        # the first range of a name registers its NVTX string (10 µs - ms); the end-of-data
        # range also pops the step range it opened
        dx, dy = dx[1:], dy[1:]
        if phase == "data":
            dx, dy = dx[:-1], dy[:-1]
        ok = np.abs(dx - dy) <= np.maximum(0.02 * dy, 12_000)
        assert ok.mean() >= 0.8, (phase, (dx - dy) / 1e3)
        assert np.median(np.abs(dx - dy)) < 20_000, (phase, (dx - dy) / 1e3)
        # per phase and rank, totals within 2 % plus this run's own noise, leaving out the
        # ranges where the process was descheduled between the two clocks (spikes judged by
        # the spread of the differences in this run, not by a fixed 1 ms)
        paired_durations_agree(dx, dy, what=(phase, rank))


# -- cross-check 2: exposed sync vs the Horovod timeline -----------------------------------------
def _timeline(run_dir: Path) -> pd.DataFrame:
    ev = analysis.read_many(run_dir)
    return ev[ev["source"] == "horovod"]


def _per_step(run_dir: Path, rank: int) -> pd.DataFrame:
    """Per step of ``rank``: our sync wait and the allreduce ops that end inside the step
    (the wait ends after them), on rank 0's clock."""
    hv = _timeline(run_dir)
    ev = analysis.read_many(run_dir)
    own = ev[(ev["source"] == "scalescope_trace") & (ev["rank"] == rank)]
    act = hv[hv["cat"].isin(["negotiate", "op"]) & hv["name"].astype(str).str.endswith("ALLREDUCE")]
    ops = act[act["cat"] == "op"]
    tot = iv.union(act["start_ns"], act["start_ns"] + act["dur_ns"])
    ph = own[own["kind"] == "phase"]
    rows = []
    for _, w in step_times(own).iterrows():
        lo, hi = int(w["step_start_ns"]), int(w["step_end_ns"])
        sync = ph[(ph["name"] == "sync") & (ph["start_ns"] >= lo) & (ph["start_ns"] < hi)]
        o_end = ops["start_ns"] + ops["dur_ns"]
        o = ops[(o_end >= lo) & (o_end <= hi)]
        s = iv.union(sync["start_ns"], sync["start_ns"] + sync["dur_ns"])
        a = iv.clip(tot, lo, hi)
        rows.append({
            "step": int(w["step"]), "n_sync": len(sync), "n_allreduce": len(o),
            "sync_ns": iv.length(s), "activity_ns": iv.length(a),
            "sync_not_under_activity_ns": iv.length(iv.subtract(s, a)),
            "sync_end_minus_last_op_end_ns": int((sync["start_ns"] + sync["dur_ns"]).max()
                                                 - (o["start_ns"] + o["dur_ns"]).max()) if len(o) else None,
        })
    return pd.DataFrame(rows)


def test_timeline_and_sync_counts_per_step(hvd_run):
    """One wait per step on each rank; on rank 0 (whose clock the timeline shares; rank 1's
    windows are placed by the estimated clock offset, whose error can reach ms on the loaded
    VM) one allreduce per gradient tensor ends inside every step."""
    for rank in (0, 1):
        t = _per_step(hvd_run, rank)
        assert len(t) == STEPS, t
        assert (t["n_sync"] == 1).all(), t
    t = _per_step(hvd_run, 0)
    assert (t["n_allreduce"] == N_GRAD_TENSORS).all(), t
    ops = _timeline(hvd_run)
    ops = ops[(ops["cat"] == "op") & (ops["name"] == "ALLREDUCE")]
    assert len(ops) == STEPS * N_GRAD_TENSORS + 1  # + the end-of-epoch metrics allreduce


def test_exposed_wait_against_total_allreduce_activity(hvd_run):
    """How the exposed wait (our ``sync``) relates to the allreduce activity the timeline
    shows (negotiation + op spans), on rank 0, the timeline's own clock:

    * the wait ends only after the step's last allreduce ended (completion callback and
      Python wake-up; measured 13-140 µs, ms when the VM descheduled the rank);
    * the wait overlaps the activity in every step, unless every allreduce of the step ended
      before the wait began (all hidden under backward): then the wait is only the
      completion bookkeeping (short);
    * the wait is *not* bounded by the activity: the part the timeline does not cover lies
      before the step's last ``NEGOTIATE`` begins (the tensor sat in Horovod's queue: cycle
      latency, and with the response cache on, waiting for the slower rank to reach the
      coordination cycle; measured up to 24 ms) or after the last op ended (the completion
      tail); the gaps left between activities are small (measured 8-46 µs per step after
      the first; the first step negotiates uncached and may leave ms).
    """
    ev = analysis.read_many(hvd_run)
    hv = ev[ev["source"] == "horovod"]
    act = hv[hv["cat"].isin(["negotiate", "op"]) & hv["name"].astype(str).str.endswith("ALLREDUCE")]
    neg, ops = act[act["cat"] == "negotiate"], act[act["cat"] == "op"]
    tot = iv.union(act["start_ns"], act["start_ns"] + act["dur_ns"])
    own = ev[(ev["source"] == "scalescope_trace") & (ev["rank"] == 0)]
    ph = own[own["kind"] == "phase"]
    res_ns = 1_000  # integer-µs timeline stamps
    for _, w in step_times(own).iterrows():
        lo, hi = int(w["step_start_ns"]), int(w["step_end_ns"])
        [sync] = ph[(ph["name"] == "sync") & (ph["start_ns"] >= lo) & (ph["start_ns"] < hi)].itertuples()
        s0, s1 = int(sync.start_ns), int(sync.start_ns + sync.dur_ns)
        n = neg[(neg["start_ns"] >= lo) & (neg["start_ns"] < hi)]
        o = ops[(ops["start_ns"] + ops["dur_ns"] >= lo) & (ops["start_ns"] + ops["dur_ns"] <= hi)]
        last_neg = int(n["start_ns"].max()) if len(n) else s0  # cached: may negotiate early
        last_end = int((o["start_ns"] + o["dur_ns"]).max())
        wait = iv.union([s0], [s1])
        uncovered = iv.subtract(wait, iv.clip(tot, lo, hi))
        assert s1 >= last_end - res_ns, (w["step"], s1 - last_end)
        if last_end <= s0:  # all hidden under backward: the wait is only the bookkeeping
            assert s1 - s0 < 5_000_000, (w["step"], s1 - s0)
        else:
            assert iv.length(uncovered) < s1 - s0, w["step"]
        queue = iv.length(iv.clip(uncovered, s0, max(s0, last_neg)))
        tail = iv.length(iv.clip(uncovered, max(s0, last_end), s1))
        gaps = iv.length(uncovered) - queue - tail
        if int(w["step"]) > 0:
            assert gaps <= 500_000 + res_ns * N_GRAD_TENSORS, (w["step"], gaps, queue, tail)
