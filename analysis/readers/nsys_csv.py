"""``nsys stats --format csv`` reports.

Trace reports become events (:func:`read`); summary reports are statistics, not events, and
are read by :func:`read_summary`.

=====================================================  ==================================
report (old name, nsys <= 2022.4)                      events
=====================================================  ==================================
``cuda_gpu_trace`` (``gputrace``)                      kernels ``compute`` (``comm`` for
                                                       ``nccl*``), ``[CUDA memcpy ...]``
                                                       ``memcpy``, ``[CUDA memset]``
                                                       ``memset``; ``bytes`` from
                                                       ``Bytes (MB)`` x 10^6
``cuda_api_trace`` (``cudaapitrace``)                  ``runtime`` (``sync_wait`` for the
                                                       synchronize calls)
``nvtx_pushpop_trace`` (``nvtxpptrace``)               ``range`` (``phase`` / ``comm`` for
                                                       the ``scalescope:`` / ``NCCL:``
                                                       domain prefixes)
=====================================================  ==================================

Reports are recognised by their columns, not their file names. Columns are matched with the
regex ``^(?P<name>.*?)(?: \\((?P<unit>[^)]*)\\))?$`` and converted by their unit (``ns``,
``us``, ``ms``, ``s`` to integer ns; ``B``, ``KB``, ``MB``, ``GB`` (powers of 10, as nsys
prints them) to bytes). ``None`` (2022.4) and empty cells are missing values. A file holding
``nsys stats`` stdout (several reports, each after a ``Processing [...] with [...]`` line,
separated by blank lines) is read table by table; ``SKIPPED:`` notices are ignored.

Time: the reports print the session timeline (0 = start of profiling), with no epoch
anchor, so ``start_ns`` is session-relative unless ``session_start_ns=`` is given (e.g.
``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` from the matching SQLite export), in which
case it is added to every start. With it, kernels, copies and sets agree with
:mod:`analysis.readers.nsys_sqlite` row for row (name as printed, start, duration, device,
stream, correlation); copy sizes differ by the CSV's rounding to 0.001 MB, and
``cuda_gpu_trace:base`` prints the short kernel names (``read(..., kernel_names="short")``
on the SQLite side).

NVTX names in nsys reports are ``"<domain>:<text>"`` for non-default domains. Since ``:`` is
common in range names (``aten::mm``), only the prefixes ``scalescope:`` and ``NCCL:`` (and
any passed in ``domains=``) are split off into ``cat``; other names are kept whole with
``cat`` = ``NVTX``.
"""

from __future__ import annotations

import csv
import io
import re
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import schema
from analysis._io import head, keep_parsed, read_text
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers._cupti import api_category, is_nccl_kernel, is_sync_api
from analysis.readers.registry import default_run_id, register

NAME = "nsys_csv"
SUFFIXES = (".csv", ".txt", ".log")

_COL = re.compile(r"^(?P<name>.*?)(?: \((?P<unit>[^)]*)\))?$")
_PROCESSING = re.compile(r"^Processing \[(?P<file>.*?)\] with \[(?P<report>.*?)\]")
TIME_UNITS = {"ns": 1, "nsec": 1, "us": 1_000, "usec": 1_000, "ms": 1_000_000, "msec": 1_000_000,
              "s": 1_000_000_000, "sec": 1_000_000_000}
SIZE_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
KNOWN_DOMAINS = ("scalescope", "NCCL")


def _split(col: str) -> tuple[str, str | None]:
    m = _COL.match(col.strip())
    assert m is not None  # the regex matches any string
    return m["name"].strip(), m["unit"]


def _looks_like_header(line: str) -> bool:
    names = {_split(c)[0] for c in line.split(",")}
    trace = "Start" in names and ("Duration" in names or "End" in names) and any(
        f"({u})" in line for u in TIME_UNITS
    )
    summary = "Time" in names and "Total Time" in names
    return trace or summary


def sniff(path: Path) -> bool:
    """A CSV whose first line is an nsys stats header, or nsys stats stdout."""
    path = Path(path)
    name = path.name.lower().removesuffix(".gz")
    if not name.endswith(SUFFIXES):
        return False
    text = head(path, 8192).decode("utf-8", errors="replace")
    lines = [ln.strip("\ufeff\r") for ln in text.splitlines()]
    lines = [ln for ln in lines if ln.strip()]
    if not lines:
        return False
    if _looks_like_header(lines[0]):
        return True
    return any(_PROCESSING.match(ln) for ln in lines[:20])


