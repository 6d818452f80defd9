"""Build the synthetic nvprof database in this folder (``python make_fixtures.py``).

Table layout copied from the corpus file ``ece408__timeline.nvprof`` (nvprof DB version 11);
the rows are invented with known answers (README.md). Tests call :func:`build` for variants.
"""

from __future__ import annotations

import sqlite3
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
T0 = 1_543_505_600_000_000_000
PID, TID_SIGNED = 248, -635091200  # threadId is stored signed; & 0xffffffff = 3659876096

SCHEMA = """
CREATE TABLE StringTable( _id_ INTEGER PRIMARY KEY AUTOINCREMENT, value TEXT NOT NULL UNIQUE );
CREATE TABLE Version( version INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(_id_ INTEGER PRIMARY KEY AUTOINCREMENT, start INT NOT NULL, end INT NOT NULL, deviceId INT NOT NULL, contextId INT NOT NULL, streamId INT NOT NULL, correlationId INT NOT NULL, name INT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL(_id_ INTEGER PRIMARY KEY AUTOINCREMENT, registersPerThread INT NOT NULL, start INT NOT NULL, end INT NOT NULL, completed INT NOT NULL, deviceId INT NOT NULL, contextId INT NOT NULL, streamId INT NOT NULL, gridX INT NOT NULL, blockX INT NOT NULL, correlationId INT NOT NULL, gridId INT NOT NULL, name INT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY(_id_ INTEGER PRIMARY KEY AUTOINCREMENT, copyKind INT NOT NULL, srcKind INT NOT NULL, dstKind INT NOT NULL, flags INT NOT NULL, bytes INT NOT NULL, start INT NOT NULL, end INT NOT NULL, deviceId INT NOT NULL, contextId INT NOT NULL, streamId INT NOT NULL, correlationId INT NOT NULL, runtimeCorrelationId INT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET(_id_ INTEGER PRIMARY KEY AUTOINCREMENT, value INT NOT NULL, bytes INT NOT NULL, start INT NOT NULL, end INT NOT NULL, deviceId INT NOT NULL, contextId INT NOT NULL, streamId INT NOT NULL, correlationId INT NOT NULL, flags INT NOT NULL, memoryKind INT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(_id_ INTEGER PRIMARY KEY AUTOINCREMENT, cbid INT NOT NULL, start INT NOT NULL, end INT NOT NULL, processId INT NOT NULL, threadId INT NOT NULL, correlationId INT NOT NULL, returnValue INT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_DRIVER(_id_ INTEGER PRIMARY KEY AUTOINCREMENT, cbid INT NOT NULL, start INT NOT NULL, end INT NOT NULL, processId INT NOT NULL, threadId INT NOT NULL, correlationId INT NOT NULL, returnValue INT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_MARKER(_id_ INTEGER PRIMARY KEY AUTOINCREMENT, flags INT NOT NULL, timestamp INT NOT NULL, id INT NOT NULL, objectKind INT NOT NULL, objectId BLOB NOT NULL, name INT NOT NULL, domain INT NOT NULL);
"""


def build(path: Path, *, open_marker: bool = False) -> Path:
    """Write the synthetic database; ``open_marker`` adds a start marker with no end."""
    path = Path(path)
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size=512")
    con.executescript(SCHEMA)
    strings = ["-- null --", "_Z6vecAddPfS_S_i", "ncclKernel_AllReduce_RING_LL_Sum_float",
               "forward", "scalescope", "epoch_end", "volta_sgemm_128x64_tn"]
    con.executemany("INSERT INTO StringTable VALUES (?, ?)", list(enumerate(strings)))
    con.execute("INSERT INTO Version VALUES (11)")
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL (registersPerThread, start, end, completed, "
        "deviceId, contextId, streamId, gridX, blockX, correlationId, gridId, name) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        [(16, T0 + 2_000, T0 + 5_000, T0 + 5_000, 0, 1, 14, 40, 256, 11, 1, 1),
         (16, T0 + 6_000, T0 + 9_000, T0 + 9_000, 0, 1, 15, 1, 256, 13, 2, 2),
         (16, T0 + 9_500, T0 + 9_900, T0 + 9_900, 0, 1, 14, 1, 256, 14, 3, 6)])
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (copyKind, srcKind, dstKind, flags, bytes, start, end, "
        "deviceId, contextId, streamId, correlationId, runtimeCorrelationId) VALUES (1,1,3,0,40000,?,?,0,1,7,10,0)",
        (T0 + 1_000, T0 + 1_800))
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (value, bytes, start, end, deviceId, contextId, streamId, "
        "correlationId, flags, memoryKind) VALUES (0,15360,?,?,0,1,31,12,1,3)", (T0 + 5_500, T0 + 5_600))
    # cbids: 41 cudaMemcpyAsync, 211 cudaLaunchKernel, 51 cudaMemsetAsync, 165 cudaDeviceSynchronize, 9999 unknown
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (cbid, start, end, processId, threadId, correlationId, returnValue) "
        "VALUES (?,?,?,?,?,?,0)",
        [(41, T0 + 500, T0 + 900, PID, TID_SIGNED, 10), (211, T0 + 1_900, T0 + 2_100, PID, TID_SIGNED, 11),
         (51, T0 + 5_400, T0 + 5_450, PID, TID_SIGNED, 12), (211, T0 + 5_900, T0 + 6_100, PID, TID_SIGNED, 13),
         (211, T0 + 9_400, T0 + 9_450, PID, TID_SIGNED, 14), (165, T0 + 9_950, T0 + 10_500, PID, TID_SIGNED, 15),
         (9999, T0 + 11_000, T0 + 11_100, PID, TID_SIGNED, 16)])
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_DRIVER (cbid, start, end, processId, threadId, correlationId, returnValue) "
        "VALUES (?,?,?,?,?,?,0)",
        [(1, T0 + 100, T0 + 200, PID, TID_SIGNED, 1), (17, T0 + 10_000, T0 + 10_400, PID, TID_SIGNED, 2)])
    obj = struct.pack("<II", PID, 3659876096) + bytes(4)
    markers = [(2, T0 + 1_850, 1, 2, obj, 3, 4), (4, T0 + 9_950, 1, 2, obj, 0, 0),
               (1, T0 + 12_000, 2, 2, obj, 5, 0)]
    if open_marker:
        markers.append((2, T0 + 11_500, 3, 2, obj, 3, 0))
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MARKER (flags, timestamp, id, objectKind, objectId, name, domain) "
        "VALUES (?,?,?,?,?,?,?)", markers)
    con.commit()
    con.execute("VACUUM")
    con.close()
    return path


if __name__ == "__main__":
    out = build(HERE / "synthetic.nvprof")
    print(out, out.stat().st_size, "bytes", file=sys.stderr)
