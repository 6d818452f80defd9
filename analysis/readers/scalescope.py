"""Reader for scalescope's own files: per-rank traces, samples, epochs, run directories.

Registered formats:

* ``scalescope_trace``: one ``rank-NNNNN.trace.json`` (events). Phases become kind
  ``phase`` (cat ``phase``, ``name`` the phase); DDP comm-hook records kind ``comm`` (cat
  ``ddp_hook``, ``tensor`` = ``bucketI``, ``bytes``); Horovod's in-flight records kind
  ``comm`` (cat ``hvd_hook``); instants kind ``marker``; other
  complete events kind ``range``. ``start_ns`` is the epoch ns on the rank's own clock,
  parsed exactly from the µs decimal string (no float rounding).
* ``scalescope_samples``: one ``samples-<host>.csv`` (samples), GPU or CPU columns.

A whole run directory (every rank's trace joined with its manifest, the Horovod
timeline, the samples) is read by :mod:`analysis.readers.rundir`; its layout and manifests
are :mod:`analysis.rundir`'s. This module is the format of one file only.

A trace cut off by a killed rank (no closing ``]``, maybe half a record) loads with one
:class:`~analysis.errors.RecoveryWarning` saying how many bytes were dropped.
"""

from __future__ import annotations

import json
import os
import warnings
from decimal import Decimal
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import _io, schema
from analysis._io import head
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers.registry import default_run_id, register

__all__ = [
    "parse_trace",
    "read_samples",
    "read_trace",
    "sniff_samples",
    "sniff_trace",
]

#: Newest trace format version this reader understands (run.json: :mod:`analysis.rundir`).
TRACE_VERSION = 1
#: |ns| at or beyond this does not fit int64 once the clock offset is added.
_NS_LIMIT = 2**62

_GPU_HEADER = ("ts_ns,host,device,util_gpu_pct,util_mem_pct,mem_used_mib,mem_total_mib,"
               "power_w,temp_c,sm_clock_mhz")
_CPU_HEADER = "ts_ns,host,cpu_core,rank,cpu_util_pct,rss_mib"


# -- sniffing ----------------------------------------------------------------------------------
def sniff_trace(path: Path) -> bool:
    """A scalescope trace names its ``scalescope_clock`` record in its first lines."""
    return b'"scalescope_clock"' in head(Path(path), 4096)


def sniff_samples(path: Path) -> bool:
    """A scalescope samples CSV starts with the header ``ts_ns,host,``."""
    return head(Path(path), 64).startswith(b"ts_ns,host,")


