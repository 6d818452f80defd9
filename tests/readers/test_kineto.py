"""Kineto (PyTorch profiler) reader: known answers on tests/data/kineto and the corpus."""

from __future__ import annotations

import gzip
import json
import re
import warnings
from pathlib import Path

import pandas as pd
import pytest

from analysis.errors import ReadError, RecoveryWarning
from analysis.readers import horovod, kineto
from analysis.schema import validate_events

BASE = 1711964646000000000
DLRM = "kineto/param_dlrm_8rank"
# rows = events with ph X/i (counted with stdlib json; see tests/data/kineto/README.md)
DLRM_ROWS = {0: 2462, 1: 2529, 2: 2451, 3: 2554, 4: 2472, 5: 2442, 6: 2453, 7: 2442}


def _read(path, n_warnings=0):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = kineto.read(path)
    rec = [w for w in caught if issubclass(w.category, RecoveryWarning)]
    assert len(rec) == n_warnings, [str(w.message) for w in rec]
    validate_events(df)
    return df, [str(w.message) for w in rec]


def _json_events(path: Path) -> list[dict]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    obj = json.loads(raw)
    return obj["traceEvents"] if isinstance(obj, dict) else obj


# --------------------------------------------------------------------------------------
# tiny fixtures


@pytest.mark.parametrize("name", ["tiny_rank1.pt.trace.json", "tiny_rank1.pt.trace.json.gz"])
def test_tiny_known_answers(data_dir, name):
    df, _ = _read(data_dir / "kineto" / name)
    assert len(df) == 13  # 16 events minus 2 flows and 1 M
    assert df["run_id"].unique().tolist() == ["tiny_rank1"]
    assert set(df["rank"]) == {1} and set(df["host"]) == {"node7"}
    by = df.set_index("name")
    # baseTimeNanoseconds + ts (µs, 3 decimals) exactly, although ts ~ 4.46e12 µs
    assert by.loc["ProfilerStep#3", "start_ns"] == BASE + 4458676522000001
    assert by.loc["aten::mm", "start_ns"] == BASE + 4458676522010123
    assert by.loc["aten::mm", "dur_ns"] == 20457
    assert by.loc["Record Window End", "start_ns"] == BASE + 4458676524000999
    kinds = by["kind"].to_dict()
    assert kinds == {
        "PyTorch Profiler (0)": "other", "ProfilerStep#3": "range", "aten::mm": "cpu_op",
        "cudaLaunchKernel": "runtime", "ampere_sgemm_64x32_tn": "compute",
        "record_param_comms": "comm",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)": "comm",
        "Memcpy HtoD (Pinned -> Device)": "memcpy",
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__": "data",
        "train.py(12): step": "other", "[memory]": "marker", "Record Window End": "marker",
    }
    nccl = by.loc["ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"]
    assert nccl["bytes"] == 2000 and nccl["device"] == 0 and nccl["stream"] == 20
    assert pd.isna(nccl["pid"]) and pd.isna(nccl["tid"])
    assert nccl["correlation"] == 78 and nccl["step"] == 3  # step via its launch
    assert by.loc["record_param_comms", "bytes"] == 2000
    assert by.loc["Memcpy HtoD (Pinned -> Device)", "bytes"] == 4096
    assert by.loc["aten::mm", "pid"] == 4242 and by.loc["aten::mm", "tid"] == 4243
    assert by.loc["aten::mm", "step"] == 3
    assert pd.isna(by.loc["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "step"])
    assert pd.isna(by.loc["PyTorch Profiler (0)", "pid"])  # string pid "Spans"
    assert by.loc["[memory]", "dur_ns"] == 0
    assert df["start_ns"].is_monotonic_increasing


def test_legacy_categories_and_rank_from_name(data_dir):
    df, _ = _read(data_dir / "kineto" / "worker3.legacy.json")
    assert set(df["rank"]) == {3}  # no distributedInfo: from "worker3"
    assert df["kind"].tolist() == ["cpu_op", "runtime", "compute", "memcpy"]
    # no baseTimeNanoseconds: ts is epoch µs
    assert df["start_ns"].tolist()[0] == 1610000000000100 * 1000
    k = df[df["name"] == "add_kernel"].iloc[0]
    assert k["device"] == 0 and k["stream"] == 7  # tid "stream 7"
    assert df.loc[df["name"] == "Memcpy DtoH", "bytes"].tolist() == [16]


def test_sniff(data_dir, tmp_path):
    for f in (data_dir / "kineto").glob("*.json*"):
        assert kineto.sniff(f), f
        assert not horovod.sniff(f), f
    legacy = tmp_path / "old.json"
    legacy.write_text('[{"name": "aten::add", "ph": "X", "cat": "Operator", "ts": 1, "dur": 1, '
                      '"pid": 1, "tid": 1}]')
    assert kineto.sniff(legacy) and not horovod.sniff(legacy)
    assert not kineto.sniff(data_dir / "kineto" / "README.md")


def test_exact_ns_beyond_float_range(tmp_path):
    # above 2**43 µs float64 cannot hold every ns: the chunk is re-read as text
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1,'
                 ' "ts": 9999999999999.999, "dur": 0.001}, {"ph": "X", "cat": "cpu_op", "name": '
                 '"b", "pid": 1, "tid": 1, "ts": 1234567890123456.789, "dur": 1.5}, {"ph": "X", "cat": "cpu_op", "name": "c", '
                 '"pid": 1, "tid": 1, "ts": 587519266351678.938, "dur": 2}]}')
    df, _ = _read(p)
    # 587519266351678.938 decodes to the float 587519266351679.0: only the text has the ns
    assert df["start_ns"].tolist() == [9999999999999999, 587519266351678938,
                                       1234567890123456789]
    assert df["dur_ns"].tolist() == [1, 2000, 1500]


# --------------------------------------------------------------------------------------
# bad input


def test_bad_inputs(tmp_path):
    e = tmp_path / "e.json"
    e.write_bytes(b"")
    with pytest.raises(ReadError, match="empty"):
        kineto.read(e)
    gz = tmp_path / "c.json.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00" + b"garbage" * 20)
    with pytest.raises(ReadError, match="corrupt gzip"):
        kineto.read(gz)
    nt = tmp_path / "n.json"
    nt.write_text('{"foo": 1}')
    with pytest.raises(ReadError, match="no 'traceEvents'"):
        kineto.read(nt)
    bad = tmp_path / "b.json"
    bad.write_text('{"traceEvents": 5}')
    with pytest.raises(ReadError, match="not a JSON array"):
        kineto.read(bad)
    txt = tmp_path / "t.json"
    txt.write_text("hello")
    with pytest.raises(ReadError, match="not JSON"):
        kineto.read(txt)


