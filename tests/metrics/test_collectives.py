"""The device timeline (analysis/metrics/collectives.py) on small frames built with the
schema, every number worked out by hand in the comments. The same functions on the real
8-rank DLRM step are in test_collectives_corpus.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import analysis.metrics as M
from analysis.errors import ScalescopeError
from analysis.metrics.collectives import (
    BLOCKING_COLUMNS,
    COLLECTIVE_COLUMNS,
    EXPOSED_COLUMNS,
    LAUNCHED_COLUMNS,
    OUTSIDE_COLUMNS,
    STEP_PART_COLUMNS,
)
from analysis.schema import concat, empty_events, make_events


def _gpu(rank, kind, start, dur, *, run_id="r", stream=7, name=None, corr=None, step=None):
    n = len(start)
    return make_events(run_id=run_id, rank=rank, device=rank, stream=stream, kind=kind,
                       name=name or ([f"ncclKernel_AllReduce_{i}" for i in range(n)] if kind == "comm"
                                     else [f"k{i}" for i in range(n)]),
                       start_ns=start, dur_ns=dur, correlation=corr, step=step, source="test")


def _host(rank, names, kinds, start, dur, *, run_id="r", tid=1, corr=None, step=None, cat=None):
    return make_events(run_id=run_id, rank=rank, pid=100 + rank, tid=tid, name=names, kind=kinds, start_ns=start,
                       dur_ns=dur, correlation=corr, step=step, cat=cat, source="test")


def _two_ranks() -> pd.DataFrame:
    """Two allreduces on two ranks. #0: rank 0 starts at 100, rank 1 at 400 (last), both end
    at 500. #1: rank 0 at 1000 (last), rank 1 at 900, both end at 1100."""
    return concat([_gpu(0, "comm", [100, 1000], [400, 100]), _gpu(1, "comm", [400, 900], [100, 200])])


def test_collectives_known_answer():
    ev = _two_ranks()
    before = ev.copy()
    c = M.collectives(ev)
    pd.testing.assert_frame_equal(ev, before)
    assert list(c.columns) == list(COLLECTIVE_COLUMNS)
    assert c[["seq", "rank"]].values.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert (c["match"] == "order").all() and c["pg"].isna().all() and (c["n_ranks"] == 2).all()
    assert c["wait_s"].tolist() == pytest.approx([300e-9, 0, 0, 100e-9])
    assert c["transfer_s"].tolist() == pytest.approx([100e-9, 100e-9, 100e-9, 100e-9])
    assert c["last_rank"].tolist() == [1, 1, 0, 0]
    assert (c["dur_s"] == c["wait_s"] + c["transfer_s"]).all()
    assert (c["clock_offset_ns"] == 0).all()


def test_ties_go_to_the_lowest_rank_and_transfer_is_clipped():
    ev = concat([_gpu(r, "comm", [10], [5 if r == 2 else 20]) for r in range(3)])
    c = M.collectives(ev)
    assert (c["last_rank"] == 0).all() and (c["wait_s"] == 0).all()
    ev = concat([_gpu(0, "comm", [0], [10]), _gpu(1, "comm", [50], [10])])  # rank 0 ends before rank 1 starts
    c = M.collectives(ev)
    assert c["transfer_s"].tolist() == [0.0, pytest.approx(10e-9)]
    assert c["wait_s"].tolist() == pytest.approx([50e-9, 0])


def test_sequence_numbers_match_where_order_does_not():
    """Rank 1 issues the two process groups' collectives in the other order; with ``pg`` and
    ``seq`` columns they still pair up (order matching would pair the wrong kernels)."""
    r0 = _gpu(0, "comm", [100, 200], [50, 50], name=["ncclKernel_AllReduce", "ncclKernel_AllGather"])
    r1 = _gpu(1, "comm", [120, 230], [40, 30], name=["ncclKernel_AllGather", "ncclKernel_AllReduce"])
    ev = concat([r0, r1])
    ev = ev.assign(pg=["dp", "tp", "tp", "dp"], seq=[5, 9, 9, 5])
    c = M.collectives(ev)
    assert (c["match"] == "seq").all()
    ar = c[c["name"] == "ncclKernel_AllReduce"].set_index("rank")
    assert ar["seq"].tolist() == [5, 5] and ar["pg"].tolist() == ["dp", "dp"]
    assert ar.loc[0, "wait_s"] == pytest.approx(130e-9) and ar.loc[1, "wait_s"] == 0 and ar.loc[0, "last_rank"] == 1
    with pytest.warns(UserWarning, match="different kernel names"):
        M.collectives(ev.drop(columns=["pg", "seq"]))


