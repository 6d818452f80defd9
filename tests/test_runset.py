"""RunSet on the hand-built experiment (tests/data/experiment_small, see its README)."""

from __future__ import annotations

import json
import shutil
import warnings

import pandas as pd
import pytest

from analysis.errors import ReadError, RecoveryWarning, ScalescopeError
from analysis.runset import RunSet, read_epochs


@pytest.fixture(scope="module")
def exp(data_dir):
    return data_dir / "experiment_small"


@pytest.fixture()
def rs(exp):
    return RunSet.from_dirs(exp)


def test_runs_table_from_manifests(rs):
    runs = rs.runs.set_index("run_id")
    assert len(runs) == 7
    assert runs.loc["horovod-gloo_np4_bs10_r1", "n_ranks"] == 4
    assert runs.loc["horovod-gloo_np4_bs10_r1", "n_nodes"] == 2
    assert runs.loc["horovod-gloo_np4_bs10_r1", "global_batch_size"] == 40
    assert runs.loc["horovod-gloo_np2_bs10_r2", "repeat"] == 2
    assert runs.loc["horovod-gloo_np2_bs10_r1", "config_backend"] == "horovod-gloo"
    assert runs.loc["horovod-gloo_np2_bs10_r1", "horovod_controller"] == "gloo"
    assert runs.loc["none_np1_bs10_r1", "framework"] == "none"
    assert runs.loc["none_np1_bs10_r1", "config_backend"] == "none"
    assert runs.loc["none_np1_bs20_r1", "batch_size"] == 20
    assert runs.loc["none_np1_bs10_r1", "sampler_kind"] == "cpu"
    assert runs.loc["none_np1_bs10_r1", "dataset_size"] == 40
    assert runs.loc["none_np1_bs10_r1", "time_origin"] == "unix_epoch"
    assert runs.loc["horovod-gloo_np4_bs10_r1", "learning_rate"] == pytest.approx(0.04)


def test_failed_run_listed_not_used(rs):
    failed = rs.failed_runs()
    assert failed["run_id"].tolist() == ["horovod-gloo_np8_bs10_r1"]
    row = failed.iloc[0]
    assert row["status"] == "failed" and row["exit_code"] == 1
    assert "connectFullMesh" in row["log_tail"]
    assert row["n_ranks"] == 8  # from the manifest, not from data
    assert "horovod-gloo_np8_bs10_r1" not in set(rs.epochs["run_id"])
    assert len(rs.usable_runs()) == 6


def test_epochs_table(rs):
    e = rs.epochs
    assert len(e) == (1 + 1 + 1 + 2 + 2 + 4) * 2
    one = e[(e["run_id"] == "horovod-gloo_np2_bs10_r1") & (e["rank"] == 1) & (e["epoch"] == 0)].iloc[0]
    assert one["epoch_time_s"] == pytest.approx(0.026)
    assert one["samples"] == 20
    assert one["peak_mem_mib"] == 250.0
    assert str(e["rank"].dtype) == "Int32"


def test_filter_select_groupby_return_new_runsets(rs):
    two = rs.filter(framework="horovod", n_ranks=[2, 4])
    assert sorted(two.runs["run_id"]) == ["horovod-gloo_np2_bs10_r1", "horovod-gloo_np2_bs10_r2",
                                          "horovod-gloo_np4_bs10_r1"]
    assert len(rs.runs) == 7  # unchanged
    assert set(two.epochs["run_id"]) == set(two.runs["run_id"])
    big = rs.filter(n_ranks=lambda n: n > 2)
    assert sorted(big.runs["n_ranks"].tolist()) == [4, 8]
    groups = dict(rs.groupby("n_ranks"))
    assert sorted(groups) == [1, 2, 4, 8]
    assert len(groups[2]) == 2
    with pytest.raises(ScalescopeError, match="no run column"):
        rs.filter(gpus=2)


def test_events_and_select(rs):
    pytest.importorskip("analysis.readers.scalescope")
    ev = rs.events
    assert set(ev["run_id"].astype(str)) == set(rs.usable_runs()["run_id"])
    phases = rs.select(kind="phase", name=["forward", "backward"])
    assert set(phases.events["name"].astype(str)) == {"forward", "backward"}
    assert len(phases.runs) == len(rs.runs)
    # 2 epochs x 4 steps x (forward + backward) in the baseline run
    n = (phases.events["run_id"] == "none_np1_bs10_r1").sum()
    assert n == 16