# --- splitting a file into tables -------------------------------------------------------------
def _tables(text: str) -> list[tuple[str | None, list[str]]]:
    """(report name or None, CSV lines) for each table in the text."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff").split("\n")
    if not any(_PROCESSING.match(ln) for ln in lines):
        body = [ln for ln in lines if ln.strip()]
        return [(None, body)] if body else []
    out: list[tuple[str | None, list[str]]] = []
    report: str | None = None
    cur: list[str] = []

    def flush() -> None:
        if cur:
            out.append((report, list(cur)))
        cur.clear()

    for ln in lines:
        m = _PROCESSING.match(ln)
        if m:
            flush()
            report = Path(m["report"].split()[0]).stem
            continue
        if not ln.strip():
            if cur:
                flush()
            continue
        if not cur and not _looks_like_header(ln):
            continue  # SKIPPED:/NOTICE:/Generating ... lines between tables
        cur.append(ln)
    flush()
    return out


def _parse(lines: list[str]) -> pd.DataFrame:
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header = rows[0]
    width = len(header)
    good = [r for r in rows[1:] if len(r) == width]
    frame = pd.DataFrame(good, columns=header, dtype=object)
    frame.attrs["bad_rows"] = len(rows) - 1 - len(good)
    return frame


def _classify(frame: pd.DataFrame) -> str:
    names = {_split(c)[0] for c in frame.columns}
    if "Start" in names:
        if names & {"GrdX", "Grid X", "Bytes", "Strm", "Ctx", "Stream"}:
            return "gpu_trace"
        if names & {"RangeStack", "NameTree", "Lvl", "DurChild"}:
            return "nvtx_trace"
        if names & {"Result", "CorrID", "Thread Name", "T-Pri"}:
            return "api_trace"
        return "unknown_trace"
    if names & {"Total Time", "Time", "Instances", "Num Calls", "Count"}:
        return "summary"
    return "unknown"


# --- value conversion -------------------------------------------------------------------------
def _col(frame: pd.DataFrame, *names: str) -> tuple[pd.Series | None, str | None]:
    for c in frame.columns:
        n, u = _split(c)
        if n in names:
            return frame[c], u
    return None, None


def _num(s: pd.Series) -> pd.Series:
    s = s.astype(object).where(~s.isin(["", "None", "N/A", "-"]), None)
    return pd.to_numeric(s, errors="coerce")


def _times(frame: pd.DataFrame, name: str) -> pd.Series | None:
    s, unit = _col(frame, name)
    if s is None:
        return None
    if unit not in TIME_UNITS:
        raise ValueError(f"column {name!r} has unit {unit!r}; expected one of {sorted(TIME_UNITS)}")
    return (_num(s) * TIME_UNITS[unit]).round()


def _required_times(frame: pd.DataFrame, name: str) -> pd.Series:
    v = _times(frame, name)
    if v is None:
        raise ValueError(f"no {name!r} column")
    return v


def _ints(frame: pd.DataFrame, *names: str, dtype: str = "Int64") -> object:
    s, _ = _col(frame, *names)
    if s is None:
        return None
    v = _num(s)
    info = np.iinfo(dtype.lower())
    if ((v < info.min) | (v > info.max)).any():
        raise ValueError(f"column {s.name!r} has values out of range")
    return pd.array(v.where(v.notna() & (v == v.round())), dtype=dtype)


def _device(frame: pd.DataFrame) -> object:
    s, _ = _col(frame, "Device")
    if s is None:
        return None
    num = s.astype(str).str.extract(r"\((\d+)\)\s*$")[0]
    num = num.where(num.notna(), s.astype(str).where(s.astype(str).str.fullmatch(r"\d+")))
    return pd.array(pd.to_numeric(num, errors="coerce"), dtype="Int16")


def _valid_rows(frame: pd.DataFrame, path: Path, what: str, dur: pd.Series | None = None,
                ) -> tuple[pd.DataFrame, pd.Series]:
    """The rows with a parsable ``Start`` (and ``dur``, when given) within int64 ns, and those
    start times (ns); the rows dropped here and those the CSV parse already dropped are
    counted in one warning."""
    start = _required_times(frame, "Start")
    ok = start.abs() < _NS_LIMIT
    if dur is not None:
        ok &= dur.abs() < _NS_LIMIT
    return keep_parsed(frame, start.where(ok), path, stacklevel=4,
                       detail=f" of the {what} table (wrong number of fields, or no parsable Start or Duration "
                              "within range)",
                       already_bad=int(frame.attrs.get("bad_rows", 0)))


#: |ns| at or above this does not fit int64 after the session offset: such rows are dropped.
_NS_LIMIT = 2.0**62


def _names(frame: pd.DataFrame, fill: str = "") -> pd.Series:
    names, _ = _col(frame, "Name")
    if names is None:
        raise ValueError("no 'Name' column")
    return names.fillna(fill).astype(str)


def _gpu_trace(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    frame, start = _valid_rows(frame, path, "cuda_gpu_trace", _required_times(frame, "Duration"))
    dur = _required_times(frame, "Duration")
    names = _names(frame)
    is_copy = names.str.startswith("[CUDA memcpy").to_numpy()
    is_set = names.str.startswith("[CUDA memset").to_numpy()
    nccl = np.array([is_nccl_kernel(n) for n in names], dtype=bool)
    kind = np.where(is_copy, "memcpy", np.where(is_set, "memset", np.where(nccl, "comm", "compute")))
    cat = np.where(is_copy, "cuda_memcpy", np.where(is_set, "cuda_memset", "cuda_kernel"))
    size, unit = _col(frame, "Bytes", "Size")
    nbytes = None
    if size is not None:
        factor = SIZE_UNITS.get(unit or "B")
        if factor is None:
            raise ValueError(f"size column has unit {unit!r}; expected one of {sorted(SIZE_UNITS)}")
        b = (_num(size) * factor).round()
        if (b.abs() >= 2.0**63).any():
            raise ValueError(f"column {size.name!r} has values out of range")
        nbytes = pd.array(b.where(is_copy | is_set), dtype="Int64")
    return pd.DataFrame(
        {
            "device": _device(frame),
            "stream": _ints(frame, "Strm", "Stream"),
            "name": names.to_numpy(dtype=object),
            "kind": kind,
            "cat": cat,
            "start_ns": start.to_numpy(np.int64),
            "dur_ns": dur.to_numpy(np.int64),
            "bytes": nbytes if nbytes is not None else pd.array([pd.NA] * len(frame), dtype="Int64"),
            "correlation": _ints(frame, "CorrId", "CorrID"),
        }
    )


def _api_trace(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    frame, start = _valid_rows(frame, path, "cuda_api_trace", _required_times(frame, "Duration"))
    dur = _required_times(frame, "Duration")
    names = _names(frame)
    return pd.DataFrame(
        {
            "pid": _ints(frame, "Pid", "PID"),
            "tid": _ints(frame, "Tid", "TID"),
            "name": names.to_numpy(dtype=object),
            "kind": ["sync_wait" if is_sync_api(n) else "runtime" for n in names],
            "cat": [api_category(n) for n in names],
            "start_ns": start.to_numpy(np.int64),
            "dur_ns": dur.to_numpy(np.int64),
            "correlation": _ints(frame, "CorrID", "CorrId"),
        }
    )


def _nvtx_trace(frame: pd.DataFrame, path: Path, domains: Iterable[str]) -> pd.DataFrame:
    frame, start = _valid_rows(frame, path, "nvtx_pushpop_trace", _nvtx_dur(frame, _times(frame, "Start")))
    dur = _nvtx_dur(frame, start)
    names = _names(frame, "<unnamed>")
    known = tuple(domains)
    cats, texts = [], []
    for n in names:
        dom, sep, text = n.partition(":")
        if sep and dom in known and not text.startswith(":"):
            cats.append(dom)
            texts.append(text)
        else:
            cats.append("NVTX")
            texts.append(n)
    kind = ["phase" if c == "scalescope" else "comm" if c == "NCCL" else "range" for c in cats]
    return pd.DataFrame(
        {
            "pid": _ints(frame, "PID", "Pid"),
            "tid": _ints(frame, "TID", "Tid"),
            "name": np.array(texts, dtype=object),
            "kind": kind,
            "cat": np.array(cats, dtype=object),
            "start_ns": start.to_numpy(np.int64),
            "dur_ns": dur.to_numpy(np.int64),
        }
    )


def _nvtx_dur(frame: pd.DataFrame, start: pd.Series) -> pd.Series:
    """An NVTX range's duration: its ``Duration``, else ``End - Start``."""
    end = _times(frame, "End")
    dur = _times(frame, "Duration")
    if dur is None:
        if end is None:
            raise ValueError("neither a 'Duration' nor an 'End' column")
        dur = end - start
    if end is not None:
        dur = dur.where(dur.notna(), end - start)
    return dur


