"""Property tests: shares sum to 1, speedup is 1 at the baseline, efficiency = speedup·n0/n,
inputs are never changed, row order does not matter."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from analysis.metrics.breakdown import gpu_time_breakdown, time_breakdown  # noqa: E402
from analysis.metrics.scaling import scaling_table  # noqa: E402
from analysis.schema import make_events  # noqa: E402

PHASES = ["data", "forward", "backward", "sync", "optimizer"]
SHARES = ["data_frac", "forward_frac", "backward_frac", "sync_exposed_frac", "optimizer_frac", "other_frac"]

interval = st.tuples(st.sampled_from(PHASES), st.integers(0, 900), st.integers(1, 300))


@settings(max_examples=60, deadline=None)
@given(st.lists(interval, min_size=1, max_size=12), st.lists(st.tuples(st.integers(0, 900), st.integers(1, 200)),
                                                             max_size=4))
def test_shares_sum_to_one_and_input_unchanged(phases, comm):
    names = ["step"] + [p[0] for p in phases]
    starts = [0] + [p[1] for p in phases]
    durs = [1000] + [p[2] for p in phases]
    ev = make_events(run_id="r", rank=0, kind="phase", name=names, step=0, epoch=0, start_ns=starts,
                     dur_ns=durs, source="t")
    if comm:
        c = make_events(run_id="r", rank=0, kind="comm", cat="ddp_hook", name="allreduce", source="t",
                        start_ns=[s for s, _ in comm], dur_ns=[d for _, d in comm])
        from analysis.schema import concat

        ev = concat([ev, c])
    before = copy.deepcopy(ev)
    b = time_breakdown(ev)
    pd.testing.assert_frame_equal(ev, before)
    row = b.iloc[0]
    assert sum(row[s] for s in SHARES) == pytest.approx(1.0, abs=1e-9)
    assert all(0 <= row[s] <= 1 for s in SHARES)
    shuffled = ev.sample(frac=1.0, random_state=1).reset_index(drop=True)
    pd.testing.assert_frame_equal(time_breakdown(shuffled), b)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["compute", "comm", "memcpy"]), st.integers(0, 500), st.integers(1, 100)),
                min_size=1, max_size=10))
def test_gpu_shares_sum_to_one(kernels):
    ev = make_events(run_id="r", rank=0, device=0, stream=7, kind=[k[0] for k in kernels], name="k",
                     start_ns=[k[1] for k in kernels], dur_ns=[k[2] for k in kernels], source="t")
    row = gpu_time_breakdown(ev).iloc[0]
    total = row["compute_frac"] + row["comm_frac"] + row["memory_frac"] + row["idle_frac"]
    assert total == pytest.approx(1.0, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.floats(0.5, 100), st.lists(st.tuples(st.sampled_from([1, 2, 4, 8, 16]), st.floats(0.1, 100)),
                                     min_size=1, max_size=8))
def test_speedup_one_at_baseline_and_efficiency_identity(t0, runs):
    pr = pd.DataFrame({
        "framework": ["none"] + ["ddp"] * len(runs),
        "config_backend": ["none"] + ["ddp-gloo"] * len(runs),
        "batch_size": 32,
        "n_ranks": [1] + [n for n, _ in runs],
        "epoch_time_s": [t0] + [t for _, t in runs],
    })
    pr["throughput_samples_per_s"] = 1000 / pr["epoch_time_s"]
    before = copy.deepcopy(pr)
    for mode in ("strong", "weak"):
        t = scaling_table(pr, mode=mode)
        pd.testing.assert_frame_equal(pr, before)
        base = t[t["config_backend"] == "none"]
        assert base["speedup"].tolist() == pytest.approx([1.0])
        expected = t["speedup"] * t["baseline_n_ranks"] / t["n_ranks"]
        assert t["efficiency_frac"].tolist() == pytest.approx(expected.tolist())
