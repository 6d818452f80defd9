"""Nsight Systems SQLite exports (``nsys export --type sqlite``, or ``nsys stats`` side files).

What becomes an event
---------------------
=============================================  =======================================
table                                          kind (cat)
=============================================  =======================================
``CUPTI_ACTIVITY_KIND_KERNEL``                 ``compute``; ``comm`` for ``nccl*`` kernels
                                               (``cuda_kernel``)
``CUPTI_ACTIVITY_KIND_MEMCPY``                 ``memcpy`` named ``[CUDA memcpy <label>]``
                                               from ``ENUM_CUDA_MEMCPY_OPER`` (``cuda_memcpy``)
``CUPTI_ACTIVITY_KIND_MEMSET``                 ``memset`` named ``[CUDA memset]``
``CUPTI_ACTIVITY_KIND_RUNTIME``                ``runtime``; ``sync_wait`` for the
                                               device/stream/event synchronize calls
                                               (``cuda_runtime`` / ``cuda_driver``)
``NVTX_EVENTS`` 59 (push/pop), 60 (start/end)  ``range``; ``phase`` in domain ``scalescope``;
                                               ``comm`` in domain ``NCCL`` (cat = domain name,
                                               ``NVTX`` for the default domain)
``NVTX_EVENTS`` 34 (mark)                      ``marker`` (dur 0)
``OSRT_API``                                   ``runtime`` (``osrt``)
``MPI_*_EVENTS``                               ``comm`` (``mpi``); best effort, columns
                                               ``start, end, globalTid, textId`` and a size
=============================================  =======================================

Other NVTX event types (33 category names, 39 thread names, 75/76 domain create/destroy,
70/71 NVTXT imports) are metadata, not events. Tables are created lazily by the exporter, so
a missing table simply contributes no rows; a capture without GPU activity gives only its
host rows (or an empty, valid frame).

Identity and time
-----------------
* ``pid = (globalTid >> 24) & 0xFFFFFF``, ``tid = globalTid & 0xFFFFFF`` (kernels, copies and
  sets only carry ``globalPid``, so their ``tid`` is missing). ``device`` is ``deviceId``,
  ``stream`` is ``streamId``, ``correlation`` is ``correlationId``.
* ``host`` is ``TARGET_INFO_SYSTEM_ENV.Hostname`` when exported.
* ``rank``: from ``MPI_RANKS`` (per process) when present; otherwise, when the captured
  process environment (``META_DATA_CAPTURE`` ``PROCESS_n:ENVIRONMENT_VARIABLE`` rows) holds
  exactly one value of ``OMPI_COMM_WORLD_RANK``, ``PMIX_RANK``, ``PMI_RANK``, ``RANK``,
  ``HOROVOD_RANK`` or ``SLURM_PROCID`` (first found in that order), that value for every
  row; else ``<NA>``. ``local_rank`` likewise from ``OMPI_COMM_WORLD_LOCAL_RANK``,
  ``LOCAL_RANK``, ``HOROVOD_LOCAL_RANK``, ``MPI_LOCALRANKID``, ``PMI_LOCAL_RANK``,
  ``SLURM_LOCALID``.
* Event times are integer ns on the session timeline (0 = start of profiling; can be
  negative). With ``time="epoch"`` (default) ``start_ns = utcEpochNs + t`` using
  ``TARGET_INFO_SESSION_START_TIME`` (the wall clock the docs intend; not verified against
  an external clock); when that table is absent the times stay session-relative. With
  ``time="session"`` they are always session-relative, which is what ``nsys stats`` CSV
  reports print (see :mod:`analysis.readers.nsys_csv`).
* An NVTX push/start range whose ``end`` is NULL (never popped/ended) is closed at the
  capture end (``ANALYSIS_DETAILS.duration`` on the session timeline, else the latest end of
  any event), with one :class:`~analysis.errors.RecoveryWarning` giving the count. nsys
  2023.4+ already writes the capture end itself for never-popped push ranges.
* Ranges in domain ``scalescope`` carrying an integer payload take it as ``step``.
"""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path
from typing import Literal

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
    is_nccl_kernel,
    is_sync_api,
    ns_column,
    sniff_tables,
    sqlite_error,
    sqlite_tables,
    table_columns,
    value_error,
)
from analysis.readers.registry import default_run_id, register