def test_crashed_tmp_file(data_dir, tmp_path):
    raw = (data_dir / "kineto" / "tiny_rank1.pt.trace.json").read_bytes()
    cut = raw.index(b'{"ph": "X", "cat": "python_function"') + 20
    p = tmp_path / "node7_4242.1.pt.trace.json.tmp"
    p.write_bytes(raw[:cut])
    df, msgs = _read(p, n_warnings=1)
    assert "cut off" in msgs[0] and "1 incomplete record" in msgs[0]
    assert len(df) == 9  # events before the cut (flows excluded)
    assert set(df["rank"]) == {1}  # distributedInfo precedes traceEvents


def test_trailing_comma_before_the_closing_bracket(data_dir, tmp_path):
    # "...},\n  ]" then more keys: every record and the metadata after the list are read,
    # and the one warning names the file and the trailing comma (not a cut-off file)
    raw = (data_dir / "kineto" / "tiny_rank1.pt.trace.json").read_text()
    base = '  "baseTimeNanoseconds": 1711964646000000000,\n'
    assert base in raw and raw.rstrip().endswith('"\n}')
    moved = raw.replace(base, "").rstrip()[:-1].rstrip() + ',\n' + base.rstrip().rstrip(",") + "\n}\n"
    valid = tmp_path / "valid.pt.trace.json"
    valid.write_text(moved)
    comma = tmp_path / "comma.pt.trace.json"
    last = moved.rindex("}\n  ],")
    comma.write_text(moved[: last + 1] + "," + moved[last + 1 :])
    expected, _ = _read(valid)
    df, msgs = _read(comma, n_warnings=1)
    assert str(comma) in msgs[0] and "trailing comma" in msgs[0]
    assert "cut off" not in msgs[0] and "not terminated" not in msgs[0]
    pd.testing.assert_frame_equal(df.drop(columns="run_id"), expected.drop(columns="run_id"))
    assert df["start_ns"].min() > BASE  # baseTimeNanoseconds, written after the list, is used
    assert set(df["rank"]) == {1}


