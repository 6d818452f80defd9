"""A damaged experiment (a copy of tests/data/experiment_small, damaged in place) still loads
and still gets a report: every damaged or missing part is named with its reason and left out
only of the data it breaks (issue 16, part 5)."""

from __future__ import annotations

import json
import shutil
import warnings
from html import unescape

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
    with pytest.raises(ReadError, match="format is None"):
        rundir.read_manifest(run)
    with pytest.raises(ReadError, match="format is None"):
        RunSet.from_dirs(run)
    d = _load(exp).damaged
    assert d.loc[d["run_id"] == "none_np1_bs10_r1", "reason"].tolist() == [
        "format is None, expected 'scalescope.run'"]


@pytest.mark.parametrize("workers", [1, 2])
def test_damage_found_by_parallel_readers_reaches_the_damaged_table(exp, workers):
    """Runs read in a process pool (or one by one as one-run RunSets) hand their damage back:
    the 0-byte rank trace found while reading is in ``damaged``, as when read serially."""
    _damage(exp)
    rs = _load(exp)
    rs.workers = workers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        ev = rs.events
        damaged = rs.damaged
    assert "horovod-gloo_np4_bs10_r1" not in set(ev["run_id"].astype(str))
    trace = damaged[damaged["path"].astype(str).str.endswith("rank-00003.trace.json")]
    assert len(trace) == 1 and trace["run_id"].iloc[0] == "horovod-gloo_np4_bs10_r1"
    assert "empty" in trace["reason"].iloc[0]


# -- manifests with valid JSON and wrong types (issue 25, class 4) ----------------------------------

#: (run, field path, value): a field of the wrong type or out of range in a valid JSON manifest.
WRONG_FIELDS = [
    ("horovod-gloo_np2_bs10_r1", ("gpu",), "A100"),
    ("none_np1_bs10_r1", ("config", "labels"), ["a", "b"]),
    ("horovod-gloo_np1_bs10_r1", ("world_size",), 1e20),
    ("horovod-gloo_np2_bs10_r2", ("world_size",), "two"),
    ("horovod-gloo_np4_bs10_r1", ("world_size",), -3),
    ("none_np1_bs20_r1", ("world_size",), 0),
]


def _set_field(exp, run, keys, value) -> None:
    f = exp / run / "run.json"
    data = json.loads(f.read_text())
    node = data
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    f.write_text(json.dumps(data))


def test_wrong_field_types_are_damaged_runs_never_an_abort(exp, tmp_path):
    for run, keys, value in WRONG_FIELDS:
        _set_field(exp, run, keys, value)
    with pytest.warns(RecoveryWarning, match="run.json fields damaged"):
        rs = RunSet.from_dirs(exp)
    d = rs.damaged.set_index("run_id")
    for run, keys, _ in WRONG_FIELDS:
        assert ".".join(keys) in d.loc[[run], "reason"].str.cat(), run
        assert (d.loc[[run], "part"] == "run.json fields").all()
    runs = rs.runs.set_index("run_id")
    # a bad world_size is never used: the sweep's np (experiment.json) stands in, never -3 or 1e20
    assert runs["n_ranks"].dropna().between(1, 8).all()
    assert runs.loc["horovod-gloo_np4_bs10_r1", "n_ranks"] == 4
    assert runs.loc["horovod-gloo_np2_bs10_r1", "gpu_model"] is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        page = report.build_report(exp, tmp_path / "rep", static=False)
    html = unescape(page.read_text(encoding="utf-8"))
    assert "Damaged runs (" in html and "world_size is -3" in html and 'gpu is "A100"' in html
    assert "efficiency" in html and "-0.38" not in html
    assert "Traceback (most recent call last):\n  File" not in html  # no study failed


def test_unknown_world_size_without_fallback_leaves_the_run_out(exp, tmp_path):
    """No experiment.json and no config.np: the run cannot be placed on a ranks axis, so it
    is listed as damaged and left out of the studies (which never fail on it)."""
    (exp / "experiment.json").unlink()
    for run, ws in (("horovod-gloo_np2_bs10_r1", "two"), ("horovod-gloo_np4_bs10_r1", 0)):
        _set_field(exp, run, ("world_size",), ws)
        _set_field(exp, run, ("config",), {"np": [2]})
    rs = _load(exp)
    d = rs.damaged
    assert set(d.loc[d["reason"].str.contains("number of ranks is unknown"), "run_id"]) == {
        "horovod-gloo_np2_bs10_r1", "horovod-gloo_np4_bs10_r1"}
    assert "horovod-gloo_np2_bs10_r1" not in set(rs.usable_runs()["run_id"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        page = report.build_report(exp, tmp_path / "rep", static=False)
    assert "Traceback (most recent call last):\n  File" not in page.read_text(encoding="utf-8")


def test_manifest_schema_keeps_valid_manifests_whole(data_dir):
    for f in sorted(data_dir.rglob("run.json")):
        problems: list[str] = []
        assert rundir.read_manifest(f, problems) == json.loads(f.read_text()), f
        assert problems == []


def test_single_run_with_wrong_fields_reads_with_a_warning(exp):
    run = exp / "horovod-gloo_np2_bs10_r1"
    _set_field(exp, run.name, ("ranks",), [{"rank": "x"}, {"rank": 1, "host": 5}])
    _set_field(exp, run.name, ("clock",), {"offsets_ns": {"1": "z"}})
    with pytest.warns(RecoveryWarning, match=r"ranks\[0\]\.rank is \"x\", not an integer"):
        m = rundir.read_manifest(run)
    assert m["ranks"] == [{"rank": None}, {"rank": 1, "host": None}] and m["clock"] == {"offsets_ns": {}}
    import analysis

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        df = analysis.read_many(run, cache=False, workers=1)
    assert set(df["rank"].dropna().astype(int)) == {0, 1}
