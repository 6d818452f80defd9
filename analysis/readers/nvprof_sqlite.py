"""nvprof databases (``nvprof -o file.nvprof`` / ``--export-profile``, also opened as ``.nvvp``).

One SQLite table per CUPTI activity kind, ``StringTable(_id_, value)`` for strings, no
``StringIds`` (that is how :func:`sniff` tells them from nsys exports).

==========================================================  ==================================
table                                                       events
==========================================================  ==================================
``CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`` and ``_KERNEL``   ``compute`` (``comm`` for
                                                            ``nccl*``), name demangled
``CUPTI_ACTIVITY_KIND_MEMCPY``                              ``memcpy`` named
                                                            ``[CUDA memcpy HtoD]`` etc. (nvprof's
                                                            own spelling), ``bytes``
``CUPTI_ACTIVITY_KIND_MEMSET``                              ``memset`` ``[CUDA memset]``
``CUPTI_ACTIVITY_KIND_RUNTIME`` / ``_DRIVER``               ``runtime`` / ``sync_wait``; name
                                                            from the CUPTI ``cbid`` tables in
                                                            :mod:`analysis.readers._cupti`
                                                            (runtime names without CUPTI's
                                                            ``_v3020`` suffix, as nvprof prints
                                                            them; unknown ids -> ``cbid_<n>``)
``CUPTI_ACTIVITY_KIND_MARKER``                              NVTX: ``flags`` 2/4 start/end
                                                            paired on ``id`` -> ``range``
                                                            (``phase``/``comm`` in domains
                                                            ``scalescope``/``NCCL``); flag 1 ->
                                                            ``marker``
==========================================================  ==================================

Kernel names are stored mangled; they are demangled with the ``cxxfilt`` module when
installed, else with one ``c++filt`` subprocess for all names; when neither exists the
names stay mangled and one ``UserWarning`` says so. ``pid``/``tid`` are
``processId & 0xffffffff`` / ``threadId & 0xffffffff`` (stored signed). Times are integer ns
as recorded, which look like Unix-epoch ns (not documented by NVIDIA). A start marker
without an end is closed at the latest end of any event, with a RecoveryWarning.
"""

from __future__ import annotations

import re
import sqlite3
import struct
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import schema
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers._cupti import (
    SQLITE_ERRORS,
    VALUE_ERRORS,
    checked_times,
    connect_ro,
    damaged_sqlite,
    demangle,
    driver_cbid_name,
    is_nccl_kernel,
    is_sync_api,
    ns_column,
    runtime_cbid_name,
    sniff_tables,
    sqlite_error,
    sqlite_tables,
    table_columns,
    value_error,
)
from analysis.readers.registry import default_run_id, register

NAME = "nvprof_sqlite"
SUFFIXES = (".nvprof", ".nvvp", ".sqlite", ".db")

#: CUpti_ActivityMemcpyKind in nvprof's short spelling.
MEMCPY_NAMES = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
}
_RUNTIME_SUFFIX = re.compile(r"_v\d{4,5}$")
_MASK32 = 0xFFFFFFFF


def sniff(path: Path) -> bool:
    """SQLite with ``StringTable`` and ``CUPTI_ACTIVITY_KIND_*`` tables but no ``StringIds``."""
    tables = sniff_tables(Path(path))
    if tables is None:
        return damaged_sqlite(path, (".nvprof", ".nvvp"))
    if not tables or "StringIds" in tables or "StringTable" not in tables:
        return False
    return any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in tables)


def _q(con: sqlite3.Connection, table: str, wanted: list[str]) -> pd.DataFrame:
    have = set(table_columns(con, table))
    cols = ", ".join(c if c in have else f"NULL AS {c}" for c in wanted)
    return pd.read_sql_query(f"SELECT {cols} FROM {table}", con)


def _frame(n: int, **cols: object) -> pd.DataFrame:
    return pd.DataFrame(
        {k: ([v] * n if isinstance(v, str) or v is None else v) for k, v in cols.items()},
        index=pd.RangeIndex(n),
    )


def _gpu_common(df: pd.DataFrame) -> dict[str, object]:
    return {
        "device": pd.array(df["deviceId"], dtype="Int16"),
        "stream": pd.array(df["streamId"], dtype="Int64"),
        "start_ns": ns_column(df["start"]),
        "end_ns": ns_column(df["end"]),
        "correlation": pd.array(df["correlationId"], dtype="Int64"),
    }


