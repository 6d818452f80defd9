"""The Parquet caches: one module for the parse cache of single files and the cache of a
run's events that a Dask RunSet reads from.

**Files.** :func:`analysis.read` caches each parsed frame as Parquet in :func:`cache_dir`,
one entry per (file, reader, run id) slot, named ``<slot>.<digest>.parquet``: the digest
of the whole entry (so a damaged entry is never trusted), and in its metadata the
identity of its source (path, reader and versions, and a :func:`fingerprint` of the
file's content), checked on every hit, with the warnings the parse gave (raised again on
a hit). Entries are written through :mod:`analysis.atomic` (temporary file, renamed to the
name of its digest).

**Runs.** :func:`run_entry` writes one run's events to ``cache_dir() / "runs"``, keyed by
every file of the run directory and its fingerprint, for the workers of a Dask cluster
to hand a Dask DataFrame to the notebook (``docs/scale.md``). One protocol for both: the
same entry names, the same check on every use (:func:`_whole_entry`), the same writer
(:func:`write`).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import atomic, schema
from analysis._io import check_file
from analysis.errors import OutputError, RecoveryWarning, recording, replaying
from analysis.readers._assembly import NP_INT, missing
from analysis.readers.registry import Reader
from instrumentation.paths import leaves

#: Bumped whenever any reader's output changes, so cached Parquet files are not reused.
CACHE_VERSION = 4
#: Files at least this large are cached as Parquet by default.
CACHE_MIN_BYTES = 1 << 20


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
    (its content is still identified through the link, by :func:`fingerprint`)."""
    return os.path.abspath(path)


def file_key(path: Path, reader: Reader, run_id: str | None) -> str:
    """The cache slot of (file, reader, run_id); which content it holds is checked apart."""
    key = "|".join(map(str, (_given_path(path), reader.name, reader.version, CACHE_VERSION, run_id)))
    return hashlib.sha256(key.encode()).hexdigest()[:32]


#: Bytes of the source file's head and tail that go into its fingerprint.
_FINGERPRINT_BYTES = 1 << 16


def fingerprint(path: Path) -> dict:
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
    with replaying():
        for category, message in recorded:
            warnings.warn(message, _WARNING_CLASSES.get(category, UserWarning), stacklevel=5)


def _restore_dtypes(df: pd.DataFrame, reader: Reader) -> pd.DataFrame:
    columns = schema.EVENT_COLUMNS if reader.kind == "events" else schema.SAMPLE_COLUMNS
    for col, dtype in columns.items():
        if dtype == "category" and not isinstance(df[col].dtype, pd.CategoricalDtype):
            if df[col].isna().all():  # Parquet keeps an all-missing category column as plain nulls
                df[col] = missing(len(df), "category")
            else:
                df[col] = schema.as_category(df[col].astype(object).where(df[col].notna(), None), len(df))
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


def _whole_entry(slot: str, ident: dict, base: Path) -> tuple[Path, dict] | None:
    """The one check of every cache entry (files and runs): the entry of ``slot`` in
    ``base`` that is whole (the digest of its content is in its name), belongs to the same
    source (``ident`` but its ``source``) and was made from the same content (``source``),
    with its recorded metadata. Damaged or foreign entries are removed with a note, stale
    ones silently."""
    import pyarrow.parquet as pq

    try:
        entries = sorted(base.glob(f"{slot}.*.parquet"))
    except OSError:
        return None
    for entry in entries:
        problem = None
        try:
            if not entry.is_file():
                warnings.warn(f"parse cache: {entry} is not a regular file; not used", stacklevel=5)
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
                    return entry, info
        except Exception as exc:  # unreadable: never trusted
            problem = f"unreadable ({type(exc).__name__}: {exc})"
        _drop(entry, problem)
    return None


def _drop(entry: Path, problem: str | None) -> None:
    """Remove a cache entry that is not used, saying why when it is damaged or foreign."""
    if problem:
        warnings.warn(f"parse cache entry {entry} is {problem}; the file is parsed again", stacklevel=6)
    try:
        entry.unlink()
    except OSError:
        pass


