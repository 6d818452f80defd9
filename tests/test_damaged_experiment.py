"""A damaged experiment (a copy of tests/data/experiment_small, damaged in place) still loads
and still gets a report: every damaged or missing part is named with its reason and left out
only of the data it breaks (issue 16, part 5)."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

from analysis import report, rundir
from analysis.errors import ReadError, RecoveryWarning
from analysis.runset import RunSet


@pytest.fixture()
def exp(data_dir, tmp_path):
    out = tmp_path / "EXP"
    shutil.copytree(data_dir / "experiment_small", out)
    return out


def _load(path) -> RunSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        return RunSet.from_dirs(path)


def _damage(exp):
    """Three damaged runs: a corrupt run.json, a missing run directory, a 0-byte rank trace."""
    (exp / "horovod-gloo_np2_bs10_r2" / "run.json").write_text('{"format": "scalescope.run", "world')
    shutil.rmtree(exp / "horovod-gloo_np1_bs10_r1")
    (exp / "horovod-gloo_np4_bs10_r1" / "rank-00003.trace.json").write_bytes(b"")


def test_damaged_parts_are_named_and_the_rest_is_used(exp):
    _damage(exp)
    with pytest.warns(RecoveryWarning, match="run.json damaged: .*not valid JSON"):
        rs = RunSet.from_dirs(exp)
    assert len(rs.runs) == 7  # every listed run stays in the runs table
    with pytest.warns(RecoveryWarning, match="rank-00003.trace.json"):
        d = rs.damaged.set_index("run_id")
    assert set(d.index) == {"horovod-gloo_np2_bs10_r2", "horovod-gloo_np1_bs10_r1", "horovod-gloo_np4_bs10_r1"}
    assert d.loc["horovod-gloo_np2_bs10_r2", "part"] == "run.json"
    assert "not valid JSON" in d.loc["horovod-gloo_np2_bs10_r2", "reason"]
    assert d.loc["horovod-gloo_np1_bs10_r1", "part"] == "run directory"
    assert "missing" in d.loc["horovod-gloo_np1_bs10_r1", "reason"]
    assert d.loc["horovod-gloo_np4_bs10_r1", "path"].endswith("rank-00003.trace.json")
    assert "empty" in d.loc["horovod-gloo_np4_bs10_r1", "reason"]
    ev_runs = set(rs.events["run_id"].astype(str))
    # the runs that are whole keep their events; damaged ones lose only what they break
    assert {"none_np1_bs10_r1", "none_np1_bs20_r1", "horovod-gloo_np2_bs10_r1"} <= ev_runs
    assert "horovod-gloo_np2_bs10_r2" not in ev_runs and "horovod-gloo_np4_bs10_r1" not in ev_runs
    # epochs need no run.json and no trace: still used
    ep_runs = set(rs.epochs["run_id"])
    assert {"horovod-gloo_np2_bs10_r2", "horovod-gloo_np4_bs10_r1"} <= ep_runs
    assert "horovod-gloo_np1_bs10_r1" not in ep_runs


def test_report_names_the_damage(exp, tmp_path):
    _damage(exp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        page = report.build_report(exp, tmp_path / "rep", static=False)
    html = page.read_text(encoding="utf-8")
    assert "Damaged runs (3 damaged or missing part(s))" in html
    for name in ("horovod-gloo_np2_bs10_r2", "horovod-gloo_np1_bs10_r1", "rank-00003.trace.json"):
        assert name in html
    assert "Every run completed" not in html
    # the studies that need events still run on the whole runs
    assert 'id="figure-breakdown"' in html and 'id="figure-scaling"' in html


def test_every_run_completed_only_when_true(data_dir, exp, tmp_path):
    (exp / "horovod-gloo_np8_bs10_r1").rename(exp / "gone")  # the failed run: not damage
    data = json.loads((exp / "experiment.json").read_text())
    data["runs"] = [r for r in data["runs"] if r["status"] == "ok"]
    (exp / "experiment.json").write_text(json.dumps(data))
    shutil.rmtree(exp / "gone")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecoveryWarning)
        page = report.build_report(exp, tmp_path / "ok", static=False)
    assert "Every run completed." in page.read_text(encoding="utf-8")
    (exp / "none_np1_bs20_r1" / "run.json").unlink()
    page = report.build_report(exp, tmp_path / "bad", static=False)
    html = page.read_text(encoding="utf-8")
    assert "Every run completed." not in html and "Damaged runs (1 " in html


def test_corrupt_experiment_json_falls_back_to_run_manifests(exp, tmp_path):
    (exp / "experiment.json").write_text("{")
    rs = _load(exp)
    assert len(rs.runs) == 7
    d = rs.damaged
    row = d[d["part"] == "experiment.json"].iloc[0]
    assert row["run_id"] is None and "not valid JSON" in row["reason"]
    page = report.build_report(exp, tmp_path / "rep", static=False)
    assert "experiment.json" in page.read_text(encoding="utf-8")


def test_unlisted_run_without_run_json_is_named(exp):
    (exp / "none_np1_bs20_r1" / "run.json").unlink()
    data = json.loads((exp / "experiment.json").read_text())
    data["runs"] = [r for r in data["runs"] if r["run_id"] != "none_np1_bs20_r1"]
    (exp / "experiment.json").write_text(json.dumps(data))
    d = _load(exp).damaged
    row = d[d["run_id"] == "none_np1_bs20_r1"].iloc[0]
    assert row["part"] == "run directory" and "not listed" in row["reason"]


def test_bad_epochs_line_drops_that_file_only(exp):
    f = exp / "horovod-gloo_np2_bs10_r1" / "rank-00001.epochs.jsonl"
    f.write_text("garbage\n" + f.read_text())
    rs = _load(exp)
    e = rs.epochs
    run = e[e["run_id"] == "horovod-gloo_np2_bs10_r1"]
    assert run["rank"].tolist() == [0, 0]  # rank 1's file left out, rank 0's kept
    d = rs.damaged
    assert d.loc[d["part"] == "epochs", "reason"].tolist() == ["line 1 is not valid JSON"]
    with pytest.raises(ReadError, match="line 1 is not valid JSON"):
        rundir.read_epochs(exp / "horovod-gloo_np2_bs10_r1")


def test_one_manifest_rule_for_runset_and_reader(exp):
    """A run.json without "format" is refused by both (it used to load into a RunSet and
    then fail on .events)."""
    run = exp / "none_np1_bs10_r1"
    m = json.loads((run / "run.json").read_text())
    del m["format"]
    (run / "run.json").write_text(json.dumps(m))
    from analysis.readers import scalescope as own

    with pytest.raises(ReadError, match="format is None"):
        own.read_manifest(run)
    with pytest.raises(ReadError, match="format is None"):
        RunSet.from_dirs(run)
    d = _load(exp).damaged
    assert d.loc[d["run_id"] == "none_np1_bs10_r1", "reason"].tolist() == [
        "format is None, expected 'scalescope.run'"]


@pytest.mark.parametrize("workers", [1, 2])
def test_damage_found_by_parallel_readers_reaches_the_damaged_table(exp, workers):
    """Runs read in a process pool (or one by one as one-run RunSets) hand their damage back:
    the 0-byte rank trace found while reading is in ``damaged``, as when read serially."""
    from analysis import scale

    _damage(exp)
    rs = _load(exp)
    rs.workers = workers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        ev = scale.load_table(rs, "events")
    assert "horovod-gloo_np4_bs10_r1" not in set(ev["run_id"].astype(str))
    trace = [d for d in rs.damage_records() if str(d.get("path", "")).endswith("rank-00003.trace.json")]
    assert len(trace) == 1 and trace[0]["run_id"] == "horovod-gloo_np4_bs10_r1" and "empty" in trace[0]["reason"]
