"""GPU telemetry logged by ``nvidia-smi --query-gpu=... --format=csv`` (kind ``samples``).

Accepted shapes:

* nvidia-smi's own header with units (``timestamp, index, utilization.gpu [%],
  memory.used [MiB], power.draw [W]``) and values with units (``45 %``, ``21.76 W``);
* ``--format=csv,nounits`` (header units, bare values);
* ``--format=csv,noheader[,nounits]``: the file does not say which column is which, so pass
  ``read(path, columns=[...])`` with the ``--query-gpu`` field names in order; without it a
  :class:`~analysis.errors.ReadError` lists the accepted names;
* headers written by wrapper scripts (``timestamp,gpu_index,temperature_C,
  utilization_gpu_percent,power_W``, ``gpu_utilization[%]``, ``temperature[°C]``).

Field mapping onto :data:`analysis.schema.SAMPLE_COLUMNS`: ``utilization.gpu`` ->
``util_gpu_pct``; ``utilization.memory`` -> ``util_mem_pct``; ``memory.used`` /
``memory.total`` -> ``mem_used_mib`` / ``mem_total_mib`` (MiB; ``MB``/``GiB``/``KiB``/``B``
converted); ``power.draw`` (also ``.average``/``.instant``) -> ``power_w`` (``mW`` converted);
``temperature.gpu`` -> ``temp_c``; ``clocks.sm`` / ``clocks.current.sm`` -> ``sm_clock_mhz``;
``index`` / ``gpu_index`` -> ``device``. Other fields (``name``, ``uuid``, ``memory.free``...)
are not part of the schema and are ignored. ``[N/A]``, ``[Not Supported]`` and empty values
are NaN.

Time: nvidia-smi writes local wall-clock time without a zone (``2023/09/07 12:34:56.789``);
ISO-8601 (``2025-09-24T03:41:43.487Z``) is accepted too. Naive times are interpreted as UTC
unless ``tz=`` names the zone they were written in (an IANA name such as
``"America/New_York"``, an offset such as ``"-04:00"``, or a ``tzinfo``); times with an
explicit offset are converted exactly. ``ts_ns`` is Unix-epoch ns. ``host`` comes from
``host=``, else it is missing.

Rows with the wrong number of fields or an unparsable timestamp (including a repeated header
line from an appended log) are dropped with one RecoveryWarning giving the count.

Locales and clocks (each a RecoveryWarning naming the cause, never a silent loss): a log
written under a locale with a decimal comma (``73,41 W``; nvidia-smi puts a space after
each separator, none after a decimal comma) is read with decimal points; a GPU's clock
stepping back by more than a second (a daylight-saving change read without ``tz=``, a clock
set back) is named with the size of the step; with ``tz=``, a time in the hour a
daylight-saving change repeats is placed by its order in the log (before the clock stepped
back: summer time, after it: winter time), and one in the hour a change skips, which does
not exist in that zone, is dropped as such.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import schema
from analysis._io import decode_utf8, drop_nul_lines, head, keep_parsed, read_text_bytes
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers.registry import default_run_id, register

NAME = "nvml"
SUFFIXES = (".csv", ".log", ".txt")

#: Canonical field -> target column. Canonical = lower case, ``.`` and spaces -> ``_``,
#: unit suffix removed.
FIELDS: dict[str, str] = {
    "timestamp": "ts",
    "time": "ts",
    "index": "device",
    "gpu_index": "device",
    "gpu_id": "device",
    "utilization_gpu": "util_gpu_pct",
    "gpu_utilization": "util_gpu_pct",
    "gpu_util": "util_gpu_pct",
    "util_gpu": "util_gpu_pct",
    "utilization_memory": "util_mem_pct",
    "memory_utilization": "util_mem_pct",
    "mem_util": "util_mem_pct",
    "util_mem": "util_mem_pct",
    "memory_used": "mem_used_mib",
    "mem_used": "mem_used_mib",
    "fb_memory_used": "mem_used_mib",
    "memory_total": "mem_total_mib",
    "mem_total": "mem_total_mib",
    "power_draw": "power_w",
    "power_draw_average": "power_w",
    "power_draw_instant": "power_w",
    "power": "power_w",
    "temperature_gpu": "temp_c",
    "temperature": "temp_c",
    "gpu_temp": "temp_c",
    "temp": "temp_c",
    "clocks_sm": "sm_clock_mhz",
    "clocks_current_sm": "sm_clock_mhz",
    "sm_clock": "sm_clock_mhz",
}
#: nvidia-smi fields that are recognised but have no place in the sample schema.
IGNORED = ("name", "uuid", "pci_bus_id", "memory_free", "driver_version", "pstate",
           "serial", "fan_speed", "power_limit", "clocks_mem", "clocks_current_memory",
           "clocks_gr", "clocks_current_graphics")
#: The ``--query-gpu`` names to pass in ``columns=`` for a ``noheader`` log.
QUERY_FIELDS = ("timestamp", "index", "utilization.gpu", "utilization.memory", "memory.used",
                "memory.total", "power.draw", "temperature.gpu", "clocks.sm", "name", "uuid",
                "pci.bus_id", "memory.free")

_UNIT_WORDS = {"percent": "%", "pct": "%", "c": "c", "w": "w", "mw": "mw", "mib": "mib",
               "mb": "mb", "gib": "gib", "mhz": "mhz", "ghz": "ghz"}
_SCALE = {
    "mem": {"mib": 1.0, "mb": 1e6 / 2**20, "gib": 1024.0, "kib": 1 / 1024, "b": 1 / 2**20, "": 1.0},
    "power_w": {"w": 1.0, "mw": 1e-3, "": 1.0},
    "sm_clock_mhz": {"mhz": 1.0, "ghz": 1000.0, "": 1.0},
    "temp_c": {"c": 1.0, "°c": 1.0, "": 1.0},
    "pct": {"%": 1.0, "": 1.0},
}
_SMI_TS = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?$")
_ISO_TS = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}")
_VALUE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)\s*$")


def _canon(field: str) -> tuple[str, str]:
    """``'memory.used [MiB]'`` -> ``('memory_used', 'mib')``; ``'power_W'`` -> ``('power', 'w')``."""
    f = field.strip().strip("\ufeff").lower()
    unit = ""
    m = re.match(r"^(.*?)\s*\[(.*)\]\s*$", f)
    if m:
        f, unit = m[1], m[2].strip()
    f = re.sub(r"[.\s\-]+", "_", f).strip("_")
    if not unit and f not in FIELDS:
        base, _, last = f.rpartition("_")
        if base and last in _UNIT_WORDS:
            f, unit = base, _UNIT_WORDS[last]
    return f, unit.replace("°", "").replace("%", "%")


def _target(field: str) -> tuple[str | None, str]:
    name, unit = _canon(field)
    return FIELDS.get(name), unit


def sniff(path: Path) -> bool:
    """An nvidia-smi CSV log: a header naming a timestamp and a known GPU field, or a
    ``noheader`` log starting with an nvidia-smi timestamp. Never our ``ts_ns,...`` files."""
    path = Path(path)
    if not path.name.lower().removesuffix(".gz").endswith(SUFFIXES):
        return False
    text = head(path, 4096).decode("utf-8", errors="replace")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return False
    fields = [f.strip() for f in lines[0].split(",")]
    if fields[0].strip("\ufeff").lower() in ("ts_ns", "start (ns)") or fields[0].startswith(('"', "=")):
        return False
    if _SMI_TS.match(fields[0]) and len(fields) >= 2:
        return True
    targets = [_target(f)[0] for f in fields]
    return "ts" in targets and any(t not in (None, "ts", "device") for t in targets)


def _parse_ts(values: pd.Series, tz: object, path: Path | None = None) -> pd.Series:
    s = values.astype(str).str.strip()
    smi = s.str.match(_SMI_TS.pattern)
    out = pd.Series(pd.NaT, index=s.index, dtype="datetime64[ns, UTC]")
    if smi.any():
        naive = pd.to_datetime(s[smi], format="%Y/%m/%d %H:%M:%S.%f", errors="coerce")
        out[smi] = _localize(naive, tz, path)
    rest = ~smi & s.str.match(_ISO_TS.pattern)
    if rest.any():
        parsed = [pd.Timestamp(v) if _ok_ts(v) else pd.NaT for v in s[rest]]
        naive = [p is not pd.NaT and p.tzinfo is None for p in parsed]
        conv = [p.tz_convert("UTC") if p is not pd.NaT and not n else pd.NaT for p, n in zip(parsed, naive, strict=True)]
        out[rest] = pd.Series(conv, index=s[rest].index, dtype="datetime64[ns, UTC]")
        if any(naive):  # all at once, in file order: a repeated hour is placed by order, with a warning
            idx = s[rest].index[np.asarray(naive)]
            out[idx] = _localize(pd.Series([p for p, n in zip(parsed, naive, strict=True) if n], index=idx), tz, path)
    return out


def _ok_ts(v: str) -> bool:
    try:
        t = pd.Timestamp(v)
        if t.tzinfo is not None:
            t = t.tz_convert("UTC").tz_localize(None)
        return bool(_NS_MIN.tz_localize(None) < t < _NS_MAX.tz_localize(None))
    except (ValueError, TypeError, OverflowError):
        return False


def _tzinfo(tz: object) -> object:
    if tz is None:
        return "UTC"
    if isinstance(tz, str):
        m = re.fullmatch(r"(?:UTC)?([+-])(\d{1,2}):?(\d{2})?", tz.strip())
        if m:
            delta = dt.timedelta(hours=int(m[2]), minutes=int(m[3] or 0))
            return dt.timezone(delta if m[1] == "+" else -delta)
    return tz


#: The instants int64 ns can hold (a damaged year such as 3025 falls outside: NaT, dropped).
_NS_MIN, _NS_MAX = pd.Timestamp.min + pd.Timedelta(days=1), pd.Timestamp.max - pd.Timedelta(days=1)


def _localize(naive: pd.Series, tz: object, path: Path | None = None) -> pd.Series:
    """Naive wall-clock times of zone ``tz`` as UTC. A time in the hour a daylight-saving
    change repeats is placed by its order in the log (before the clock stepped back: summer
    time; after: winter time) and counted in a warning; one in the hour a change skips does
    not exist and is dropped, with a warning naming that cause."""
    naive = pd.to_datetime(naive)
    naive = naive.where((naive > _NS_MIN.tz_localize(None)) & (naive < _NS_MAX.tz_localize(None)))
    naive = naive.astype("datetime64[ns]")
    zone = _tzinfo(tz)
    if tz is None:
        return naive.dt.tz_localize(zone).dt.tz_convert("UTC")
    amb = naive.dt.tz_localize(zone, ambiguous="NaT", nonexistent="shift_forward").isna() & naive.notna()
    # each stretch of rows in a repeated hour: summer time until the clock steps back in it
    stretch = (~amb).cumsum()
    before = naive.groupby(stretch).cummax().groupby(stretch).shift(1)
    stepped = (naive < before).groupby(stretch).cummax()
    try:
        out = naive.dt.tz_localize(zone, ambiguous=(~stepped).to_numpy(), nonexistent="NaT")
    except (ValueError, TypeError):
        out = naive.dt.tz_localize(zone, ambiguous="NaT", nonexistent="NaT")
    if path is not None and len(naive):
        gap = out.isna() & naive.notna() & ~amb
        repeated = int(amb.sum())
        if repeated:
            warnings.warn(f"{path}: {repeated} timestamp(s) fall in the hour repeated by a daylight-saving change "
                          f"in {tz} (ambiguous); each placed by its order in the log (before the clock stepped "
                          "back: summer time, after: winter time)", RecoveryWarning, stacklevel=6)
        if gap.any():
            warnings.warn(f"{path}: {int(gap.sum())} timestamp(s) fall in the hour skipped by a daylight-saving "
                          f"change in {tz} (they do not exist there): those rows are dropped; is tz= the zone the "
                          "log was written in?", RecoveryWarning, stacklevel=6)
    return out.dt.tz_convert("UTC")


def _check_order(ts: pd.Series, devices: object, path: Path) -> None:
    """Warn when a GPU's clock steps back by more than a second (a daylight-saving change
    read without ``tz=``, or the clock set back): its later samples are interleaved in
    time with earlier ones."""
    if len(ts) < 2:
        return
    frame = pd.DataFrame({"ts": ts.to_numpy(), "device": devices if devices is not None else 0})
    back = frame.groupby("device", dropna=False)["ts"].cummax() - frame["ts"]
    worst = back.max()
    if pd.notna(worst) and worst > pd.Timedelta(seconds=1):
        row = int(back.to_numpy().argmax())
        warnings.warn(f"{path}: the clock steps back by {worst.to_pytimedelta()} (first at sample {row + 1}): a "
                      "daylight-saving change read without tz=, or the clock set back; samples after the step overlap earlier "
                      "ones in time (pass tz= the zone the log was written in, for a daylight-saving change)",
                      RecoveryWarning, stacklevel=4)


def _values(col: pd.Series, target: str, header_unit: str, path: Path) -> np.ndarray:
    kind = "mem" if target.startswith("mem_") else "pct" if target.endswith("_pct") else target
    scale = _SCALE[kind]
    if header_unit.lower().replace("°", "") not in scale:
        raise ValueError(f"unknown unit {header_unit!r} in the header for {target}")
    out = np.full(len(col), np.nan)
    bad: dict[str, int] = {}
    for i, raw in enumerate(col):
        m = _VALUE.match(str(raw))
        if not m:
            continue  # [N/A], [Not Supported], empty
        unit = (m[2] or header_unit).lower().replace("°", "")
        factor = scale.get(unit)
        if factor is None:
            bad[unit] = bad.get(unit, 0) + 1
            continue
        out[i] = float(m[1]) * factor
    if bad and np.isnan(out).all():  # not one stray value: the column's unit is unknown
        raise ValueError(f"unknown unit {next(iter(bad))!r} for {target}")
    if bad:
        units = ", ".join(repr(u) for u in list(bad)[:3])
        warnings.warn(f"{path}: {sum(bad.values())} {target} value(s) with an unreadable unit ({units}) left "
                      "empty", RecoveryWarning, stacklevel=5)
    lo, hi = schema.SAMPLE_RANGES.get(target, (-np.inf, np.inf))
    with np.errstate(invalid="ignore"):
        wrong = (~np.isfinite(out) & ~np.isnan(out)) | (out < lo) | (out > hi)
    if wrong.any():
        warnings.warn(f"{path}: {int(wrong.sum())} {target} value(s) out of range left empty",
                      RecoveryWarning, stacklevel=5)
        out[wrong] = np.nan
    return out


def read(
    path: str | Path,
    *,
    run_id: str | None = None,
    columns: Sequence[str] | None = None,
    tz: object = None,
    host: str | None = None,
) -> pd.DataFrame:
    """Read an nvidia-smi ``--query-gpu`` CSV log into the sample schema.

    Parameters
    ----------
    path
        The CSV log.
    run_id
        Value of ``run_id``; defaults to the file name without suffixes.
    columns
        The ``--query-gpu`` field names, in order, for a ``noheader`` log (see
        :data:`QUERY_FIELDS`); ignored when the file has a header.
    tz
        Zone of naive timestamps (IANA name, ``"+HH:MM"`` offset or ``tzinfo``); UTC when
        ``None``.
    host
        Value of the ``host`` column.

    Returns
    -------
    pandas.DataFrame
        Sample schema (``ts_ns`` epoch ns; metrics in %, MiB, W, °C, MHz), one row per GPU
        per sampling instant, in file order; ``source`` = ``"nvml"``.

    Raises
    ------
    ReadError
        Empty file, a ``noheader`` log without ``columns=``, no timestamp column, no known
        metric, or unknown units.
    """
    path = Path(path)
    raw = drop_nul_lines(read_text_bytes(path), path, what="row")
    text = _decode(raw, path)
    try:
        rows = [r for r in csv.reader(io.StringIO(text.lstrip("\ufeff")), skipinitialspace=True) if r]
    except csv.Error as exc:
        raise ReadError(path, f"malformed CSV: {exc}") from None
    if not rows:
        raise ReadError(path, "no rows (the file holds only blank lines)")
    header, body, targets = _header(rows, columns, path)
    if any(len(r) > len(header) for r in body):
        fixed = _decimal_commas(text.lstrip("\ufeff"), len(header), path)
        if fixed is not None:
            rows = [r for r in csv.reader(io.StringIO(fixed), skipinitialspace=True) if r]
            header, body, targets = _header(rows, columns, path)
    ts_idx = [i for i, (t, _) in enumerate(targets) if t == "ts"]
    if not ts_idx:
        raise ReadError(path, f"no timestamp column among {header}; nvidia-smi logs need --query-gpu=timestamp,...")
    if not any(t not in (None, "ts", "device") for t, _ in targets):
        raise ReadError(path, f"no known GPU metric among the columns {header}")
    width = len(header)
    good = [[f.strip() for f in r] for r in body if len(r) == width]
    bad = len(body) - len(good)
    frame = pd.DataFrame(good, columns=range(width), dtype=object)
    ts = _parse_ts(frame[ts_idx[0]], tz, path) if len(frame) else pd.Series([], dtype="datetime64[ns, UTC]")
    frame, ts = keep_parsed(frame, ts, path, already_bad=bad,
                            detail=" (wrong number of fields, repeated header or unparsable timestamp)")
    data = _metrics(frame, header, targets, path)
    _check_order(ts, data.get("device"), path)
    epoch = pd.Timestamp("1970-01-01", tz="UTC")
    ts_ns = ((ts - epoch) // pd.Timedelta(1, "ns")).to_numpy(np.int64) if len(ts) else np.array([], dtype=np.int64)
    df = schema.make_samples(
        len(frame),
        run_id=run_id if run_id is not None else default_run_id(path),
        host=host,
        ts_ns=ts_ns,
        source=NAME,
        **data,
    )
    return schema.validate_samples(df)


_DECIMAL_COMMA = re.compile(r"(?<=\d),(?=\d)")


def _decimal_commas(text: str, width: int, path: Path) -> str | None:
    """``text`` with the decimal commas of rows written under a locale such as ``de_DE``
    (``73,41 W``) read as decimal points, or None when no row has one. Such a row has more
    fields than the header; a comma between two digits (nvidia-smi puts a space after every
    separator) is its decimal comma when, read as a point, the row has the header's number
    of fields. Counted in a warning: never dropped in silence."""
    lines = text.split("\n")
    fixed = 0
    for i, line in enumerate(lines):
        if '"' in line or not _DECIMAL_COMMA.search(line) or line.count(",") + 1 <= width:
            continue
        new = _DECIMAL_COMMA.sub(".", line)
        if new.count(",") + 1 == width:
            lines[i], fixed = new, fixed + 1
    if not fixed:
        return None
    warnings.warn(f"{path}: {fixed} row(s) hold numbers with a decimal comma (a log written under a locale such "
                  "as de_DE: '73,41 W'), read as decimal points (73.41)", RecoveryWarning, stacklevel=4)
    return "\n".join(lines)


def _decode(raw: bytes, path: Path) -> str:
    """UTF-8 (nvidia-smi's own), with stray invalid bytes replaced (and warned); Latin-1 for
    a file with no valid UTF-8 multi-byte character at all (an old log whose "°" is one
    byte)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    text = raw.decode("utf-8", errors="replace")
    if any(ord(c) > 127 and c != "\ufffd" for c in text):
        return decode_utf8(raw, path, stacklevel=3)
    return raw.decode("latin-1")


def _header(rows: list[list[str]], columns: Sequence[str] | None, path: Path,
            ) -> tuple[list[str], list[list[str]], list]:
    """``(header, body rows, target per column)``: the file's header row, or ``columns``
    for a ``noheader`` log (whose first field is a timestamp)."""
    first = [f.strip() for f in rows[0]]
    if _SMI_TS.match(first[0]) or _ISO_TS.match(first[0]):
        if columns is None:
            raise ReadError(
                path,
                "this nvidia-smi log has no header (--format=csv,noheader), so its columns are "
                "unknown: pass read(path, columns=[...]) with the --query-gpu fields in order; "
                f"accepted names: {', '.join(QUERY_FIELDS)} (units may follow in brackets, "
                "e.g. 'memory.used [MiB]')",
            )
        header = list(columns)
        body = rows
    else:
        header, body = first, rows[1:]
    targets = [_target(h) for h in header]
    if columns is not None:
        unknown = [h for h, (t, _) in zip(header, targets, strict=False) if t is None and _canon(h)[0] not in IGNORED]
        if unknown:
            raise ReadError(path, f"unknown column name(s) {unknown}; accepted: {', '.join(QUERY_FIELDS)}")
    return header, body, targets


def _device_index(values: pd.Series, path: Path) -> object:
    """The ``index`` column: a GPU index is an integer in [0, 2**15); anything else (text, a
    fraction, a negative or huge number) is left empty and counted in a warning."""
    num = pd.to_numeric(values, errors="coerce")
    ok = num.notna() & (num == num.round()) & (num >= 0) & (num < 2**15)
    bad = int((~ok & values.astype(str).str.strip().ne("")).sum())
    if bad:
        warnings.warn(f"{path}: {bad} GPU index value(s) that are not an integer in [0, 32767] left empty",
                      RecoveryWarning, stacklevel=5)
    return pd.array(num.where(ok).astype("Float64").round(), dtype="Float64").astype("Int16")


def _metrics(frame: pd.DataFrame, header: list[str], targets: list, path: Path) -> dict[str, object]:
    """The sample columns of the parsed rows: one per known metric (the first column of
    each), and ``device``."""
    data: dict[str, object] = {}
    for i, (target, unit) in enumerate(targets):
        if target in (None, "ts") or target in data:
            continue
        if target == "device":
            data["device"] = _device_index(frame[i], path)
            continue
        try:
            data[target] = _values(frame[i], target, unit, path)
        except ValueError as exc:
            raise ReadError(path, f"column {header[i]!r}: {exc}") from None
    return data


register(
    NAME,
    sniff=sniff,
    read=read,
    kind="samples",
    suffixes=SUFFIXES,
    description="nvidia-smi --query-gpu CSV log",
)
