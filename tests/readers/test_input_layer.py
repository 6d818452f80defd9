"""One layer opens every input (issue 25, classes 1-3): gzip of any number of members, a
UTF-8 byte order mark, other encodings refused, damage in the middle costing the damaged
record only and named by what was found; values taken from files checked for type and range."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
import subprocess
import warnings
from pathlib import Path

import pandas as pd
import pytest

import analysis
from analysis import _io
from analysis.errors import ReadError, RecoveryWarning

ROOT = Path(__file__).resolve().parents[2]

#: One fixture per text reader: (format, path under tests/data).
TEXT_FIXTURES = [
    ("kineto", "kineto/tiny_rank1.pt.trace.json"),
    ("horovod", "horovod/tiny_timeline.json"),
    ("scalescope_trace", "scalescope/ddp_gloo_np2/rank-00000.trace.json"),
    ("scalescope_samples", "scalescope/ddp_gloo_np2/samples-vm.csv"),
    ("nsys_csv", "nsys/cuda_gpu_trace.csv"),
    ("nvprof_csv", "nvprof/gpu_trace.csv"),
    ("nvml", "nvml/smi_units.csv"),
    ("nccl", "nccl/h100_ddp_nccl_np1.log"),
    ("nvsmi_topo", "topo/h100_single_gpu.topo.txt"),
]
IDS = [f for f, _ in TEXT_FIXTURES]


def _read(path: Path, fmt: str | None) -> tuple[pd.DataFrame, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = analysis.read(path, fmt, cache=False)
    return df, [str(w.message) for w in caught]


def _copy(data_dir: Path, tmp: Path, rel: str, raw: bytes) -> Path:
    d = tmp / "x"
    d.mkdir(exist_ok=True)
    p = d / Path(rel).name
    p.write_bytes(raw)
    return p


def test_no_reader_decompresses_by_itself():
    """Only analysis/_io.py touches gzip or zlib (every reader goes through it)."""
    out = subprocess.run(["grep", "-rlE", r"^\s*(import|from) (gzip|zlib)", "analysis"], cwd=ROOT,
                         capture_output=True, text=True).stdout.split()
    assert out == ["analysis/_io.py"]


@pytest.mark.parametrize(("fmt", "rel"), TEXT_FIXTURES, ids=IDS)
def test_gzip_members_bom_and_plain_give_one_frame(data_dir, tmp_path, fmt, rel):
    raw = (data_dir / rel).read_bytes()
    plain, plain_msgs = _read(data_dir / rel, fmt)
    lines = raw.splitlines(keepends=True)
    for i in sorted({1, len(lines) // 2, len(lines) - 1}):
        joined = gzip.compress(b"".join(lines[:i])) + gzip.compress(b"".join(lines[i:]))  # cat a.gz b.gz
        got, _ = _read(_copy(data_dir, tmp_path, rel, joined), fmt)
        pd.testing.assert_frame_equal(got, plain)
    three = b"".join(gzip.compress(bytes(part)) for part in (lines[0], b"".join(lines[1:-1]), lines[-1]))
    pd.testing.assert_frame_equal(_read(_copy(data_dir, tmp_path, rel, three), fmt)[0], plain)
    p = _copy(data_dir, tmp_path, rel, b"\xef\xbb\xbf" + raw)
    got, msgs = _read(p, None)  # sniffed too
    pd.testing.assert_frame_equal(got, plain)
    # the same warnings as the plain file (a BOM is not "cut off" or any other damage)
    assert [m.replace(str(p), "F") for m in msgs] == [m.replace(str(data_dir / rel), "F") for m in plain_msgs]


#: Line-based inputs (and the scalescope trace, read as text): files that each began with a
#: byte order mark, joined with ``cat``, leave one at the start of a line inside.
LINE_FIXTURES = [(f, r) for f, r in TEXT_FIXTURES if f not in ("kineto", "horovod")]


@pytest.mark.parametrize(("fmt", "rel"), LINE_FIXTURES, ids=[f for f, _ in LINE_FIXTURES])
def test_byte_order_marks_inside_a_joined_file_are_removed_with_a_warning(data_dir, tmp_path, fmt, rel):
    raw = (data_dir / rel).read_bytes()
    plain, plain_msgs = _read(data_dir / rel, fmt)
    lines = raw.splitlines(keepends=True)
    for i in sorted({1, len(lines) // 2, len(lines) - 1}):
        bom = b"\xef\xbb\xbf"
        p = _copy(data_dir, tmp_path, rel, bom + b"".join(lines[:i]) + bom + b"".join(lines[i:]))
        got, msgs = _read(p, fmt)
        pd.testing.assert_frame_equal(got, plain)
        named = [m for m in msgs if "byte order mark(s) at the start of a line" in m]
        assert len(named) == 1 and str(p) in named[0] and f"(line {i + 1})" in named[0], msgs
        rest = [m.replace(str(p), "F") for m in msgs if m not in named]
        assert rest == [m.replace(str(data_dir / rel), "F") for m in plain_msgs]


@pytest.mark.parametrize(("fmt", "rel"), TEXT_FIXTURES, ids=IDS)
@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-32"])
def test_other_encodings_are_refused_by_name(data_dir, tmp_path, fmt, rel, codec):
    text = (data_dir / rel).read_bytes().decode("utf-8")
    p = _copy(data_dir, tmp_path, rel, text.encode(codec))
    for named in (fmt, None):  # sniffed: the encoding is named, not "not a format scalescope knows"
        with pytest.raises(ReadError, match=r"(UTF-16|UTF-32).*not UTF-8; convert it"):
            analysis.read(p, named, cache=False)


def test_truncated_and_trailing_gzip(tmp_path):
    body = b"".join(b"line %d\n" % i for i in range(2000))
    p = tmp_path / "a.gz"
    p.write_bytes(gzip.compress(body)[:-40])
    with pytest.warns(RecoveryWarning, match="gzip stream is truncated"):
        got = _io.read_bytes(p)
    assert body.startswith(got) and len(got) > 0
    p.write_bytes(gzip.compress(body) + b"garbage!")
    with pytest.warns(RecoveryWarning, match="not gzip data and were ignored"):
        assert _io.read_bytes(p) == body
    p.write_bytes(gzip.compress(body) + b"\0" * 512)  # zero padding: ignored, as gunzip does
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _io.read_bytes(p) == body
    assert _io.head(p, 10) == body[:10]


@pytest.mark.parametrize(("fmt", "rel"), [f for f in TEXT_FIXTURES if f[0] != "nvsmi_topo"], ids=IDS[:-1])
def test_nul_bytes_in_the_middle_cost_one_record_and_are_named(data_dir, tmp_path, fmt, rel):
    raw = (data_dir / rel).read_bytes()
    plain, _ = _read(data_dir / rel, fmt)
    lines = raw.splitlines(keepends=True)
    # a record in the second half (the longest line there: not a header, units row or bracket)
    i = max(range(len(lines) // 2, len(lines) - 1), key=lambda k: len(lines[k]))
    mid = lines[i]
    damaged = b"".join(lines[:i]) + mid[:5] + b"\0" * 16 + mid[5:] + b"".join(lines[i + 1:])
    got, msgs = _read(_copy(data_dir, tmp_path, rel, damaged), fmt)
    said = " ".join(msgs)
    assert "NUL" in said or "could not be parsed" in said, said
    assert "not terminated" not in said and "killed" not in said  # no guessed cause
    if fmt in ("kineto", "horovod"):  # a record may span lines: at most that record is lost
        assert len(plain) - 1 <= len(got) <= len(plain)
        return
    # line-based: exactly the frame of the file without the damaged line
    (tmp_path / "y").mkdir()
    without = tmp_path / "y" / Path(rel).name
    without.write_bytes(b"".join(lines[:i] + lines[i + 1:]))
    pd.testing.assert_frame_equal(got, _read(without, fmt)[0])
    assert f"offset {len(b''.join(lines[:i])) + 5:,}" in said


def test_scalescope_trace_nul_run_names_offset_and_keeps_the_rest(data_dir, tmp_path):
    rel = "scalescope/ddp_gloo_np2/rank-00000.trace.json"
    raw = (data_dir / rel).read_bytes()
    plain, _ = _read(data_dir / rel, "scalescope_trace")
    at = raw.index(b'"name":"backward"')
    damaged = raw[:at] + b"\0" * 64 + raw[at + 64:]  # a hole over a record, the end intact
    got, msgs = _read(_copy(data_dir, tmp_path, rel, damaged), "scalescope_trace")
    assert len(got) == len(plain) - 1
    assert any(f"64 byte(s) of NUL data at offset {at:,}" in m for m in msgs), msgs
    assert got["start_ns"].max() == plain["start_ns"].max()  # events after the hole kept


@pytest.mark.parametrize("ts", ['"1e"', '"abc"', '"1e999999999999999999"', "true", '{"a": 1}', "null"])
def test_scalescope_timestamps_decimal_rejects_cost_one_event(data_dir, tmp_path, ts):
    rel = "scalescope/ddp_gloo_np2/rank-00000.trace.json"
    raw = (data_dir / rel).read_bytes()
    plain, _ = _read(data_dir / rel, "scalescope_trace")
    damaged = raw.replace(b'"ts":1795356160978322.531', b'"ts":' + ts.encode(), 1)
    assert damaged != raw
    got, msgs = _read(_copy(data_dir, tmp_path, rel, damaged), "scalescope_trace")
    assert len(got) == len(plain) - 1  # that event only; never a raw decimal exception
    assert any("1 event(s) with a ts" in m for m in msgs), msgs


# -- Kineto distributedInfo and read_many's ranks ------------------------------------------------

def _kineto(data_dir, tmp_path, name, **dist) -> Path:
    src = json.loads((data_dir / "kineto/tiny_rank1.pt.trace.json").read_text())
    src["distributedInfo"] = {**src.get("distributedInfo", {}), **dist}
    p = tmp_path / name
    p.write_text(json.dumps(src))
    return p


@pytest.mark.parametrize(("rank", "world", "want", "said"), [
    (99, 8, None, "outside [0, world_size 8)"), (-1, 8, None, "outside"), (8, 8, None, "outside"),
    ("3", 8, 3, "the string '3'"), (True, 8, None, "not an integer"), (3.0, 8, None, "not an integer"),
    ({"a": 1}, 8, None, "not an integer"), (2, "eight", 2, "world_size 'eight'"), (5, 8, 5, None)])
def test_kineto_rank_is_checked_against_world_size(data_dir, tmp_path, rank, world, want, said):
    p = _kineto(data_dir, tmp_path, "trace.json", rank=rank, world_size=world)
    df, msgs = _read(p, "kineto")
    got = df["rank"].dropna().unique().tolist()
    assert got == ([] if want is None else [want])
    if said is None:
        assert not msgs
    else:
        assert any(said in m and "distributedInfo" in m and str(p) in m for m in msgs), msgs


def test_bad_kineto_rank_falls_back_to_the_file_name(data_dir, tmp_path):
    p = _kineto(data_dir, tmp_path, "rank-6.json", rank=99, world_size=8)
    df, msgs = _read(p, "kineto")
    assert df["rank"].unique().tolist() == [6]
    assert any("the rank in the file name (6) is used" in m for m in msgs)


def test_read_many_never_counts_one_rank_twice(data_dir, tmp_path):
    a = _kineto(data_dir, tmp_path, "a.json", rank=1, world_size=2)
    b = _kineto(data_dir, tmp_path, "b.json", rank=1, world_size=2)
    c = _kineto(data_dir, tmp_path, "c.json", rank=0, world_size=2)
    with pytest.warns(RecoveryWarning, match=r"b\.json: rank 1 of this kineto file is also claimed by .*a\.json"):
        df = analysis.read_many([a, b, c], cache=False, workers=1)
    one = analysis.read(a, cache=False)
    assert len(df) == 2 * len(one)
    assert set(df["run_id"].astype(str)) == {"a", "c"}


def test_read_many_keeps_one_ranks_traces_of_disjoint_spans(data_dir, tmp_path):
    """A profiler's trace per step: the same rank over spans that do not overlap is kept."""
    a = _kineto(data_dir, tmp_path, "step1.json", rank=1, world_size=2)
    later = json.loads(a.read_text())
    later["baseTimeNanoseconds"] = later["baseTimeNanoseconds"] + 10**12  # 1000 s later
    b = tmp_path / "step2.json"
    b.write_text(json.dumps(later))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecoveryWarning)
        df = analysis.read_many([a, b], cache=False, workers=1)
    assert set(df["run_id"].astype(str)) == {"step1", "step2"}