def test_several_nccl_streams_match_per_stream():
    """Two communicators on two streams, first used in the same order on both ranks but
    interleaved differently later: the n-th kernel of each stream pairs up (pairing the
    n-th kernel of the rank would pair rank 0's ``b`` with rank 1's second ``a``)."""
    r0 = concat([_gpu(0, "comm", [0, 100], [10, 10], stream=20, name=["a", "a"]),
                 _gpu(0, "comm", [50], [10], stream=30, name=["b"])])
    r1 = concat([_gpu(1, "comm", [5, 30], [5, 80], stream=21, name=["a", "a"]),
                 _gpu(1, "comm", [45], [15], stream=31, name=["b"])])
    c = M.collectives(concat([r0, r1]))
    assert c.groupby(["seq", "stream"])["name"].nunique().max() == 1
    b = c[c["name"] == "b"].set_index("rank")
    assert b["seq"].tolist() == [0, 0] and b["last_rank"].tolist() == [0, 0]
    assert b.loc[1, "wait_s"] == pytest.approx(5e-9)
    a2 = c[(c["name"] == "a") & (c["seq"] == 1)].set_index("rank")
    assert a2["last_rank"].tolist() == [0, 0] and a2.loc[1, "wait_s"] == pytest.approx(70e-9)


def test_align_ends_recovers_an_injected_clock_offset():
    rng = np.random.default_rng(0)
    n = 20
    starts = np.cumsum(rng.integers(1000, 5000, n))
    ends = starts + 3000
    ev = concat([_gpu(r, "comm", starts + rng.integers(0, 500, n), ends - (starts + 0)) for r in range(4)])
    ev = ev.assign(dur_ns=np.tile(ends, 4) - ev["start_ns"])
    truth = M.collectives(ev)
    shifted = ev.assign(start_ns=ev["start_ns"] + np.where(ev["rank"] == 2, 7_000_000, 0))
    with pytest.warns(UserWarning, match="clocks differ"):
        raw = M.collectives(shifted)
    assert raw["end_ns"].groupby(raw["seq"]).agg(np.ptp).min() == 7_000_000  # the clocks disagree
    fixed = M.collectives(shifted, align="ends")
    off = fixed.groupby("rank")["clock_offset_ns"].first()
    assert off[2] - off[0] == 7_000_000 and off[0] == off[1] == off[3]
    for col in ("wait_s", "transfer_s", "last_rank"):
        assert fixed[col].tolist() == truth[col].tolist()
    with pytest.raises(ScalescopeError, match="align"):
        M.collectives(ev, align="median")


def test_runs_of_one_rank_each_are_not_matched_and_say_why():
    ev = concat([_gpu(0, "comm", [0], [10], run_id="a"), _gpu(1, "comm", [5], [5], run_id="b")])
    with pytest.warns(UserWarning, match="one run_id"):
        c = M.collectives(ev)
    assert (c["n_ranks"] == 1).all() and (c["wait_s"] == 0).all()


def test_empty_and_commless_inputs():
    e = empty_events()
    for f, cols in ((M.collectives, COLLECTIVE_COLUMNS), (M.blocking_calls, BLOCKING_COLUMNS),
                    (M.launched_work, LAUNCHED_COLUMNS), (M.sync_outside_steps, OUTSIDE_COLUMNS),
                    (M.kernel_step_parts, STEP_PART_COLUMNS)):
        out = f(e)
        assert out.empty and list(out.columns) == list(cols), f.__name__
    assert M.exposed_comm(e).empty
    # a rank with compute kernels only: no collectives, and zero communication
    ev = _gpu(0, "compute", [0, 50], [20, 20])
    assert M.collectives(ev).empty
    x = M.exposed_comm(ev)
    assert len(x) == 1 and (x[list(EXPOSED_COLUMNS)] == 0).all(axis=None)
    k = M.kernel_step_parts(ev).iloc[0]
    assert k["step_s"] == pytest.approx(70e-9) and k["compute_s"] == pytest.approx(40e-9)
    assert k["other_s"] == pytest.approx(30e-9) and k["sync_s"] == k["straggler_s"] == 0
    with pytest.raises(ScalescopeError, match="needs column"):
        M.collectives(ev.drop(columns=["device"]))


