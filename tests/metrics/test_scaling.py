"""Known answers for epoch times, speedup, efficiency, the speedup fit and node boundaries."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from analysis.errors import ScalescopeError
from analysis.metrics.overhead import framework_overhead
from analysis.metrics.scaling import (
    epoch_times,
    fit_speedup,
    node_boundaries,
    run_speedups,
    scaling_table,
)


def per_run():
    # the numbers of tests/data/experiment_small: baseline 40 ms; Horovod 46, 26 & 28, 15 ms
    return pd.DataFrame({
        "run_id": ["base", "h1", "h2a", "h2b", "h4"],
        "framework": ["none", "horovod", "horovod", "horovod", "horovod"],
        "config_backend": ["none", "hg", "hg", "hg", "hg"],
        "batch_size": 10,
        "n_ranks": [1, 1, 2, 2, 4],
        "n_nodes": [1, 1, 1, 1, 2],
        "epoch_time_s": [0.040, 0.046, 0.026, 0.028, 0.015],
        "throughput_samples_per_s": [40 / 0.040, 40 / 0.046, 40 / 0.026, 40 / 0.028, 40 / 0.015],
    })


def test_epoch_times_slowest_rank_and_median_over_epochs():
    e = pd.DataFrame({"run_id": "r", "rank": [0, 1, 0, 1, 0, 1], "epoch": [0, 0, 1, 1, 2, 2],
                      "epoch_time_s": [3.0, 4.0, 2.0, 2.5, 2.0, 1.0], "samples": 50})
    t = epoch_times(e, warmup_epochs=0)
    assert t["epoch_time_s"].iloc[0] == 2.5  # median of 4.0, 2.5, 2.0
    assert t["throughput_samples_per_s"].iloc[0] == pytest.approx(100 / 2.5)
    # by default the first epoch is warm-up
    assert epoch_times(e)["epoch_time_s"].iloc[0] == pytest.approx((2.5 + 2.0) / 2)
    assert epoch_times(e, warmup_epochs=2)["epoch_time_s"].iloc[0] == 2.0
    # a run with no more epochs than the warm-up keeps them
    assert epoch_times(e[e["epoch"] == 0])["n_epochs"].iloc[0] == 1


def test_scaling_table_strong():
    pr = per_run()
    before = copy.deepcopy(pr)
    t = scaling_table(pr)
    pd.testing.assert_frame_equal(pr, before)
    hg = t[t["config_backend"] == "hg"].set_index("n_ranks")
    assert hg.loc[1, "speedup"] == pytest.approx(40 / 46)
    assert hg.loc[2, "epoch_time_s_median"] == pytest.approx(0.027)
    assert hg.loc[2, "speedup"] == pytest.approx(40 / 27)
    assert hg.loc[2, "speedup_min"] == pytest.approx(40 / 28)
    assert hg.loc[2, "speedup_max"] == pytest.approx(40 / 26)
    assert hg.loc[2, "efficiency_frac"] == pytest.approx(40 / 27 / 2)
    assert hg.loc[4, "efficiency_frac"] == pytest.approx(40 / 15 / 4)
    assert hg.loc[2, "n_runs"] == 2
    assert hg.loc[2, "epoch_time_s_std"] == pytest.approx(np.std([0.026, 0.028], ddof=1))
    assert t[t["config_backend"] == "none"]["speedup"].iloc[0] == pytest.approx(1.0)


def test_scaling_table_weak_and_min_baseline():
    t = scaling_table(per_run(), mode="weak", baseline="min").set_index(["config_backend", "n_ranks"])
    x1 = 40 / 0.046
    assert t.loc[("hg", 4), "speedup"] == pytest.approx((40 / 0.015) / x1)
    assert t.loc[("hg", 4), "efficiency_frac"] == pytest.approx((40 / 0.015) / x1 / 4)
    assert t.loc[("hg", 1), "speedup"] == pytest.approx(1.0)


def test_missing_baseline_is_an_error():
    pr = per_run()
    pr = pr[pr["framework"] != "none"]
    with pytest.raises(ScalescopeError, match="no baseline runs"):
        run_speedups(pr)


def test_fit_speedup_slope_and_t_interval():
    x = np.array([1.0, 2.0, 2.0, 4.0])
    y = np.array([40 / 46, 40 / 26, 40 / 28, 40 / 15])
    pts = pd.DataFrame({"n_ranks": x, "speedup": y})
    f = fit_speedup(pts).iloc[0]
    sxx = ((x - x.mean()) ** 2).sum()  # 4.75
    slope = ((x - x.mean()) * (y - y.mean())).sum() / sxx
    intercept = y.mean() - slope * x.mean()
    rss = ((y - intercept - slope * x) ** 2).sum()
    se = np.sqrt(rss / 2 / sxx)
    t975_df2 = 4.302652729911275  # Student t, 97.5 % quantile, 2 degrees of freedom (tables)
    assert sxx == pytest.approx(4.75)
    assert f["slope_per_rank"] == pytest.approx(slope)
    assert f["intercept"] == pytest.approx(intercept)
    assert f["slope_ci_low"] == pytest.approx(slope - t975_df2 * se)
    assert f["slope_ci_high"] == pytest.approx(slope + t975_df2 * se)
    assert f["n_points"] == 4


def test_fit_speedup_two_points_has_no_interval():
    f = fit_speedup(pd.DataFrame({"n_ranks": [1, 2], "speedup": [1.0, 1.8]})).iloc[0]
    assert f["slope_per_rank"] == pytest.approx(0.8)
    assert np.isnan(f["slope_ci_low"])


def test_node_boundaries():
    b = node_boundaries(pd.DataFrame({"n_ranks": [1, 2, 4, 8, 8], "n_nodes": [1, 1, 2, 2, 2]}))
    assert b.to_dict("records") == [{"n_ranks_before": 2, "n_ranks_after": 4, "n_nodes_before": 1,
                                     "n_nodes_after": 2, "x": 3.0}]


def test_framework_overhead():
    t = framework_overhead(per_run())
    assert len(t) == 1
    assert t["overhead_frac"].iloc[0] == pytest.approx(0.046 / 0.040 - 1)
    assert t["overhead_pct"].iloc[0] == pytest.approx(15.0)