def _object_ids(blobs: pd.Series) -> tuple[list[object], list[object]]:
    pids, tids = [], []
    for b in blobs:
        if isinstance(b, (bytes, bytearray)) and len(b) >= 8:
            p, t = struct.unpack_from("<II", b)
            pids.append(p)
            tids.append(t)
        else:
            pids.append(None)
            tids.append(None)
    return pids, tids


def _kernels(con: sqlite3.Connection, tables: set[str], strings: dict, path: Path,
             ) -> list[pd.DataFrame]:
    """The kernel tables' rows (names demangled; NCCL kernels are ``comm``)."""
    parts: list[pd.DataFrame] = []
    for t in ("CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL", "CUPTI_ACTIVITY_KIND_KERNEL"):
        if t not in tables:
            continue
        df = _q(con, t, ["start", "end", "deviceId", "streamId", "correlationId", "name"])
        if not len(df):
            continue
        raw = df["name"].map(strings).fillna(df["name"].map(lambda i: f"<string {i}>"))
        uniq = sorted(set(raw))
        demangled, how = demangle(uniq)
        if how == "unavailable":
            warnings.warn(
                f"{path}: no C++ demangler (pip install cxxfilt, or binutils' c++filt); kernel "
                "names are kept mangled",
                UserWarning,
                stacklevel=5,
            )
        names = raw.map(dict(zip(uniq, demangled, strict=False)))
        kind = np.where([is_nccl_kernel(n) for n in names], "comm", "compute")
        parts.append(_frame(len(df), name=names.to_numpy(dtype=object), kind=kind, cat="cuda_kernel",
                            **_gpu_common(df)))
    return parts


def _read(con: sqlite3.Connection, path: Path, run_id: str) -> pd.DataFrame:
    tables = sqlite_tables(con)
    if "StringTable" not in tables:
        if "StringIds" in tables:
            raise ReadError(path, "this is an nsys export, not an nvprof database; use format='nsys_sqlite'")
        raise ReadError(path, "not an nvprof database (no StringTable)")
    strings = dict(con.execute("SELECT _id_, value FROM StringTable").fetchall())
    parts = _kernels(con, tables, strings, path)
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        df = _q(con, "CUPTI_ACTIVITY_KIND_MEMCPY",
                ["start", "end", "deviceId", "streamId", "correlationId", "bytes", "copyKind"])
        names = df["copyKind"].map(lambda k: f"[CUDA memcpy {MEMCPY_NAMES.get(k, f'kind {k}')}]")
        parts.append(_frame(len(df), name=names.to_numpy(dtype=object), kind="memcpy", cat="cuda_memcpy",
                            bytes=pd.array(df["bytes"], dtype="Int64"), **_gpu_common(df)))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        df = _q(con, "CUPTI_ACTIVITY_KIND_MEMSET",
                ["start", "end", "deviceId", "streamId", "correlationId", "bytes"])
        parts.append(_frame(len(df), name="[CUDA memset]", kind="memset", cat="cuda_memset",
                            bytes=pd.array(df["bytes"], dtype="Int64"), **_gpu_common(df)))
    for t, namer, cat in (
        ("CUPTI_ACTIVITY_KIND_RUNTIME", lambda c: _RUNTIME_SUFFIX.sub("", runtime_cbid_name(c)), "cuda_runtime"),
        ("CUPTI_ACTIVITY_KIND_DRIVER", driver_cbid_name, "cuda_driver"),
    ):
        if t not in tables:
            continue
        df = _q(con, t, ["cbid", "start", "end", "processId", "threadId", "correlationId"])
        names = [namer(c) for c in df["cbid"]]
        parts.append(
            _frame(
                len(df),
                pid=pd.array(df["processId"] & _MASK32, dtype="Int64"),
                tid=pd.array(df["threadId"] & _MASK32, dtype="Int64"),
                name=np.array(names, dtype=object),
                kind=np.where([is_sync_api(n) for n in names], "sync_wait", "runtime"),
                cat=cat,
                start_ns=ns_column(df["start"]),
                end_ns=ns_column(df["end"]),
                correlation=pd.array(df["correlationId"], dtype="Int64"),
            )
        )
    parts = [p for p in parts if len(p)]
    latest = max((int(p["end_ns"].max()) for p in parts), default=0)
    markers = _markers(con, tables, strings, latest, path)
    if markers is not None:
        parts.append(markers)
    if not parts:
        return schema.make_events(0, run_id=run_id, start_ns=[], dur_ns=[], source=NAME)
    raw = pd.concat(parts, ignore_index=True).sort_values("start_ns", kind="mergesort")
    raw = checked_times(raw.reset_index(drop=True), path, stacklevel=4)
    start = raw["start_ns"].to_numpy(np.int64)
    cols = {c: pd.array(raw[c], dtype=schema.EVENT_COLUMNS[c])
            for c in ("pid", "tid", "device", "stream", "bytes", "correlation") if c in raw}
    return schema.make_events(
        len(raw),
        run_id=run_id,
        name=raw["name"].to_numpy(dtype=object),
        kind=raw["kind"].to_numpy(dtype=object),
        cat=raw["cat"].to_numpy(dtype=object),
        start_ns=start,
        dur_ns=np.maximum(raw["end_ns"].to_numpy(np.int64) - start, 0),
        source=NAME,
        **cols,
    )


