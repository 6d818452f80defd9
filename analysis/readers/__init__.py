"""One registry of readers, one module per format.

Each reader module defines ``sniff(path) -> bool`` (cheap: suffix and first bytes, never a
full parse) and ``read(path, *, run_id=None) -> DataFrame`` in the event or sample schema,
and registers itself with :func:`register`. Third-party readers register through the
entry-point group ``scalescope.readers`` (each entry point names a module that calls
:func:`register` on import).

>>> import analysis
>>> df = analysis.read("trace.json.gz")                # doctest: +SKIP
>>> df = analysis.read("report.sqlite", format="nsys_sqlite")  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from analysis import schema
from analysis._io import check_encoding, check_file, head, open_binary
from analysis.errors import (
    ReadError,
    RecoveryWarning,
    ScalescopeError,
    SchemaError,
    UnknownFormatError,
    recording,
)

#: Bumped whenever any reader's output changes, so cached Parquet files are not reused.
CACHE_VERSION = 4
#: Files at least this large are cached as Parquet by default.
CACHE_MIN_BYTES = 1 << 20

_BUILTIN_MODULES = (
    "analysis.readers.scalescope",
    "analysis.readers.horovod",
    "analysis.readers.kineto",
    "analysis.readers.nsys_sqlite",
    "analysis.readers.nsys_csv",
    "analysis.readers.nvprof_csv",
    "analysis.readers.nvprof_sqlite",
    "analysis.readers.nvml",
    "analysis.readers.nccl",
    "analysis.readers.nvsmi_topo",
)


@dataclass(frozen=True)
class Reader:
    """A registered format."""

    name: str
    sniff: Callable[[Path], bool]
    read: Callable[..., pd.DataFrame]
    kind: Literal["events", "samples"] = "events"
    suffixes: tuple[str, ...] = ()
    description: str = ""
    version: int = 1
    #: ``read`` takes ``workers=`` and can read one large file in parts in several processes
    parts: bool = False
    extra: dict = field(default_factory=dict)


REGISTRY: dict[str, Reader] = {}
_loaded = False


def register(
    name: str,
    *,
    sniff: Callable[[Path], bool],
    read: Callable[..., pd.DataFrame],
    kind: Literal["events", "samples"] = "events",
    suffixes: Iterable[str] = (),
    description: str = "",
    version: int = 1,
    parts: bool = False,
) -> Reader:
    """Add a reader to :data:`REGISTRY` (replacing one of the same name). ``parts``: its
    ``read`` takes ``workers=`` (one large file read in parts by several processes)."""
    reader = Reader(name, sniff, read, kind, tuple(suffixes), description, version, parts)
    REGISTRY[name] = reader
    return reader


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in _BUILTIN_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:  # a real missing dependency, not a module not yet written
                raise
    try:
        from importlib.metadata import entry_points

        for ep in entry_points(group="scalescope.readers"):
            try:
                ep.load()
            except Exception as exc:  # a broken plug-in must not break the built-ins
                warnings.warn(f"reader plug-in {ep.name!r} failed to load: {exc}", stacklevel=2)
    except Exception:  # pragma: no cover - importlib.metadata quirks
        pass


def formats() -> dict[str, Reader]:
    """All registered readers by name."""
    _load()
    return dict(REGISTRY)


def _describe_formats() -> str:
    return ", ".join(f"{r.name} ({r.description})" if r.description else r.name for r in REGISTRY.values())


def sniff(path: str | os.PathLike[str]) -> str:
    """Name of the first registered reader whose ``sniff`` accepts ``path``."""
    _load()
    path = Path(path)
    if os.path.isdir(path):
        raise ReadError(path, "is a directory; use analysis.read_many() for run directories")
    if check_file(path).st_size == 0:  # not found, link loop, no permission, FIFO or device: ReadError
        raise ReadError(path, "file is empty (0 bytes)")
    with open_binary(path):  # unreadable: "permission denied", not "not a format scalescope knows"
        pass
    for reader in REGISTRY.values():
        try:
            if reader.sniff(path):
                return reader.name
        except Exception:  # sniff must be cheap and total; a failing sniff means "not mine"
            continue
    check_encoding(head(path, 512), path)  # UTF-16/32 text: say so, not "unknown format"
    raise UnknownFormatError(
        path, "not a format scalescope knows. Known formats: " + _describe_formats()
    )


def cache_dir() -> Path:
    """Where parsed frames are cached: ``$SCALESCOPE_CACHE`` or ``~/.cache/scalescope``."""
    env = os.environ.get("SCALESCOPE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "scalescope"


def _given_path(path: Path) -> str:
    """The absolute path as given, symbolic links not followed: a reader takes the run_id
    (and Kineto a rank) from the name it was given, so a link is a file of its own here
    (its content is still identified through the link, by :func:`_fingerprint`)."""
    return os.path.abspath(path)


def _cache_key(path: Path, reader: Reader, run_id: str | None) -> str:
    """The cache slot of (file, reader, run_id); which content it holds is checked apart."""
    key = "|".join(map(str, (_given_path(path), reader.name, reader.version, CACHE_VERSION, run_id)))
    return hashlib.sha256(key.encode()).hexdigest()[:32]


#: Bytes of the source file's head and tail that go into its fingerprint.
_FINGERPRINT_BYTES = 1 << 16


def _fingerprint(path: Path) -> dict:
    """What identifies a source file's content without reading all of it: size, mtime and
    ctime (ns), inode and device, and a digest of its first and last 64 KiB. A rewrite with
    the same size and a restored mtime still changes ctime (and a rename over it, the inode)."""
    st = check_file(path)
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        h.update(fh.read(_FINGERPRINT_BYTES))
        if st.st_size > _FINGERPRINT_BYTES:
            fh.seek(max(_FINGERPRINT_BYTES, st.st_size - _FINGERPRINT_BYTES))
            h.update(fh.read(_FINGERPRINT_BYTES))
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino,
            "dev": st.st_dev, "head_tail": h.hexdigest()}


def _entry_digest(path: Path) -> str:
    """Digest of a whole cache entry (it is in the entry's file name)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


_WARNING_CLASSES = {c.__name__: c for c in (RecoveryWarning, UserWarning, RuntimeWarning)}


def _replay(recorded: list[list[str]]) -> None:
    """Issue again the warnings the parse of a cached frame gave (so a cached re-read of a
    damaged file says what was lost, as the first read did)."""
    for category, message in recorded:
        warnings.warn(message, _WARNING_CLASSES.get(category, UserWarning), stacklevel=4)


def _restore_dtypes(df: pd.DataFrame, reader: Reader) -> pd.DataFrame:
    from analysis.readers._assembly import missing

    columns = schema.EVENT_COLUMNS if reader.kind == "events" else schema.SAMPLE_COLUMNS
    for col, dtype in columns.items():
        if dtype == "category" and not isinstance(df[col].dtype, pd.CategoricalDtype):
            if df[col].isna().all():  # Parquet keeps an all-missing category column as plain nulls
                df[col] = missing(len(df), "category")
            else:
                df[col] = schema._as_category(df[col].astype(object).where(df[col].notna(), None), len(df))
        elif dtype == "category":
            cats = df[col].cat.categories
            if cats.dtype != object:
                df[col] = df[col].cat.set_categories(cats.astype(object))
        elif str(df[col].dtype) != dtype:
            df[col] = df[col].astype(dtype)
    return df


def _all_null_columns(meta: Any) -> set[str]:  # a pyarrow.parquet.FileMetaData
    """Columns that the Parquet statistics show to be missing in every row."""
    n, out = meta.num_rows, set()
    if not n:
        return out
    for i in range(meta.num_columns):
        nulls = 0
        for rg in range(meta.num_row_groups):
            st = meta.row_group(rg).column(i).statistics
            if st is None or not st.has_null_count:
                break
            nulls += st.null_count
        else:
            if nulls == n:
                out.add(meta.schema.column(i).name)
    return out


def _read_cache(path: Path, reader: Reader) -> pd.DataFrame:
    """A cached frame, read with as little memory traffic as the parse itself.

    Columns missing in every row (8 of 19 in a Horovod frame) are not read: they are rebuilt
    as the readers build them, all-missing arrays whose values are never made resident.
    The others are handed from Arrow to pandas column by column (``split_blocks``), each
    Arrow buffer released once converted (``self_destruct``).
    """
    import pyarrow.parquet as pq

    from analysis.readers._assembly import NP_INT, missing

    columns = schema.EVENT_COLUMNS if reader.kind == "events" else schema.SAMPLE_COLUMNS
    with pq.ParquetFile(path) as f:  # one file: no dataset discovery as in read_table
        names = f.schema_arrow.names
        n = f.metadata.num_rows
        lazy = {c for c in _all_null_columns(f.metadata)
                if columns.get(c) == "category" or columns.get(c) in NP_INT}
        table = f.read(columns=[c for c in names if c not in lazy])
    df = table.to_pandas(split_blocks=True, self_destruct=True)
    del table
    data = {}
    for c in names:
        if c in lazy:
            data[c] = missing(n, columns[c])
            continue
        col = df.pop(c)  # popped, its array is the frame's own (not a read-only view of it)
        if isinstance(col.dtype, np.dtype):  # plain NumPy: a read-only view of an Arrow buffer
            arr = col.to_numpy()
            data[c] = arr if arr.flags.writeable else arr.copy()
        else:
            data[c] = col.array
        del col
    # built without copies: pandas' insert/setitem would copy every column (and so make the
    # lazy all-missing values resident)
    return pd.DataFrame(data, copy=False)


def _sorted(df: pd.DataFrame, reader: Reader) -> pd.DataFrame:
    """Every frame from :func:`read` is in time order (stable, so ties keep file order)."""
    col = "start_ns" if reader.kind == "events" else "ts_ns"
    if col in df.columns and not df[col].is_monotonic_increasing:
        df = df.sort_values(col, kind="stable", ignore_index=True)
    return df


def read(
    path: str | os.PathLike[str],
    format: str | None = None,
    *,
    run_id: str | None = None,
    cache: bool | None = None,
    workers: int | None = None,
    **options: object,
) -> pd.DataFrame:
    """Read one file into the tidy event (or sample) schema.

    Parameters
    ----------
    path
        The file. Compressed ``.gz`` files are handled by the readers that accept them.
    format
        A registered reader name (see :func:`formats`); sniffed when ``None``.
    run_id
        Value for the ``run_id`` column; defaults to the file name without suffixes.
    cache
        Cache the parsed frame as Parquet keyed by path, size and mtime. ``None`` (default)
        caches files of at least 1 MiB. The cache lives in :func:`cache_dir`.
    workers
        Processes that decode one large plain Kineto trace or Horovod timeline in parts
        (``docs/scale.md``); the frame and warnings are those of ``workers=1``. ``None``
        (default) uses the machine's cores for a file of at least two parts' worth
        (:data:`analysis.readers._split.MIN_PART_BYTES` each), unless this process is itself
        a worker of a process pool or a Dask cluster; ``1`` reads in this process.
    **options
        Passed to the reader.

    Raises
    ------
    UnknownFormatError
        When no reader recognises the file; the message lists the known formats.
    ReadError
        For any damaged or unreadable input, naming the file and the problem.
    """
    _load()
    path = Path(path)
    if not isinstance(format, (str, type(None))):
        raise TypeError(f"format must be a registered reader name or None, not {type(format).__name__}")
    if format is None:
        format = sniff(path)
    elif format not in REGISTRY:
        raise UnknownFormatError(path, f"unknown format {format!r}. Known formats: {_describe_formats()}")
    reader = REGISTRY[format]
    st = check_file(path)
    use_cache = cache if cache is not None else st.st_size >= CACHE_MIN_BYTES
    use_cache = use_cache and not options and reader.kind in ("events", "samples")
    if reader.parts:
        options = {**options, "workers": _file_workers(workers, st.st_size)}
    if not use_cache:
        return _parse(path, reader, run_id, options)
    slot = _cache_key(path, reader, run_id)
    ident = {"path": _given_path(path), "reader": reader.name, "version": reader.version,
             "cache_version": CACHE_VERSION, "run_id": run_id, "source": _fingerprint(path)}
    hit = _cache_lookup(slot, ident, reader)
    if hit is not None:
        return hit
    with recording() as caught:
        df = _parse(path, reader, run_id, options)
    recorded = [[w.category.__name__, str(w.message)] for w in caught]
    for w in caught:  # the caller sees them as if nothing had been recorded
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    if len(df):  # empty frames are cheap to rebuild
        _cache_write(df, slot, {**ident, "warnings": recorded})
    return df


def _file_workers(workers: int | None, size: int) -> int:
    """Processes for one file: ``workers``, or (None) the machine's cores for a file of two
    parts or more, read in a process that is not itself a pool's or a cluster's worker."""
    import multiprocessing

    from analysis.readers import _split
    from analysis.scale import default_workers

    if workers is not None:
        return max(1, int(workers))
    if size < 2 * _split.MIN_PART_BYTES or multiprocessing.parent_process() is not None:
        return 1
    return default_workers()


def _parse(path: Path, reader: Reader, run_id: str | None, options: dict) -> pd.DataFrame:
    """``reader.read`` in time order and validated. What a parser raises from deep inside on
    damaged content (nesting too deep, numbers that overflow, text that is not Unicode, a
    value of an unexpected type) becomes a :class:`ReadError` naming the file; so does a
    frame that fails the schema."""
    from analysis.readers._assembly import small_pages

    try:
        with small_pages():  # a frame's fresh columns, first touched without compaction
            df = _sorted(reader.read(path, run_id=run_id, **options), reader)
        if reader.kind == "events":
            schema.validate_events(df)
        elif reader.kind == "samples":
            schema.validate_samples(df)  # other kinds (nccl, topo) validate their own frames
    except ScalescopeError as exc:
        if isinstance(exc, SchemaError) or (isinstance(exc, ReadError) and exc.path is None):
            raise ReadError(path, f"the {reader.name} reader made an invalid frame: {exc}") from None
        raise
    except RecursionError:
        raise ReadError(path, "nesting too deep to be a trace (recursion limit reached while parsing)") from None
    except (OverflowError, UnicodeError, AttributeError, KeyError, IndexError, MemoryError) as exc:
        raise ReadError(path, f"damaged or unexpected content: {type(exc).__name__}: {str(exc)[:200]}") from None
    return df


def _cache_lookup(slot: str, ident: dict, reader: Reader) -> pd.DataFrame | None:
    """The cached frame of this slot if an entry is whole (its digest matches its file
    name), belongs to this file and reader, and was made from the same content; damaged or
    foreign entries are removed with a note, stale ones silently."""
    import pyarrow.parquet as pq

    try:
        entries = sorted(cache_dir().glob(f"{slot}.*.parquet"))
    except OSError:
        return None
    for entry in entries:
        problem = None
        try:
            if not entry.is_file():
                warnings.warn(f"parse cache: {entry} is not a regular file; not used", stacklevel=3)
                continue
            if _entry_digest(entry) != entry.name.split(".")[1]:
                problem = "damaged (its checksum does not match)"
            else:
                info = json.loads((pq.read_metadata(entry).metadata or {}).get(b"scalescope", b"{}"))
                mine = {k: v for k, v in info.items() if k != "warnings"}
                if {k: v for k, v in mine.items() if k != "source"} != {k: v for k, v in ident.items()
                                                                       if k != "source"}:
                    problem = "foreign (it was made from another file or reader)"
                elif mine.get("source") == ident["source"]:
                    df = _restore_dtypes(_read_cache(entry, reader), reader)
                    _replay(info.get("warnings") or [])
                    return df
        except Exception as exc:  # unreadable: never trusted
            problem = f"unreadable ({type(exc).__name__}: {exc})"
        if problem:
            warnings.warn(f"parse cache entry {entry} is {problem}; the file is parsed again", stacklevel=3)
        try:
            entry.unlink()
        except OSError:
            pass
    return None


def _cache_write(df: pd.DataFrame, slot: str, info: dict) -> None:
    """Write the entry ``<slot>.<digest>.parquet`` atomically (temp file + rename), with the
    identity of its source in the Parquet metadata; older entries of the slot are removed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = cache_dir()
    tmp = base / f"{slot}.{os.getpid()}.tmp"
    try:
        base.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pandas(df, preserve_index=False)
        meta = {**(table.schema.metadata or {}), b"scalescope": json.dumps(info).encode()}
        # one row group (no chunk concatenation on re-load) and LZ4, which decodes faster
        # than the default Snappy at the same size
        pq.write_table(table.replace_schema_metadata(meta), tmp, compression="lz4", row_group_size=max(len(df), 1))
        del table
        final = base / f"{slot}.{_entry_digest(tmp)}.parquet"
        os.replace(tmp, final)
        for old in base.glob(f"{slot}.*.parquet"):
            if old != final and old.is_file():
                old.unlink(missing_ok=True)
    except (OSError, ValueError, pa.ArrowException) as exc:  # full disk, text Parquet cannot hold
        warnings.warn(f"could not write the parse cache in {base}: {exc}", stacklevel=3)
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def default_run_id(path: Path) -> str:
    """The file name without its suffixes (``rank0.pt.trace.json.gz`` -> ``rank0``)."""
    name = path.name
    for suffix in (".gz", ".json", ".sqlite", ".csv", ".nvprof", ".nvvp", ".trace", ".pt", ".jsonl"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or path.name


def _expand(paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for p in paths:
        p = Path(p)
        if not os.path.isdir(p):
            check_file(p)  # not found, link loop, permission denied, FIFO: ReadError naming it
        out.append(p)
    return out


#: Formats whose file is one rank's trace (its rank read from the file): ``read_many``
#: reads one file per rank of them.
PER_RANK_FORMATS = ("kineto", "scalescope_trace")


def _drop_duplicate_ranks(frames: list[pd.DataFrame], jobs: list) -> list[pd.DataFrame]:
    """The frames of separate per-rank files (:data:`PER_RANK_FORMATS`) without those that
    claim a rank an earlier file of the same format already claimed over an overlapping
    time span (the same rank's events twice would be counted twice), each dropped with a
    :class:`RecoveryWarning` naming both files. Files of one rank over disjoint spans (a
    profiler's trace per step) are kept; run directories and whole-job files (a Horovod
    timeline) are left alone."""
    claimed: dict[tuple[str, int], list[tuple[int, int, Path]]] = {}
    out = []
    for df, (func, path) in zip(frames, jobs, strict=True):
        if (getattr(func, "func", None) is not read or func.keywords.get("format") not in PER_RANK_FORMATS
                or df.empty or "rank" not in df.columns or df["rank"].isna().all()):
            out.append(df)
            continue
        lo = int(df["start_ns"].min())
        hi = int((df["start_ns"] + df["dur_ns"]).max())
        keys = {(str(src), int(r)) for src, r in
                df.loc[df["rank"].notna(), ["source", "rank"]].drop_duplicates().itertuples(index=False)}
        clash = next(((k, other) for k in sorted(keys) for (a, b, other) in claimed.get(k, [])
                      if lo <= b and a <= hi), None)
        if clash:
            (src, rank), other = clash
            warnings.warn(f"{path}: rank {rank} of this {src} file is also claimed by {other} over an overlapping "
                          f"time span; only {other} is read (one rank's events twice would be counted twice: "
                          "read the files of each run separately)", RecoveryWarning, stacklevel=3)
            continue
        for k in keys:
            claimed.setdefault(k, []).append((lo, hi, path))
        out.append(df)
    return out


def read_many(
    paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    format: str | None = None,
    kind: Literal["events", "samples"] = "events",
    cache: bool | None = None,
    workers: int | None = None,
) -> pd.DataFrame:
    """Read per-rank file sets, directories and scalescope run directories into one frame.

    A directory holding a ``run.json`` is a scalescope run directory: its per-rank traces,
    Horovod timeline and samples are read with the run's manifest (rank, host, clock
    offsets). Any other directory is searched recursively for files a reader recognises;
    files no reader knows are listed in one warning, never silently dropped.

    Parameters
    ----------
    paths
        Files and/or directories.
    format
        Force one reader for every file (not for run directories).
    kind
        ``"events"`` or ``"samples"``: which table to return.
    workers
        Processes reading the files and run directories in parallel (``docs/scale.md``):
        ``None`` uses the machine's cores when there is more than one and they hold at
        least 64 MiB, ``1`` reads in this process. A single Kineto trace or Horovod
        timeline is read in parts instead (as :func:`read` with ``workers``). Frames and
        warnings are those of serial reading, in the same order.
    """
    from functools import partial

    from analysis import scale

    _load()
    if kind not in ("events", "samples"):
        raise ValueError(f"kind must be 'events' or 'samples', not {kind!r}")
    if format is not None and format not in REGISTRY:
        raise ValueError(f"unknown format {format!r}. Known formats: {_describe_formats()}")
    jobs: list[tuple[Callable[[Path], pd.DataFrame], Path]] = []  # what to read, in order
    unknown: list[Path] = []
    for p in _expand(paths):
        if p.is_dir() and (p / "run.json").exists():
            from analysis.readers import scalescope as own

            jobs.append((partial(own.read_run_dir, kind=kind), p))
            continue
        if p.is_dir():
            runs = sorted(d.parent for d in p.rglob("run.json"))
            if runs:
                for d in runs:
                    from analysis.readers import scalescope as own

                    jobs.append((partial(own.read_run_dir, kind=kind), d))
                continue
            try:
                files = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
            except OSError as exc:
                raise ReadError(exc.filename or p, f"cannot list the directory: {exc.strerror or exc}") from None
        else:
            files = [p]
        for f in files:
            fmt = format
            if fmt is None:
                try:
                    fmt = sniff(f)
                except UnknownFormatError:
                    unknown.append(f)
                    continue
                except ReadError:
                    unknown.append(f)
                    continue
            if REGISTRY[fmt].kind != kind:
                continue
            jobs.append((partial(read, format=fmt, cache=cache, workers=1), f))
    n = scale.pool_workers(workers, n_tasks=len(jobs), n_bytes=sum(scale.input_bytes(p) for _, p in jobs))
    if len(jobs) == 1 and getattr(jobs[0][0], "func", None) is read:  # one file: read in parts
        frames = [jobs[0][0](jobs[0][1], workers=workers)]
    else:
        frames = [func(p) for func, p in jobs] if n <= 1 else scale.run_calls(jobs, workers=n)
    if kind == "events":
        frames = _drop_duplicate_ranks(frames, jobs)
    if unknown:
        shown = ", ".join(str(u) for u in unknown[:10])
        more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        warnings.warn(f"skipped {len(unknown)} file(s) no reader recognises: {shown}{more}", stacklevel=2)
    if not frames:
        return schema.empty_events() if kind == "events" else schema.empty_samples()
    return schema.concat(frames)
