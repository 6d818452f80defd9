"""Build the synthetic nsys SQLite fixture(s) in this folder (``python make_fixtures.py``).

The databases follow the table layout of ``nsys export --type sqlite`` (export schema 3.x,
checked against the corpus exports of nsys 2024.5/2024.6) but hold invented rows with known
answers; see README.md. Tests also call :func:`build` to make variants in a temp directory.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
UTC_EPOCH_NS = 1_700_000_000_000_000_000
CAPTURE_NS = 10_000_000
PID, TID = 4242, 4243
GPID = (1 << 48) | (PID << 24)
GTID = GPID | TID
GTID2 = GPID | (TID + 1)

STRINGS = {
    1: "void gemm_kernel<float>(float*, int)",
    2: "gemm_kernel",
    3: "_Z11gemm_kernelIfEvPfi",
    4: "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    5: "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    10: "cudaLaunchKernel_v7000",
    11: "cudaMemcpyAsync_v3020",
    12: "cudaStreamSynchronize_v3020",
    13: "cuCtxSynchronize",
    14: "pthread_mutex_lock",
    20: "train_loop",
}

SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
CREATE TABLE META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, nameEnum INTEGER, value TEXT);
CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER NOT NULL, duration INTEGER NOT NULL, startTime INTEGER NOT NULL, stopTime INTEGER NOT NULL);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, gridX INTEGER, blockX INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, nestingLevel INTEGER, callchainId INTEGER NOT NULL);
"""


def build(path: Path, *, open_range: bool = False, mpi_ranks: dict[int, int] | None = None) -> Path:
    """Write the synthetic export to ``path``.

    ``open_range`` adds one push range with ``end`` NULL; ``mpi_ranks`` ({pid: rank}) adds an
    ``MPI_RANKS`` table and a second process whose runtime call belongs to the other rank.
    """
    path = Path(path)
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size=512")
    con.executescript(SCHEMA)
    ins = con.executemany
    ins("INSERT INTO StringIds VALUES (?, ?)", STRINGS.items())
    ins("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_SCHEMA_VERSION", "3.16.1"),
        ("EXPORT_NOTE", "synthetic fixture written by scalescope tests/data/nsys/make_fixtures.py")])
    ins("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", [
        ("PROCESS_0:ENVIRONMENT_VARIABLE", 'OMPI_COMM_WORLD_RANK="3"'),
        ("PROCESS_0:ENVIRONMENT_VARIABLE", 'OMPI_COMM_WORLD_LOCAL_RANK="1"'),
        ("PROCESS_0:ENVIRONMENT_VARIABLE", 'HOME="/root"')])
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?)",
                (UTC_EPOCH_NS, "2023-11-14T22:13:20", "2023-11-14T22:13:20"))
    con.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (1, 'Local', 'Hostname', 619, 'node7')")
    con.execute("INSERT INTO ANALYSIS_DETAILS VALUES (1, ?, 100, ?)", (CAPTURE_NS, CAPTURE_NS + 100))
    ins("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", [
        (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"), (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host")])
    # kernels: start, end, device, ctx, green, stream, corr, gpid, demangled, short, mangled, grid, block
    ins("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", [
        (2_000_000, 2_500_000, 0, 1, None, 7, 101, GPID, 1, 2, 3, 64, 256),
        (3_000_000, 3_400_000, 0, 1, None, 7, 103, GPID, 1, 2, 3, 64, 256),
        (4_000_000, 6_000_000, 0, 1, None, 13, 105, GPID, 4, 5, None, 2, 512)])
    ins("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?,?,?)", [
        (1_500_000, 1_510_000, 0, 1, 7, 100, GPID, 4096, 1, 1, 2)])
    ins("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,?,?,?,?,?,?,?)", [
        (1_600_000, 1_601_000, 0, 1, 7, 102, GPID, 0, 1024, 2)])
    runtime = [
        (1_400_000, 1_420_000, 0, GTID, 100, 11, 0, None),
        (1_950_000, 1_960_000, 0, GTID, 101, 10, 0, None),
        (2_950_000, 2_960_000, 0, GTID, 103, 10, 0, None),
        (3_950_000, 3_960_000, 0, GTID, 105, 10, 0, None),
        (6_100_000, 6_300_000, 0, GTID, 106, 12, 0, None),
        (6_400_000, 6_500_000, 1, GTID, 107, 13, 0, None),
    ]
    if mpi_ranks:
        other = (1 << 48) | ((PID + 1) << 24) | (PID + 1)
        runtime.append((1_000_000, 1_001_000, 0, other, 1, 10, 0, None))
    ins("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)", runtime)
    nvtx = [
        # start, end, eventType, text, globalTid, textId, domainId, int64Value
        (50_000, None, 75, "scalescope", GTID, None, 1, None),
        (60_000, None, 75, "NCCL", GTID, None, 2, None),
        (1_000_000, 9_000_000, 59, None, GTID, 20, 0, None),
        (1_900_000, 3_500_000, 59, "forward", GTID, None, 1, 5),
        (3_500_000, 6_400_000, 59, "backward", GTID, None, 1, 5),
        (3_900_000, 6_050_000, 59, "ncclAllReduce", GTID, None, 2, None),
        (7_000_000, None, 34, "checkpoint", GTID, None, 0, None),
        (7_500_000, 8_000_000, 60, "data", GTID2, None, 0, None),
    ]
    if open_range:
        nvtx.append((8_500_000, None, 59, "eval", GTID, None, 1, None))
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId, int64Value) "
        "VALUES (?,?,?,?,?,?,?,?)", nvtx)
    ins("INSERT INTO OSRT_API VALUES (?,?,?,?,?,?,?,?)", [(-5_000, 20_000, 27, GTID2, 14, 0, 0, 1)])
    if mpi_ranks:
        con.execute("CREATE TABLE MPI_RANKS (globalTid INTEGER, rank INTEGER)")
        ins("INSERT INTO MPI_RANKS VALUES (?, ?)",
            [((1 << 48) | (p << 24) | p, r) for p, r in mpi_ranks.items()])
    con.commit()
    con.execute("VACUUM")
    con.close()
    return path


if __name__ == "__main__":
    out = build(HERE / "synthetic.sqlite")
    print(out, out.stat().st_size, "bytes", file=sys.stderr)
