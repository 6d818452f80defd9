"""Input size and the memory limit, strong against weak scaling, and the reference study's
batch-size / learning-rate figures (issue 13), on small known-answer frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import metrics as M
from analysis import plots as P

RUNS = pd.DataFrame({
    "run_id": [f"r{i}" for i in range(7)], "config_backend": "baseline", "n_ranks": 1,
    "status": ["ok", "ok", "ok", "oom", "ok", "oom", "ok"],
    "vary_curve-length": [200, 400, 800, 1600, 1200, 1400, 1500],  # 1500 ok above 1400 oom: noise
    "vary_lr-scaling": ["none"] * 7,
})
PER_RUN = pd.DataFrame({"run_id": ["r0", "r1", "r2", "r4", "r6"],
                        "throughput_samples_per_s": [1000.0, 600.0, 300.0, 200.0, 150.0],
                        "epoch_time_s": [1.0, 1.6, 3.3, 5.0, 6.6]})


def test_size_axes_are_numeric_vary_columns():
    assert M.size_axes(RUNS) == ["vary_curve-length"]


def test_input_size_table_marks_oom_at_its_size():
    t = M.input_size_table(RUNS, PER_RUN, size="vary_curve-length")
    assert t["size"].tolist() == [200, 400, 800, 1200, 1400, 1500, 1600]
    assert t.loc[t["n_oom"] > 0, "size"].tolist() == [1400, 1600]
    assert t.set_index("size").loc[1400, "status"] == "oom"
    assert np.isnan(t.set_index("size").loc[1600, "throughput_samples_per_s"])
    assert t.set_index("size").loc[400, "throughput_rel"] == pytest.approx(0.6)
    assert t.set_index("size").loc[200, "time_per_sample_s"] == pytest.approx(1e-3)
    lim = M.memory_limit(t, find_max=[{"name": "curve-length", "largest_ok": 1200}])
    assert lim[["largest_ok", "smallest_oom", "find_max_largest_ok"]].values.tolist() == [[1200.0, 1400.0, 1200.0]]
    fig = P.plot_input_size(t, limit=lim, size_label="--curve-length")
    oom = [d for d in fig.data if d.name.startswith("out of memory")]
    assert list(oom[0].x) == [1400, 1600] and fig.layout.xaxis.type == "log"
    line = [d for d in fig.data if d.name == "largest that fits: 1200"]
    assert list(line[0].x) == [1200.0, 1200.0]
    assert fig.layout.yaxis.title.text == "throughput (samples/s)"


def test_strong_weak_each_with_its_ideal():
    pr = pd.DataFrame({"framework": ["none", "ddp", "none", "ddp"], "config_backend": ["none", "ddp"] * 2,
                       "scaling": ["strong", "strong", "weak", "weak"], "n_ranks": [1, 2, 1, 2], "batch_size": 75,
                       "epoch_time_s": [10.0, 6.0, 10.0, 12.5], "throughput_samples_per_s": [100.0, 166.7, 100.0, 160.0]})
    t = M.strong_weak_table(pr).set_index(["scaling", "config_backend", "n_ranks"])
    assert t.loc[("strong", "ddp", 2), "ideal_epoch_time_s"] == pytest.approx(5.0)
    assert t.loc[("weak", "ddp", 2), "ideal_epoch_time_s"] == pytest.approx(10.0)
    fig = P.plot_strong_weak(t.reset_index().query("framework != 'none'"))
    assert {d.name for d in fig.data} >= {"strong · ddp", "ideal weak · ddp"}


def _curves():
    rows = []
    for rule, speed in (("none", 1.0), ("linear", 2.0)):
        for rep, jitter in ((1, 1.0), (2, 1.2)):
            for e in range(3):
                rows.append({"run_id": f"{rule}{rep}", "lr_scaling": rule, "repeat": rep, "n_ranks": 2, "batch_size": 75,
                             "global_batch_size": 150, "config_backend": "ddp", "epoch": e,
                             "wall_s": (e + 1) * jitter, "val_loss": 0.1 / (speed * (e + 1)) * jitter})
    return pd.DataFrame(rows)


def test_lr_rule_curves_combine_repeats():
    lr = M.lr_rule_curves(_curves())
    one = lr[(lr["lr_scaling"] == "linear") & (lr["epoch"] == 0)].iloc[0]
    assert one["n_runs"] == 2
    assert (one["val_loss_min"], one["val_loss_max"]) == (pytest.approx(0.05), pytest.approx(0.06))
    assert one["wall_s_median"] == pytest.approx(1.1)
    fig = P.plot_lr_curves(lr, x="wall_s", budget_s=2.0)
    assert fig.layout.yaxis.type == "log" and "validation MSE" in fig.layout.yaxis.title.text
    assert [d.name for d in fig.data if d.mode == "lines+markers"] == ["linear · 2 · 75", "none · 2 · 75"]


def test_lr_rule_curves_end_where_every_repeat_got_to():
    c = _curves()
    c = c[~((c["run_id"] == "none2") & (c["epoch"] == 2))]  # a repeat the time budget stopped earlier
    lr = M.lr_rule_curves(c)
    assert lr.groupby("lr_scaling")["epoch"].max().to_dict() == {"linear": 2, "none": 1}
    assert M.lr_rule_curves(c, complete_only=False).groupby("lr_scaling")["epoch"].max().to_dict() == \
        {"linear": 2, "none": 2}
    assert M.lr_rule_curves(c.assign(lr_scaling=None))["epoch"].max() == 1


def test_time_to_target_per_rule():
    t = M.time_to_target(_curves(), target=0.039).set_index("lr_scaling")
    assert t.loc["linear", "n_reached"] == 2 and t.loc["linear", "time_to_target_s"] == pytest.approx((2 + 2.4) / 2)
    assert t.loc["none", "n_reached"] == 1  # 0.1/3 = 0.033 by the first repeat; the second ends at 0.04
    assert t.loc["none", "time_to_target_s"] == pytest.approx(3.0)


def test_epochs_to_target_counts_the_epochs_trained():
    """The reference's count (reached in the first epoch: 1), whether the script numbers its
    epochs from 0 or from 1 (issue 35.7: it was the 0-based epoch index)."""
    from_0 = M.time_to_target(_curves(), target=0.039).set_index("lr_scaling")
    from_1 = M.time_to_target(_curves().assign(epoch=lambda d: d["epoch"] + 1), target=0.039).set_index("lr_scaling")
    # linear: 0.1/(2(e+1)) <= 0.039 from e = 1 (the second epoch) in both repeats
    assert from_0.loc["linear", "epochs_to_target"] == 2 == from_1.loc["linear", "epochs_to_target"]
    assert from_0.loc["none", "epochs_to_target"] == 3 == from_1.loc["none", "epochs_to_target"]


def test_batch_speedup_and_equal_effective_batch():
    pr = pd.DataFrame({"run_id": ["a", "b", "c"], "config_backend": ["baseline", "baseline", "ddp-gloo"],
                       "framework": ["none", "none", "ddp"], "n_ranks": [1, 1, 2], "batch_size": [75, 150, 75],
                       "global_batch_size": [75, 150, 150], "lr_scaling": "none",
                       "epoch_time_s": [4.0, 2.5, 3.0], "throughput_samples_per_s": [250.0, 400.0, 333.0]})
    sp = M.batch_speedup(pr)
    assert sp["speedup"].tolist() == [1.0, 1.6]
    final = pd.DataFrame({"run_id": ["a", "b", "c"], "final_val_loss": [0.01, 0.02, 0.03]})
    eq = M.equal_batch_comparison(pr, final=final)
    assert eq[["n_ranks", "batch_size", "relative_epoch_time", "final_val_loss"]].values.tolist() == [
        [1, 150, 1.0, 0.02], [2, 75, 1.2, 0.03]]
    fig = P.plot_equal_batch(eq)
    assert list(fig.data[0].x) == ["1 × 150", "2 × 75"] and fig.layout.yaxis2.type == "log"
    fig = P.plot_batch_speedup(sp)
    assert list(fig.data[0].y) == [1.0, 1.6]


def test_speedup_slopes_figure():
    fit = pd.DataFrame({"partition": ["alpha", "beta"], "slope_per_rank": [0.45, 0.28], "slope_ci_low": [0.4, 0.2],
                        "slope_ci_high": [0.5, 0.36], "confidence": 0.95})
    fig = P.plot_speedup_slopes(fit)
    assert list(fig.data[0].x) == ["alpha", "beta"] and list(fig.data[0].y) == [0.45, 0.28]
    assert list(fig.data[0].error_y.array) == [pytest.approx(0.05), pytest.approx(0.08)]


def test_input_size_draws_no_limit_where_nothing_ran_out_of_memory():
    ok = RUNS[RUNS["status"] != "oom"] if "status" in RUNS else RUNS
    t = M.input_size_table(ok, PER_RUN, size="vary_curve-length")
    assert not (t["n_oom"] > 0).any()
    lim = M.memory_limit(t)
    fig = P.plot_input_size(t, limit=lim, size_label="--curve-length")
    assert not [d for d in fig.data if d.name.startswith("largest that fits")], "the largest size tried is no limit"
