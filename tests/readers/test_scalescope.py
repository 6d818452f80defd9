"""Reader of scalescope's own files: traces, samples, manifests and whole run directories."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

import analysis
from analysis import rundir
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers import REGISTRY
from analysis.readers import rundir as run_reader
from analysis.readers import scalescope as own


@pytest.fixture
def run_dir(data_dir) -> Path:
    return data_dir / "scalescope" / "ddp_gloo_np2"


@pytest.fixture
def run_copy(run_dir, tmp_path) -> Path:
    dst = tmp_path / "ddp_gloo_np2"
    shutil.copytree(run_dir, dst)
    return dst


def test_registered(run_dir):
    analysis.formats()
    assert REGISTRY["scalescope_trace"].kind == "events"
    assert REGISTRY["scalescope_samples"].kind == "samples"
    assert analysis.sniff(run_dir / "rank-00000.trace.json") == "scalescope_trace"
    assert analysis.sniff(run_dir / "samples-vm.csv") == "scalescope_samples"
    assert not own.sniff_trace(run_dir / "run.json")
    assert not own.sniff_samples(run_dir / "rank-00000.trace.json")


def test_run_dir_known_answers(run_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecoveryWarning)  # a clean run: nothing recovered
        df = analysis.read_many(run_dir)
    analysis.validate_events(df)
    assert set(df["run_id"]) == {"ddp_gloo_np2"}
    assert sorted(df["rank"].unique()) == [0, 1]
    expected = {"step": 6, "forward": 6, "backward": 6, "optimizer": 6, "data": 8,
                "epoch": 2, "allreduce": 11}
    for rank in (0, 1):
        counts = df[df["rank"] == rank]["name"].value_counts()
        assert {k: int(counts[k]) for k in expected} == expected
        steps = df[(df["rank"] == rank) & (df["name"] == "step")]
        assert list(steps["step"]) == [0, 1, 2, 3, 4, 5]
        assert list(steps["epoch"]) == [0, 0, 0, 1, 1, 1]
    comm = df[df["kind"] == "comm"]
    assert set(comm["cat"]) == {"ddp_hook"} and set(comm["name"]) == {"allreduce"}
    assert (comm.groupby(["rank", "step"])["bytes"].sum() == 6928).all()
    assert set(comm[comm["step"] == 0]["tensor"]) == {"bucket0"}
    later = comm[comm["step"] > 0].groupby("tensor", observed=True)["bytes"].unique()
    assert [list(v) for v in later] == [[4752], [2176]]
    assert set(df[df["kind"] == "phase"]["cat"]) == {"phase"}
    assert set(df["host"]) == {"vm"}
    assert list(df.groupby("rank")["local_rank"].first()) == [0, 1]
    for _, g in df.groupby("rank"):
        assert g["start_ns"].is_monotonic_increasing
    assert (df["dur_ns"] >= 0).all()


def test_clock_offsets_are_applied(run_copy):
    plain = {r: own.read_trace(run_copy / f"rank-0000{r}.trace.json") for r in (0, 1)}
    manifest = json.loads((run_copy / "run.json").read_text())
    assert manifest["clock"]["offsets_ns"] == {"1": 5173}
    df = run_reader.read_run_dir(run_copy)
    r1 = df[df["rank"] == 1].reset_index(drop=True)
    assert (r1["start_ns"] - plain[1]["start_ns"] == 5173).all()
    r0 = df[df["rank"] == 0].reset_index(drop=True)
    assert (r0["start_ns"] == plain[0]["start_ns"]).all()
    manifest["clock"]["offsets_ns"] = {"1": -1_000_000_007}
    (run_copy / "run.json").write_text(json.dumps(manifest))
    df2 = run_reader.read_run_dir(run_copy)
    r1b = df2[df2["rank"] == 1].reset_index(drop=True)
    assert (r1b["start_ns"] - plain[1]["start_ns"] == -1_000_000_007).all()


def test_samples_and_epochs(run_dir):
    s = analysis.read_many(run_dir, kind="samples")
    analysis.validate_samples(s)
    assert set(s["source"]) == {"scalescope_samples"} and set(s["host"]) == {"vm"}
    ticks = s["ts_ns"].nunique()
    assert ticks > 0
    assert (s[s["rank"].notna()].groupby("ts_ns").size() == 2).all()  # 2 local ranks per tick
    assert sorted(s["rank"].dropna().unique()) == [0, 1]
    assert set(s["cpu_core"].dropna().unique()) == {0, 1}
    assert s["util_gpu_pct"].isna().all()
    e = rundir.read_epochs(run_dir)
    assert list(e["rank"]) == [0, 0, 1, 1] and list(e["epoch"]) == [0, 1, 0, 1]
    assert set(e["samples"]) == {24} and (e["epoch_time_s"] > 0).all()
    assert set(e["peak_mem_kind"]) == {"rss"} and set(e["run_id"]) == {"ddp_gloo_np2"}


def test_reading_twice_gives_equal_frames(run_dir):
    a = analysis.read(run_dir / "rank-00001.trace.json")
    b = analysis.read(run_dir / "rank-00001.trace.json")
    assert a.equals(b)


def test_exact_ns_from_microsecond_decimals(tmp_path):
    p = tmp_path / "rank-00000.trace.json"
    p.write_text(
        '[\n{"name":"scalescope_clock","ph":"M","pid":0,"tid":0,"args":{"rank":0,'
        '"local_rank":0,"host":"h","os_pid":1,"wall_ns":0,"mono_ns":0,"format_version":1}},\n'
        # 1795355991049696.241 µs is not exactly representable as a float64
        '{"name":"forward","cat":"phase","ph":"X","ts":1795355991049696.241,"dur":0.001,'
        '"pid":0,"tid":7,"args":{"step":3,"epoch":1}},\n'
        '{"name":"x","cat":"user","ph":"X","ts":17,"dur":2,"pid":0,"tid":7,"args":{}}\n]\n'
    )
    df = analysis.read(p)
    assert list(df["start_ns"]) == [17_000, 1_795_355_991_049_696_241]
    assert list(df["dur_ns"]) == [2_000, 1]
    assert list(df["kind"]) == ["range", "phase"] and list(df["cat"]) == ["user", "phase"]
    assert df["step"].iloc[1] == 3 and df["epoch"].iloc[1] == 1


def test_truncated_trace_recovers_with_bytes_lost(run_dir, tmp_path):
    raw = (run_dir / "rank-00000.trace.json").read_bytes()
    full = analysis.read(run_dir / "rank-00000.trace.json")
    lines = raw.split(b"\n")
    # keep the first 12 lines (header + 8 events) and 25 bytes of the next record
    kept = b"\n".join(lines[:12]) + b"\n"
    cut = kept + lines[12][:25]
    p = tmp_path / "rank-00000.trace.json"
    p.write_bytes(cut)
    with pytest.warns(RecoveryWarning, match="25 byte"):
        df = analysis.read(p)
    n_meta = sum(1 for ln in lines[:12] if b'"ph":"M"' in ln)
    assert len(df) == 12 - 1 - n_meta  # minus the '[' line and the metadata records
    assert set(df["name"]).issubset(set(full["name"]))
    # cut exactly after a record: no bytes lost, still a warning (not terminated)
    p.write_bytes(kept)
    with pytest.warns(RecoveryWarning, match=r"not terminated.* 0 byte"):
        assert len(analysis.read(p)) == len(df)


def test_damaged_traces_raise_read_error(tmp_path):
    p = tmp_path / "t.trace.json"
    p.write_text('{"traceEvents": []}')
    with pytest.raises(ReadError, match="does not start with a JSON array"):
        own.read_trace(p)
    p.write_text('[\n{"name":"forward","ph":"X","ts":1,"dur":1,"pid":0},\n]')
    with pytest.raises(ReadError, match="no scalescope_clock"):
        own.read_trace(p)
    p.write_text('[\n{"name":"scalescope_clock","ph":"M","args":{"format_version":2}},\n')
    with pytest.raises(ReadError, match="format_version 2 is newer"):
        own.read_trace(p)
    p.write_text("[\n{garbage\n")
    with pytest.raises(ReadError, match=str(p.name)):
        own.read_trace(p)


def test_manifest_validation(run_copy):
    m = rundir.read_manifest(run_copy)
    assert m["world_size"] == 2 and m["framework"] == "ddp" and m["backend"] == "gloo"
    assert m["sampler"]["kind"] == "cpu" and "NVML" in m["sampler"]["nvml_unavailable_reason"]
    newer = dict(m, format_version=2)
    (run_copy / "run.json").write_text(json.dumps(newer))
    with pytest.raises(ReadError, match="format_version 2 is newer than this scalescope reads"):
        rundir.read_manifest(run_copy)
    with pytest.raises(ReadError, match="format_version 2"):
        analysis.read_many(run_copy)
    (run_copy / "run.json").write_text(json.dumps(dict(m, format="something.else")))
    with pytest.raises(ReadError, match=r"expected 'scalescope\.run'"):
        rundir.read_manifest(run_copy / "run.json")
    (run_copy / "run.json").write_text("{not json")
    with pytest.raises(ReadError, match="not valid JSON"):
        rundir.read_manifest(run_copy)


def test_missing_rank_trace_warns(run_copy):
    (run_copy / "rank-00001.trace.json").unlink()
    with pytest.warns(RecoveryWarning, match=r"no trace for rank\(s\) \[1\]"):
        df = run_reader.read_run_dir(run_copy)
    assert set(df["rank"]) == {0}


def test_horovod_timeline_is_read_or_skipped_with_a_warning(run_copy, corpus_dir):
    src = corpus_dir / "horovod_timeline" / "alcf__timeline_cpu_n1.json"
    shutil.copy(src, run_copy / "horovod_timeline.json")
    analysis.formats()
    if "horovod" not in REGISTRY:
        with pytest.warns(RecoveryWarning, match="'horovod' reader is not available"):
            df = run_reader.read_run_dir(run_copy)
        assert set(df["source"]) == {"scalescope_trace"}
    else:
        df = run_reader.read_run_dir(run_copy)
        assert {"scalescope_trace", "horovod"} <= set(df["source"])


def test_truncated_samples_line_is_dropped_with_a_warning(run_dir, tmp_path):
    raw = (run_dir / "samples-vm.csv").read_bytes()
    p = tmp_path / "samples-vm.csv"
    p.write_bytes(raw + b"1795355991049696241,vm,,1,12.")
    full = analysis.read(run_dir / "samples-vm.csv")
    with pytest.warns(RecoveryWarning, match="dropped 29 byte"):
        df = analysis.read(p)
    assert len(df) == len(full)
    p.write_bytes(b"time,host\n1,2\n")
    with pytest.raises(ReadError, match="unexpected header"):
        own.read_samples(p)
