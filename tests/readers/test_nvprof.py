"""Known answers for the nvprof readers (CSV logs and ``-o`` databases)."""

from __future__ import annotations

import importlib.util
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from analysis import schema
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers import _cupti, nsys_csv, nsys_sqlite, nvml, nvprof_csv, nvprof_sqlite

HERE = Path(__file__).resolve().parents[1] / "data" / "nvprof"
HAS_DEMANGLER = _cupti.demangle(["_Z1fv"])[1] != "unavailable"


def _builder():
    spec = importlib.util.spec_from_file_location("nvprof_fixtures", HERE / "make_fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- CSV --------------------------------------------------------------------------------------
def test_gpu_trace_units_row(data_dir):
    path = data_dir / "nvprof" / "gpu_trace.csv"
    assert nvprof_csv.sniff(path)
    df = nvprof_csv.read(path)
    schema.validate_events(df)
    # Start in s, Duration in ms, Size in MB (1024^2)
    assert df["start_ns"].tolist() == [1_000_000_000, 1_500_000_000, 1_600_000_000, 4_000_000_000]
    assert df["dur_ns"].tolist() == [10_000, 2_000_000, 1_000, 3_000_000]
    assert df["kind"].tolist() == ["memcpy", "compute", "memset", "comm"]
    assert df["bytes"].tolist()[0] == 2 * 1024**2 and df["bytes"].tolist()[2] == 512 * 1024
    assert df["correlation"].tolist() == [116, 118, 120, 122]
    assert set(df["device"]) == {1} and set(df["pid"]) == {3170}
    assert df["stream"].tolist() == [7, 7, 13, 13]


def test_api_trace_and_notice_lines(data_dir):
    df = nvprof_csv.read(data_dir / "nvprof" / "api_trace.csv")
    assert df["name"].tolist() == ["cudaMemcpy", "cudaLaunchKernel", "cudaDeviceSynchronize"]
    assert df["kind"].tolist() == ["runtime", "runtime", "sync_wait"]
    assert df["start_ns"].tolist() == [215_000_000, 215_100_000, 219_000_000]
    assert df["dur_ns"].tolist() == [12_500, 3_250, 1_500_000]
    assert set(df["cat"]) == {"cuda_runtime"}


def test_two_process_blocks_with_own_units(data_dir):
    df = nvprof_csv.read(data_dir / "nvprof" / "two_processes.csv")
    assert df["pid"].tolist() == [100, 101]
    assert df["start_ns"].tolist() == [10_000, 20_000] and df["dur_ns"].tolist() == [500, 1_000]


def test_summary_mode(data_dir):
    path = data_dir / "nvprof" / "summary.csv"
    with pytest.raises(ReadError, match=r"summary.*read_summary"):
        nvprof_csv.read(path)
    s = nvprof_csv.read_summary(path)
    assert s["type"].tolist() == ["GPU activities", "GPU activities", "API calls"]
    assert s["total_ns"].tolist() == [3_000_000, 2_000_000, 1_500_000]
    assert s["avg_ns"].tolist() == [3_000_000, 2_000_000, 1_500_000]
    assert s["instances"].tolist() == [1, 1, 1] and s["time_pct"].tolist() == [60, 40, 100]


def test_csv_bad_input(tmp_path, data_dir):
    lines = (data_dir / "nvprof" / "api_trace.csv").read_text().splitlines()
    no_units = tmp_path / "no_units.csv"
    no_units.write_text("\n".join(lines[:2] + lines[3:]) + "\n")
    with pytest.raises(ReadError, match="units row"):
        nvprof_csv.read(no_units)
    garbage = tmp_path / "garbage.csv"
    garbage.write_text("\n".join([*lines, 'oops,"half a row"', 'not-a-time,1.0,"cudaFree",9']) + "\n")
    with pytest.warns(RecoveryWarning, match="dropped 2 garbage row"):
        df = nvprof_csv.read(garbage)
    assert len(df) == 3
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert not nvprof_csv.sniff(empty)
    with pytest.raises(ReadError, match="empty"):
        nvprof_csv.read(empty)
    notice_only = tmp_path / "notice.csv"
    notice_only.write_text("==1== NVPROF is profiling process 1, command: ./a\n==1== Profiling result:\n")
    with pytest.raises(ReadError, match="no nvprof CSV table"):
        nvprof_csv.read(notice_only)


def test_csv_sniff_does_not_claim_others(tmp_path, data_dir):
    for f in (data_dir / "nvprof").glob("*.csv"):
        assert nvprof_csv.sniff(f) and not nsys_csv.sniff(f) and not nvml.sniff(f)
    ours = tmp_path / "samples-node1.csv"
    ours.write_text("ts_ns,host,cpu_core,rank,cpu_util_pct,rss_mib\n1,node1,,,5.0,\n")
    assert not nvprof_csv.sniff(ours)


# --- SQLite -----------------------------------------------------------------------------------
def test_synthetic_database(data_dir):
    path = data_dir / "nvprof" / "synthetic.nvprof"
    assert nvprof_sqlite.sniff(path) and not nsys_sqlite.sniff(path)
    df = nvprof_sqlite.read(path)
    schema.validate_events(df)
    assert len(df) == 16
    k = df[df["cat"] == "cuda_kernel"]
    assert k["kind"].tolist() == ["compute", "comm", "compute"]
    expected = "vecAdd(float*, float*, float*, int)" if HAS_DEMANGLER else "_Z6vecAddPfS_S_i"
    assert k["name"].tolist()[0] == expected
    assert k["correlation"].tolist() == [11, 13, 14] and k["stream"].tolist() == [14, 15, 14]
    rt = df[df["cat"] == "cuda_runtime"]
    assert rt["name"].tolist() == ["cudaMemcpyAsync", "cudaLaunchKernel", "cudaMemsetAsync",
                                   "cudaLaunchKernel", "cudaLaunchKernel", "cudaDeviceSynchronize",
                                   "cbid_9999"]
    assert set(rt["pid"]) == {248} and set(rt["tid"]) == {3659876096}  # threadId & 0xffffffff
    drv = df[df["cat"] == "cuda_driver"]
    assert drv["name"].tolist() == ["cuInit", "cuCtxSynchronize"]
    assert drv["kind"].tolist() == ["runtime", "sync_wait"]
    copy = df[df["kind"] == "memcpy"].iloc[0]
    assert copy["name"] == "[CUDA memcpy HtoD]" and copy["bytes"] == 40000 and copy["dur_ns"] == 800
    assert df[df["kind"] == "memset"]["bytes"].tolist() == [15360]
    phase = df[df["kind"] == "phase"].iloc[0]
    assert phase["name"] == "forward" and phase["cat"] == "scalescope" and phase["dur_ns"] == 8_100
    assert phase["pid"] == 248 and phase["tid"] == 3659876096
    mark = df[df["kind"] == "marker"].iloc[0]
    assert mark["name"] == "epoch_end" and mark["dur_ns"] == 0


def test_unclosed_marker_warns(tmp_path):
    path = _builder().build(tmp_path / "open.nvprof", open_marker=True)
    with pytest.warns(RecoveryWarning, match="1 NVTX range"):
        df = nvprof_sqlite.read(path)
    assert (df["name"] == "forward").sum() == 2


def test_sqlite_bad_input(tmp_path, data_dir):
    cut = tmp_path / "cut.nvprof"
    raw = (data_dir / "nvprof" / "synthetic.nvprof").read_bytes()
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ReadError, match=r"cut\.nvprof.*(malformed|not a database|damaged)"):
        nvprof_sqlite.read(cut)
    with pytest.raises(ReadError, match="nsys export"):
        nvprof_sqlite.read(data_dir / "nsys" / "synthetic.sqlite")
    empty = tmp_path / "e.nvprof"
    empty.write_bytes(b"")
    with pytest.raises(ReadError, match="empty"):
        nvprof_sqlite.read(empty)


