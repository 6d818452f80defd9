"""The tidy event and sample schemas every reader produces.

One row per interval or instant (events) or per measurement instant (samples), a plain
``RangeIndex``, identity in columns, units in column names. See ``docs/schema.md``.

Events
------
=============  ==========  ==============================================================
column         dtype       meaning
=============  ==========  ==============================================================
run_id         category    key into ``RunSet.runs``; the file stem for a bare file
rank           Int32       global rank (``<NA>`` where the source does not say)
local_rank     Int32       node-local rank
host           category    host name
pid            Int64       OS process id (not Horovod's tensor "pid")
tid            Int64       OS thread id
device         Int16       GPU index, ``<NA>`` for host events
stream         Int64       CUDA stream
name           category    kernel, op, NVTX range or Horovod activity name as recorded
kind           category    one of :data:`KINDS`
cat            category    the source's own category (Kineto ``cat``, NVTX domain,
                           Horovod level ``negotiate``/``op``/``activity``/``rank_ready``)
start_ns       int64       epoch ns when the source has an anchor, else trace-relative
dur_ns         int64       >= 0; 0 for instants
step           Int32       training iteration, if known
epoch          Int32       training epoch, if known
bytes          Int64       payload of a collective or copy
tensor         category    tensor / bucket name (Horovod, DDP buckets)
correlation    Int64       correlation id linking a launch to its GPU activity
source         category    registry name of the reader that produced the row
=============  ==========  ==============================================================

Samples
-------
``run_id, host, device, cpu_core, rank, ts_ns`` then float64 metric columns (NaN where a
source does not measure it): ``util_gpu_pct, util_mem_pct, mem_used_mib, mem_total_mib,
power_w, temp_c, sm_clock_mhz, cpu_util_pct, rss_mib``, then ``source``.
Host-wide CPU rows have ``cpu_core`` and ``rank`` missing; per-core rows set ``cpu_core``;
per-process rows set ``rank`` (process CPU % where 100 = one full core, and RSS).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from analysis.errors import SchemaError

#: The fixed ``kind`` vocabulary.
KINDS: tuple[str, ...] = (
    "compute",  # GPU kernels (non-communication)
    "comm",  # collectives: NCCL/gloo/MPI ops and kernels, Horovod collectives, DDP buckets
    "memcpy",  # copies: host<->device, fusion-buffer copies
    "memset",
    "data",  # data loading (DataLoader, our `data` phase is kind "phase")
    "sync_wait",  # host blocked waiting (cudaDeviceSynchronize, Horovod WAIT_FOR_DATA, queue)
    "negotiate",  # Horovod negotiation of which tensors are ready
    "cpu_op",  # framework CPU operators
    "runtime",  # CUDA runtime / driver API calls, OS runtime calls
    "phase",  # training phases: data, forward, backward, sync, optimizer, step, epoch, eval
    "device_phase",  # the same phases timed on the GPU's stream by CUDA events (instrumentation.device)
    "range",  # other user / NVTX ranges
    "marker",  # instants: CYCLE_START, NVTX marks, Horovod per-rank readiness ticks
    "other",
)

#: Training phases recorded by ``instrumentation`` (kind ``phase``).
PHASES: tuple[str, ...] = ("data", "forward", "backward", "sync", "optimizer", "step", "epoch", "eval")

EVENT_COLUMNS: dict[str, str] = {
    "run_id": "category",
    "rank": "Int32",
    "local_rank": "Int32",
    "host": "category",
    "pid": "Int64",
    "tid": "Int64",
    "device": "Int16",
    "stream": "Int64",
    "name": "category",
    "kind": "category",
    "cat": "category",
    "start_ns": "int64",
    "dur_ns": "int64",
    "step": "Int32",
    "epoch": "Int32",
    "bytes": "Int64",
    "tensor": "category",
    "correlation": "Int64",
    "source": "category",
}

SAMPLE_METRICS: tuple[str, ...] = (
    "util_gpu_pct",
    "util_mem_pct",
    "mem_used_mib",
    "mem_total_mib",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "cpu_util_pct",
    "rss_mib",
)

#: The range of each sample metric: a value outside it is damage, left empty with a warning
#: by every samples reader. CPU utilisation may pass 100 % (100 % is one core).
SAMPLE_RANGES: dict[str, tuple[float, float]] = {
    "util_gpu_pct": (0.0, 100.0), "util_mem_pct": (0.0, 100.0), "mem_used_mib": (0.0, float("inf")),
    "mem_total_mib": (0.0, float("inf")), "power_w": (0.0, float("inf")), "temp_c": (-273.15, float("inf")),
    "sm_clock_mhz": (0.0, float("inf")), "cpu_util_pct": (0.0, float("inf")), "rss_mib": (0.0, float("inf")),
}

SAMPLE_COLUMNS: dict[str, str] = {
    "run_id": "category",
    "host": "category",
    "device": "Int16",
    "cpu_core": "Int16",
    "rank": "Int32",
    "ts_ns": "int64",
    **dict.fromkeys(SAMPLE_METRICS, "float64"),
    "source": "category",
}

_CATEGORY_COLUMNS_EVENTS = [c for c, t in EVENT_COLUMNS.items() if t == "category"]


def _as_category(values: object, n: int) -> pd.Categorical:
    if values is None:  # all missing (built from codes: no list of n objects)
        return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8),
                                         categories=pd.Index([], dtype=object))
    if isinstance(values, str):  # a broadcast scalar
        return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8),
                                         categories=pd.Index([values], dtype=object))
    cat = pd.Categorical(values)
    # Keep categories as plain object strings: pandas 3 would otherwise infer the
    # arrow-backed ``str`` dtype, and mixing both kinds breaks ``concat``.
    if len(cat.categories) and cat.categories.dtype != object:
        cat = cat.set_categories(cat.categories.astype(object))
    elif not len(cat.categories):
        cat = pd.Categorical(cat, categories=pd.Index([], dtype=object))
    return cat


#: ``as_category(values, n)``: a categorical of ``n`` rows with object categories (a string
#: is broadcast, None is all missing), as the schema's category columns are built.
as_category = _as_category

#: The runs table's machine axes (``RunSet.runs``): where a run ran, from SLURM or the
#: sweep's ``--label cluster=/partition=``. Studies keep runs that differ in one apart; the
#: one list of them (the runs table, the studies, the metrics; with ``gpu_model`` where a
#: GPU model also keeps runs apart).
MACHINE_AXES: tuple[str, ...] = ("cluster", "partition")


def _owned(v: object, dtype: str, n: int) -> bool:
    """Whether ``v`` is already a column of ``dtype`` and length ``n`` that can be used as is."""
    if dtype == "category":
        return (isinstance(v, pd.Categorical) and len(v) == n
                and v.categories.dtype == object)
    if dtype in ("int64", "float64"):
        return (isinstance(v, np.ndarray) and v.ndim == 1 and len(v) == n
                and v.dtype == np.dtype(dtype))
    return (isinstance(v, pd.api.extensions.ExtensionArray) and len(v) == n
            and str(v.dtype) == dtype)


def _build(columns: Mapping[str, str], data: Mapping[str, object], n: int | None, *,
           copy: bool = True) -> pd.DataFrame:
    unknown = set(data) - set(columns)
    if unknown:
        raise SchemaError(f"unknown column(s) {sorted(unknown)}; schema has {list(columns)}")
    if n is None:
        n = 0
        for v in data.values():
            if v is not None and not isinstance(v, (str, int, float)):
                n = len(v)  # type: ignore[arg-type]
                break
    # every column below is a new array unless copy=False hands an already-typed array
    # over; the frame then takes the columns without copying them again
    out: dict[str, object] = {}
    for col, dtype in columns.items():
        v = data.get(col)
        if not copy and _owned(v, dtype, n):
            out[col] = v
        elif dtype == "category":
            out[col] = _as_category(v, n)
        elif dtype == "int64":
            if v is None:
                raise SchemaError(f"column {col!r} is required")
            arr = np.asarray(v)
            if arr.ndim == 0:
                arr = np.full(n, arr)
            out[col] = np.array(arr, dtype=np.int64)  # a copy: never the caller's array
        elif dtype == "float64":
            if v is None:
                out[col] = np.full(n, np.nan)
            else:
                arr = np.asarray(v, dtype=np.float64)
                out[col] = np.full(n, arr) if arr.ndim == 0 else arr.copy()
        else:  # nullable integers
            if v is None:
                out[col] = pd.array([pd.NA] * n, dtype=dtype)
            elif isinstance(v, (int, np.integer)):
                out[col] = pd.array(np.full(n, v), dtype=dtype)
            else:
                out[col] = pd.array(v, dtype=dtype)
    return pd.DataFrame(out, index=pd.RangeIndex(n), copy=False)


def make_events(n: int | None = None, *, copy: bool = True, **columns: object) -> pd.DataFrame:
    """Build an event frame in schema order and dtypes from column arrays.

    Missing optional columns are filled with missing values; a scalar is broadcast.
    ``start_ns`` and ``dur_ns`` are required.

    ``copy=False`` is for readers that built their columns for the frame: a column that is
    already of its schema dtype and length (a ``pd.Categorical`` with object categories, a
    nullable integer array of the right dtype, an ``int64`` ndarray) is used without a copy,
    so the caller must not modify it afterwards. Other columns are converted as usual. With
    the default ``copy=True`` the frame never shares memory with the arguments.

    Examples
    --------
    >>> df = make_events(name=["forward", "backward"], kind="phase", start_ns=[0, 10],
    ...                  dur_ns=[10, 20], rank=0, source="test")
    >>> list(df["dur_ns"])
    [10, 20]
    """
    return _build(EVENT_COLUMNS, columns, n, copy=copy)


def make_samples(n: int | None = None, *, copy: bool = True, **columns: object) -> pd.DataFrame:
    """Build a sample frame in schema order and dtypes from column arrays (see
    :func:`make_events` for ``copy``)."""
    return _build(SAMPLE_COLUMNS, columns, n, copy=copy)


def empty_events() -> pd.DataFrame:
    """An empty, valid event frame."""
    return make_events(0, start_ns=[], dur_ns=[])


def empty_samples() -> pd.DataFrame:
    """An empty, valid sample frame."""
    return make_samples(0, ts_ns=[])


def _check_columns(df: pd.DataFrame, columns: Mapping[str, str], what: str) -> list[str]:
    problems = []
    if list(df.columns) != list(columns):
        missing = [c for c in columns if c not in df.columns]
        extra = [c for c in df.columns if c not in columns]
        problems.append(
            f"{what} columns differ from the schema (missing {missing}, extra {extra}, "
            f"or out of order)"
        )
        return problems
    for col, dtype in columns.items():
        actual = str(df[col].dtype)
        if actual != dtype:
            problems.append(f"column {col!r} has dtype {actual}, schema says {dtype}")
    if not isinstance(df.index, pd.RangeIndex):
        problems.append("index is not a RangeIndex")
    return problems


def validate_events(df: pd.DataFrame) -> pd.DataFrame:
    """Check an event frame against the schema; return it unchanged or raise SchemaError.

    Checks column names, order and dtypes, ``dur_ns >= 0``, ``kind`` within :data:`KINDS`,
    no missing ``name``/``kind``/``source``.
    """
    problems = _check_columns(df, EVENT_COLUMNS, "event")
    if not problems:
        if (df["dur_ns"] < 0).any():
            problems.append(f"{int((df['dur_ns'] < 0).sum())} row(s) with negative dur_ns")
        bad_kinds = set(df["kind"].dropna().unique()) - set(KINDS)
        if bad_kinds:
            problems.append(f"kind values outside the vocabulary: {sorted(bad_kinds)}")
        for col in ("name", "kind", "source"):
            if df[col].isna().any():
                problems.append(f"{int(df[col].isna().sum())} row(s) with missing {col}")
    if problems:
        raise SchemaError("invalid event frame: " + "; ".join(problems))
    return df


def validate_samples(df: pd.DataFrame) -> pd.DataFrame:
    """Check a sample frame against the schema; return it unchanged or raise SchemaError."""
    problems = _check_columns(df, SAMPLE_COLUMNS, "sample")
    if not problems:
        for col in ("util_gpu_pct", "util_mem_pct"):
            v = df[col].dropna()
            if ((v < 0) | (v > 100)).any():
                problems.append(f"{col} outside 0..100")
        if df["source"].isna().any():
            problems.append("rows with missing source")
    if problems:
        raise SchemaError("invalid sample frame: " + "; ".join(problems))
    return df


def validate(df: pd.DataFrame) -> pd.DataFrame:
    """Validate an event or a sample frame, whichever schema its columns claim."""
    if "ts_ns" in df.columns:
        return validate_samples(df)
    return validate_events(df)


def concat(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate frames of one schema, unioning categories so dtypes are kept."""
    frames = [f for f in frames]
    if not frames:
        return empty_events()
    cat_cols = [c for c in frames[0].columns if isinstance(frames[0][c].dtype, pd.CategoricalDtype)]
    if cat_cols:
        union = {col: pd.Index(sorted({v for f in frames for v in f[col].cat.categories}, key=str), dtype=object)
                 for col in cat_cols}
        # new frames holding the recoded columns (the others are not copied: pd.concat copies
        # every column once anyway); the callers' frames are left as they were
        frames = [f.assign(**{col: f[col].cat.set_categories(cats) for col, cats in union.items()})
                  for f in frames]
    out = pd.concat(frames, ignore_index=True)
    return out
