"""Known answers for synchronisation cost against ranks."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from analysis.metrics.sync import sync_cost, sync_scaling, sync_times
from analysis.schema import concat, make_events


def _run(run_id, n_ranks, steps_per_epoch, sync_ns, epochs=2, step_ns=10_000):
    frames = []
    for rank in range(n_ranks):
        names, steps, eps, starts, durs = [], [], [], [], []
        t, step = 0, 0
        for epoch in range(epochs):
            for _ in range(steps_per_epoch):
                names += ["step", "backward", "sync"]
                steps += [step] * 3
                eps += [epoch] * 3
                starts += [t, t, t + 50]
                durs += [step_ns, 50, sync_ns]
                t += step_ns
                step += 1
        frames.append(make_events(run_id=run_id, rank=rank, kind="phase", cat="phase", source="test", name=names,
                                  step=steps, epoch=eps, start_ns=starts, dur_ns=durs))
    return concat(frames)


def test_sync_times_one_row_per_rank_and_step():
    ev = _run("a", 2, 3, 20)
    s = sync_times(ev, warmup=0)
    assert len(s) == 2 * 3 * 2
    # a sync wait is for a collective in flight: total covers it, and it is all exposed
    assert s["sync_total_s"].tolist() == pytest.approx([20e-9] * 12)
    assert s["sync_exposed_s"].tolist() == pytest.approx([20e-9] * 12)
    # the default warm-up rule drops each rank's first step (6 steps per rank here)
    assert len(sync_times(ev)) == 2 * 5


def test_sync_times_falls_back_to_ddp_records():
    ev = concat([
        make_events(run_id="d", rank=0, kind="phase", name=["step", "backward"], step=0, epoch=0, source="t",
                    start_ns=[0, 0], dur_ns=[100, 60]),
        make_events(run_id="d", rank=0, kind="comm", cat="ddp_hook", name="allreduce", source="t",
                    start_ns=[30, 50], dur_ns=[30, 30]),
    ])
    s = sync_times(ev)
    # in flight: the union of both buckets; exposed: what backward does not cover
    assert s["sync_total_s"].tolist() == pytest.approx([50e-9])
    assert s["sync_exposed_s"].tolist() == pytest.approx([20e-9])


def test_no_sync_records_no_rows():
    ev = make_events(run_id="n", rank=0, kind="phase", name=["step"], step=0, epoch=0, source="t",
                     start_ns=[0], dur_ns=[10])
    assert sync_times(ev).empty


def test_sync_cost_and_decomposition():
    # 1 rank: 4 syncs/epoch of 1.5 units; 2 ranks: 2 of 3 (repeat 1) and 2 of 4 (repeat 2);
    # 4 ranks: 1 of 5. Sync per epoch: 6, 7 (pooled), 5.
    ev = concat([_run("np1", 1, 4, 1500), _run("np2a", 2, 2, 3000), _run("np2b", 2, 2, 4000),
                 _run("np4", 4, 1, 5000)])
    runs = pd.DataFrame({"run_id": ["np1", "np2a", "np2b", "np4"], "n_ranks": [1, 2, 2, 4],
                         "n_nodes": [1, 1, 1, 2], "config_backend": "horovod-gloo", "batch_size": 10})
    syncs = sync_times(ev, warmup=0)
    before = copy.deepcopy(syncs)
    cost = sync_cost(syncs, runs=runs)
    pd.testing.assert_frame_equal(syncs, before)
    c = cost.set_index("run_id")
    assert c.loc["np1", "syncs_per_epoch"] == 4
    assert c.loc["np2a", "sync_median_s"] == pytest.approx(3000e-9)
    assert c.loc["np2b", "sync_per_epoch_s"] == pytest.approx(8000e-9)
    assert c.loc["np4", "n_rank_epochs"] == 8
    t = sync_scaling(cost).set_index("n_ranks")
    assert t.loc[2, "sync_mean_s"] == pytest.approx(3500e-9)
    assert t.loc[2, "sync_per_epoch_s"] == pytest.approx(7000e-9)
    assert t.loc[2, "sync_min_s"] == pytest.approx(3000e-9) and t.loc[2, "sync_max_s"] == pytest.approx(4000e-9)
    assert t["syncs_ratio"].tolist() == pytest.approx([1, 0.5, 0.25])
    assert t["time_per_sync_ratio"].tolist() == pytest.approx([1, 3500 / 1500, 5000 / 1500])
    assert t["sync_per_epoch_ratio"].tolist() == pytest.approx([1, 7 / 6, 5 / 6])
    assert t["fewer_syncs_win"].tolist() == [False, False, True]
    # the identity the decomposition rests on
    assert (t["syncs_per_epoch"] * t["sync_mean_s"]).tolist() == pytest.approx(t["sync_per_epoch_s"].tolist())


def test_syncs_per_epoch_counts_warmup_steps_but_times_only_kept_ones():
    # 2 ranks, 5 syncs per rank and epoch, two epochs: the warm-up drops the first step of
    # each rank, yet an epoch still has 5 batches per rank
    ev = concat([_run("r", 2, 5, 2000, epochs=2)])
    syncs = sync_times(ev, keep_warmup=True)
    assert syncs["warmup"].sum() == 2
    c = sync_cost(syncs).iloc[0]
    assert c["syncs_per_epoch"] == 5
    assert c["n_syncs"] == 18 and c["n_batches"] == 20
    assert c["sync_per_epoch_s"] == pytest.approx(5 * c["sync_mean_s"])
