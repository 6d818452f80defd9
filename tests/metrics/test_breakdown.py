"""Known answers for the step-time breakdown, Horovod/DDP overlap and the GPU timeline."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from analysis.metrics import _intervals as iv
from analysis.metrics.breakdown import (
    breakdown_by_ranks,
    ddp_comm_overlap,
    gpu_time_breakdown,
    horovod_allreduce,
    step_times,
    time_breakdown,
)
from analysis.schema import concat, make_events


def phases(rows, *, run_id="r", rank=0, epoch=0):
    """rows: (name, step, start, end)."""
    names, steps, starts, ends = zip(*rows, strict=False)
    return make_events(run_id=run_id, rank=rank, kind="phase", cat="phase", source="test", name=list(names),
                       step=list(steps), epoch=epoch, start_ns=list(starts),
                       dur_ns=[e - s for s, e in zip(starts, ends, strict=False)])


def test_intervals_union_intersect_subtract():
    u = iv.union([0, 5, 20, 25], [10, 12, 30, 26])
    assert u[0].tolist() == [0, 20] and u[1].tolist() == [12, 30]
    assert iv.length(u) == 22
    other = iv.union([8, 28], [21, 40])
    assert iv.length(iv.intersect(u, other)) == (12 - 8) + (21 - 20) + (30 - 28)
    assert iv.length(iv.subtract(u, other)) == 22 - 7
    assert iv.union_length([0, 10], [10, 20]) == 20  # touching intervals join


def test_breakdown_counts_overlap_once_and_sums_to_step():
    # step [0,100): data 10, forward 20, backward 40 with a DDP bucket allreduce [50,80)
    # under it, optimizer 10; exposed sync is only [70,80); 10 ns unattributed.
    ev = phases([("step", 0, 0, 100), ("data", 0, 0, 10), ("forward", 0, 10, 30), ("backward", 0, 30, 70),
                 ("optimizer", 0, 80, 90)])
    comm = make_events(run_id="r", rank=0, kind="comm", cat="ddp_hook", name="allreduce", source="test",
                       step=0, start_ns=[50], dur_ns=[30], bytes=[4000])
    events = concat([ev, comm])
    before = copy.deepcopy(events)
    b = time_breakdown(events)
    pd.testing.assert_frame_equal(events, before)
    row = b.iloc[0]
    assert row["n_steps"] == 1
    assert row["step_time_s"] == pytest.approx(100e-9)
    for col, ns in (("data_s", 10), ("forward_s", 20), ("backward_s", 40), ("sync_exposed_s", 10),
                    ("optimizer_s", 10), ("other_s", 10)):
        assert row[col] == pytest.approx(ns * 1e-9), col
    assert row[["data_frac", "forward_frac", "backward_frac", "sync_exposed_frac", "optimizer_frac",
                "other_frac"]].tolist() == pytest.approx([0.1, 0.2, 0.4, 0.1, 0.1, 0.1])


def test_sync_nested_in_optimizer_counts_as_sync():
    ev = phases([("step", 0, 0, 100), ("forward", 0, 0, 30), ("backward", 0, 30, 70), ("optimizer", 0, 70, 100),
                 ("sync", 0, 75, 95)])
    row = time_breakdown(ev).iloc[0]
    assert row["sync_exposed_s"] == pytest.approx(20e-9)
    assert row["optimizer_s"] == pytest.approx(10e-9)
    assert row["other_s"] == pytest.approx(0)


def test_step_windows_without_step_phase():
    # no `step` phases: a step runs from its first phase to the next step's first phase;
    # the last step of an epoch ends with its last phase
    ev = concat([
        phases([("forward", 0, 0, 10), ("backward", 0, 10, 30), ("forward", 1, 40, 50), ("backward", 1, 50, 60)]),
        phases([("forward", 2, 100, 110)], epoch=1),
    ])
    st = step_times(ev)
    assert st["step_start_ns"].tolist() == [0, 40, 100]
    assert st["step_end_ns"].tolist() == [40, 60, 110]
    b = time_breakdown(ev, level="step")
    assert b["other_s"].tolist() == pytest.approx([10e-9, 0, 0])
    assert b["n_steps"].tolist() == [1, 1, 1]


def test_levels_and_warmup():
    ev = concat([
        phases([("step", 0, 0, 10), ("forward", 0, 0, 10), ("step", 1, 10, 30), ("forward", 1, 10, 20)], rank=0),
        phases([("step", 0, 0, 10), ("forward", 0, 0, 5), ("step", 1, 10, 30), ("forward", 1, 10, 30)], rank=1),
    ])
    by_rank = time_breakdown(ev, level="rank")
    assert by_rank["rank"].tolist() == [0, 1]
    assert by_rank["forward_frac"].tolist() == pytest.approx([20 / 30, 25 / 30])
    by_run = time_breakdown(ev, level="run")
    assert by_run["forward_frac"].iloc[0] == pytest.approx(45 / 60)
    assert by_run["step_mean_s"].iloc[0] == pytest.approx(60e-9 / 4)
    skipped = time_breakdown(ev, level="rank", warmup=1)
    assert skipped["forward_frac"].tolist() == pytest.approx([10 / 20, 20 / 20])


def test_breakdown_by_ranks_pools_runs():
    b = pd.DataFrame({"run_id": ["a", "b"], "n_steps": [2, 2], "step_time_s": [10.0, 30.0],
                      "data_s": [1.0, 3.0], "forward_s": [2.0, 6.0], "backward_s": [3.0, 9.0],
                      "sync_exposed_s": [1.0, 9.0], "optimizer_s": [1.0, 1.0], "other_s": [2.0, 2.0]})
    runs = pd.DataFrame({"run_id": ["a", "b"], "n_ranks": [2, 2], "n_nodes": [1, 1], "config_backend": "x"})
    t = breakdown_by_ranks(b, runs)
    assert len(t) == 1
    assert t["n_runs"].iloc[0] == 2
    assert t["sync_exposed_frac"].iloc[0] == pytest.approx(10 / 40)
    assert t["step_mean_s"].iloc[0] == pytest.approx(40 / 4)
    assert t["sync_exposed_s"].iloc[0] == pytest.approx(10 / 4)


def _horovod_frame():
    # two tensors fused into one allreduce; every activity is written for both tensors
    rows = [
        ("NEGOTIATE_ALLREDUCE", "negotiate", "negotiate", "a", 0, 4),
        ("NEGOTIATE_ALLREDUCE", "negotiate", "negotiate", "b", 0, 2),
        ("ALLREDUCE", "comm", "op", "a", 5, 38),
        ("ALLREDUCE", "comm", "op", "b", 5, 38),
    ]
    for tensor in ("a", "b"):
        rows += [("MEMCPY_IN_FUSION_BUFFER", "memcpy", "activity", tensor, 5, 10),
                 ("GLOO_ALLREDUCE", "comm", "activity", tensor, 10, 35),
                 ("MEMCPY_OUT_FUSION_BUFFER", "memcpy", "activity", tensor, 35, 38)]
    name, kind, cat, tensor, s, e = zip(*rows, strict=False)
    hv = make_events(run_id="r", name=list(name), kind=list(kind), cat=list(cat), tensor=list(tensor),
                     start_ns=list(s), dur_ns=[b - a for a, b in zip(s, e, strict=False)], source="horovod")
    back = phases([("backward", 0, -10, 10)])
    return concat([hv, back])


def test_horovod_allreduce_dedupes_fusion_duplicates():
    ev = _horovod_frame()
    before = copy.deepcopy(ev)
    t = horovod_allreduce(ev)
    pd.testing.assert_frame_equal(ev, before)
    row = t.iloc[0]
    assert row["n_activity_rows"] == 6 and row["n_fusion_duplicates"] == 3
    assert row["activity_sum_naive_s"] == pytest.approx(66e-9)
    assert row["memcpy_s"] == pytest.approx(8e-9)
    assert row["collective_s"] == pytest.approx(25e-9)
    assert row["negotiate_s"] == pytest.approx(4e-9)
    # union of [0,4) and [5,38)
    assert row["allreduce_total_s"] == pytest.approx(37e-9)
    # backward [-10,10) covers [0,4) and [5,10)
    assert row["overlap_backward_s"] == pytest.approx(9e-9)
    assert row["overlap_backward_frac"] == pytest.approx(9 / 37)
    assert row["exposed_s"] == pytest.approx(28e-9)


def test_ddp_comm_overlap():
    ev = concat([
        phases([("forward", 0, 0, 10), ("backward", 0, 10, 50), ("optimizer", 0, 70, 80)]),
        make_events(run_id="r", rank=0, kind="comm", cat="ddp_hook", name="allreduce", source="test",
                    start_ns=[20, 40], dur_ns=[20, 25], bytes=[100, 50], tensor=["0", "1"]),
    ])
    row = ddp_comm_overlap(ev).iloc[0]
    # union [20,65): 45 ns; under backward [20,50): 30 ns; exposed [50,65): 15 ns
    assert row["n_buckets"] == 2 and row["comm_bytes"] == 150
    assert row["comm_s"] == pytest.approx(45e-9)
    assert row["overlap_backward_s"] == pytest.approx(30e-9)
    assert row["exposed_s"] == pytest.approx(15e-9)


def test_gpu_time_breakdown_matches_hta_definitions():
    kinds = ["compute", "compute", "comm", "memcpy", "cpu_op"]
    ev = make_events(run_id="r", rank=0, device=[0, 0, 0, 0, None], stream=[7, 7, 20, 8, None], kind=kinds,
                     name=["gemm", "relu", "ncclDevKernel_AllReduce", "Memcpy HtoD", "aten::mm"],
                     start_ns=[0, 20, 5, 32, 0], dur_ns=[10, 10, 20, 8, 100], source="test")
    row = gpu_time_breakdown(ev).iloc[0]
    # span 0..40 (the CPU op is not GPU time); compute 20; comm outside compute [10,20) = 10;
    # memory outside both [32,40) = 8; idle = 40 - |[0,30) ∪ [32,40)| = 2
    assert row["span_s"] == pytest.approx(40e-9)
    assert row[["compute_s", "comm_s", "memory_s", "idle_s"]].tolist() == pytest.approx([20e-9, 10e-9, 8e-9, 2e-9])
    assert row["comm_total_s"] == pytest.approx(20e-9)
    assert row["comm_overlapped_s"] == pytest.approx(10e-9)
    assert row["non_compute_s"] == pytest.approx(18e-9)
    fr = row[["compute_frac", "comm_frac", "memory_frac", "idle_frac"]].to_numpy(float)
    assert fr.tolist() == pytest.approx([0.5, 0.25, 0.2, 0.05])
    assert np.isclose(fr.sum(), 1.0)


def test_empty_inputs_give_empty_frames():
    ev = make_events(0, start_ns=[], dur_ns=[])
    assert time_breakdown(ev).empty
    assert horovod_allreduce(ev).empty
    assert gpu_time_breakdown(ev).empty