def _launch_frame() -> pd.DataFrame:
    """One rank. Host: ProfilerStep#3 [0, 1000) and ``## forward ##`` [0, 400) on thread 1,
    ``aten::mm`` [10, 60) on thread 1 launching k0 (call [20, 30), corr 1), autograd's
    thread 2 launching k1 at 500 (corr 2, inside the step but outside forward) and k2 at 50
    (corr 3, thread 2, inside forward by time). GPU: k0 [100, 200), k1 [600, 700), k2 [150, 250),
    a copy [300, 320) launched by cudaMemcpyAsync at 40 on thread 1 (corr 4)."""
    host = concat([
        _host(0, ["ProfilerStep#3", "## forward ##", "aten::mm"], ["range", "range", "cpu_op"],
              [0, 0, 10], [1000, 400, 50], cat=["user_annotation", "user_annotation", "cpu_op"]),
        _host(0, ["cudaLaunchKernel", "cudaMemcpyAsync"], ["runtime", "runtime"], [20, 40], [10, 5], corr=[1, 4]),
        _host(0, ["cudaLaunchKernel", "cudaLaunchKernel"], ["runtime", "runtime"], [500, 50], [10, 10], tid=2,
              corr=[2, 3]),
    ])
    gpu = concat([_gpu(0, "compute", [100, 600, 150], [100, 100, 100], corr=[1, 2, 3]),
                  _gpu(0, "memcpy", [300], [20], corr=[4], name=["Memcpy HtoD"])])
    return concat([host, gpu])


def test_launched_work_projects_gpu_rows_onto_host_ranges():
    ev = _launch_frame()
    w = M.launched_work(ev).set_index("name")
    assert list(M.launched_work(ev).columns) == list(LAUNCHED_COLUMNS)
    # the step: all four rows; union [100, 250) + [300, 320) + [600, 700) = 270 ns
    assert w.loc["ProfilerStep#3", "gpu_s"] == pytest.approx(270e-9)
    assert w.loc["ProfilerStep#3", ["n_kernels", "n_copies"]].tolist() == [3, 1]
    # forward (any thread, by the call's start): k0, k2 and the copy
    assert w.loc["## forward ##", "gpu_s"] == pytest.approx(170e-9)
    assert w.loc["## forward ##", ["first_start_ns", "last_end_ns"]].tolist() == [100, 320]
    # the operator [10, 60): its own thread's calls only, k0 and the copy (k2's call at 50 is
    # on thread 2)
    assert w.loc["aten::mm", "gpu_s"] == pytest.approx(120e-9)
    assert w.loc["aten::mm", ["n_kernels", "n_copies"]].tolist() == [1, 1]
    assert w.loc["aten::mm", "kind"] == "cpu_op" and w.loc["aten::mm", "n_ranges"] == 1


def test_exposed_comm_splits_blocking_from_idle():
    """NCCL kernel [0, 100); compute k0 [50, 60), launched by a call ending at 50, overlaps
    it; compute k1, launched by a call ending at 20, starts at 100: it waited behind the
    allreduce from 20 on. Exposed = 100 - 10 = 90; blocking = [20, 100) - [50, 60) = 70;
    idle = [0, 20) = 20."""
    ev = concat([_gpu(0, "comm", [0], [100]), _gpu(0, "compute", [50, 100], [10, 30], corr=[1, 2]),
                 _host(0, ["cudaLaunchKernel"] * 2, ["runtime"] * 2, [40, 10], [10, 10], corr=[1, 2])])
    x = M.exposed_comm(ev).iloc[0]
    assert x["comm_s"] == pytest.approx(100e-9) and x["exposed_s"] == pytest.approx(90e-9)
    assert x["exposed_blocking_s"] == pytest.approx(70e-9) and x["exposed_idle_s"] == pytest.approx(20e-9)
    assert x["transfer_s"] == pytest.approx(100e-9) and x["wait_s"] == 0
    # without the launch calls nothing is known to be queued: all of it is idle
    y = M.exposed_comm(ev[ev["device"].notna()].reset_index(drop=True)).iloc[0]
    assert y["exposed_blocking_s"] == 0 and y["exposed_idle_s"] == pytest.approx(90e-9)