def _load(path: Path) -> list[tuple[str | None, pd.DataFrame]]:
    text = read_text(path, what="row")
    tables = _tables(text)
    if not tables:
        raise ReadError(path, "no nsys stats table found (empty report or only notices)")
    out = []
    for report, lines in tables:
        if not _looks_like_header(lines[0]):
            raise ReadError(path, f"first line is not an nsys stats CSV header: {lines[0][:120]!r}")
        try:
            out.append((report, _parse(lines)))
        except csv.Error as exc:
            raise ReadError(path, f"malformed CSV: {exc}") from None
    return out


def read(
    path: str | Path,
    *,
    run_id: str | None = None,
    session_start_ns: int | None = None,
    domains: Iterable[str] = KNOWN_DOMAINS,
) -> pd.DataFrame:
    """Read the trace tables of an ``nsys stats --format csv`` file into the event schema.

    Parameters
    ----------
    path
        One report CSV (``<prefix>_<report>.csv``) or captured ``nsys stats`` stdout holding
        several reports.
    run_id
        Value of ``run_id``; defaults to the file name without suffixes.
    session_start_ns
        Epoch ns of the session start (``utcEpochNs`` of the SQLite export) to make times
        absolute; by default times stay session-relative, as printed.
    domains
        NVTX domain prefixes to split off range names into ``cat``.

    Returns
    -------
    pandas.DataFrame
        Event schema rows for every trace table, sorted by ``start_ns``; ``source`` =
        ``"nsys_csv"``. ``rank`` and ``host`` are missing (the reports do not say).

    Raises
    ------
    ReadError
        Empty or unrecognised file, or a file that holds only summary reports (use
        :func:`read_summary`).
    """
    path = Path(path)
    parts, summaries, unknown = _trace_tables(path, domains)
    if not parts and summaries and not unknown:
        raise ReadError(
            path,
            f"this is an nsys stats summary report ({', '.join(map(str, summaries))}), not a trace: "
            "summaries hold statistics, not events; use "
            "analysis.readers.nsys_csv.read_summary(path)",
        )
    if unknown:
        if not parts and not summaries:
            raise ReadError(path, f"unrecognised nsys stats report: {unknown[0]}")
        warnings.warn(
            f"{path}: skipped {len(unknown)} table(s) of a report type this reader does not "
            f"turn into events: {'; '.join(unknown)}",
            RecoveryWarning,
            stacklevel=2,
        )
    rid = run_id if run_id is not None else default_run_id(path)
    if not parts:
        return schema.make_events(0, run_id=rid, start_ns=[], dur_ns=[], source=NAME)
    return _events(parts, rid, session_start_ns, path)


