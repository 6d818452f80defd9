"""The run directory's layout is known on the analysis side by :mod:`analysis.rundir` only;
``instrumentation/`` (which writes it and may not import ``analysis``) keeps its own names.
These tests check that the two agree, and that every kind of directory is told apart once."""

from __future__ import annotations

import json
from fnmatch import fnmatch
from pathlib import Path

import pytest

from analysis import rundir
from instrumentation import experiment, horovod_timeline, manifest, paths, recorder, torch_profiler


def test_the_two_sides_name_the_same_files(tmp_path):
    assert paths.RUN_MANIFEST == rundir.RUN_MANIFEST
    assert paths.EXPERIMENT_MANIFEST == rundir.EXPERIMENT_MANIFEST
    assert horovod_timeline.FILE_NAME == rundir.TIMELINE
    assert manifest.FORMAT == rundir.RUN_FORMAT
    assert experiment.EXPERIMENT_FORMAT == rundir.EXPERIMENT_FORMAT
    assert manifest.FORMAT_VERSION == experiment.FORMAT_VERSION == rundir.FORMAT_VERSION
    for rank in (0, 7, 12345):
        trace = recorder.trace_path(tmp_path, rank)
        assert fnmatch(trace.name, rundir.TRACE_GLOB) and fnmatch(trace.name + ".gz", rundir.TRACE_GLOB)
        assert fnmatch(f"rank-{rank:05d}.epochs.jsonl", rundir.EPOCHS_GLOB)  # instrumentation/run.py's name
        assert fnmatch(torch_profiler.trace_name(rank), rundir.TORCH_PROFILER_GLOB)
        assert not fnmatch(trace.name, rundir.EPOCHS_GLOB)
    assert fnmatch("samples-node01.csv", rundir.SAMPLES_GLOB)


def test_the_files_of_a_run_are_listed_by_the_layout(tmp_path):
    for rank in (1, 0):
        recorder.trace_path(tmp_path, rank).write_text("[]")
        (tmp_path / f"rank-{rank:05d}.epochs.jsonl").write_text("")
    (tmp_path / "rank-00002.trace.json.gz").write_bytes(b"")
    (tmp_path / "samples-a.csv").write_text("")
    (tmp_path / rundir.TORCH_PROFILER_DIR).mkdir()
    (tmp_path / rundir.TORCH_PROFILER_DIR / torch_profiler.trace_name(0)).write_text("")
    assert [f.name for f in rundir.trace_files(tmp_path)] == [
        "rank-00000.trace.json", "rank-00001.trace.json", "rank-00002.trace.json.gz"]
    assert [f.name for f in rundir.epoch_files(tmp_path)] == ["rank-00000.epochs.jsonl", "rank-00001.epochs.jsonl"]
    assert [f.name for f in rundir.sample_files(tmp_path)] == ["samples-a.csv"]
    assert [(f.name, fmt) for f, fmt in rundir.profiler_files(tmp_path)] == [(torch_profiler.trace_name(0), "kineto")]


def _manifest(d: Path, name: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(json.dumps({}))


@pytest.mark.parametrize(("layout", "kind"), [
    ({"run.json": True}, "run"),
    ({"experiment.json": True, "r1/run.json": True}, "experiment"),
    ({"r1/run.json": True, "r2/run.json": True}, "runs"),
    ({"e1/experiment.json": True, "e2/experiment.json": True}, "experiments"),
    ({"r1/run.json": True, "e1/experiment.json": True}, "runs"),  # run directories first
    ({"notes.txt": True}, None),
])
def test_what_kind_of_directory_is_decided_once(tmp_path, layout, kind):
    for rel in layout:
        _manifest(tmp_path / Path(rel).parent, Path(rel).name)
    assert rundir.kind_of(tmp_path) == kind
    assert rundir.kind_of(tmp_path / "missing") is None


def test_find_max_records_read_the_experiment_manifest(tmp_path):
    import pandas as pd

    (tmp_path / "e").mkdir()
    (tmp_path / "e" / rundir.EXPERIMENT_MANIFEST).write_text(json.dumps(
        {"find_max": [{"name": "batch", "largest_ok": 64}, "not a record"]}))
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / rundir.EXPERIMENT_MANIFEST).write_text("[1, 2]")  # not an object: no records
    runs = pd.DataFrame({"path": [str(tmp_path / "e" / "r1"), str(tmp_path / "f" / "r1"), None]})
    assert rundir.find_max_records(runs) == [{"name": "batch", "largest_ok": 64}]
