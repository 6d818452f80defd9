"""nvprof CSV output (``nvprof --csv --print-gpu-trace`` / ``--print-api-trace``).

Layout (stderr or ``--log-file``): ``==<pid>== ...`` (or ``======== ...``) notice lines, a
quoted header row, an **unquoted units row** (``ms,us,,,,,,,,B,B,KB,GB/s,...``), then the
data. Every time column is converted by its own unit (``s``, ``ms``, ``us``, ``ns``) to
integer ns and every size column by its unit (``B``, ``KB``, ``MB``, ``GB``; nvprof's KB/MB/GB
are powers of 1024) to bytes. With ``--profile-child-processes`` each process adds a block;
every block is read and its rows get ``pid`` from the ``==<pid>==`` lines before it.

* GPU trace rows: kernels ``compute`` (``comm`` for ``nccl*``), ``[CUDA memcpy ...]``
  ``memcpy``, ``[CUDA memset]`` ``memset``. ``device`` from ``"<name> (<n>)"``, ``stream``,
  ``correlation`` from ``Correlation_ID``; without that column (CUDA <= 8 and the corpus file)
  kernel names end with ``" [<n>]"``, which nvprof appends for the launching API call: the
  suffix is moved to ``correlation`` (inferred from the format, not documented by NVIDIA).
* API trace rows (and API rows mixed into a GPU trace, recognised by an empty ``Device``):
  ``runtime``; ``sync_wait`` for the synchronize calls.
* ``Start`` is relative to the start of profiling (no epoch anchor).
* Summary mode (``Type, Time(%), Time, Calls, Avg, Min, Max, Name``) is statistics, not
  events: :func:`read` raises and points at :func:`read_summary`.
* A data line that does not have the header's number of fields, or whose ``Start`` does not
  parse, is dropped with one :class:`~analysis.errors.RecoveryWarning` giving the count.
"""

from __future__ import annotations

import csv
import io
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import schema
from analysis._io import head, keep_parsed, read_text
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers._cupti import api_category, is_nccl_kernel, is_sync_api
from analysis.readers.registry import default_run_id, register

NAME = "nvprof_csv"
SUFFIXES = (".csv", ".log", ".txt")

TIME_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
SIZE_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}
OTHER_UNITS = {"%", "GB/s", "MB/s", "KB/s", "B/s", "TB/s"}
_PID_LINE = re.compile(r"^==(\d+)==")
_NOTICE = re.compile(r"^==(\d+|=+)==")
_CORR_SUFFIX = re.compile(r"^(?P<name>.*\S) \[(?P<corr>\d+)\]$")
_TRACE_HEADERS = ('"Start","Duration"', '"Type","Time(%)"', '"Time(%)"')


def sniff(path: Path) -> bool:
    """nvprof's ``==PID==`` preamble or its quoted ``"Start","Duration"`` header."""
    path = Path(path)
    if not path.name.lower().removesuffix(".gz").endswith(SUFFIXES):
        return False
    text = head(path, 4096).decode("utf-8", errors="replace")
    lines = [ln.strip("\ufeff\r") for ln in text.splitlines() if ln.strip()]
    if not lines:
        return False
    first = lines[0]
    if _NOTICE.match(first):
        return any(ln.startswith(_TRACE_HEADERS) for ln in lines) or "NVPROF" in text or "nvprof" in text
    return first.startswith(_TRACE_HEADERS)


def _blocks(path: Path, text: str) -> list[tuple[int | None, list[str], list[str], list[list[str]], int]]:
    """(pid, header, units, rows, bad row count) per table."""
    out = []
    pid: int | None = None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff").split("\n")
    i = 0
    while i < len(lines):
        ln = lines[i]
        m = _PID_LINE.match(ln)
        if m:
            pid = int(m[1])
        if not ln.strip() or _NOTICE.match(ln) or not ln.startswith('"'):
            i += 1
            continue
        header = next(csv.reader([ln]))
        if i + 1 >= len(lines):
            raise ReadError(path, "the header row is the last line: no units row and no data")
        units = next(csv.reader([lines[i + 1]]), [])
        if len(units) != len(header) or not all(
            u == "" or u in TIME_UNITS or u in SIZE_UNITS or u in OTHER_UNITS for u in units
        ):
            raise ReadError(
                path,
                f"line {i + 2} should be nvprof's units row (like 'ms,us,,...,KB,GB/s,...') but is "
                f"{lines[i + 1][:80]!r}; without it the time and size columns cannot be converted",
            )
        rows: list[list[str]] = []
        bad = 0
        j = i + 2
        while j < len(lines):
            row_line = lines[j]
            if not row_line.strip():
                j += 1
                continue
            if _NOTICE.match(row_line) or row_line.startswith(_TRACE_HEADERS):
                break
            row = next(csv.reader(io.StringIO(row_line)), [])
            if len(row) == len(header):
                rows.append(row)
            else:
                bad += 1
            j += 1
        out.append((pid, header, units, rows, bad))
        i = j
    return out