def _markers(con, tables, strings, latest, path) -> pd.DataFrame | None:
    t = "CUPTI_ACTIVITY_KIND_MARKER"
    if t not in tables:
        return None
    df = _q(con, t, ["flags", "timestamp", "id", "objectId", "name", "domain"])
    if not len(df):
        return None
    pids, tids = _object_ids(df["objectId"])
    df = df.assign(pid=pids, tid=tids)
    null = {k for k, v in strings.items() if v == "-- null --"}

    def text(i: object) -> str | None:
        return None if i in null or pd.isna(i) else strings.get(int(i), str(i))

    rows = []
    starts = df[(df["flags"] & 2) != 0].set_index("id")
    ends = df[(df["flags"] & 4) != 0].drop_duplicates("id").set_index("id")["timestamp"]
    unclosed = 0
    for rid, r in starts.iterrows():
        end = ends.get(rid)
        if end is None:
            unclosed += 1
            end = max(latest, int(r["timestamp"]))
        dom = text(r["domain"]) or "NVTX"
        rows.append((r["pid"], r["tid"], text(r["name"]) or "<unnamed>", dom, int(r["timestamp"]), int(end), False))
    for _, r in df[(df["flags"] & 1) != 0].iterrows():
        dom = text(r["domain"]) or "NVTX"
        ts = int(r["timestamp"])
        rows.append((r["pid"], r["tid"], text(r["name"]) or "<unnamed>", dom, ts, ts, True))
    if unclosed:
        warnings.warn(
            f"{path}: {unclosed} NVTX range(s) have a start marker but no end; they are closed "
            "at the latest event end",
            RecoveryWarning,
            stacklevel=4,
        )
    if not rows:
        return None
    m = pd.DataFrame(rows, columns=["pid", "tid", "name", "cat", "start_ns", "end_ns", "mark"])
    kind = np.where(
        m["mark"], "marker",
        np.where(m["cat"] == "scalescope", "phase", np.where(m["cat"] == "NCCL", "comm", "range")),
    )
    return _frame(
        len(m),
        pid=pd.array(m["pid"], dtype="Int64"),
        tid=pd.array(m["tid"], dtype="Int64"),
        name=m["name"].to_numpy(dtype=object),
        kind=kind,
        cat=m["cat"].to_numpy(dtype=object),
        start_ns=m["start_ns"].to_numpy(np.int64),
        end_ns=m["end_ns"].to_numpy(np.int64),
    )


def read(path: str | Path, *, run_id: str | None = None) -> pd.DataFrame:
    """Read an nvprof database (``nvprof -o``) into the event schema.

    Parameters
    ----------
    path
        The ``.nvprof`` / ``.nvvp`` file.
    run_id
        Value of ``run_id``; defaults to the file name without suffixes.

    Returns
    -------
    pandas.DataFrame
        Event schema rows (kernels, copies, sets, runtime and driver calls, NVTX markers),
        sorted by ``start_ns``; ``source`` = ``"nvprof_sqlite"``.

    Raises
    ------
    ReadError
        Not SQLite, not an nvprof database, or damaged/truncated.
    """
    path = Path(path)
    con = connect_ro(path)
    try:
        try:
            df = _read(con, path, run_id if run_id is not None else default_run_id(path))
        except (*SQLITE_ERRORS, pd.errors.DatabaseError) as exc:
            raise sqlite_error(path, exc) from None
        except VALUE_ERRORS as exc:
            raise value_error(path, exc) from None
    finally:
        con.close()
    return schema.validate_events(df)


register(
    NAME,
    sniff=sniff,
    read=read,
    kind="events",
    suffixes=SUFFIXES,
    description="nvprof database (nvprof -o x.nvprof / .nvvp)",
)
