"""The device timeline on real Kineto traces: the 8-rank DLRM step of
../shared/corpus/kineto/param_dlrm_8rank (one training step, NCCL, 8x V100 on one node),
checked against the kernels read straight from the JSON files (independently of our reader)
and against the physical facts of a collective.

Found on that step (µs resolution, old Kineto: integer epoch µs on the host clock):
8 NCCL kernels per rank (5 SendRecv = all_to_all, 3 AllReduce), matched by order. The
ranks start each collective up to 7.6 ms apart, yet its kernels END within 7 µs of each
other on all 8 ranks (1-7 µs per collective) and the transfer parts agree within 7 µs: the
ranks share one clock, no alignment is needed (``align="ends"`` estimates offsets below
1.1 µs). The last arrivers are ranks 7, 7, 7, 7, 7, 5, 5, 4; rank 1 arrives first at the
first all_to_all and waits 7.6 ms in it.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analysis
import analysis.metrics as M
from analysis.schema import make_events

pytestmark = pytest.mark.corpus

_US = 1000  # ns per µs


@pytest.fixture(scope="module")
def dlrm_files(corpus_dir) -> list[Path]:
    files = sorted((corpus_dir / "kineto" / "param_dlrm_8rank").glob("*.pt.trace.json"))
    if len(files) != 8:
        pytest.skip("the 8-rank DLRM set is not in ../shared/corpus")
    return files


@pytest.fixture(scope="module")
def raw(dlrm_files) -> dict[int, dict]:
    out = {}
    for f in dlrm_files:
        d = json.loads(f.read_text())
        out[d["distributedInfo"]["rank"]] = d
    return out


@pytest.fixture(scope="module")
def dlrm(dlrm_files) -> pd.DataFrame:
    """All 8 ranks under one run id (each file alone would be its own run)."""
    return pd.concat([analysis.read(f, format="kineto", run_id="dlrm", cache=False) for f in dlrm_files],
                     ignore_index=True)


def _nccl(d: dict) -> list[dict]:
    return sorted((e for e in d["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")),
                  key=lambda e: e["ts"])


def _window(d: dict, name: str) -> tuple[int, int]:
    (e,) = [e for e in d["traceEvents"] if e.get("name") == name and e.get("ph") == "X"]
    return e["ts"], e["ts"] + e["dur"]


def test_dlrm_collectives_agree_with_the_raw_kernels(dlrm, raw):
    c = M.collectives(dlrm)
    assert len(c) == 8 * 8 and (c["match"] == "order").all() and (c["n_ranks"] == 8).all()
    for seq in range(8):
        kernels = {r: _nccl(d)[seq] for r, d in raw.items()}
        last_ts = max(k["ts"] for k in kernels.values())
        got = c[c["seq"] == seq].set_index("rank")
        for r, k in kernels.items():
            assert got.loc[r, "start_ns"] == k["ts"] * _US and got.loc[r, "end_ns"] == (k["ts"] + k["dur"]) * _US
            assert got.loc[r, "wait_s"] == pytest.approx((last_ts - k["ts"]) * 1e-6, abs=1e-12)
            assert got.loc[r, "transfer_s"] == pytest.approx((k["ts"] + k["dur"] - last_ts) * 1e-6, abs=1e-12)
        last = min(r for r, k in kernels.items() if k["ts"] == last_ts)
        assert (got["last_rank"] == last).all() and got.loc[last, "wait_s"] == 0
    assert c.groupby("seq")["last_rank"].first().tolist() == [7, 7, 7, 7, 7, 5, 5, 4]


def test_dlrm_collectives_end_together_on_every_rank(dlrm):
    """The physical fact: a collective completes together everywhere. Starts spread by up
    to 7.6 ms, ends by at most 7 µs, and the transfer part is the same on every rank."""
    c = M.collectives(dlrm)
    g = c.groupby("seq")
    start_spread = g["start_ns"].agg(np.ptp)
    end_spread = g["end_ns"].agg(np.ptp)
    transfer_spread = g["transfer_s"].agg(np.ptp)
    assert start_spread.max() == 7_624_000 and start_spread.idxmax() == 0
    assert end_spread.max() <= 7 * _US and transfer_spread.max() <= 7e-6 + 1e-12
    assert (end_spread < start_spread).all()
    first = c[c["seq"] == 0].set_index("rank")
    assert first["wait_s"].idxmax() == 1 and first.loc[1, "wait_s"] == pytest.approx(7.624e-3)


def test_dlrm_clock_alignment_is_not_needed_and_recovers_an_injected_offset(dlrm):
    truth = M.collectives(dlrm)
    est = M.collectives(dlrm, align="ends").groupby("rank")["clock_offset_ns"].first()
    assert est.abs().max() <= 1100  # below the traces' 1 µs resolution
    shifted = dlrm.assign(start_ns=dlrm["start_ns"] + np.where(dlrm["rank"] == 5, 3_000_000, 0))
    with pytest.warns(UserWarning, match="clocks differ"):
        raw = M.collectives(shifted)
    assert raw.groupby("seq")["end_ns"].agg(np.ptp).min() >= 3_000_000 - 7 * _US
    fixed = M.collectives(shifted, align="ends")
    off = fixed.groupby("rank")["clock_offset_ns"].first() - est
    assert abs(off[5] - 3_000_000) <= 1100 and off.drop(5).abs().max() <= 1100
    assert fixed["last_rank"].tolist() == truth["last_rank"].tolist()
    assert np.allclose(fixed["wait_s"], truth["wait_s"], atol=2.2e-6, rtol=0)


def test_dlrm_blocking_calls_in_forward(dlrm, raw):
    """Each rank's synchronisations inside ``## forward ##``, against the raw JSON: count and
    total. The rank that arrives first at the forward all_to_all (rank 1) blocks longest."""
    b = M.blocking_calls(dlrm)
    blocked = {}
    for r, d in raw.items():
        lo, hi = _window(d, "## forward ##")
        want = [e for e in d["traceEvents"] if e.get("cat") == "cuda_runtime"
                and e["name"] == "cudaStreamSynchronize" and lo <= e["ts"] < hi]
        got = b[(b["rank"] == r) & (b["name"] == "cudaStreamSynchronize")
                & b["start_ns"].between(lo * _US, hi * _US - 1)]
        assert len(got) == len(want) > 0
        assert got["dur_s"].sum() == pytest.approx(sum(e["dur"] for e in want) * 1e-6, abs=1e-12)
        assert (got["op"] == "aten::copy_").all() and not got["nested"].any() and (got["step"] == 10).all()
        blocked[r] = got["dur_s"].sum()
    assert max(blocked, key=blocked.get) == 1 and blocked[1] > 6e-3
    # every aten::_local_scalar_dense (.item()) of the step is found, inside its aten::item
    n_items = sum(1 for e in raw[0]["traceEvents"] if e.get("name") == "aten::_local_scalar_dense")
    r0 = b[(b["rank"] == 0) & (b["name"] == "aten::_local_scalar_dense")]
    assert len(r0) == n_items == 57 and r0["op"].notna().all()


def _launched_in(d: dict, name: str) -> list[dict]:
    """The GPU events whose launching runtime call (same correlation id) starts in the
    window of the range ``name`` (on any thread)."""
    lo, hi = _window(d, name)
    ev = d["traceEvents"]
    launched = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime"
                and "correlation" in e.get("args", {}) and lo <= e["ts"] < hi}
    gpu = ("kernel", "gpu_memcpy", "gpu_memset")
    return [e for e in ev if e.get("cat") in gpu and e["args"].get("correlation") in launched]


def _union_us(events: list[dict]) -> int:
    total, end = 0, None
    for s, e in sorted((e["ts"], e["ts"] + e["dur"]) for e in events):
        if end is None or s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total


def test_dlrm_launched_work_against_correlation_ids(dlrm, raw):
    """The GPU work under the profiler step and under ``## forward ##``, against the raw
    JSON's correlation ids. Ranks 1 and 3 also hold 64 kernels whose launch is not in the
    trace (launched before the profiler window): they count nowhere."""
    w = M.launched_work(dlrm)
    unlaunched = {}
    for r, d in raw.items():
        one = w[(w["rank"] == r)].set_index("name")
        for name in ("ProfilerStep#10", "## forward ##"):
            want = _launched_in(d, name)
            assert one.loc[name, "n_kernels"] == sum(e["cat"] == "kernel" for e in want)
            assert one.loc[name, "n_copies"] == sum(e["cat"] != "kernel" for e in want)
            assert one.loc[name, "gpu_s"] == pytest.approx(_union_us(want) * 1e-6, abs=1e-12)
        n_gpu = sum(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in d["traceEvents"])
        unlaunched[r] = n_gpu - len(_launched_in(d, "ProfilerStep#10"))
    assert unlaunched == {0: 0, 1: 64, 2: 0, 3: 64, 4: 0, 5: 0, 6: 0, 7: 0}


def _host_phases(ev: pd.DataFrame) -> pd.DataFrame:
    """The DLRM step's own ranges as scalescope phases (what the host breakdown is fed)."""
    names = {"## copy_batch_to_gpu ##": "data", "## forward ##": "forward", "## backward ##": "backward",
             "## optimizer ##": "optimizer", "ProfilerStep#10": "step"}
    r = ev[ev["name"].isin(list(names)) & ev["device"].isna()]
    return make_events(run_id="dlrm", rank=r["rank"].to_numpy(), name=r["name"].map(names).to_numpy(),
                       kind="phase", start_ns=r["start_ns"].to_numpy(), dur_ns=r["dur_ns"].to_numpy(),
                       step=10, epoch=0, source="test")


