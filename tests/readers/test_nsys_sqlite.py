"""Known answers for the Nsight Systems SQLite reader (corpus exports + synthetic fixture)."""

from __future__ import annotations

import importlib.util
import shutil
import sqlite3
import warnings
from pathlib import Path

import pandas as pd
import pytest

from analysis import schema
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers import nsys_sqlite, nvprof_sqlite

HERE = Path(__file__).resolve().parents[1] / "data" / "nsys"


def _builder():
    spec = importlib.util.spec_from_file_location("nsys_fixtures", HERE / "make_fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _count(path: Path, sql: str) -> int:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


# --- synthetic fixture ------------------------------------------------------------------------
def test_synthetic_known_answers(data_dir):
    path = data_dir / "nsys" / "synthetic.sqlite"
    assert nsys_sqlite.sniff(path)
    assert not nvprof_sqlite.sniff(path)
    df = nsys_sqlite.read(path)
    schema.validate_events(df)
    assert len(df) == 18
    counts = df.groupby("kind", observed=True).size().to_dict()
    assert counts == {"compute": 2, "comm": 2, "memcpy": 1, "memset": 1, "runtime": 5,
                      "sync_wait": 2, "phase": 2, "range": 2, "marker": 1}
    assert set(df["rank"]) == {3} and set(df["local_rank"]) == {1} and set(df["host"]) == {"node7"}
    utc = 1_700_000_000_000_000_000
    k = df[df["cat"] == "cuda_kernel"]
    assert list(k["name"]) == ["void gemm_kernel<float>(float*, int)"] * 2 + [
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"]
    assert list(k["kind"]) == ["compute", "compute", "comm"]
    assert list(k["start_ns"] - utc) == [2_000_000, 3_000_000, 4_000_000]
    assert list(k["dur_ns"]) == [500_000, 400_000, 2_000_000]
    assert list(k["stream"]) == [7, 7, 13] and list(k["correlation"]) == [101, 103, 105]
    assert set(k["pid"]) == {4242} and k["tid"].isna().all() and set(k["device"]) == {0}
    copy = df[df["kind"] == "memcpy"].iloc[0]
    assert copy["name"] == "[CUDA memcpy Host-to-Device]" and copy["bytes"] == 4096
    assert df[df["kind"] == "memset"].iloc[0]["bytes"] == 1024
    sync = df[df["kind"] == "sync_wait"]
    assert list(sync["name"]) == ["cudaStreamSynchronize_v3020", "cuCtxSynchronize"]
    assert list(sync["cat"]) == ["cuda_runtime", "cuda_driver"]
    phases = df[df["kind"] == "phase"]
    assert list(phases["name"]) == ["forward", "backward"] and set(phases["cat"]) == {"scalescope"}
    assert list(phases["step"]) == [5, 5]
    nccl = df[(df["kind"] == "comm") & (df["cat"] == "NCCL")].iloc[0]
    assert nccl["name"] == "ncclAllReduce" and nccl["dur_ns"] == 2_150_000
    loop = df[df["name"] == "train_loop"].iloc[0]  # registered string via textId
    assert loop["kind"] == "range" and loop["cat"] == "NVTX" and loop["dur_ns"] == 8_000_000
    mark = df[df["kind"] == "marker"].iloc[0]
    assert mark["name"] == "checkpoint" and mark["dur_ns"] == 0
    data = df[df["name"] == "data"].iloc[0]  # start/end range on another thread
    assert data["tid"] == 4244 and data["dur_ns"] == 500_000
    osrt = df[df["cat"] == "osrt"].iloc[0]
    assert osrt["start_ns"] - utc == -5_000  # negative session time is kept
    assert df["start_ns"].is_monotonic_increasing


def test_session_time_and_kernel_name_options(data_dir):
    path = data_dir / "nsys" / "synthetic.sqlite"
    epoch = nsys_sqlite.read(path)
    session = nsys_sqlite.read(path, time="session", kernel_names="short")
    assert (epoch["start_ns"] - session["start_ns"]).unique().tolist() == [1_700_000_000_000_000_000]
    assert session[session["cat"] == "cuda_kernel"]["name"].tolist() == [
        "gemm_kernel", "gemm_kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    mangled = nsys_sqlite.read(path, kernel_names="mangled")
    names = mangled[mangled["cat"] == "cuda_kernel"]["name"].tolist()
    assert names[:2] == ["_Z11gemm_kernelIfEvPfi"] * 2
    assert names[2].startswith("ncclDevKernel")  # no mangled name stored: falls back
    with pytest.raises(ValueError, match="time"):
        nsys_sqlite.read(path, time="wall")


def test_open_nvtx_range_is_closed_at_capture_end(tmp_path):
    path = _builder().build(tmp_path / "open.sqlite", open_range=True)
    with pytest.warns(RecoveryWarning, match="1 NVTX range"):
        df = nsys_sqlite.read(path, time="session")
    row = df[df["name"] == "eval"].iloc[0]
    assert row["start_ns"] == 8_500_000 and row["dur_ns"] == 10_000_000 - 8_500_000


def test_mpi_ranks_table_gives_rank_per_process(tmp_path):
    path = _builder().build(tmp_path / "mpi.sqlite", mpi_ranks={4242: 0, 4243: 1})
    df = nsys_sqlite.read(path)
    assert set(df[df["pid"] == 4242]["rank"]) == {0}
    assert set(df[df["pid"] == 4243]["rank"]) == {1}


# --- bad input --------------------------------------------------------------------------------
def test_truncated_database_is_a_read_error(tmp_path, data_dir):
    src = data_dir / "nsys" / "synthetic.sqlite"
    cut = tmp_path / "cut.sqlite"
    raw = src.read_bytes()
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ReadError, match=r"cut\.sqlite.*(malformed|not a database|damaged)"):
        nsys_sqlite.read(cut)


def test_empty_and_wrong_files(tmp_path, data_dir):
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    assert not nsys_sqlite.sniff(empty)
    with pytest.raises(ReadError, match="empty"):
        nsys_sqlite.read(empty)
    text = tmp_path / "notes.sqlite"
    text.write_text("hello")
    with pytest.raises(ReadError, match="not a SQLite database"):
        nsys_sqlite.read(text)
    other = tmp_path / "plain.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    assert not nsys_sqlite.sniff(other)
    with pytest.raises(ReadError, match="not an Nsight Systems export"):
        nsys_sqlite.read(other)
    with pytest.raises(ReadError, match="nvprof"):
        nsys_sqlite.read(data_dir / "nvprof" / "synthetic.nvprof")
    assert not nsys_sqlite.sniff(data_dir / "nsys" / "cuda_gpu_trace.csv")


def test_read_does_not_modify_the_file(tmp_path, data_dir):
    path = tmp_path / "copy.sqlite"
    shutil.copy(data_dir / "nsys" / "synthetic.sqlite", path)
    before = path.read_bytes()
    a = nsys_sqlite.read(path)
    b = nsys_sqlite.read(path)
    pd.testing.assert_frame_equal(a, b)
    assert path.read_bytes() == before


# --- corpus -----------------------------------------------------------------------------------
def test_flame_torch_ex(corpus_dir):
    path = corpus_dir / "nsys" / "flame__torch-ex.sqlite"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = nsys_sqlite.read(path)
    schema.validate_events(df)
    n_kernels = _count(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    n_runtime = _count(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    assert n_kernels == 2482 and n_runtime == 5142
    assert (df["cat"] == "cuda_kernel").sum() == n_kernels
    assert df["cat"].isin(["cuda_runtime", "cuda_driver"]).sum() == n_runtime
    assert (df["kind"] == "memcpy").sum() == _count(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY") == 122
    assert (df["kind"] == "memset").sum() == _count(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET") == 81
    assert (df["cat"] == "osrt").sum() == _count(path, "SELECT count(*) FROM OSRT_API")
    assert int(df[df["kind"] == "memcpy"]["bytes"].sum()) == _count(
        path, "SELECT sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    nvtx = df[df["cat"] == "NVTX"]
    assert sorted(nvtx["name"][nvtx["name"].str.startswith("iteration")]) == [
        f"iteration{i}" for i in range(10, 20)]
    assert (nvtx["name"] == "forward").sum() == 10
    assert df[df["cat"] == "cuBLAS"]["name"].tolist() == ["cublasCreate_v2"]
    utc = 1745524738320414836
    first_kernel = df[df["cat"] == "cuda_kernel"]["start_ns"].min()
    assert first_kernel == utc + _count(path, "SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert set(df["host"]) == {"Lenovo-ThinkStation-P3-Tower"}
    assert df["rank"].isna().all()
    sync = df[df["kind"] == "sync_wait"]["name"].astype(str)
    assert sync.str.startswith(("cudaDeviceSynchronize", "cudaStreamSynchronize",
                                "cudaEventSynchronize", "cuCtxSynchronize",
                                "cuStreamSynchronize", "cuEventSynchronize")).all()
    assert len(sync) == _count(
        path,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value LIKE 'cudaDeviceSynchronize%' OR s.value LIKE 'cudaStreamSynchronize%' "
        "OR s.value LIKE 'cudaEventSynchronize%' OR s.value LIKE 'cuCtxSynchronize%' "
        "OR s.value LIKE 'cuStreamSynchronize%' OR s.value LIKE 'cuEventSynchronize%'",
    )


def test_pipit_cloverleaf(corpus_dir):
    path = corpus_dir / "nsys" / "pipit__perlmutter-cloverleaf-cuda.sqlite"
    df = nsys_sqlite.read(path)
    assert (df["cat"] == "cuda_kernel").sum() == 1312
    assert (df["kind"] == "memcpy").sum() == 279
    assert df["cat"].isin(["cuda_runtime", "cuda_driver"]).sum() == 3048
    assert set(df["rank"]) == {0}  # PMI_RANK="0" in the captured environment
    assert set(df["host"]) == {"nid008553"}
    assert set(df[df["cat"] == "cuda_kernel"]["device"]) <= {0, 1, 2, 3}


def test_parallel2_reports(corpus_dir):
    r2 = corpus_dir / "nsys" / "parallel2__report2.sqlite"
    assert nsys_sqlite.sniff(r2)  # 2022.4: EXPORT_META_DATA table name
    df = nsys_sqlite.read(r2)
    assert (df["cat"] == "cuda_kernel").sum() == 2
    assert (df["kind"] == "memcpy").sum() == 2
    assert df["cat"].isin(["cuda_runtime", "cuda_driver"]).sum() == 20
    assert df[df["kind"] == "memcpy"]["bytes"].tolist() == [131072, 131072]
    assert df[df["kind"] == "memcpy"]["name"].tolist() == [
        "[CUDA memcpy Host-to-Device]", "[CUDA memcpy Device-to-Host]"]
    r1 = corpus_dir / "nsys" / "parallel2__report1.sqlite"
    assert nsys_sqlite.sniff(r1)
    empty = nsys_sqlite.read(r1)
    schema.validate_events(empty)
    assert len(empty) == 0


def test_corpus_sniffs_do_not_cross(corpus_dir):
    for f in (corpus_dir / "nsys").glob("*.sqlite"):
        assert nsys_sqlite.sniff(f) and not nvprof_sqlite.sniff(f)
    nvp = corpus_dir / "nvprof" / "ece408__timeline.nvprof"
    assert not nsys_sqlite.sniff(nvp)