def test_include_failed(exp):
    rs = RunSet.from_dirs(exp, include_failed=True)
    assert len(rs.usable_runs()) == 7


def test_single_run_directory(exp):
    rs = RunSet.from_dirs(exp / "none_np1_bs10_r1")
    assert rs.runs["run_id"].tolist() == ["none_np1_bs10_r1"]
    assert rs.runs["status"].iloc[0] == "ok"


def test_two_experiments_with_the_same_run_ids(exp, tmp_path):
    other = tmp_path / "copy"
    shutil.copytree(exp, other)
    data = json.loads((other / "experiment.json").read_text())
    data["name"] = "copy"
    (other / "experiment.json").write_text(json.dumps(data))
    rs = RunSet.from_dirs([exp, other])
    assert len(rs.runs) == 14
    assert "copy/none_np1_bs10_r1" in set(rs.runs["run_id"])
    assert "copy/none_np1_bs10_r1" in set(rs.epochs["run_id"])


def test_bad_manifests(tmp_path):
    with pytest.raises(ReadError, match="not found"):
        RunSet.from_dirs(tmp_path / "nope")
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(ReadError, match="not valid JSON"):
        RunSet.from_dirs(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"format": "scalescope.run", "format_version": 99}))
    with pytest.raises(ReadError, match="format_version 99"):
        RunSet.from_dirs(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ReadError, match="neither an experiment"):
        RunSet.from_dirs(empty)


def test_epochs_cut_off_last_line_warns(tmp_path):
    f = tmp_path / "rank-00000.epochs.jsonl"
    f.write_text(json.dumps({"rank": 0, "epoch": 0, "epoch_time_s": 1.5, "samples": 10}) + '\n{"rank": 0, "ep')
    with pytest.warns(RecoveryWarning, match="cut-off last line"):
        e = read_epochs(tmp_path, run_id="x")
    assert e["epoch_time_s"].tolist() == [1.5]
    f.write_text('{"rank": 0, "ep\n' + json.dumps({"rank": 0, "epoch": 1}) + "\n")
    with pytest.raises(ReadError, match="line 1 is not valid JSON"):
        read_epochs(tmp_path)


def test_experiment_listing_runs_without_directories(tmp_path):
    exp = {"format": "scalescope.experiment", "format_version": 1, "name": "x",
           "runs": [{"run_id": "ddp-gloo_np2_bs8_r1", "status": "oom", "exit_code": 137,
                     "log_tail": "CUDA out of memory",
                     "config": {"backend": "ddp-gloo", "np": 2, "batch_size": 8, "repeat": 1, "vary": {"lr": 0.1}}}]}
    (tmp_path / "experiment.json").write_text(json.dumps(exp))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rs = RunSet.from_dirs(tmp_path)
    row = rs.runs.iloc[0]
    assert row["status"] == "oom" and row["n_ranks"] == 2 and row["framework"] == "ddp" and row["backend"] == "gloo"
    assert row["vary_lr"] == 0.1
    assert rs.epochs.empty
    assert isinstance(rs.epochs, pd.DataFrame)


@pytest.mark.parametrize("workers", [1, 2])
def test_reduce_gives_the_metric_of_all_events_run_by_run(workers):
    """``rs.reduce(metric)`` (the RunSet's door for per-run metrics: one run per task, only
    the tables come back) equals the metric of all events, for declared and undeclared
    metrics, here and on a pool."""
    from pathlib import Path

    from analysis import metrics as M

    sweep = Path(__file__).resolve().parents[1] / "data" / "sample_sweep"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        everything = RunSet.from_dirs(sweep, workers=1).events
        for metric, options in ((M.phase_stragglers, {}), (M.warmup_summary, {}),
                                (M.time_breakdown, {"level": "step"})):
            by_run = RunSet.from_dirs(sweep, workers=workers).reduce(metric, **options)
            want = metric(everything, **options)
            assert len(want)
            pd.testing.assert_frame_equal(by_run.reset_index(drop=True), want.reset_index(drop=True),
                                          check_categorical=False, obj=metric.__name__)