def test_dlrm_kernel_step_parts_name_the_waiting_rank_not_the_slow_one(dlrm):
    """The wrong straggler: from the host phases, rank 1 has the longest step and is named
    slowest; on the device, rank 1 is the rank that WAITS most (straggler_s 10.9 ms), and
    the rank the others wait for (rank 7, last to arrive at the first five collectives)
    waits least."""
    k = M.kernel_step_parts(dlrm)
    assert len(k) == 8 and (k["step"] == 10).all()
    parts = k[["compute_s", "sync_s", "straggler_s", "other_s"]].sum(axis=1)
    assert np.allclose(parts, k["step_s"], atol=1e-12, rtol=0)
    x = M.exposed_comm(dlrm, by_step=True).set_index("rank")
    ks = k.set_index("rank")
    assert np.allclose(ks["sync_s"] + ks["straggler_s"], x["exposed_s"], atol=1e-12, rtol=0)
    assert (x["exposed_blocking_s"] + x["exposed_idle_s"] - x["exposed_s"]).abs().max() < 1e-12
    c = M.collectives(dlrm)
    last = int(c.loc[c["seq"] == 0, "last_rank"].iloc[0])
    waiter = int(ks["straggler_s"].idxmax())
    assert last == 7 and waiter == 1 and waiter != last
    assert ks["straggler_s"].idxmin() == last
    assert c[(c["rank"] == last) & (c["last_rank"] == last)]["wait_s"].eq(0).all()
    host = M.rank_step_parts(_host_phases(dlrm), warmup=0).set_index("rank")
    assert host["is_slowest"].idxmax() == waiter  # the host view names the waiting rank slowest