def test_truncated_gzip_one_warning(data_dir, tmp_path):
    raw = (data_dir / "kineto" / "tiny_rank1.pt.trace.json.gz").read_bytes()
    p = tmp_path / "t.json.gz"
    p.write_bytes(raw[: len(raw) * 2 // 3])
    df, msgs = _read(p, n_warnings=1)
    assert "gzip stream is truncated" in msgs[0]
    assert 0 < len(df) < 13


def test_non_utf8_name(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op\xfe", "pid": 1, '
                  b'"tid": 1, "ts": 1.0, "dur": 1.0}]}')
    df, msgs = _read(p, n_warnings=1)
    assert "not valid UTF-8" in msgs[0]
    assert df["name"].tolist() == ["op\ufffd"]


def test_every_truncation_recovers_or_raises(data_dir, tmp_path):
    src = data_dir / "kineto" / "tiny_rank1.pt.trace.json"
    raw = src.read_bytes()
    full = len(kineto.read(src))
    p = tmp_path / "cut.json"
    for cut in sorted(set(range(0, len(raw), 9)) | set(range(len(raw) - 80, len(raw)))):
        p.write_bytes(raw[:cut])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                df = kineto.read(p)
            except ReadError:
                continue
        validate_events(df)
        assert len(df) <= full
        rec = [w for w in caught if issubclass(w.category, RecoveryWarning)]
        assert len(rec) == (0 if not raw[cut:].strip() else 1), (cut, [str(w.message) for w in caught])


# --------------------------------------------------------------------------------------
# corpus


@pytest.mark.corpus
def test_dlrm_8_ranks(corpus_dir):
    files = sorted((corpus_dir / DLRM).glob("worker*.json"))
    assert len(files) == 8
    for f in files:
        df, _ = _read(f)
        rank = int(re.match(r"worker(\d)", f.name).group(1))
        assert set(df["rank"]) == {rank}  # from distributedInfo (file name agrees)
        assert len(df) == DLRM_ROWS[rank]
        ev = _json_events(f)
        assert len(df) == sum(e.get("ph") in ("X", "i") for e in ev)
        assert set(df["step"].dropna()) == {10}  # ProfilerStep#10 in every rank
        n_kernels = sum(e.get("cat") == "kernel" for e in ev)
        assert (df["cat"] == "kernel").sum() == n_kernels
        assert (df["device"].notna() == df["cat"].isin(["kernel", "gpu_memcpy", "gpu_memset"])).all()


@pytest.mark.corpus
def test_nccl_kernels_with_collective_metadata(corpus_dir):
    path = corpus_dir / "kineto/hta__nccl_data.json.gz"
    df, _ = _read(path)
    assert set(df["rank"]) == {0}
    ev = _json_events(path)
    coll = [e for e in ev if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})]
    assert len(coll) == 21
    sizes = {"Float": 4, "Char": 1, "BFloat16": 2, "Half": 2, "Long": 8, "Int": 4, "Byte": 1}
    exp = sum(e["args"]["In msg nelems"] * sizes[e["args"]["dtype"]] for e in coll)
    assert exp == 307323096
    k = df[(df["cat"] == "kernel") & (df["kind"] == "comm")]
    assert len(k) == 21 and k["bytes"].notna().all() and k["bytes"].sum() == exp
    assert set(k["stream"]) == {e["args"]["stream"] for e in coll}
    assert set(df["step"].dropna()) == {4, 5, 6}
    # exact ns: baseTimeNanoseconds + ts*1000 with ts as written (3 decimals)
    first = min((e for e in ev if e.get("ph") == "X"), key=lambda e: e["ts"])
    whole, frac = repr(first["ts"]).split(".")
    exp_ns = 1711964646000000000 + int(whole) * 1000 + int((frac + "000")[:3])
    assert df["start_ns"].min() == exp_ns


