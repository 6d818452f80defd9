"""Known answers for the two sync quantities, the warm-up rule and the scaling-gap split."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.errors import ScalescopeError
from analysis.metrics import (
    ddp_comm_overlap,
    explain_loss,
    rank_step_parts,
    scaling_loss,
    sync_times,
    time_breakdown,
    warmup_count,
    warmup_summary,
)
from analysis.metrics.gap import CAUSES
from analysis.schema import concat, make_events

US = 1000  # ns


def _steps(run_id, rank, layout, n_steps=6, *, nested=(), extra=()):
    """Phases of ``n_steps`` identical steps: ``layout`` is [(phase, µs), ...] back to back;
    ``nested`` is [(phase, start µs in step, µs)] drawn inside them (e.g. DDP's sync inside
    backward); ``extra`` is [(kind, cat, start µs in step, µs)] other records per step."""
    names, steps, starts, durs = [], [], [], []
    comm = []
    step_us = sum(d for _, d in layout)
    for k in range(n_steps):
        t = k * step_us
        names.append("step"), steps.append(k), starts.append(t * US), durs.append(step_us * US)
        for name, d in layout:
            names.append(name), steps.append(k), starts.append(t * US), durs.append(d * US)
            t += d
        for name, at, d in nested:
            names.append(name), steps.append(k), starts.append((k * step_us + at) * US), durs.append(d * US)
        for kind, cat, at, d in extra:
            comm.append((kind, cat, (k * step_us + at) * US, d * US, k))
    frames = [make_events(run_id=run_id, rank=rank, kind="phase", cat="phase", source="t", name=names,
                          step=steps, epoch=0, start_ns=starts, dur_ns=durs)]
    for kind, cat, start, dur, k in comm:
        frames.append(make_events(run_id=run_id, rank=rank, kind=kind, cat=cat, source="t", name=["allreduce"],
                                  step=[k], epoch=0, start_ns=[start], dur_ns=[dur]))
    return concat(frames)


def test_warmup_rule():
    assert warmup_count(np.array([5.0, 1, 1, 1]), "auto") == 1
    # until the step time settles: the four slow steps
    times = np.array([9.0, 8, 7, 6] + [1.0] * 26)
    assert warmup_count(times, "auto") == 4
    # steps that fall slowly (82, 78, 69, 66 against 57 later, as at batch 300): all dropped
    slow = np.array([82.0, 78, 69, 66] + [57.0, 58, 56, 57] * 3)
    assert warmup_count(slow, "auto") == 4
    # short partial-batch steps in the steady state do not widen the band
    partial = np.array([82.0, 78, 40, 69, 57, 30, 57, 57, 30, 57, 58, 30])
    assert warmup_count(partial, "auto") == 4
    # one step after a fast one: a single fast step amid slow ones does not end the warm-up
    assert warmup_count(np.array([9.0, 1, 9, 9] + [1.0] * 12), "auto") == 4
    # at most half the steps
    assert warmup_count(np.array([9.0] * 9 + [1.0] * 7), "auto") == 8
    assert warmup_count(np.array([9.0, 1.0, 1.0]), "auto") == 0  # fewer than 4 steps
    assert warmup_count(times, 2) == 2 and warmup_count(times, None) == 0
    with pytest.raises(ScalescopeError, match="warmup"):
        warmup_count(times, "first")
    with pytest.raises(ScalescopeError, match="warmup"):
        warmup_count(times, -1)


def test_warmup_summary_and_default_drop():
    ev = _steps("r", 0, [("forward", 10), ("backward", 10)])
    w = warmup_summary(ev)
    assert w[["n_steps", "n_warmup"]].values.tolist() == [[6, 1]]
    assert w["warmup_s"].iloc[0] == pytest.approx(20e-6)
    assert time_breakdown(ev)["n_steps"].tolist() == [5]
    assert time_breakdown(ev, warmup=0)["n_steps"].tolist() == [6]


def test_ddp_wait_nested_in_backward_is_exposed_and_not_overlap():
    # backward 0-30 µs holds DDP's recorded wait 20-30; one bucket in flight 20-30
    ev = _steps("d", 0, [("forward", 10), ("backward", 30), ("optimizer", 5)],
                nested=[("sync", 30, 10)], extra=[("comm", "ddp_hook", 30, 10)])
    b = time_breakdown(ev, warmup=0)
    assert b["sync_exposed_s"].iloc[0] == pytest.approx(6 * 10e-6)
    assert b["backward_s"].iloc[0] == pytest.approx(6 * 20e-6)
    assert b["sync_total_s"].iloc[0] == pytest.approx(6 * 10e-6)
    o = ddp_comm_overlap(ev)
    assert o["overlap_backward_frac"].iloc[0] == 0.0
    # the warm-up step's bucket is left out, as the breakdown leaves the step out
    assert o["n_buckets"].iloc[0] == 5
    assert o["exposed_s"].iloc[0] == pytest.approx(5 * 10e-6)
    assert ddp_comm_overlap(ev, warmup=0)["exposed_s"].iloc[0] == pytest.approx(6 * 10e-6)


def test_sync_total_from_in_flight_records_and_timeline():
    # Horovod: allreduces in flight from 15 µs (during backward) to the end of the wait at 40
    layout = [("forward", 10), ("backward", 20), ("sync", 10), ("optimizer", 5)]
    r0 = _steps("h", 0, layout, extra=[("comm", "hvd_hook", 15, 25)])
    r1 = _steps("h", 1, layout, extra=[("comm", "hvd_hook", 15, 25)])
    s = sync_times(concat([r0, r1]), warmup=0)
    assert s["sync_total_s"].tolist() == pytest.approx([25e-6] * 12)
    assert s["sync_exposed_s"].tolist() == pytest.approx([10e-6] * 12)
    # with a timeline (here 12-40 µs), every rank with hook records keeps the hook: one
    # instrument on every rank
    tl = make_events(run_id="h", rank=0, kind="negotiate", cat="negotiate", source="horovod",
                     name="NEGOTIATE_ALLREDUCE", start_ns=[(k * 45 + 12) * US for k in range(6)],
                     dur_ns=[28 * US] * 6)
    s = sync_times(concat([r0, r1, tl]), warmup=0).groupby("rank")["sync_total_s"].first()
    assert s.tolist() == pytest.approx([25e-6, 25e-6])
    # a rank 0 without hook records (an older trace) takes the timeline
    r0_old = _steps("h", 0, layout)
    s = sync_times(concat([r0_old, r1, tl]), warmup=0).groupby("rank")["sync_total_s"].first()
    assert s.tolist() == pytest.approx([28e-6, 25e-6])


def _gap_events():
    base = _steps("base", 0, [("data", 1), ("forward", 2), ("backward", 3), ("optimizer", 1)])
    one = _steps("f1", 0, [("data", 1), ("forward", 2), ("backward", 3), ("sync", 1), ("optimizer", 1)])
    # two ranks: rank 1 loads data 3 µs longer, rank 0 waits for it in its sync
    two = concat([
        _steps("f2", 0, [("data", 1), ("forward", 2), ("backward", 3), ("sync", 5), ("optimizer", 1)]),
        _steps("f2", 1, [("data", 4), ("forward", 2), ("backward", 3), ("sync", 2), ("optimizer", 1)]),
    ])
    runs = pd.DataFrame({"run_id": ["base", "f1", "f2"], "framework": ["none", "horovod", "horovod"],
                         "config_backend": ["none", "horovod-gloo", "horovod-gloo"], "n_ranks": [1, 1, 2],
                         "batch_size": 75})
    return concat([base, one, two]), runs


def test_rank_step_parts_straggler():
    ev, _ = _gap_events()
    p = rank_step_parts(ev, warmup=0)
    two = p[p["run_id"] == "f2"].groupby("rank")[["busy_s", "wait_s", "straggler_s", "exposed_s"]].first()
    assert two["busy_s"].tolist() == pytest.approx([6e-6, 9e-6])
    assert two["wait_s"].tolist() == pytest.approx([3e-6, 0.0])
    assert two["straggler_s"].tolist() == pytest.approx([3e-6, 0.0])
    assert bool(p.loc[(p["run_id"] == "f2") & (p["rank"] == 1), "is_slowest"].all())


def test_scaling_loss_known_answer_sums_to_gap():
    ev, runs = _gap_events()
    t = scaling_loss(ev, runs, warmup=0).set_index("n_ranks")
    two = t.loc[2]
    assert two["ideal_step_s"] == pytest.approx(7e-6)
    assert two["measured_step_s"] == pytest.approx(12e-6)
    assert two["gap_s"] == pytest.approx(5e-6)
    expected = {"framework_s": 1, "data_s": 1.5, "straggler_s": 1.5, "sync_s": 1, "compute_s": 0, "other_s": 0}
    for col, us in expected.items():
        assert two[col] == pytest.approx(us * 1e-6, abs=1e-15), col
    assert sum(two[c] for c in CAUSES) == pytest.approx(two["gap_s"])
    assert two["efficiency"] == pytest.approx(7 / 12)
    assert two["slowest_rank"] == 1
    assert t.loc[1, "gap_s"] == pytest.approx(t.loc[1, "framework_s"])
    (sentence,) = explain_loss(t.reset_index())
    assert sentence.startswith("At 2 ranks horovod-gloo (batch 75) reaches 0.58 of ideal (no interval: 1 repeat(s), "
                               "fewer than 3); of the 0.005 ms lost")
    assert "(shares untested against noise)" in sentence
    assert "30 % is waiting for rank 1" in sentence and "30 % is data loading" in sentence


def test_scaling_loss_injected_runs_are_never_references():
    ev, runs = _gap_events()
    # an injected one-rank run must not replace the clean reference
    inj = _steps("f1i", 0, [("data", 1), ("forward", 2), ("backward", 30), ("sync", 1), ("optimizer", 1)])
    runs = pd.concat([runs.assign(inject=None),
                      pd.DataFrame({"run_id": ["f1i"], "framework": ["horovod"], "config_backend": ["horovod-gloo"],
                                    "n_ranks": [1], "batch_size": [75], "inject": ["backward:0.027"]})])
    t = scaling_loss(concat([ev, inj]), runs, warmup=0)
    clean = t[t["inject"].isna()].set_index("n_ranks")
    assert clean.loc[2, "framework_s"] == pytest.approx(1e-6)
    injected = t[t["inject"].notna()].iloc[0]
    assert injected["compute_s"] == pytest.approx(27e-6)
    assert injected["framework_s"] == pytest.approx(1e-6)


def test_scaling_loss_needs_a_baseline():
    ev, runs = _gap_events()
    with pytest.raises(ScalescopeError, match="no baseline runs"):
        scaling_loss(ev, runs[runs["framework"] != "none"], warmup=0)
    t = scaling_loss(ev, runs[runs["framework"] != "none"], warmup=0, baseline="min").set_index("n_ranks")
    assert t.loc[2, "framework_s"] == 0
    assert t.loc[2, "gap_s"] == pytest.approx(4e-6)
    with pytest.raises(ScalescopeError, match="mode"):
        scaling_loss(ev, runs, mode="diagonal")


def test_partitions_are_configurations_with_their_own_baseline():
    ev, runs = _gap_events()
    ev_b = ev.assign(run_id=(ev["run_id"].astype(str) + "-b").astype("category"), start_ns=ev["start_ns"] * 2,
                     dur_ns=ev["dur_ns"] * 2)
    runs = pd.concat([runs.assign(partition="a"), runs.assign(run_id=runs["run_id"] + "-b", partition="b")])
    t = scaling_loss(concat([ev, ev_b]), runs, warmup=0).set_index(["partition", "n_ranks"])
    assert t.loc[("a", 2), "ideal_step_s"] == pytest.approx(7e-6)
    assert t.loc[("b", 2), "ideal_step_s"] == pytest.approx(14e-6)  # its own baseline
    assert t.loc[("b", 2), "gap_s"] == pytest.approx(10e-6)
    (a, b) = explain_loss(t.reset_index())
    assert "partition a" in a and "partition b" in b
    # one chosen baseline for every partition, as the reference study did
    one = scaling_loss(concat([ev, ev_b]), runs, warmup=0,
                       baseline={"partition": "a", "framework": "none", "n_ranks": 1}).set_index(["partition", "n_ranks"])
    assert one.loc[("b", 2), "ideal_step_s"] == pytest.approx(7e-6)
    assert one.loc[("b", 2), "framework_s"] == pytest.approx(16e-6 - 7e-6)