@pytest.mark.parametrize("name", ["hta__negative_queue_length_rank0.json.gz", "hta__trace_diff_control.json.gz"])
def test_profiler_steps_leave_gaps_without_blocking_calls(corpus_dir, name):
    """Consecutive ``ProfilerStep#N`` ranges of these production traces leave gaps of
    40-62 µs (the profiler's own step bookkeeping), and none of their many blocking calls
    (hundreds of ``.item()``) falls in one: nothing to report."""
    import gzip

    path = corpus_dir / "kineto" / name
    with gzip.open(path) as fh:
        d = json.loads(fh.read())
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in d["traceEvents"]
                   if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    gaps = [(a[1], b[0]) for a, b in pairwise(steps)]
    assert len(gaps) >= 4 and all(30 < hi - lo < 70 for lo, hi in gaps)
    blocking = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "aten::_local_scalar_dense"}
    in_gaps = [e for e in d["traceEvents"] if e.get("name") in blocking
               and any(lo <= e["ts"] < hi for lo, hi in gaps)]
    ev = analysis.read(path, format="kineto", cache=False)
    assert len(M.blocking_calls(ev)) > 80
    assert len(M.sync_outside_steps(ev)) == len(in_gaps) == 0


def test_dlrm_an_injected_straggler_is_found_again(dlrm):
    """Make rank 2 arrive D = 3 ms after everyone at the first all_to_all: its kernel starts
    at the old last arrival + D, every other rank's kernel of that collective ends D later,
    and all GPU work after the old last arrival moves D later on every rank. Then rank 2 is
    the last arriver, every other rank waits exactly D more (rank 7, the old last arriver,
    from 0 to D), the transfers do not change, and on the device every other rank's
    straggler time and every rank's step grow by D."""
    d_ns = 3_000_000
    c = M.collectives(dlrm)
    first = c[c["seq"] == 0].set_index("rank")
    t0 = int(first["start_ns"].max())
    gpu = dlrm["device"].notna().to_numpy()
    start, dur = dlrm["start_ns"].to_numpy().copy(), dlrm["dur_ns"].to_numpy().copy()
    start[gpu & (start > t0)] += d_ns
    for r in range(8):
        (i,) = np.flatnonzero(gpu & (dlrm["rank"] == r).to_numpy() & (dlrm["start_ns"] == first.loc[r, "start_ns"])
                              .to_numpy() & (dlrm["kind"] == "comm").to_numpy())
        end = dlrm["start_ns"].iloc[i] + dlrm["dur_ns"].iloc[i] + d_ns
        if r == 2:
            start[i] = t0 + d_ns
        dur[i] = end - start[i]
    injected = dlrm.assign(start_ns=start, dur_ns=dur)
    got = M.collectives(injected)
    g = got[got["seq"] == 0].set_index("rank")
    assert (g["last_rank"] == 2).all() and g.loc[2, "wait_s"] == 0
    more = (g["wait_s"] - first["wait_s"]).drop(2)
    assert np.allclose(more, d_ns / 1e9, rtol=0, atol=1e-12)
    assert np.allclose(g["transfer_s"], first["transfer_s"], rtol=0, atol=1e-12)
    assert got[got["seq"] > 0]["wait_s"].tolist() == pytest.approx(c[c["seq"] > 0]["wait_s"].tolist(), abs=1e-12)
    before = M.kernel_step_parts(dlrm).set_index("rank")
    after = M.kernel_step_parts(injected).set_index("rank")
    assert np.allclose((after["straggler_s"] - before["straggler_s"]).drop(2), d_ns / 1e9, rtol=0, atol=1e-9)
    assert np.allclose(after["step_s"] - before["step_s"], d_ns / 1e9, rtol=0, atol=1e-9)
    assert after["straggler_s"].idxmin() == 2