# -- trace -------------------------------------------------------------------------------------
def _us_to_ns(value: object) -> int | None:
    """A µs value as written (string from ``parse_float=str``, or int) -> exact int ns;
    None for anything that is not a number (a bool, null, a string, an object)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value * 1000
    if not isinstance(value, str):  # parse_float=str: a float is its text; a JSON string is too
        return None
    s = value.strip()
    if not s or not s.isascii() or s.lower() in ("nan", "inf", "infinity", "-inf", "-infinity"):
        return None
    try:
        neg = s.startswith("-")
        if neg:
            s = s[1:]
        if "e" in s or "E" in s:  # not written by us; exact enough through Decimal
            exp = Decimal(s).adjusted()  # 1e999999999: no exact product needed
            if exp > 30:
                ns = _NS_LIMIT  # beyond int64 ns: the caller drops it as such
            elif exp < -30:
                ns = 0
            else:
                ns = int((Decimal(s) * 1000).to_integral_value())
        else:
            if not (whole_frac := s.replace(".", "", 1)).isdigit() or not whole_frac.isascii():
                return None
            whole, _, frac = s.partition(".")
            frac3 = (frac + "000")[:3]
            ns = int(whole or "0") * 1000 + int(frac3)
            if len(frac) > 3 and int(frac[3]) >= 5:  # sub-ns digits: round half up
                ns += 1
        return -ns if neg else ns
    except (ValueError, ArithmeticError):  # decimal.InvalidOperation, Overflow
        return None


def _load_records(path: Path) -> tuple[list, int, bool]:
    """Parse the JSON array, tolerating a missing ``]``, a half-written last record and
    damaged records in the middle (NUL bytes, garbage: each costs its own line).

    Returns ``(records, bytes_dropped, closed)``: ``bytes_dropped`` are those of a
    half-written last record, ``closed`` whether the array was terminated.
    """
    raw = _io.read_text_bytes(path)  # gzip of any members; UTF-16 refused; BOM removed
    padded = raw.rstrip(b" \t\r\n\0")
    if b"\0" in raw[len(padded):]:  # zero fill after the end (a crash on an extended file)
        warnings.warn(f"{path}: {raw.count(0, len(padded)):,} byte(s) of NUL data after the end of the trace "
                      "were ignored", RecoveryWarning, stacklevel=4)
        raw = padded + b"\n"
    if b"\0" not in raw:
        # a damaged byte in a name: the record is kept, the byte replaced (NUL bytes are
        # left for the per-record parse below, which drops the record that holds them)
        raw = _io.decode_utf8(raw, path, stacklevel=3).encode("utf-8")
    body = raw.rstrip()
    if not body.lstrip().startswith(b"["):
        raise ReadError(path, "not a scalescope trace: it does not start with a JSON array '['")
    if body.endswith(b"]"):
        try:
            recs = json.loads(body, parse_float=str)
            if isinstance(recs, list):
                return recs, 0, True
        except ValueError:
            pass  # damage inside, or a trailing comma before ']': record by record below
    lined = _records_by_line(raw, path)
    if lined is not None:
        return lined
    if body.endswith(b"]"):
        body = body[:-1].rstrip()
    # Not one record per line (or nothing parsed): cut back to the last complete record.
    pos = len(body)
    while pos > 0:
        prefix = body[:pos].rstrip()
        if prefix.endswith((b"}", b"},")):
            candidate = prefix.rstrip(b",") + b"\n]"
            try:
                recs = json.loads(candidate, parse_float=str)
            except ValueError:
                recs = None
            if isinstance(recs, list):
                # what follows the last complete record, whitespace aside, is lost
                return recs, len(raw[len(prefix):].strip()), False
        nl = body.rfind(b"\n", 0, pos)
        if nl < 0:
            break
        pos = nl
    if body.strip() == b"[":
        return [], len(raw) - len(body), False
    raise ReadError(path, "not valid JSON and no complete record could be recovered")


def _records_by_line(raw: bytes, path: Path) -> tuple[list, int, bool] | None:
    """The records of a trace written one per line (as the recorder writes it), line by
    line: a line that does not parse costs that record only, and is named in a warning by
    what it holds (NUL bytes, invalid UTF-8, text that is not JSON) and where. A last line
    that does not parse in an unterminated array is the half-written record of a killed
    rank. None when no line parses (not written one record per line)."""
    recs: list = []
    bad: list[tuple[int, int, bytes]] = []  # (offset, line number, line)
    closed = False
    last_bad = False
    offset = 0
    opened = False
    after: list[tuple[int, int, bytes]] = []  # lines after the closing "]"
    for lineno, line in enumerate(raw.split(b"\n"), 1):
        start = offset
        offset += len(line) + 1
        text = line.strip()
        if not text:
            continue
        if not opened:  # the array's "[" (the caller checked it is there)
            opened, text = True, text[1:].strip()
            if not text:
                continue
        if closed:
            after.append((start, lineno, text))
            continue
        if text == b"]":
            closed = True
            continue
        piece = text.rstrip(b",").rstrip()
        if piece.endswith(b"]") and not piece.endswith(b"]}") and _closes(piece):
            piece, closed = piece[:-1].rstrip().rstrip(b","), True
        try:
            if b"\0" in piece:
                raise ValueError("NUL")
            recs.append(json.loads(piece, parse_float=str))
            last_bad = False
        except (ValueError, RecursionError):
            bad.append((start + max(line.find(piece[:1]), 0), lineno, piece))
            last_bad = True
    if not recs:
        return None
    if after:
        off, lineno, text = after[0]
        warnings.warn(f"{path}: {sum(len(t) for _, _, t in after):,} byte(s) after the closing ']' (from line "
                      f"{lineno}: {_io.describe_bytes(text, off)}) were ignored", RecoveryWarning, stacklevel=4)
    dropped = 0
    if last_bad and not closed:  # the record being written when the rank stopped
        dropped = len(bad.pop()[2])
    if bad:
        off, lineno, piece = bad[0]
        more = f"; {len(bad)} damaged record(s) in all" if len(bad) > 1 else ""
        warnings.warn(f"{path}: dropped {len(bad)} record(s) that do not parse: line {lineno} holds "
                      f"{_io.describe_bytes(piece, off)}{more}; the records before and after "
                      "were kept", RecoveryWarning, stacklevel=4)
    return recs, dropped, closed


def _closes(piece: bytes) -> bool:
    """Whether a line ending in ``]`` is a record followed by the array's closing bracket
    (``{...}]``), not a record whose last value is a list."""
    try:
        json.loads(piece[:-1].rstrip().rstrip(b","), parse_float=str)
        return True
    except (ValueError, RecursionError):
        return False


def _text(value: object) -> tuple[str, bool]:
    """``str(value)`` with lone surrogates (``"\\ud800"`` in the JSON) replaced by U+FFFD, no
    frame can hold them (Arrow strings are UTF-8); and whether one was replaced."""
    s = str(value)
    try:
        s.encode("utf-8")
        return s, False
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s), True


def _int(value: object, bits: int, notes: dict[str, int]) -> int | None:
    """An integer field (tid, step, epoch, bytes) as written, or None (counted in ``notes``)
    when it is not an integer of that many bits."""
    if value is None or (type(value) is int and -(2**bits) <= value < 2**bits):
        return value
    what = "an id, step, epoch or bytes that is not an integer in range (left empty)"
    notes[what] = notes.get(what, 0) + 1
    return None


def _event_columns(recs: list, path: Path) -> tuple[dict[str, list], dict[str, int]]:
    """The event columns of a trace's records (one value per X or instant record), and
    how many records of other types were skipped, by type."""
    cols: dict[str, list] = {k: [] for k in (
        "tid", "name", "kind", "cat", "start_ns", "dur_ns", "step", "epoch", "bytes", "tensor", "device")}
    skipped: dict[str, int] = {}
    notes: dict[str, int] = {}
    for r in recs:
        if not isinstance(r, dict):
            skipped["non-object"] = skipped.get("non-object", 0) + 1
            continue
        ph = r.get("ph")
        if ph == "M":
            continue
        if ph not in ("X", "i", "I"):
            skipped[str(ph)] = skipped.get(str(ph), 0) + 1
            continue
        args = r.get("args")
        if not isinstance(args, dict):
            if args is not None:
                notes["args that are not an object (ignored)"] = notes.get(
                    "args that are not an object (ignored)", 0) + 1
            args = {}
        rcat = r.get("cat")
        start = _us_to_ns(r.get("ts"))
        if start is None:
            what = "a ts that is not a number of µs (dropped)"
            notes[what] = notes.get(what, 0) + 1
            continue
        if abs(start) >= _NS_LIMIT:
            notes["a ts beyond ±2**62 ns (dropped)"] = notes.get("a ts beyond ±2**62 ns (dropped)", 0) + 1
            continue
        if ph == "X":
            if rcat == "phase":
                kind, cat = "phase", "phase"
            elif rcat == "comm":
                kind, cat = "comm", ("hvd_hook" if args.get("hook") == "horovod" else "ddp_hook")
            elif rcat == "device":  # a span timed by CUDA events (instrumentation.device)
                kind, cat = "device_phase", ("device_comm" if args.get("of") == "comm" else "device")
            else:
                kind, cat = "range", rcat
            if r.get("dur") is None:
                notes["no dur (kept with dur 0)"] = notes.get("no dur (kept with dur 0)", 0) + 1
                dur = 0
            else:
                dur = _us_to_ns(r["dur"])
            if dur is None:
                what = "a dur that is not a number of µs (dropped)"
                notes[what] = notes.get(what, 0) + 1
                continue
            if dur < 0:
                notes["a negative dur (set to 0)"] = notes.get("a negative dur (set to 0)", 0) + 1
            elif dur >= _NS_LIMIT:
                notes["a dur beyond 2**62 ns (dropped)"] = notes.get("a dur beyond 2**62 ns (dropped)", 0) + 1
                continue
        else:
            kind, cat, dur = "marker", rcat, 0
        cols["tid"].append(_int(r.get("tid"), 63, notes))
        name, bad_name = _text(r.get("name"))
        cat, bad_cat = (None, False) if cat is None else _text(cat)
        if bad_name or bad_cat:
            what = "text that is not Unicode (a lone surrogate escape, replaced with U+FFFD)"
            notes[what] = notes.get(what, 0) + 1
        cols["name"].append(name)
        cols["kind"].append(kind)
        cols["cat"].append(cat)
        cols["start_ns"].append(start)
        cols["dur_ns"].append(max(dur, 0))
        cols["step"].append(_int(args.get("step"), 31, notes))
        cols["epoch"].append(_int(args.get("epoch"), 31, notes))
        cols["bytes"].append(_int(args.get("bytes"), 63, notes))
        bucket = args.get("bucket")
        cols["tensor"].append(None if bucket is None or kind != "comm" else f"bucket{bucket}")
        cols["device"].append(_int(args.get("device"), 15, notes) if rcat == "device" else None)
    if notes:
        warnings.warn(f"{path}: " + "; ".join(f"{n} event(s) with {what}" for what, n in notes.items()),
                      RecoveryWarning, stacklevel=4)
    return cols, skipped


def parse_trace(path: Path, run_id: str | None) -> tuple[pd.DataFrame, dict]:
    recs, dropped, closed = _load_records(path)
    clock = next((r.get("args") for r in recs if isinstance(r, dict)
                  and r.get("name") == "scalescope_clock" and r.get("ph") == "M"), None)
    if not isinstance(clock, dict):
        raise ReadError(path, "no scalescope_clock metadata record: not a scalescope trace "
                        "(or cut off before its header)")
    version = clock.get("format_version", 1)
    if not isinstance(version, int) or version > TRACE_VERSION:
        raise ReadError(path, f"trace format_version {version!r} is newer than this reader "
                        f"understands ({TRACE_VERSION}); upgrade scalescope")
    end = next((r.get("args") for r in recs if isinstance(r, dict)
                and r.get("name") == "scalescope_end"), None)
    if not closed or dropped:
        warnings.warn(
            f"{path}: trace is not terminated (the file ends before the closing ']': the rank "
            f"did not close it, e.g. it was killed, or the file was cut); {dropped:,} byte(s) of "
            "an incomplete last record were dropped, "
            f"{sum(1 for r in recs if isinstance(r, dict) and r.get('ph') != 'M'):,} "
            "complete event(s) kept",
            RecoveryWarning,
            stacklevel=3,
        )
    cols, skipped = _event_columns(recs, path)
    if skipped:
        warnings.warn(
            f"{path}: ignored {sum(skipped.values())} record(s) of types scalescope does not "
            f"write ({', '.join(f'{k}: {v}' for k, v in sorted(skipped.items()))})",
            RecoveryWarning,
            stacklevel=3,
        )
    n = len(cols["name"])
    df = schema.make_events(
        n,
        run_id=run_id or default_run_id(path),
        rank=_clock_int(clock, "rank", path, default=0),
        local_rank=_clock_int(clock, "local_rank", path),
        host=None if clock.get("host") is None else _text(clock["host"])[0],
        pid=clock["os_pid"] if type(clock.get("os_pid")) is int and 0 <= clock["os_pid"] < 2**62 else None,
        source="scalescope_trace",
        **{k: (pd.array(v, dtype="object") if k in ("step", "epoch", "bytes", "tid", "device") else v)
           for k, v in cols.items()},
    )
    _correct_device_anchor(df, end, path)
    if n:
        order = np.lexsort((-df["dur_ns"].to_numpy(), df["start_ns"].to_numpy()))
        df = df.iloc[order].reset_index(drop=True)
    info = {"clock": clock, "end": end, "closed": closed, "bytes_dropped": dropped}
    return df, info


def _correct_device_anchor(df: pd.DataFrame, end: object, path: Path) -> None:
    """Move the device rows by the anchor correction the timer measured (no event can run
    before the host recorded it; ``docs/run-directory.md``), in place."""
    dev = end.get("device") if isinstance(end, dict) else None
    shift = dev.get("anchor_correction_ns") if isinstance(dev, dict) else None
    if not shift:
        return
    if type(shift) is not int or not 0 < shift < 10**12:
        warnings.warn(f"{path}: device anchor_correction_ns {shift!r} is not a plausible number of ns "
                      "(ignored)", RecoveryWarning, stacklevel=4)
        return
    on_device = (df["kind"] == "device_phase") | ((df["kind"] == "marker") & (df["cat"] == "device"))
    df.loc[on_device, "start_ns"] += shift


def _clock_int(clock: dict, key: str, path: Path, *, default: int | None = None) -> int | None:
    v = clock.get(key, default)
    if v is not None and not (type(v) is int and 0 <= v < 2**31):
        raise ReadError(path, f"scalescope_clock {key} is {v!r}, not a rank number")
    return v


def read_trace(path: str | os.PathLike[str], *, run_id: str | None = None) -> pd.DataFrame:
    """Read one ``rank-NNNNN.trace.json`` into the event schema (times on the rank's clock).

    Parameters
    ----------
    path
        The trace (optionally gzipped).
    run_id
        Value of the ``run_id`` column; default the file name without suffixes.

    Returns
    -------
    pandas.DataFrame
        Event schema, sorted by ``start_ns`` (longer spans first on ties); ``kind`` is
        ``phase``, ``comm``, ``marker`` or ``range``.
    """
    df, _ = parse_trace(Path(path), run_id)
    return df


# -- samples -----------------------------------------------------------------------------------
def read_samples(path: str | os.PathLike[str], *, run_id: str | None = None) -> pd.DataFrame:
    """Read one ``samples-<host>.csv`` into the sample schema.

    A last line cut off by a killed sampler is dropped with a :class:`RecoveryWarning`.
    """
    path = Path(path)
    # gzip of any members, UTF-16 refused, BOM removed; a line holding NUL bytes is dropped
    # and bytes that are not UTF-8 replaced, each named in a warning
    text = _io.read_text(path, what="row")
    header, _, rest = text.partition("\n")
    header = header.strip()
    if header not in (_GPU_HEADER, _CPU_HEADER):
        raise ReadError(path, f"unexpected header {header[:120]!r}; expected {_GPU_HEADER!r} "
                        f"or {_CPU_HEADER!r}")
    if rest and not rest.endswith("\n"):
        cut = rest.rfind("\n") + 1
        lost = len(rest) - cut
        warnings.warn(f"{path}: last line is incomplete (the sampler was killed mid-write); "
                      f"dropped {lost} byte(s) of 1 partial row", RecoveryWarning, stacklevel=3)
        rest = rest[:cut]
    names = header.split(",")
    if rest.strip():
        try:
            # a row with too many fields (damage) is skipped and counted below
            df = pd.read_csv(StringIO(rest), header=None, names=names, dtype=object,
                             keep_default_na=True, on_bad_lines="skip", skip_blank_lines=True)
        except (ValueError, pd.errors.ParserError) as exc:
            raise ReadError(path, f"malformed CSV rows: {exc}") from None
        skipped = sum(1 for ln in rest.split("\n") if ln.strip()) - len(df)
    else:
        df = pd.DataFrame({c: [] for c in names})
        skipped = 0
    # ts_ns: integer ns; a row whose ts_ns is not one (damage) costs that row only
    ts = pd.Series(_int_ns(df["ts_ns"]), index=df.index, dtype=object)
    df, ts = _io.keep_parsed(df, ts, path, already_bad=max(skipped, 0),
                             detail=" (wrong number of fields, or a ts_ns that is not an integer)")
    ts = ts.astype("int64")
    n = len(df)
    metrics, ints = _sample_values(df, names, path)

    out = schema.make_samples(
        n,
        run_id=run_id or default_run_id(path),
        host=df["host"].astype(object).where(df["host"].notna(), None).tolist(),
        **ints,
        ts_ns=ts.to_numpy(),
        source="scalescope_samples",
        **{k: v.to_numpy(dtype=float) for k, v in metrics.items()},
    )
    return out


def _sample_values(df: pd.DataFrame, names: list[str], path: Path) -> tuple[dict, dict]:
    """``(metrics, ids)`` of the samples rows: every value checked against its column's type
    and range; a bad one is left empty and counted (one warning), never the whole file lost
    or a wrapped number kept."""
    bad: dict[str, int] = {}

    def checked(col: str, lo: float, hi: float, integer: bool) -> pd.Series:
        given = df[col].notna() & df[col].astype(str).str.strip().ne("")
        num = pd.to_numeric(df[col], errors="coerce")
        with np.errstate(invalid="ignore"):
            ok = num.notna() & np.isfinite(num) & (num >= lo) & (num <= hi)
            if integer:
                ok &= num == num.round()
        if int((given & ~ok).sum()):
            bad[col] = int((given & ~ok).sum())
        return num.where(ok)

    metrics = {c: checked(c, *schema.SAMPLE_RANGES[c], integer=False)
               for c in names if c in schema.SAMPLE_METRICS}

    def ids(col: str) -> object:
        if col not in df:
            return None
        hi = 2**31 - 1 if col == "rank" else 2**15 - 1
        return pd.array(checked(col, 0, hi, integer=True).astype("Float64"),
                        dtype="Float64").astype("Int64").to_numpy(dtype=object, na_value=None)

    ints = {c: ids(c) for c in ("device", "cpu_core", "rank")}
    if bad:
        warnings.warn(f"{path}: {sum(bad.values())} value(s) of the wrong type or out of range left empty ("
                      + ", ".join(f"{c}: {k}" for c, k in bad.items()) + ")", RecoveryWarning, stacklevel=4)
    return metrics, ints


def _int_ns(values: pd.Series) -> list:
    """Each value as an int64 ns (decimal digits, optional sign), or None."""
    out: list = []
    for v in values.tolist():
        s = v.strip() if isinstance(v, str) else None
        if s and s.lstrip("-").isdigit() and s.lstrip("-").isascii():
            i = int(s)
            out.append(i if -(2**63) <= i < 2**63 else None)
        else:
            out.append(None)
    return out


register(
    "scalescope_trace",
    sniff=sniff_trace,
    read=read_trace,
    kind="events",
    suffixes=(".trace.json",),
    description="scalescope per-rank phase trace (rank-N.trace.json)",
)
register(
    "scalescope_samples",
    sniff=sniff_samples,
    read=read_samples,
    kind="samples",
    suffixes=(".csv",),
    description="scalescope NVML/CPU samples (samples-<host>.csv)",
)