# -- SQLite exports: times checked ---------------------------------------------------------------

@pytest.mark.parametrize(("rel", "table"), [("nsys/synthetic.sqlite", "CUPTI_ACTIVITY_KIND_KERNEL"),
                                            ("nvprof/synthetic.nvprof", "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL")])
@pytest.mark.parametrize(("sql", "said", "lost"), [
    ("end = start - 100", "end before they start", 0), ("start = 'abc'", "not a time in ns", 1),
    ("end = 9223372036854775807", "not a time in ns", 1), ("start = 1.5e300", "not a time in ns", 1)])
def test_sqlite_times_are_checked(data_dir, tmp_path, rel, table, sql, said, lost):
    p = tmp_path / Path(rel).name
    shutil.copy(data_dir / rel, p)
    plain, _ = _read(data_dir / rel, None)
    con = sqlite3.connect(p)
    con.execute(f"UPDATE {table} SET {sql} WHERE rowid IN (SELECT rowid FROM {table} LIMIT 2)")
    con.commit()
    con.close()
    df, msgs = _read(p, None)
    assert any(said in m for m in msgs), msgs
    assert len(df) == len(plain) - 2 * lost
    assert (df["dur_ns"] >= 0).all() and df["dur_ns"].max() <= plain["dur_ns"].max()


