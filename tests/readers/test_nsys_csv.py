"""Known answers for ``nsys stats --format csv`` reports, and the CSV/SQLite agreement."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis import schema
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers import nsys_csv, nsys_sqlite, nvml, nvprof_csv


def test_gpu_trace_known_answers(data_dir):
    path = data_dir / "nsys" / "cuda_gpu_trace.csv"
    assert nsys_csv.sniff(path)
    df = nsys_csv.read(path)
    schema.validate_events(df)
    assert df["kind"].tolist() == ["memcpy", "memset", "compute", "compute", "comm"]
    assert df["start_ns"].tolist() == [1_500_000, 1_600_000, 2_000_000, 3_000_000, 4_000_000]
    assert df["dur_ns"].tolist() == [10_000, 1_000, 500_000, 400_000, 2_000_000]
    assert df["bytes"].tolist()[:2] == [4000, 1000] and df["bytes"][2:].isna().all()
    assert df["stream"].tolist() == [7, 7, 7, 7, 13] and set(df["device"]) == {0}
    assert df["correlation"].tolist() == [100, 102, 101, 103, 105]


def test_old_2022_spelling_and_microseconds(data_dir):
    df = nsys_csv.read(data_dir / "nsys" / "gputrace_2022.csv")  # Start (us), None, MBps
    assert df["start_ns"].tolist() == [1_500_000, 2_000_000, 3_000_500]
    assert df["dur_ns"].tolist() == [10_000, 500_000, 400_250]
    assert df["name"].tolist()[0] == "[CUDA memcpy HtoD]" and df["kind"].tolist()[0] == "memcpy"
    assert set(df["device"]) == {1}
    assert df["bytes"].tolist()[0] == 4000 and df["bytes"][1:].isna().all()


def test_api_trace(data_dir):
    df = nsys_csv.read(data_dir / "nsys" / "cuda_api_trace.csv")
    assert df["kind"].tolist() == ["runtime", "runtime", "sync_wait", "sync_wait"]
    assert df["cat"].tolist() == ["cuda_runtime"] * 3 + ["cuda_driver"]
    assert set(df["pid"]) == {4242} and set(df["tid"]) == {4243}


def test_nvtx_pushpop_trace_domains(data_dir):
    df = nsys_csv.read(data_dir / "nsys" / "nvtx_pushpop_trace.csv")
    assert df["name"].tolist() == ["train_loop", "forward", "aten::mm", "backward", "ncclAllReduce"]
    assert df["kind"].tolist() == ["range", "phase", "range", "phase", "comm"]
    assert df["cat"].tolist() == ["NVTX", "scalescope", "NVTX", "scalescope", "NCCL"]
    assert df["dur_ns"].tolist() == [8_000_000, 1_600_000, 100_000, 2_900_000, 2_150_000]


def test_stdout_with_several_reports(data_dir):
    path = data_dir / "nsys" / "stats_stdout.txt"
    assert nsys_csv.sniff(path)
    df = nsys_csv.read(path)
    assert df["name"].tolist() == ["cudaMemcpyAsync", "[CUDA memcpy Host-to-Device]", "gemm_kernel",
                                   "cudaStreamSynchronize"]
    summary = nsys_csv.read_summary(path)
    assert summary["report"].tolist() == ["nvtx_sum", "nvtx_sum"]
    assert summary["total_ns"].tolist() == [8_000_000, 4_500_000]
    assert summary["instances"].tolist() == [1, 2] and summary["style"].tolist() == ["PushPop"] * 2


def test_summary_is_not_events(data_dir):
    path = data_dir / "nsys" / "cuda_gpu_kern_sum.csv"
    with pytest.raises(ReadError, match=r"summary report.*read_summary"):
        nsys_csv.read(path)
    s = nsys_csv.read_summary(path)
    assert s.columns.tolist() == ["report", "time_pct", "total_ns", "instances", "avg_ns", "med_ns",
                                  "min_ns", "max_ns", "stddev_ns", "name"]
    assert s["total_ns"].tolist() == [2_000_000, 900_000] and s["instances"].tolist() == [1, 2]
    assert s["report"].tolist() == ["cuda_gpu_kern_sum"] * 2
    with pytest.raises(ReadError, match="no summary"):
        nsys_csv.read_summary(data_dir / "nsys" / "cuda_gpu_trace.csv")


def test_session_start_anchor(data_dir):
    path = data_dir / "nsys" / "cuda_gpu_trace.csv"
    rel = nsys_csv.read(path)
    absolute = nsys_csv.read(path, session_start_ns=1_700_000_000_000_000_000)
    assert (absolute["start_ns"] - rel["start_ns"]).unique().tolist() == [1_700_000_000_000_000_000]


def test_same_frame_as_sqlite_synthetic(data_dir):
    """The hand-written CSV mirrors the synthetic SQLite export: same GPU rows."""
    sql = nsys_sqlite.read(data_dir / "nsys" / "synthetic.sqlite", kernel_names="short")
    sql = sql[sql["cat"].isin(["cuda_kernel", "cuda_memcpy", "cuda_memset"])].reset_index(drop=True)
    csv = nsys_csv.read(data_dir / "nsys" / "cuda_gpu_trace.csv",
                        session_start_ns=1_700_000_000_000_000_000)
    cols = ["name", "kind", "cat", "start_ns", "dur_ns", "device", "stream", "correlation"]
    pd.testing.assert_frame_equal(
        csv[cols].astype(object), sql[cols].astype(object), check_categorical=False)


def test_bad_input(tmp_path, data_dir):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert not nsys_csv.sniff(empty)
    with pytest.raises(ReadError, match="empty"):
        nsys_csv.read(empty)
    garbage = tmp_path / "gputrace.csv"
    garbage.write_text((data_dir / "nsys" / "gputrace_2022.csv").read_text() + "this,is,garbage\n"
                       + "x" * 20 + ",1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19\n")
    with pytest.warns(RecoveryWarning, match="dropped 2 garbage row"):
        df = nsys_csv.read(garbage)
    assert len(df) == 3
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("a,b,c\n1,2,3\n")
    assert not nsys_csv.sniff(wrong)
    with pytest.raises(ReadError, match="header"):
        nsys_csv.read(wrong)


def test_sniff_does_not_claim_other_csvs(tmp_path, data_dir):
    ours = tmp_path / "samples-node1.csv"
    ours.write_text("ts_ns,host,device,util_gpu_pct,util_mem_pct,mem_used_mib,mem_total_mib,"
                    "power_w,temp_c,sm_clock_mhz\n1,node1,0,1,1,1,1,1,1,1\n")
    assert not nsys_csv.sniff(ours)
    for f in (data_dir / "nvprof").glob("*.csv"):
        assert not nsys_csv.sniff(f)
    for f in (data_dir / "nvml").glob("*.csv"):
        assert not nsys_csv.sniff(f)
    for f in (data_dir / "nsys").glob("*.csv"):
        assert not nvprof_csv.sniff(f) and not nvml.sniff(f)


# --- corpus -----------------------------------------------------------------------------------
def test_flame_csv_matches_sqlite(corpus_dir):
    """nsys stats cuda_gpu_trace:base vs the export of the same report: same GPU rows."""
    csv = nsys_csv.read(corpus_dir / "nsys" / "flame__torch-ex_cuda_gpu_trace_base.csv")
    sql = nsys_sqlite.read(corpus_dir / "nsys" / "flame__torch-ex.sqlite", time="session",
                           kernel_names="short")
    sql = sql[sql["cat"].isin(["cuda_kernel", "cuda_memcpy", "cuda_memset"])].reset_index(drop=True)
    assert (csv["cat"] == "cuda_kernel").sum() == 2482
    assert len(csv) == len(sql) == 2482 + 122 + 81
    cols = ["name", "kind", "cat", "start_ns", "dur_ns", "device", "stream", "correlation"]
    pd.testing.assert_frame_equal(
        csv[cols].astype(object), sql[cols].astype(object), check_categorical=False)
    # sizes are printed in MB with 3 decimals: equal to the byte count within 500 B
    diff = (csv["bytes"] - sql["bytes"]).dropna().abs()
    assert len(diff) == 122 + 81 and diff.max() <= 500


def test_pipit_nbody_nvtx_trace(corpus_dir):
    path = corpus_dir / "nsys" / "pipit__nbody-nvtx__trace.csv"
    assert nsys_csv.sniff(path) and not nvprof_csv.sniff(path) and not nvml.sniff(path)
    df = nsys_csv.read(path)
    n_rows = sum(1 for line in path.read_text().splitlines()[1:] if line.strip())
    assert len(df) == n_rows == 131
    assert set(df["kind"]) == {"range"}
    main = df[df["name"] == "main"].iloc[0]
    assert main["start_ns"] == 982845927 and main["dur_ns"] == 1005098329
    assert (df["name"] == "cudaDeviceSynchronize").sum() == 40