def test_nsys_export_blocking_calls_and_nvtx_projection(corpus_dir):
    """nsys (flame__torch-ex.sqlite, ResNet-18, NVTX ``iterationN``/``forward`` ranges on one
    thread): the 122 ``cudaStreamSynchronize_v3020`` calls are found (nsys' version suffix),
    and the GPU work projected onto the ``forward`` ranges equals the kernels, copies and
    sets whose runtime call (same correlationId) starts inside one, read with SQL."""
    import sqlite3

    path = corpus_dir / "nsys" / "flame__torch-ex.sqlite"
    ev = analysis.read(path, cache=False)
    b = M.blocking_calls(ev)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    n_sync = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON r.nameId = s.id "
                         "WHERE s.value LIKE 'cudaStreamSynchronize%'").fetchone()[0]
    assert len(b) == n_sync == 122 and (b["name"] == "cudaStreamSynchronize_v3020").all()
    gpu_sql = " UNION ALL ".join(f"SELECT start, end, correlationId, {int(t == 'KERNEL')} AS k "
                                 f"FROM CUPTI_ACTIVITY_KIND_{t}" for t in ("KERNEL", "MEMCPY", "MEMSET"))
    rows = con.execute(
        f"SELECT DISTINCT g.start, g.end, g.k, g.correlationId FROM ({gpu_sql}) g "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = g.correlationId "
        "JOIN NVTX_EVENTS n ON n.text = 'forward' AND n.globalTid = r.globalTid "
        "AND r.start >= n.start AND r.start < n.end").fetchall()
    con.close()
    w = M.launched_work(ev).set_index("name").loc["forward"]
    assert w["n_ranges"] == 10
    assert w["n_kernels"] == sum(k for _, _, k, _ in rows) > 0
    assert w["n_copies"] == sum(1 - k for _, _, k, _ in rows)
    total = _union_us([{"ts": s, "dur": e - s} for s, e, _, _ in rows])  # ns here
    assert w["gpu_s"] == pytest.approx(total / 1e9, abs=1e-12)


def test_kernels_that_do_not_belong_together_are_flagged(corpus_dir):
    """HTA's sampled_rank-0/1: ranks 0 and 1 of a 128-rank job, each an event-sampled subset
    (HTA's maintainers kept some events of each rank), 10 NCCL kernels each on two streams.
    Matched by order, 6 of their "collectives" end up to 134 ms apart, which a collective
    never does: the n-th kept kernels of the two ranks are not the same collective, and
    ``collectives`` says so instead of reporting 100 ms peer waits silently."""
    paths = [corpus_dir / "kineto" / f"hta__sampled_rank-{r}.json.gz" for r in (0, 1)]
    ev = pd.concat([analysis.read(p, format="kineto", run_id="sampled", cache=False) for p in paths],
                   ignore_index=True)
    with pytest.warns(UserWarning, match=r"6 matched collective\(s\) end up to 134\.153 ms apart"):
        c = M.collectives(ev)
    assert len(c) == 20 and set(c["rank"]) == {0, 1}


def test_dlrm_where_the_host_blocked_in_words(dlrm):
    """The issue's sentence: rank 1's forward waited 6.6 ms in a blocking copy for the first
    all_to_all, which waited 7.6 ms for rank 7 (the last arriver)."""
    lines = M.explain_blocking(M.blocking_calls(dlrm), M.collectives(dlrm))
    rank1 = [s for s in lines if s.startswith("Rank 1:")]
    assert len(rank1) == 1, lines
    assert "DistributedDataParallel.forward waited 6.56 ms" in rank1[0] and "cudaStreamSynchronize" in rank1[0]
    assert "waited 7.62 ms for rank 7" in rank1[0]
    # the last arriver blocked nowhere long enough to be named
    assert not [s for s in lines if s.startswith("Rank 7:")]