def _trace_tables(path: Path, domains: Iterable[str],
                  ) -> tuple[list[pd.DataFrame], list[str], list[str]]:
    """The file's trace tables as event parts, and the labels of its summary reports and of
    the tables of unknown report types."""
    parts: list[pd.DataFrame] = []
    summaries: list[str] = []
    unknown: list[str] = []
    for report, frame in _load(path):
        kind = _classify(frame)
        label = report or path.name
        try:
            if kind == "gpu_trace":
                parts.append(_gpu_trace(frame, path))
            elif kind == "api_trace":
                parts.append(_api_trace(frame, path))
            elif kind == "nvtx_trace":
                parts.append(_nvtx_trace(frame, path, domains))
            elif kind == "summary":
                summaries.append(label)
            else:
                unknown.append(f"{label} (columns {list(frame.columns)[:6]}...)")
        except ValueError as exc:
            raise ReadError(path, f"{label}: {exc}") from None
    return parts, summaries, unknown


def _events(parts: list[pd.DataFrame], rid: str, session_start_ns: int | None, path: Path) -> pd.DataFrame:
    """One event frame, in time order, from the trace tables' parts."""
    raw = pd.concat(parts, ignore_index=True)
    raw = raw.sort_values("start_ns", kind="mergesort").reset_index(drop=True)
    offset = int(session_start_ns) if session_start_ns is not None else 0
    negative = int((raw["dur_ns"] < 0).sum())
    if negative:
        warnings.warn(f"{path}: {negative} event(s) with a negative duration; their dur_ns is set to 0",
                      RecoveryWarning, stacklevel=3)
    cols = {}
    for c in ("pid", "tid", "device", "stream", "bytes", "correlation"):
        if c in raw:
            cols[c] = pd.array(raw[c], dtype=schema.EVENT_COLUMNS[c])
    df = schema.make_events(
        len(raw),
        run_id=rid,
        name=raw["name"].to_numpy(dtype=object),
        kind=raw["kind"].to_numpy(dtype=object),
        cat=raw["cat"].to_numpy(dtype=object),
        start_ns=raw["start_ns"].to_numpy(np.int64) + offset,
        dur_ns=np.maximum(raw["dur_ns"].to_numpy(np.int64), 0),
        source=NAME,
        **cols,
    )
    return schema.validate_events(df)