@pytest.mark.corpus
def test_cpu_only_gloo(corpus_dir):
    path = corpus_dir / "kineto/hta__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    df, _ = _read(path)
    assert set(df["rank"]) == {34}
    assert df["device"].isna().all()
    ev = _json_events(path)
    gloo = [e for e in ev if e.get("name") == "gloo:all_reduce"]
    assert len(gloo) == 10
    rows = df[df["name"] == "gloo:all_reduce"]
    assert len(rows) == 10 and set(rows["kind"]) == {"comm"}
    exp = sorted(e["args"]["Input Dims"][0][0] * 4 for e in gloo)  # float inputs
    assert sorted(rows["bytes"].tolist()) == exp
    assert (df["name"] == "c10d::allreduce_").sum() == 10
    assert set(df.loc[df["name"] == "c10d::allreduce_", "kind"]) == {"comm"}
    assert set(df["step"].dropna()) == {551, 552, 553, 554, 555}


@pytest.mark.corpus
def test_rocm_trace(corpus_dir):
    path = corpus_dir / "kineto/hta__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    df, _ = _read(path)
    assert len(df) == 115
    assert df["rank"].isna().all()  # no distributedInfo, no rank in the name
    assert (df["kind"] == "compute").sum() == 14
    assert set(df["step"].dropna()) == {1, 2}


@pytest.mark.corpus
@pytest.mark.parametrize("name,rows,rank", [
    ("hta__df_index_resolver.json.gz", 151391, 1),
    ("hta__negative_queue_length_rank0.json.gz", 67219, 0),
    ("hta__trace_diff_control.json.gz", 74939, 3),
    ("hta__sampled_rank-0.json.gz", 4811, 0),
    ("hta__sampled_rank-1.json.gz", 4676, 1),
])
def test_hta_traces(corpus_dir, name, rows, rank):
    df, _ = _read(corpus_dir / "kineto" / name)
    assert len(df) == rows
    assert set(df["rank"]) == {rank}
    assert df["start_ns"].is_monotonic_increasing
    # old traces (no baseTimeNanoseconds) are epoch µs: 2022-2023
    assert 1.6e18 < df["start_ns"].min() < 1.7e18


@pytest.mark.corpus
def test_corpus_sniff_is_exclusive(corpus_dir):
    for f in sorted((corpus_dir / "kineto").rglob("*.json*")):
        assert kineto.sniff(f), f
    for f in sorted((corpus_dir / "horovod_timeline").glob("*.json")):
        assert not kineto.sniff(f), f


def test_masked_narrows_and_warns_on_overflow():
    import numpy as np

    from analysis.readers import _assembly, _chrome

    values = np.array([5, 2**40, 7], dtype=np.int64)  # the big one is missing: it may wrap
    mask = np.array([False, True, False])
    arr = _assembly.masked(values, mask, "Int16")
    assert str(arr.dtype) == "Int16" and arr.tolist() == [5, pd.NA, 7]
    damage = _chrome.Damage()  # a present value that does not fit is not silently wrapped
    arr = _assembly.masked(values, np.zeros(3, dtype=bool), "Int16", damage=damage, column="device")
    assert arr.tolist() == [5, pd.NA, 7]
    assert damage.notes == ["1 device value(s) outside Int16's range were set missing"]
    assert _assembly.masked(values, mask, "Int64").tolist() == [5, pd.NA, 7]


def test_device_id_beyond_int16_is_missing_with_a_warning(tmp_path):
    f = tmp_path / "big_device.json"
    f.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 70000, "tid": 7, "ts": 1.0, "dur": 2.0},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 3.0, "dur": 2.0}]}))
    with pytest.warns(RecoveryWarning, match="1 device value"):
        df = kineto.read(f)
    assert df["device"].tolist() == [pd.NA, 1]