def lookup(slot: str, ident: dict, reader: Reader) -> pd.DataFrame | None:
    """The cached frame of this slot if an entry passes :func:`_whole_entry`, with the
    warnings its parse gave raised again."""
    found = _whole_entry(slot, ident, cache_dir())
    if found is None:
        return None
    entry, info = found
    try:
        df = _restore_dtypes(_read_cache(entry, reader), reader)
    except Exception as exc:  # unreadable: never trusted (removed, the file parsed again)
        _drop(entry, f"unreadable ({type(exc).__name__}: {exc})")
        return None
    _replay(info.get("warnings") or [])
    return df


def write(df: pd.DataFrame, slot: str, info: dict, *, base: Path | None = None, strict: bool = False) -> Path | None:
    """Write the entry ``<slot>.<digest>.parquet`` in ``base`` (default :func:`cache_dir`)
    through :mod:`analysis.atomic` (temporary file, renamed to its digest), with the identity
    of its source in the Parquet metadata; older entries of the slot are removed. Returns
    the entry; a write that fails warns and returns None, or with ``strict`` raises."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = cache_dir() if base is None else base
    final: list[Path] = []

    def named(tmp: Path) -> Path:
        final.append(base / f"{slot}.{_entry_digest(tmp)}.parquet")
        return final[-1]

    try:
        table = pa.Table.from_pandas(df, preserve_index=False)
        meta = {**(table.schema.metadata or {}), b"scalescope": json.dumps(info).encode()}
        with atomic.replacing(base / slot, named=named) as tmp:
            # one row group (no chunk concatenation on re-load) and LZ4, which decodes faster
            # than the default Snappy at the same size
            pq.write_table(table.replace_schema_metadata(meta), tmp, compression="lz4",
                           row_group_size=max(len(df), 1))
        del table
        for old in base.glob(f"{slot}.*.parquet"):
            if old != final[-1] and old.is_file():
                old.unlink(missing_ok=True)
    except (OSError, ValueError, pa.ArrowException, OutputError) as exc:  # full disk, text Parquet cannot hold
        if strict:
            raise
        warnings.warn(f"could not write the parse cache in {base}: {exc}", stacklevel=4)
        return None
    return final[-1]


def cached(path: Path, reader: Reader, run_id: str | None,
           parse: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """The frame of ``path`` from the cache when a whole entry made from the same content is
    there (with the warnings its parse gave raised again); else ``parse()``, whose warnings
    go to the caller as they came, and whose frame (with rows) is written to the cache."""
    slot = file_key(path, reader, run_id)
    ident = {"path": _given_path(path), "reader": reader.name, "version": reader.version,
             "cache_version": CACHE_VERSION, "run_id": run_id, "source": fingerprint(path)}
    hit = lookup(slot, ident, reader)
    if hit is not None:
        return hit
    with replaying():  # no other thread records between this parse and its warnings raised again
        with recording() as caught:
            df = parse()
        recorded = [[w.category.__name__, str(w.message)] for w in caught]
        for w in caught:  # the caller sees them as if nothing had been recorded
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    if len(df):  # empty frames are cheap to rebuild
        write(df, slot, {**ident, "warnings": recorded})
    return df


# --------------------------------------------------------------------------------------
# Runs


def run_key(path: str | os.PathLike[str], run_id: str) -> str:
    """Cache key of one run's events: every file's name and fingerprint (size, mtime and
    ctime, inode, a digest of its first and last 64 KiB: the parse cache's own test, so a
    rewrite with the same size and a restored mtime still changes the key)."""
    parts = [str(Path(path).resolve()), run_id, str(CACHE_VERSION)]
    for f in sorted(Path(path).rglob("*")):
        if f.is_file() and not leaves(f):  # a link out of the experiment is never read (nor fingerprinted)
            parts.append(f"{f.relative_to(path)}:{sorted(fingerprint(f).items())}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def run_entry(path: str, run_id: str, events: Callable[[], pd.DataFrame]) -> Path:
    """The Parquet file of one run's events in ``cache_dir() / "runs"``: an entry that
    passes the same check as a file's (:func:`_whole_entry`: whole, of this run, made from
    the same files, :func:`run_key`), else written from ``events()`` as a file's entry is
    (:func:`write`); an entry that cannot be written raises."""
    base = cache_dir() / "runs"
    key = run_key(path, run_id)
    ident = {"path": str(Path(path).resolve()), "run_id": run_id, "cache_version": CACHE_VERSION, "source": key}
    found = _whole_entry(key, ident, base)
    if found is not None:
        return found[0]
    return write(events(), key, ident, base=base, strict=True)