NAME = "nsys_sqlite"
SUFFIXES = (".sqlite", ".db", ".sqlite3")

_NSYS_MARKER_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")

RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "RANK", "HOROVOD_RANK", "SLURM_PROCID")
LOCAL_RANK_ENV = (
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "LOCAL_RANK",
    "HOROVOD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "PMI_LOCAL_RANK",
    "SLURM_LOCALID",
)

#: Fallback copy-kind labels (CUpti_ActivityMemcpyKind) when ENUM_CUDA_MEMCPY_OPER is absent.
MEMCPY_LABELS = {
    0: "Unknown",
    1: "Host-to-Device",
    2: "Device-to-Host",
    3: "Host-to-Array",
    4: "Array-to-Host",
    5: "Array-to-Array",
    6: "Array-to-Device",
    7: "Device-to-Array",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
}

NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 34, 59, 60, 75


def sniff(path: Path) -> bool:
    """An SQLite file with ``StringIds`` and an nsys metadata table."""
    tables = sniff_tables(Path(path))
    if tables is None:
        return damaged_sqlite(path, (".sqlite", ".sqlite3"))
    if "StringIds" not in tables:
        return False
    return any(t in tables for t in _NSYS_MARKER_TABLES) or any(
        t.startswith("TARGET_INFO_") for t in tables
    )