def test_kernel_step_parts_add_up_and_name_the_waiting_rank():
    """Two ranks, two steps. Step 1: rank 0 computes [0, 100) and starts the allreduce at
    100, rank 1 computes [0, 400) and starts it at 400; it ends at 450 on both. Step 2
    starts at 500: one kernel [500, 600) and a copy [550, 650) on each rank."""
    ev = concat([
        _gpu(0, "compute", [0, 500], [100, 100], step=[1, 2]), _gpu(0, "comm", [100], [350], step=[1]),
        _gpu(0, "memcpy", [550], [100], step=[2], name=["cp"]),
        _gpu(1, "compute", [0, 500], [400, 100], step=[1, 2]), _gpu(1, "comm", [400], [50], step=[1]),
        _gpu(1, "memcpy", [550], [100], step=[2], name=["cp"])])
    k = M.kernel_step_parts(ev)
    assert list(k.columns) == list(STEP_PART_COLUMNS) and (k["source"] == "kernels").all()
    parts = k[["compute_s", "sync_s", "straggler_s", "other_s"]].sum(axis=1)
    assert np.allclose(parts, k["step_s"], rtol=0, atol=1e-15)
    s1 = k[k["step"] == 1].set_index("rank")
    assert s1["step_s"].tolist() == pytest.approx([500e-9, 500e-9])  # [0, 500) up to step 2's start
    assert s1.loc[0, "straggler_s"] == pytest.approx(300e-9) and s1.loc[1, "straggler_s"] == 0
    assert s1["sync_s"].tolist() == pytest.approx([50e-9, 50e-9])
    assert s1["other_s"].tolist() == pytest.approx([50e-9, 50e-9])
    s2 = k[k["step"] == 2].iloc[0]
    assert s2["step_s"] == pytest.approx(150e-9) and s2["compute_s"] == pytest.approx(150e-9)
    x = M.exposed_comm(ev, by_step=True)
    joined = k.merge(x, on=["run_id", "rank", "step"])
    assert np.allclose(joined["sync_s"] + joined["straggler_s"], joined["exposed_s"], rtol=0, atol=1e-15)


def _blocking_frame() -> pd.DataFrame:
    """One rank. ProfilerStep#1 [0, 1000), ``## forward ##`` [0, 500) on thread 1; on it
    ``aten::item`` [100, 200) > ``aten::_local_scalar_dense`` [110, 190) >
    ``cudaStreamSynchronize`` [120, 180). ``cudaDeviceSynchronize`` [600, 650) in the step
    outside forward; ProfilerStep#2 [1200, 2000) and, in the gap between the steps,
    ``aten::item`` [1050, 1150) > ``aten::_local_scalar_dense`` [1060, 1140), and a
    ``cudaMemcpyAsync`` (not blocking) at 1100."""
    return _host(0, ["ProfilerStep#1", "## forward ##", "aten::item", "aten::_local_scalar_dense",
                     "cudaStreamSynchronize", "cudaDeviceSynchronize", "ProfilerStep#2", "aten::item",
                     "aten::_local_scalar_dense", "cudaMemcpyAsync"],
                 ["range", "range", "cpu_op", "cpu_op", "runtime", "runtime", "range", "cpu_op", "cpu_op", "runtime"],
                 [0, 0, 100, 110, 120, 600, 1200, 1050, 1060, 1100], [1000, 500, 100, 80, 60, 50, 800, 100, 80, 10],
                 step=[1, 1, 1, 1, 1, 1, 2, None, None, None])


