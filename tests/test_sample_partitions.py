"""The issue-13 studies end to end on data/sample_partitions (see data/README.md): two
experiments labelled as partitions give one scaling figure with a line per partition against
one chosen baseline, and every new report section runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import metrics as M
from analysis import plots as P
from analysis.report import build_report
from analysis.runset import RunSet

DATA = Path(__file__).resolve().parents[1] / "data" / "sample_partitions"
EXPERIMENTS = ["alpha", "beta", "weak", "input_size", "batch_lr"]


@pytest.fixture(scope="module")
def partitions():
    return RunSet.from_dirs([DATA / "alpha", DATA / "beta"])


def test_partition_column_from_the_labels(partitions):
    runs = partitions.runs
    assert sorted(runs["partition"].unique()) == ["alpha", "beta"]
    assert set(runs["cluster"]) == {"vm"}
    assert runs.groupby("partition")["label_threads"].first().to_dict() == {"alpha": "1", "beta": "2"}
    assert (runs["status"] == "ok").all() and len(runs) == 12


def test_one_scaling_figure_a_line_per_partition_against_one_baseline(partitions):
    per_run = M.run_summary(partitions)
    base = {"partition": "alpha", "framework": "none", "n_ranks": 1}
    table = M.scaling_table(per_run, baseline=base, by=("partition", "config_backend", "batch_size"))
    # the baseline is the clean repeats' (a repeat disturbed by other processes, as r1 of alpha
    # was while it was recorded, is left out: docs/metrics.md, "Outlier repeats")
    alpha_base = per_run[(per_run["partition"] == "alpha") & (per_run["framework"] == "none")
                         & per_run["outlier"].isna()]["epoch_time_s"]
    assert table["baseline_epoch_time_s"].unique().tolist() == [pytest.approx(alpha_base.median())]
    fw = table[table["framework"] != "none"]
    fig = P.plot_scaling(fw, by="partition")
    lines = [d for d in fig.data if d.showlegend is not False and d.name != "ideal"]
    assert [d.name for d in lines] == ["alpha", "beta"]
    assert [list(d.x) for d in lines] == [[1, 2], [1, 2]]
    beta = fw[fw["partition"] == "beta"].sort_values("n_ranks")["speedup"].tolist()
    assert list(lines[1].y) == pytest.approx(beta, nan_ok=True)  # unreliable rows (disturbed repeats) have none


def test_weak_runs_grew_the_dataset():
    rs = RunSet.from_dirs([DATA / "weak"])
    r = rs.runs.set_index("run_id")
    assert r.loc["ddp-gloo_np2_weak_r1", "dataset_size"] == 2 * r.loc["ddp-gloo_np1_weak_r1", "dataset_size"]
    assert set(r["scaling"]) == {"weak"}


def test_find_max_bracket_matches_the_runs():
    rs = RunSet.from_dirs([DATA / "input_size"])
    t = M.input_size_table(rs.runs, M.run_summary(rs), size="vary_curve-length")
    lim = M.memory_limit(t, find_max=rs.find_max_records()).iloc[0]
    assert lim["largest_ok"] == lim["find_max_largest_ok"]
    assert lim["smallest_oom"] > lim["largest_ok"]
    assert set(rs.failed_runs()["status"]) == {"oom"}


def test_a_folder_of_experiments_reads_as_one_runset():
    rs = RunSet.from_dirs(DATA)
    assert sorted(rs.runs["experiment"].unique()) == sorted(EXPERIMENTS)
    assert len(rs.runs) == 46


def test_report_shows_every_new_study(tmp_path):
    page = build_report(DATA, tmp_path / "report", static=False)
    text = page.read_text()
    for fig in ("fig-clusters_scaling", "fig-clusters_slopes", "fig-clusters_usage", "fig-strong_weak", "fig-input_size_curve-length",
                "fig-batch_speedup", "fig-equal_batch", "fig-lr_loss_epochs", "fig-lr_loss_time"):
        assert fig in text, fig
    assert (tmp_path / "report" / "export" / "clusters_slopes.csv").exists()
    assert (tmp_path / "report" / "export" / "clusters_own_baseline.csv").exists()
    assert (tmp_path / "report" / "export" / "time_to_target.csv").exists()