# -- Horovod: a reused pid -----------------------------------------------------------------------

def test_horovod_reused_pid_keeps_spans_under_their_tensor(tmp_path):
    recs = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad_a"}},
            {"name": "ALLREDUCE", "ph": "B", "pid": 1, "ts": 100}, {"ph": "E", "pid": 1, "ts": 200},
            {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "grad_c"}},
            {"name": "ALLREDUCE", "ph": "B", "pid": 2, "ts": 110}, {"ph": "E", "pid": 2, "ts": 210},
            {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad_b"}},
            {"name": "ALLREDUCE", "ph": "B", "pid": 1, "ts": 300}, {"ph": "E", "pid": 1, "ts": 450},
            {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad_a"}},
            {"name": "ALLREDUCE", "ph": "B", "pid": 1, "ts": 500}, {"ph": "E", "pid": 1, "ts": 550}]
    p = tmp_path / "timeline.json"
    p.write_text(json.dumps(recs))
    df, msgs = _read(p, "horovod")
    got = list(zip(df["tensor"].astype(str), df["start_ns"] // 1000, df["dur_ns"] // 1000, strict=True))
    assert got == [("grad_a", 100, 100), ("grad_c", 110, 100), ("grad_b", 300, 150), ("grad_a", 500, 50)]
    assert any("2 process_name record(s) gave a pid" in m for m in msgs)


@pytest.mark.parametrize("epoch", [2**62, -5, 2**70])
def test_horovod_epoch_anchor_out_of_range_is_ignored_by_name(tmp_path, epoch):
    recs = [{"name": "process_name", "ph": "M", "pid": 0,
             "args": {"name": "grad_a", "start_time_since_epoch_in_micros": epoch}},
            {"name": "ALLREDUCE", "ph": "B", "pid": 0, "ts": 100}, {"ph": "E", "pid": 0, "ts": 200}]
    p = tmp_path / "timeline.json"
    p.write_text(json.dumps(recs))
    df, msgs = _read(p, "horovod")
    assert df["start_ns"].tolist() == [100_000]
    assert any("start_time_since_epoch_in_micros" in m for m in msgs)


def test_epochs_line_with_nul_names_what_was_found(data_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(data_dir / "scalescope/ddp_gloo_np2", run)
    f = run / "rank-00000.epochs.jsonl"
    lines = f.read_bytes().splitlines(keepends=True)
    f.write_bytes(lines[0][:4] + b"\0\0\0" + lines[0][4:] + b"".join(lines[1:]))
    with pytest.raises(ReadError, match=r"line 1 is not valid JSON \(3 byte\(s\) of NUL data at offset 4\)"):
        analysis.rundir.read_epochs(run)
    f.write_bytes(b"\xef\xbb\xbf" + b"".join(lines))
    assert len(analysis.rundir.read_epochs(run)) > 0


@pytest.mark.parametrize(("field", "value", "said"), [
    ("epoch_time_s", "NaN", "epoch_time_s is NaN, not a finite number"),
    ("epoch_time_s", "-Infinity", "epoch_time_s is -Infinity, not a finite number"),
    ("epoch_time_s", "-0.5", "epoch_time_s is -0.5, outside"),
    ("epoch_time_s", '"0.1"', 'epoch_time_s is "0.1", not a finite number'),
    ("samples", '"24"', 'samples is "24", not an integer'),
    ("samples", "true", "samples is true, not an integer"),
    ("epoch", "1.5", "epoch is 1.5, not an integer"),
    ("peak_mem_mib", "-3", "peak_mem_mib is -3, outside"),
    ("wall_ns", "[1]", "wall_ns is list, not an integer"),
    ("train_loss", '"x"', 'train_loss is "x", not a number'),
])
def test_an_epoch_value_of_the_wrong_type_or_range_costs_that_value(data_dir, tmp_path, field, value, said):
    from analysis.rundir import read_epochs
    from analysis.runset import RunSet

    run = tmp_path / "run"
    shutil.copytree(data_dir / "scalescope/ddp_gloo_np2", run)
    f = run / "rank-00001.epochs.jsonl"
    lines = f.read_text().splitlines()
    obj = json.loads(lines[1])
    obj[field] = "@"
    lines[1] = json.dumps(obj).replace('"@"', value)
    f.write_text("\n".join(lines) + "\n")
    clean = read_epochs(data_dir / "scalescope/ddp_gloo_np2")
    with pytest.warns(RecoveryWarning, match=re.escape(f"line 2: {said}")) as caught:
        got = read_epochs(run)
    assert str(f) in str(caught[0].message) and "treated as missing" in str(caught[0].message)
    assert pd.isna(got.loc[got.index[got["rank"] == 1][1], field])  # that value missing, the rest kept
    rest = [c for c in got.columns if c != field]
    pd.testing.assert_frame_equal(got[rest], clean[rest], check_dtype=False)
    with pytest.warns(RecoveryWarning):
        rs = RunSet.from_dirs([run])
        damaged = rs.damaged
        epochs = rs.epochs
    assert len(epochs) == len(clean)
    hit = damaged[damaged["part"] == "epochs"]
    assert len(hit) == 1 and said in hit["reason"].iloc[0] and "the rest of the file is used" in hit["excluded"].iloc[0]


@pytest.mark.parametrize(("rel", "col"), [("scalescope/ddp_gloo_np2/samples-vm.csv", "rank"),
                                          ("scalescope/ddp_gloo_np2/samples-vm.csv", "cpu_core"),
                                          ("gpu_run/h200_ddp_nccl_np1/samples-vm.csv", "device"),
                                          ("gpu_run/h200_ddp_nccl_np1/samples-vm.csv", "util_gpu_pct")])
@pytest.mark.parametrize("value", ["1e30", "9223372036854775807", "-5", "abc", "1.5"])
def test_a_sample_value_out_of_range_costs_that_value(data_dir, tmp_path, rel, col, value):
    lines = (data_dir / rel).read_text().splitlines(keepends=True)
    header = lines[0].strip().split(",")
    fields = lines[2].rstrip("\n").split(",")
    fields[header.index(col)] = value
    p = tmp_path / "samples-vm.csv"
    p.write_text("".join(lines[:2]) + ",".join(fields) + "\n" + "".join(lines[3:]))
    plain, _ = _read(data_dir / rel, "scalescope_samples")
    df, msgs = _read(p, "scalescope_samples")
    assert len(df) == len(plain)
    if not (col == "util_gpu_pct" and value == "1.5"):
        assert pd.isna(df[col].iloc[1]) and any(f"{col}: 1" in m for m in msgs), msgs


@pytest.mark.parametrize(("rel", "col"), [("scalescope/ddp_gloo_np2/samples-vm.csv", "cpu_util_pct"),
                                          ("gpu_run/h200_ddp_nccl_np1/samples-vm.csv", "mem_used_mib"),
                                          ("gpu_run/h200_ddp_nccl_np1/samples-vm.csv", "power_w"),
                                          ("gpu_run/h200_ddp_nccl_np1/samples-vm.csv", "sm_clock_mhz")])
def test_a_negative_sample_quantity_is_left_empty(data_dir, tmp_path, rel, col):
    """CPU %, memory, power and clocks cannot be negative (schema.SAMPLE_RANGES), in our samples
    and in nvidia-smi logs alike; 250 % CPU is two and a half cores, not damage."""
    lines = (data_dir / rel).read_text().splitlines(keepends=True)
    header = lines[0].strip().split(",")
    for value, damaged in (("-5", True), ("250", False)):
        fields = lines[2].rstrip("\n").split(",")
        fields[header.index(col)] = value
        p = tmp_path / "samples-vm.csv"
        p.write_text("".join(lines[:2]) + ",".join(fields) + "\n" + "".join(lines[3:]))
        df, msgs = _read(p, "scalescope_samples")
        assert pd.isna(df[col].iloc[1]) == damaged and any(f"{col}: 1" in m for m in msgs) == damaged, msgs


@pytest.mark.parametrize(("col", "value"), [("power.draw [W]", "-18.81 W"), ("memory.used [MiB]", "-20 MiB"),
                                            ("utilization.gpu [%]", "150 %")])
def test_nvidia_smi_values_out_of_range_are_left_empty(tmp_path, col, value):
    cols = ["timestamp", "index", "utilization.gpu [%]", "memory.used [MiB]", "power.draw [W]"]
    good = ["2025/04/24 15:58:57.879", "0", "50 %", "20 MiB", "18.81 W"]
    bad = [value if c == col else v for c, v in zip(cols, good, strict=True)]
    p = tmp_path / "smi.csv"
    p.write_text(", ".join(cols) + "\n" + ", ".join(bad) + "\n" + ", ".join(good).replace("57.879", "58.879") + "\n")
    df, msgs = _read(p, "nvml")
    target = {"power.draw [W]": "power_w", "memory.used [MiB]": "mem_used_mib", "utilization.gpu [%]": "util_gpu_pct"}[col]
    assert pd.isna(df[target].iloc[0]) and df[target].iloc[1] > 0
    assert any(f"1 {target} value(s) out of range left empty" in m for m in msgs), msgs


def test_nvml_gpu_index_out_of_range_is_left_empty(data_dir, tmp_path):
    lines = (data_dir / "nvml/smi_units.csv").read_text().splitlines(keepends=True)
    p = tmp_path / "smi.csv"
    p.write_text(lines[0] + lines[1].replace(", 0, ", ", 1e30, ", 1) + "".join(lines[2:]))
    df, msgs = _read(p, "nvml")
    assert len(df) == 3 and df["device"].isna().sum() == 1
    assert any("GPU index value(s)" in m for m in msgs)


@pytest.mark.parametrize(("old", "new"), [("rank 0 nranks 1", "rank 99999999999999999999 nranks 1"),
                                          ("rank 0 nranks 1", "rank 99 nranks 1")])
def test_nccl_numbers_out_of_range_cost_their_record(data_dir, tmp_path, old, new):
    raw = (data_dir / "nccl/h100_ddp_nccl_np1.log").read_text()
    assert old in raw
    p = tmp_path / "n.log"
    p.write_text(raw.replace(old, new, 1))
    plain, _ = _read(data_dir / "nccl/h100_ddp_nccl_np1.log", "nccl")
    df, msgs = _read(p, "nccl")
    assert len(df) == len(plain) - 1
    assert any("dropped 1 record(s) with a number out of range" in m for m in msgs), msgs


@pytest.mark.parametrize("codec", ["gzip2", "bz2", "lzma", "zip"])
def test_other_compression_is_named(data_dir, tmp_path, codec):
    import bz2
    import io
    import lzma
    import zipfile

    raw = (data_dir / "kineto/tiny_rank1.pt.trace.json").read_bytes()
    if codec == "gzip2":
        packed = gzip.compress(gzip.compress(raw))
    elif codec == "bz2":
        packed = bz2.compress(raw)
    elif codec == "lzma":
        packed = lzma.compress(raw)
    else:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("t.json", raw)
        packed = buf.getvalue()
    p = tmp_path / "t.pt.trace.json"
    p.write_bytes(packed)
    for fmt in ("kineto", None):
        with pytest.raises(ReadError, match="which scalescope does not read; decompress it"):
            analysis.read(p, fmt, cache=False)


@pytest.mark.parametrize(("fmt", "rel"), TEXT_FIXTURES[:3], ids=IDS[:3])
@pytest.mark.parametrize(("tail", "said"), [(b"\0" * 4096, "4,096 byte(s) of NUL data after the end"),
                                            (b"\n\0\0\0\0", "4 byte(s) of NUL data after the end"),
                                            (b"garbage\n", "7 byte(s) after the")])
def test_junk_after_a_complete_trace_is_not_a_cut(data_dir, tmp_path, fmt, rel, tail, said):
    """Zero fill after the end (a crash on an extended file) or text appended after a
    complete trace: every record kept, the junk named, never "not terminated"/"cut off"."""
    plain, _ = _read(data_dir / rel, fmt)
    got, msgs = _read(_copy(data_dir, tmp_path, rel, (data_dir / rel).read_bytes() + tail), fmt)
    pd.testing.assert_frame_equal(got, plain)
    said_all = " ".join(msgs)
    assert said in said_all and "not terminated" not in said_all and "cut off" not in said_all, msgs


@pytest.mark.parametrize("key", ["stream", "correlation"])
@pytest.mark.parametrize("value", ["x", "nan", -1, 2**70, 1.5, [1]])
def test_kineto_ids_that_are_not_ids_are_named(data_dir, tmp_path, key, value):
    src = json.loads((data_dir / "kineto/tiny_rank1.pt.trace.json").read_text())
    kernel = next(e for e in src["traceEvents"] if e.get("cat") == "kernel")
    kernel["args"][key] = value
    p = tmp_path / "t.json"
    p.write_text(json.dumps(src))
    df, msgs = _read(p, "kineto")
    assert len(df) == len(_read(data_dir / "kineto/tiny_rank1.pt.trace.json", "kineto")[0])
    assert any("args.stream/args.correlation value(s)" in m for m in msgs), msgs
    assert (df["stream"].dropna() >= 0).all() and (df["correlation"].dropna() >= 0).all()