def test_blocking_calls_name_operator_phase_and_nesting():
    ev = _blocking_frame()
    before = ev.copy()
    b = M.blocking_calls(ev)
    pd.testing.assert_frame_equal(ev, before)
    assert list(b.columns) == list(BLOCKING_COLUMNS)
    assert b["name"].tolist() == ["aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize",
                                  "aten::_local_scalar_dense"]
    assert b["op"].tolist()[:2] == ["aten::item", "aten::_local_scalar_dense"] and pd.isna(b["op"].iloc[2])
    assert b["phase"].iloc[:3].tolist() == ["## forward ##", "## forward ##", "ProfilerStep#1"]
    assert pd.isna(b["phase"].iloc[3]) and pd.isna(b["step"].iloc[3])
    assert b["step"].iloc[:3].tolist() == [1, 1, 1]
    assert b["nested"].tolist() == [False, True, False, False]
    assert b["dur_s"].tolist() == pytest.approx([80e-9, 60e-9, 50e-9, 80e-9])


def test_sync_outside_steps_finds_the_item_between_steps():
    ev = _blocking_frame()
    o = M.sync_outside_steps(ev)
    assert list(o.columns) == list(OUTSIDE_COLUMNS)
    assert len(o) == 1
    row = o.iloc[0]
    assert row["name"] == "aten::_local_scalar_dense" and row["op"] == "aten::item"
    assert (row["after_step"], row["before_step"]) == (1, 2)
    assert (row["gap_start_ns"], row["gap_end_ns"]) == (1000, 1200) and row["gap_s"] == pytest.approx(200e-9)
    assert row["dur_s"] == pytest.approx(80e-9)
    # scalescope's own step phases are the windows where a rank has them
    ours = concat([ev, _host(0, ["step", "step"], ["phase", "phase"], [0, 1040], [1030, 900], step=[1, 2])])
    assert M.sync_outside_steps(ours).empty  # the item now lies inside step 2's window


def _everything() -> pd.DataFrame:
    """Two ranks with collectives, compute, launches, ranges and blocking calls."""
    one = concat([_launch_frame(), _blocking_frame().assign(start_ns=lambda d: d["start_ns"] + 5000)])
    comm = _gpu(0, "comm", [700, 900], [150, 50], corr=[10, 11])
    other = concat([_gpu(1, "comm", [800, 880], [50, 70]), _gpu(1, "compute", [0], [800]),
                    _host(1, ["ProfilerStep#3"], ["range"], [0], [1000])])
    return concat([one, comm, other])


@pytest.mark.parametrize("metric", [M.collectives, M.blocking_calls, M.launched_work, M.exposed_comm,
                                    M.kernel_step_parts, M.sync_outside_steps])
def test_inputs_stay_untouched_and_row_order_does_not_matter(metric):
    ev = _everything()
    before = ev.copy()
    out = metric(ev)
    pd.testing.assert_frame_equal(ev, before)
    assert len(out) > 0
    shuffled = ev.sample(frac=1, random_state=3).reset_index(drop=True)
    pd.testing.assert_frame_equal(metric(shuffled), out, check_dtype=False, check_categorical=False)


@pytest.mark.parametrize("metric", [M.blocking_calls, M.launched_work, M.sync_outside_steps])
def test_per_rank_metrics_keep_their_maps_over_promise(metric):
    """``@maps_over(unit="rank")``: the table of all ranks is the tables of single ranks,
    concatenated in (run_id, rank) order (what lets a RunSet reduce rank files apart)."""
    ev = pd.concat([_everything(), _everything().assign(run_id="q")], ignore_index=True)
    whole = metric(ev)
    parts = [metric(ev[(ev["run_id"] == run) & (ev["rank"] == rank)].reset_index(drop=True))
             for run, rank in sorted({(str(a), int(b)) for a, b in zip(ev["run_id"], ev["rank"], strict=True)})]
    pd.testing.assert_frame_equal(whole, pd.concat([p for p in parts if len(p)], ignore_index=True),
                                  check_dtype=False, check_categorical=False)


def test_uneven_kernel_counts_are_flagged():
    ev = concat([_gpu(0, "comm", [100, 1000], [400, 100]), _gpu(1, "comm", [900], [200])])
    with pytest.warns(UserWarning, match="different numbers"):
        c = M.collectives(ev)
    assert c.loc[c["seq"] == 1, "n_ranks"].tolist() == [1]