def _convert(series: pd.Series, unit: str, table: dict[str, int]) -> pd.Series:
    v = pd.to_numeric(series.where(series != ""), errors="coerce")
    return (v * table[unit]).round() if unit in table else v


def _device(s: pd.Series) -> pd.arrays.IntegerArray:
    num = s.astype(str).str.extract(r"\((\d+)\)\s*$")[0]
    return pd.array(pd.to_numeric(num, errors="coerce"), dtype="Int16")


def _trace_block(path, pid, header, units, rows, bad) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=header, dtype=object)
    unit = dict(zip(header, units, strict=False))
    if "Start" not in frame or "Name" not in frame:
        raise ReadError(path, f"unrecognised nvprof table, columns {header[:8]}")
    if unit.get("Start") not in TIME_UNITS or unit.get("Duration") not in TIME_UNITS:
        raise ReadError(path, f"Start/Duration units {unit.get('Start')!r}/{unit.get('Duration')!r} are not time units")
    start = _convert(frame["Start"], unit["Start"], TIME_UNITS)
    dur = _convert(frame["Duration"], unit["Duration"], TIME_UNITS)
    ok = (start.abs() < 2.0**62) & (dur.abs() < 2.0**62)
    frame, start = keep_parsed(frame, start.where(ok), path, already_bad=bad, stacklevel=4,
                               detail=" (wrong number of fields, or no parsable Start or Duration within range)")
    dur = _convert(frame["Duration"], unit["Duration"], TIME_UNITS)
    names = frame["Name"].fillna("").astype(str)
    device = frame["Device"] if "Device" in frame else pd.Series([""] * len(frame))
    is_api = (device == "").to_numpy() & ~names.str.startswith("[CUDA").to_numpy()
    corr = (
        pd.to_numeric(frame["Correlation_ID"].where(frame["Correlation_ID"] != ""), errors="coerce")
        if "Correlation_ID" in frame
        else pd.Series([np.nan] * len(frame))
    )
    names = names.to_list()
    corr = corr.to_list()
    for k, n in enumerate(names):
        m = _CORR_SUFFIX.match(n)
        if m and not is_api[k] and not n.startswith("[CUDA") and pd.isna(corr[k]):
            names[k], corr[k] = m["name"], int(m["corr"])
    is_copy = np.array([n.startswith("[CUDA memcpy") for n in names], dtype=bool)
    is_set = np.array([n.startswith("[CUDA memset") for n in names], dtype=bool)
    kind = np.where(
        is_api,
        np.where([is_sync_api(n) for n in names], "sync_wait", "runtime"),
        np.where(
            is_copy,
            "memcpy",
            np.where(is_set, "memset", np.where([is_nccl_kernel(n) for n in names], "comm", "compute")),
        ),
    )
    cat = np.where(
        is_api,
        [api_category(n) for n in names],
        np.where(is_copy, "cuda_memcpy", np.where(is_set, "cuda_memset", "cuda_kernel")),
    )
    nbytes = pd.array([pd.NA] * len(frame), dtype="Int64")
    if "Size" in frame:
        if unit.get("Size") not in SIZE_UNITS and (frame["Size"] != "").any():
            raise ReadError(path, f"Size column has unit {unit.get('Size')!r}, not one of {sorted(SIZE_UNITS)}")
        nbytes = pd.array(_convert(frame["Size"], unit.get("Size", "B"), SIZE_UNITS), dtype="Int64")
    stream = (
        pd.array(pd.to_numeric(frame["Stream"].where(frame["Stream"] != ""), errors="coerce"), dtype="Int64")
        if "Stream" in frame
        else pd.array([pd.NA] * len(frame), dtype="Int64")
    )
    return pd.DataFrame(
        {
            "pid": pd.array([pid] * len(frame), dtype="Int64"),
            "device": _device(device),
            "stream": stream,
            "name": np.array(names, dtype=object),
            "kind": kind,
            "cat": cat,
            "start_ns": start.to_numpy(np.int64),
            "dur_ns": dur.to_numpy(np.int64),
            "bytes": nbytes,
            "correlation": pd.array(pd.to_numeric(pd.Series(corr), errors="coerce"), dtype="Int64"),
        }
    )


def _is_summary(header: list[str]) -> bool:
    return "Time(%)" in header or ("Type" in header and "Calls" in header)