# --- summaries --------------------------------------------------------------------------------
_SUMMARY_NAMES = {
    "Time": "time",
    "Total Time": "total",
    "Instances": "instances",
    "Num Calls": "instances",
    "Count": "instances",
    "Calls": "instances",
    "Avg": "avg",
    "Med": "med",
    "Min": "min",
    "Max": "max",
    "StdDev": "stddev",
    "Total": "total",
    "Name": "name",
    "Range": "name",
    "Operation": "name",
    "Style": "style",
}


def _snake(name: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()


def read_summary(path: str | Path) -> pd.DataFrame:
    """Read the summary tables of an ``nsys stats --format csv`` file.

    Parameters
    ----------
    path
        A summary report CSV (``cuda_gpu_kern_sum``, ``cuda_api_sum``, ``nvtx_sum``,
        ``osrt_sum``, ``cuda_gpu_mem_time_sum``, ... or their pre-2023 names), or stdout
        holding several reports.

    Returns
    -------
    pandas.DataFrame
        One row per summary line. ``report`` (the report name when known, else
        ``"summary"``), ``name``, then the statistics with units in their names:
        ``time_pct``, ``total_ns``, ``instances`` (Instances / Num Calls / Count),
        ``avg_ns``, ``med_ns``, ``min_ns``, ``max_ns``, ``stddev_ns``, or ``*_bytes`` for the
        size reports (MB x 10^6); other columns (``style``, ``grid_xyz``...) snake_cased.
    """
    path = Path(path)
    frames = []
    for report, frame in _load(path):
        if _classify(frame) != "summary":
            continue
        out: dict[str, object] = {"report": report or path.name.split(".")[0]}
        for c in frame.columns:
            n, unit = _split(c)
            base = _SUMMARY_NAMES.get(n, _snake(n))
            if unit == "%":
                out[f"{base}_pct"] = _num(frame[c]).to_numpy(float)
            elif unit in TIME_UNITS:
                out[f"{base}_ns"] = (_num(frame[c]) * TIME_UNITS[unit]).to_numpy(float)
            elif unit in SIZE_UNITS:
                out[f"{base}_bytes"] = (_num(frame[c]) * SIZE_UNITS[unit]).to_numpy(float)
            elif base == "instances":
                out[base] = pd.array(_num(frame[c]), dtype="Int64")
            else:
                out[base if not unit else f"{base}_{_snake(unit)}"] = frame[c].to_numpy(dtype=object)
        frames.append(pd.DataFrame(out, index=pd.RangeIndex(len(frame))))
    if not frames:
        raise ReadError(path, "no summary report in this file; for trace reports use read()")
    return pd.concat(frames, ignore_index=True)


register(
    NAME,
    sniff=sniff,
    read=read,
    kind="events",
    suffixes=SUFFIXES,
    description="nsys stats --format csv trace reports",
)