def test_cbid_tables():
    assert _cupti.runtime_cbid_name(211) == "cudaLaunchKernel_v7000"
    assert _cupti.runtime_cbid_name(165) == "cudaDeviceSynchronize_v3020"
    assert _cupti.driver_cbid_name(307) == "cuLaunchKernel"
    assert _cupti.runtime_cbid_name(100_000) == "cbid_100000"
    assert _cupti.is_sync_api("cudaStreamSynchronize_ptsz_v7000")
    assert not _cupti.is_sync_api("cudaStreamCreate_v3020")


# --- corpus -----------------------------------------------------------------------------------
def test_ece408_database(corpus_dir, tmp_path):
    src = corpus_dir / "nvprof" / "ece408__timeline.nvprof"
    path = tmp_path / "copy.nvprof"
    shutil.copy(src, path)
    df = nvprof_sqlite.read(path)
    con = sqlite3.connect(f"{src.resolve().as_uri()}?mode=ro", uri=True)
    count = {t: con.execute(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_{t}").fetchone()[0]
             for t in ("CONCURRENT_KERNEL", "RUNTIME", "DRIVER", "MEMCPY", "MEMSET")}
    cbids = {r[0] for r in con.execute("SELECT cbid FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
    dbids = {r[0] for r in con.execute("SELECT cbid FROM CUPTI_ACTIVITY_KIND_DRIVER")}
    con.close()
    assert count == {"CONCURRENT_KERNEL": 27, "RUNTIME": 1130, "DRIVER": 401, "MEMCPY": 21, "MEMSET": 9}
    assert (df["cat"] == "cuda_kernel").sum() == 27
    assert (df["cat"] == "cuda_runtime").sum() == 1130
    assert (df["cat"] == "cuda_driver").sum() == 401
    assert (df["kind"] == "memcpy").sum() == 21 and (df["kind"] == "memset").sum() == 9
    assert not df["name"].astype(str).str.startswith("cbid_").any()  # every cbid is in our tables
    assert cbids <= set(_cupti.RUNTIME_CBID) and dbids <= set(_cupti.DRIVER_CBID)
    assert set(df["pid"].dropna()) == {248}
    if HAS_DEMANGLER:
        assert "mxnet::op::forward_kernel(float*, float const*, float const*, int, int, int, int, int, int)" in set(df["name"])
        assert not df[df["cat"] == "cuda_kernel"]["name"].astype(str).str.startswith("_Z").any()
    assert (df["name"] == "cudaStreamSynchronize").sum() == 29  # cbid 131
    pd.testing.assert_frame_equal(df, nvprof_sqlite.read(path))


def test_cudatimeline_csv(corpus_dir):
    path = corpus_dir / "nvprof" / "cudatimeline__trace.csv"
    assert nvprof_csv.sniff(path) and not nsys_csv.sniff(path) and not nvml.sniff(path)
    df = nvprof_csv.read(path)
    assert len(df) == 8
    assert df["kind"].tolist().count("memcpy") == 6 and df["kind"].tolist().count("compute") == 2
    assert df["start_ns"].iloc[0] == 215_481_427 and df["dur_ns"].iloc[0] == 8_256
    assert set(df[df["kind"] == "memcpy"]["bytes"]) == {40000}  # 39.0625 KB x 1024
    k = df[df["kind"] == "compute"]
    assert k["name"].tolist() == ["kernel_vectorAdd(float const *, float const *, int, int, float*)"] * 2
    assert k["correlation"].tolist() == [218, 225] and k["stream"].tolist() == [13, 14]
    assert set(df["pid"]) == {21610} and set(df["device"]) == {0}