def _pid(gtid: pd.Series) -> pd.arrays.IntegerArray:
    v = pd.array(gtid, dtype="Int64")
    return (v // (1 << 24)) % (1 << 24)


def _tid(gtid: pd.Series) -> pd.arrays.IntegerArray:
    v = pd.array(gtid, dtype="Int64")
    return v % (1 << 24)


def _q(con: sqlite3.Connection, sql: str) -> pd.DataFrame:
    return pd.read_sql_query(sql, con)


def _cols(con: sqlite3.Connection, table: str, wanted: list[str]) -> str:
    have = set(table_columns(con, table))
    return ", ".join(c if c in have else f"NULL AS {c}" for c in wanted)


def _strings(con: sqlite3.Connection) -> dict[int, str]:
    return dict(con.execute("SELECT id, value FROM StringIds").fetchall())


def _scalar(con: sqlite3.Connection, tables: set[str], table: str, column: str) -> object:
    if table not in tables or column not in table_columns(con, table):
        return None
    row = con.execute(f"SELECT {column} FROM {table} LIMIT 1").fetchone()
    return None if row is None else row[0]


def _env_convention(con: sqlite3.Connection, tables: set[str], names: tuple[str, ...]) -> int | None:
    if "META_DATA_CAPTURE" not in tables:
        return None
    rows = con.execute(
        "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'"
    ).fetchall()
    env: dict[str, set[str]] = {}
    for (value,) in rows:
        if not isinstance(value, str) or "=" not in value:
            continue
        key, _, val = value.partition("=")
        if key in names:
            env.setdefault(key, set()).add(val.strip().strip('"'))
    for key in names:
        vals = env.get(key)
        if vals and len(vals) == 1:
            try:
                return int(next(iter(vals)))
            except ValueError:
                continue
    return None


def _frame(n: int, **cols: object) -> pd.DataFrame:
    out = {}
    for k, v in cols.items():
        if isinstance(v, (str, int, np.integer)) or v is None:
            v = [v] * n
        out[k] = v
    return pd.DataFrame(out, index=pd.RangeIndex(n))


def _gpu_activity(df: pd.DataFrame) -> dict[str, object]:
    """The columns every CUPTI GPU activity row has (kernels, memcpy, memset)."""
    return {
        "pid": _pid(df["globalPid"]),
        "device": pd.array(df["deviceId"], dtype="Int16"),
        "stream": pd.array(df["streamId"], dtype="Int64"),
        "start_ns": ns_column(df["start"]),
        "end_ns": ns_column(df["end"]),
        "correlation": pd.array(df["correlationId"], dtype="Int64"),
    }


def _host_call(df: pd.DataFrame) -> dict[str, object]:
    """The columns every host-thread row has (CUDA API, OS runtime, MPI)."""
    return {
        "pid": _pid(df["globalTid"]),
        "tid": _tid(df["globalTid"]),
        "start_ns": ns_column(df["start"]),
        "end_ns": ns_column(df["end"]),
    }


def _kernels(con, tables, strings, kernel_names) -> pd.DataFrame | None:
    t = "CUPTI_ACTIVITY_KIND_KERNEL"
    if t not in tables:
        return None
    df = _q(
        con,
        f"SELECT {_cols(con, t, ['start', 'end', 'deviceId', 'streamId', 'correlationId', 'globalPid', 'demangledName', 'shortName', 'mangledName'])} FROM {t}",
    )
    col = {"demangled": "demangledName", "short": "shortName", "mangled": "mangledName"}[kernel_names]
    ids = df[col].where(df[col].notna(), df["demangledName"])
    names = ids.map(strings).fillna(ids.map(lambda i: f"<string {i}>"))
    short = df["shortName"].map(strings).fillna(names)
    kind = np.where([is_nccl_kernel(s) for s in short.astype(str)], "comm", "compute")
    return _frame(len(df), **_gpu_activity(df), name=names.astype(object), kind=kind, cat="cuda_kernel")


def _memcpy(con, tables) -> pd.DataFrame | None:
    t = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if t not in tables:
        return None
    df = _q(
        con,
        f"SELECT {_cols(con, t, ['start', 'end', 'deviceId', 'streamId', 'correlationId', 'globalPid', 'bytes', 'copyKind'])} FROM {t}",
    )
    labels = dict(MEMCPY_LABELS)
    if "ENUM_CUDA_MEMCPY_OPER" in tables:
        labels.update(dict(con.execute("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER").fetchall()))
    names = df["copyKind"].map(lambda k: f"[CUDA memcpy {labels.get(k, f'kind {k}')}]")
    return _frame(len(df), **_gpu_activity(df), name=names.astype(object), kind="memcpy", cat="cuda_memcpy",
                  bytes=pd.array(df["bytes"], dtype="Int64"))


def _memset(con, tables) -> pd.DataFrame | None:
    t = "CUPTI_ACTIVITY_KIND_MEMSET"
    if t not in tables:
        return None
    df = _q(
        con,
        f"SELECT {_cols(con, t, ['start', 'end', 'deviceId', 'streamId', 'correlationId', 'globalPid', 'bytes'])} FROM {t}",
    )
    return _frame(len(df), **_gpu_activity(df), name="[CUDA memset]", kind="memset", cat="cuda_memset",
                  bytes=pd.array(df["bytes"], dtype="Int64"))


def _runtime(con, tables, strings) -> pd.DataFrame | None:
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if t not in tables:
        return None
    df = _q(
        con,
        f"SELECT {_cols(con, t, ['start', 'end', 'eventClass', 'globalTid', 'correlationId', 'nameId'])} FROM {t}",
    )
    names = df["nameId"].map(strings).fillna(df["nameId"].map(lambda i: f"<string {i}>"))
    kind = np.where([is_sync_api(n) for n in names], "sync_wait", "runtime")
    cat = df["eventClass"].map({0: "cuda_runtime", 1: "cuda_driver"}).fillna("cuda_api")
    return _frame(len(df), **_host_call(df), name=names.astype(object), kind=kind, cat=cat.astype(object),
                  correlation=pd.array(df["correlationId"], dtype="Int64"))


def _osrt(con, tables, strings) -> pd.DataFrame | None:
    t = "OSRT_API"
    if t not in tables:
        return None
    df = _q(con, f"SELECT {_cols(con, t, ['start', 'end', 'globalTid', 'nameId'])} FROM {t}")
    names = df["nameId"].map(strings).fillna(df["nameId"].map(lambda i: f"<string {i}>"))
    return _frame(len(df), **_host_call(df), name=names.astype(object), kind="runtime", cat="osrt")


def _mpi(con, tables, strings) -> list[pd.DataFrame]:
    out = []
    for t in sorted(tables):
        if not (t.startswith("MPI_") and t.endswith("_EVENTS")):
            continue
        have = set(table_columns(con, t))
        if not {"start", "end", "globalTid"} <= have:
            continue
        size_col = next((c for c in ("size", "collSendSize", "messageSize") if c in have), None)
        wanted = ["start", "end", "globalTid", "textId"] + ([size_col] if size_col else [])
        df = _q(con, f"SELECT {_cols(con, t, wanted)} FROM {t}")
        names = df["textId"].map(strings).fillna(t)
        out.append(
            _frame(len(df), **_host_call(df), name=names.astype(object), kind="comm", cat="mpi",
                   bytes=pd.array(df[size_col], dtype="Int64") if size_col else None)
        )
    return out


def _nvtx(con, tables, strings, capture_end, path) -> pd.DataFrame | None:
    t = "NVTX_EVENTS"
    if t not in tables:
        return None
    wanted = ["start", "end", "eventType", "text", "textId", "globalTid", "domainId",
              "int64Value", "uint64Value", "int32Value", "uint32Value"]
    df = _q(con, f"SELECT {_cols(con, t, wanted)} FROM {t}")
    text = df["text"].where(df["text"].notna(), df["textId"].map(strings))
    pid = _pid(df["globalTid"])
    dom_rows = df[df["eventType"] == NVTX_DOMAIN_CREATE]
    domains: dict[tuple[int, object], str] = {}
    for d, p, name in zip(dom_rows["domainId"], pid[dom_rows.index], text[dom_rows.index], strict=False):
        if pd.notna(d) and isinstance(name, str):
            domains[(int(d), None if pd.isna(p) else int(p))] = name
    keep = df["eventType"].isin([NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND]).to_numpy()
    df, text, pid = df[keep], text[keep], pid[keep]
    n = len(df)
    if n == 0:
        return None
    dom_id = df["domainId"].fillna(0).astype(np.int64).to_numpy()
    cats = [
        "NVTX" if d == 0 else domains.get((d, None if pd.isna(p) else int(p)), f"domain {d}")
        for d, p in zip(dom_id, pid, strict=False)
    ]
    is_mark = (df["eventType"] == NVTX_MARK).to_numpy()
    start = ns_column(df["start"])
    end = df["end"]
    open_ranges = int((end.isna().to_numpy() & ~is_mark).sum())
    if open_ranges:
        warnings.warn(
            f"{path}: {open_ranges} NVTX range(s) were never closed (end is NULL); they are "
            f"closed at the capture end ({capture_end} ns on the session timeline)",
            RecoveryWarning,
            stacklevel=4,
        )
    # an end before the start is left for checked_times, which warns (no silent clamp)
    end = np.where(is_mark, start, ns_column(end.fillna(capture_end)))
    kind = np.where(
        is_mark,
        "marker",
        np.where(
            np.array(cats) == "scalescope", "phase", np.where(np.array(cats) == "NCCL", "comm", "range")
        ),
    )
    payload = df["int64Value"].copy()
    for c in ("uint64Value", "int32Value", "uint32Value"):
        payload = payload.where(payload.notna(), df[c])
    step = pd.array(payload.where(np.array(cats) == "scalescope"), dtype="Int32")
    names = text.where(text.notna(), "<unnamed>")
    return _frame(
        n,
        pid=pid,
        tid=_tid(df["globalTid"]),
        name=names.astype(object).to_numpy(),
        kind=kind,
        cat=np.array(cats, dtype=object),
        start_ns=start,
        end_ns=end,
        step=step,
    )


def read(
    path: str | Path,
    *,
    run_id: str | None = None,
    time: Literal["epoch", "session"] = "epoch",
    kernel_names: Literal["demangled", "short", "mangled"] = "demangled",
) -> pd.DataFrame:
    """Read an Nsight Systems SQLite export into the event schema.

    Parameters
    ----------
    path
        The ``.sqlite`` file written by ``nsys export --type sqlite``.
    run_id
        Value of ``run_id``; defaults to the file name without suffixes.
    time
        ``"epoch"``: add ``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` (when exported) so
        ``start_ns`` is Unix-epoch ns; ``"session"``: keep the session timeline (as the
        ``nsys stats`` CSV reports print it).
    kernel_names
        Which kernel name to use: ``"demangled"`` (full signature, default), ``"short"`` (the
        base name; what ``nsys stats ... cuda_gpu_trace:base`` prints) or ``"mangled"``.

    Returns
    -------
    pandas.DataFrame
        Event schema (see :mod:`analysis.schema`), one row per kernel, copy, set, CUDA API
        call, OS runtime call, MPI call, NVTX range or mark; sorted by ``start_ns``;
        ``source`` = ``"nsys_sqlite"``.

    Raises
    ------
    ReadError
        Not an SQLite file, not an nsys export, or a damaged/truncated database.
    """
    path = Path(path)
    if time not in ("epoch", "session"):
        raise ValueError(f"time must be 'epoch' or 'session', not {time!r}")
    if kernel_names not in ("demangled", "short", "mangled"):
        raise ValueError(f"kernel_names must be 'demangled', 'short' or 'mangled', not {kernel_names!r}")
    con = connect_ro(path)
    try:
        try:
            df = _read(
                con,
                path,
                run_id=run_id if run_id is not None else default_run_id(path),
                time=time,
                kernel_names=kernel_names,
            )
        except SQLITE_ERRORS as exc:
            raise sqlite_error(path, exc) from None
        except pd.errors.DatabaseError as exc:
            raise sqlite_error(path, exc) from None
        except VALUE_ERRORS as exc:
            raise value_error(path, exc) from None
    finally:
        con.close()
    return schema.validate_events(df)


def _read(
    con: sqlite3.Connection, path: Path, *, run_id: str, time: str, kernel_names: str
) -> pd.DataFrame:
    tables = sqlite_tables(con)
    if "StringIds" not in tables:
        if "StringTable" in tables:
            raise ReadError(path, "this is an nvprof database, not an nsys export; use format='nvprof_sqlite'")
        raise ReadError(path, "not an Nsight Systems export (no StringIds table)")
    strings = _strings(con)
    offset = 0
    if time == "epoch":
        utc = _scalar(con, tables, "TARGET_INFO_SESSION_START_TIME", "utcEpochNs")
        offset = int(utc) if utc is not None else 0
    parts = [
        _kernels(con, tables, strings, kernel_names),
        _memcpy(con, tables),
        _memset(con, tables),
        _runtime(con, tables, strings),
        _osrt(con, tables, strings),
        *_mpi(con, tables, strings),
    ]
    parts = [p for p in parts if p is not None and len(p)]
    capture_end = _scalar(con, tables, "ANALYSIS_DETAILS", "duration")
    if capture_end is None:
        capture_end = max((int(p["end_ns"].max()) for p in parts), default=0)
    nvtx = _nvtx(con, tables, strings, int(capture_end), path)
    if nvtx is not None:
        parts.append(nvtx)
    if not parts:
        return schema.make_events(0, run_id=run_id, start_ns=[], dur_ns=[], source=NAME)
    raw = pd.concat(parts, ignore_index=True)
    raw = raw.sort_values("start_ns", kind="mergesort").reset_index(drop=True)
    raw = checked_times(raw, path, stacklevel=4)

    rank: object = None
    if "MPI_RANKS" in tables:
        ranks = _q(con, "SELECT globalTid, rank FROM MPI_RANKS")
        by_pid = dict(zip(_pid(ranks["globalTid"]), ranks["rank"], strict=False))
        rank = pd.array(raw["pid"].map(by_pid), dtype="Int32")
    else:
        rank = _env_convention(con, tables, RANK_ENV)
    local_rank = _env_convention(con, tables, LOCAL_RANK_ENV)
    host = None
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        row = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name='Hostname' LIMIT 1").fetchone()
        host = row[0] if row else None

    start = raw["start_ns"].to_numpy(np.int64)
    dur = np.maximum(raw["end_ns"].to_numpy(np.int64) - start, 0)
    n = len(raw)
    cols = {c: raw[c] for c in ("pid", "tid", "device", "stream", "step", "bytes", "correlation") if c in raw}
    return schema.make_events(
        n,
        run_id=run_id,
        rank=rank,
        local_rank=local_rank,
        host=host,
        name=raw["name"].to_numpy(dtype=object),
        kind=raw["kind"].to_numpy(dtype=object),
        cat=raw["cat"].to_numpy(dtype=object),
        start_ns=start + offset,
        dur_ns=dur,
        source=NAME,
        **{k: (pd.array(v, dtype=schema.EVENT_COLUMNS[k])) for k, v in cols.items()},
    )


register(
    NAME,
    sniff=sniff,
    read=read,
    kind="events",
    suffixes=SUFFIXES,
    description="Nsight Systems SQLite export (nsys export --type sqlite)",
)