def read(path: str | Path, *, run_id: str | None = None) -> pd.DataFrame:
    """Read an nvprof ``--csv`` GPU/API trace into the event schema.

    Parameters
    ----------
    path
        The nvprof CSV log.
    run_id
        Value of ``run_id``; defaults to the file name without suffixes.

    Returns
    -------
    pandas.DataFrame
        Event schema rows sorted by ``start_ns`` (relative to the start of profiling);
        ``source`` = ``"nvprof_csv"``.

    Raises
    ------
    ReadError
        Empty file, no table, a missing units row, unknown units, or a summary-mode file
        (use :func:`read_summary`).
    """
    path = Path(path)
    text = read_text(path, what="row")
    try:
        blocks = _blocks(path, text)
    except csv.Error as exc:
        raise ReadError(path, f"malformed CSV: {exc}") from None
    if not blocks:
        raise ReadError(path, "no nvprof CSV table found (no quoted header row after the ==PID== lines)")
    if all(_is_summary(h) for _, h, _, _, _ in blocks):
        raise ReadError(
            path,
            "this is an nvprof summary (Type, Time(%), Calls, ...), not a trace: it holds "
            "statistics, not events; use analysis.readers.nvprof_csv.read_summary(path), or "
            "re-run nvprof with --print-gpu-trace / --print-api-trace",
        )
    try:
        parts = [_trace_block(path, *b) for b in blocks if not _is_summary(b[1])]
    except (TypeError, ValueError, OverflowError) as exc:  # an id or size beyond its integer type
        raise ReadError(path, f"a value out of range: {exc}") from None
    raw = pd.concat(parts, ignore_index=True).sort_values("start_ns", kind="mergesort")
    raw = raw.reset_index(drop=True)
    negative = int((raw["dur_ns"] < 0).sum())
    if negative:
        warnings.warn(f"{path}: {negative} event(s) with a negative duration; their dur_ns is set to 0",
                      RecoveryWarning, stacklevel=2)
    df = schema.make_events(
        len(raw),
        run_id=run_id if run_id is not None else default_run_id(path),
        pid=pd.array(raw["pid"], dtype="Int64"),
        device=pd.array(raw["device"], dtype="Int16"),
        stream=pd.array(raw["stream"], dtype="Int64"),
        name=raw["name"].to_numpy(dtype=object),
        kind=raw["kind"].to_numpy(dtype=object),
        cat=raw["cat"].to_numpy(dtype=object),
        start_ns=raw["start_ns"].to_numpy(np.int64),
        dur_ns=np.maximum(raw["dur_ns"].to_numpy(np.int64), 0),
        bytes=pd.array(raw["bytes"], dtype="Int64"),
        correlation=pd.array(raw["correlation"], dtype="Int64"),
        source=NAME,
    )
    return schema.validate_events(df)


def read_summary(path: str | Path) -> pd.DataFrame:
    """Read nvprof's summary mode (``Type, Time(%), Time, Calls, Avg, Min, Max, Name``).

    Returns
    -------
    pandas.DataFrame
        ``pid``, ``type`` (``GPU activities`` / ``API calls``), ``name``, ``time_pct``,
        ``total_ns``, ``instances``, ``avg_ns``, ``min_ns``, ``max_ns`` (times converted by
        the units row).
    """
    path = Path(path)
    text = read_text(path, what="row")
    frames = []
    rename = {"Type": "type", "Name": "name", "Calls": "instances"}
    timed = {"Time": "total_ns", "Avg": "avg_ns", "Min": "min_ns", "Max": "max_ns"}
    for pid, header, units, rows, _bad in _blocks(path, text):
        if not _is_summary(header):
            continue
        frame = pd.DataFrame(rows, columns=header, dtype=object)
        unit = dict(zip(header, units, strict=False))
        out: dict[str, object] = {"pid": pd.array([pid] * len(frame), dtype="Int64")}
        for c in header:
            if c == "Time(%)":
                out["time_pct"] = pd.to_numeric(frame[c], errors="coerce").to_numpy(float)
            elif c in timed:
                if unit.get(c) not in TIME_UNITS:
                    raise ReadError(path, f"summary column {c!r} has unit {unit.get(c)!r}")
                out[timed[c]] = _convert(frame[c], unit[c], TIME_UNITS).to_numpy(float)
            elif c == "Calls":
                out["instances"] = pd.array(pd.to_numeric(frame[c], errors="coerce"), dtype="Int64")
            else:
                out[rename.get(c, re.sub(r"\W+", "_", c).strip("_").lower())] = frame[c].to_numpy(dtype=object)
        frames.append(pd.DataFrame(out, index=pd.RangeIndex(len(frame))))
    if not frames:
        raise ReadError(path, "no nvprof summary table in this file; for traces use read()")
    return pd.concat(frames, ignore_index=True)


register(
    NAME,
    sniff=sniff,
    read=read,
    kind="events",
    suffixes=SUFFIXES,
    description="nvprof --csv --print-gpu-trace / --print-api-trace log",
)
