"""A report over all of data/sample_partitions (five experiments: two partitions, weak scaling,
an input-size search, a batch and learning-rate sweep) keeps every experiment, partition, mode
and --vary value apart: no ratio divides one group's runs by another group's baseline (issue 35).

Before the one grouping rule, the same report showed runs with efficiency 6.7 and speedup 8.3
against a baseline pooled from other experiments (summary_runs), a batch-150 "speedup" of 3.97
(6.87 before the disturbed-repeat rules) and an equal-batch relative epoch time of 1.71 (alpha,
beta and weak runs pooled into 2 x 75)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis import metrics as M
from analysis.runset import RunSet

DATA = Path(__file__).resolve().parents[1] / "data" / "sample_partitions"

#: A framework run's efficiency against its own group's baseline mean on this loaded 2-core
#: machine stays below this (measured at most 0.96); a baseline pooled from another experiment
#: gave 6.2. (Baseline repeats against their own mean spread wider, up to 2.3 in batch_lr, whose
#: repeats were all recorded beside other load: that is noise within one group, not pooling.)
SANE = 1.5


@pytest.fixture(scope="module")
def all_samples():
    rs = RunSet.from_dirs([DATA])
    return rs, M.run_summary(rs)


def test_every_axis_that_varies_groups(all_samples):
    _, pr = all_samples
    assert M.config_by(pr) == ("experiment", "partition", "scaling", "vary_curve-length", "vary_lr-scaling",
                               "config_backend", "batch_size")


def test_each_run_against_its_own_experiments_baseline(all_samples):
    _, pr = all_samples
    by = M.config_by(pr)
    sp = M.run_speedups(pr, baseline="none", by=by, match=M.baseline_match(by))
    assert sp.loc[sp["framework"] != "none", "efficiency_frac"].max() < SANE
    keys = ["experiment", "partition", "scaling", "vary_curve-length", "vary_lr-scaling", "batch_size"]
    pr_keys = pr.reset_index(drop=True)[keys].astype(object).where(pr.reset_index(drop=True)[keys].notna(), None)
    for _, row in sp.iterrows():
        base = pr_keys.loc[[int(i) for i in str(row["_base_ids"]).split(",")]]
        own = {k: (None if pd.isna(row[k]) else row[k]) for k in keys}
        assert all(base[k].tolist() == [own[k]] * len(base) for k in keys), (row["run_id"], base)
    # the old grouping pooled them: the same runs then reached far above any sane efficiency
    old = M.run_speedups(pr, baseline="none", by=("partition", "config_backend", "batch_size"))
    assert old.loc[old["framework"] != "none", "efficiency_frac"].max() > 3


def test_scaling_table_has_no_pooled_ratio(all_samples):
    _, pr = all_samples
    by = M.config_by(pr)
    t = M.scaling_table(pr, baseline="none", by=by, match=M.baseline_match(by))
    assert t["efficiency_frac"].dropna().max() < SANE
    assert (t.groupby(list(by), dropna=False)["baseline_n_ranks"].nunique() <= 1).all()


def test_batch_speedup_and_equal_batch_within_one_experiment(all_samples):
    _, pr = all_samples
    axes = M.study_axes(pr)
    sp = M.batch_speedup(pr, reference_batch=75, by=(*axes, "config_backend"))
    at150 = sp[sp["batch_size"] == 150]
    assert set(at150["experiment"]) == {"batch_lr"} and len(at150) == 3  # one per --lr-scaling value
    assert at150["speedup"].max() < 2.5
    lr = pr[(pr["experiment"] == "batch_lr") & (pr["vary_lr-scaling"] == "none")]
    one = lr[(lr["n_ranks"] == 1) & (lr["batch_size"] == 150)]["epoch_time_s"].median()
    two = lr[(lr["n_ranks"] == 2)]["epoch_time_s"].median()
    eq = M.equal_batch_comparison(pr, by=axes)
    row = eq[(eq["vary_lr-scaling"] == "none") & (eq["n_ranks"] == 2)]
    assert row["n_runs"].tolist() == [2] and row["relative_epoch_time"].item() == pytest.approx(two / one)


def test_input_size_curves_separate_per_gpu_type(all_samples):
    """Two GPU types of the same search (the large-image study's V100 against K80): one curve
    and one limit each, never pooled."""
    rs, pr = all_samples
    runs = rs.runs[rs.runs["experiment"] == "input_size"]
    two = pd.concat([runs.assign(gpu_model="V100"),
                     runs.assign(gpu_model="K80", run_id=runs["run_id"].astype(str) + "-k80")], ignore_index=True)
    per = pr[pr["experiment"] == "input_size"]
    per2 = pd.concat([per.assign(gpu_model="V100"),
                      per.assign(gpu_model="K80", run_id=per["run_id"].astype(str) + "-k80")], ignore_index=True)
    by = (*M.study_axes(per2, without=("vary_curve-length",)), "config_backend", "n_ranks")
    assert "gpu_model" in by
    t = M.input_size_table(two, per2, size="vary_curve-length", by=by)
    assert (t["n_runs"] == 1).all() and set(t["gpu_model"]) == {"V100", "K80"}
    lim = M.memory_limit(t, by=by)
    assert len(lim) == 2 and lim["largest_ok"].tolist() == [4000.0, 4000.0]
