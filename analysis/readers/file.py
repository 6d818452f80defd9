"""Reading one file: the format sniffed or named, the parse cache, the time order and the
schema check that every frame of :func:`read` has."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from analysis import schema
from analysis._io import GZIP_MAGIC, check_file, open_binary
from analysis.errors import ReadError, ScalescopeError, SchemaError, UnknownFormatError
from analysis.readers import cache as parse_cache
from analysis.readers._memory import needs_small_pages, small_pages
from analysis.readers.registry import REGISTRY, Reader, describe_formats, load_builtins, sniff


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
    **options: object,
) -> pd.DataFrame:
    """Read one file into the tidy event (or sample) schema, in this process.

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
        caches files of at least 1 MiB. The cache lives in :func:`analysis.readers.cache_dir`
        (:mod:`analysis.readers.cache`).
    **options
        Passed to the reader.

    Raises
    ------
    UnknownFormatError
        When no reader recognises the file; the message lists the known formats.
    ReadError
        For any damaged or unreadable input, naming the file and the problem.
    """
    load_builtins()
    path = Path(path)
    if not isinstance(format, (str, type(None))):
        raise TypeError(f"format must be a registered reader name or None, not {type(format).__name__}")
    if format is None:
        format = sniff(path)
    elif format not in REGISTRY:
        raise UnknownFormatError(path, f"unknown format {format!r}. Known formats: {describe_formats()}")
    reader = REGISTRY[format]
    st = check_file(path)
    use_cache = cache if cache is not None else st.st_size >= parse_cache.CACHE_MIN_BYTES
    use_cache = use_cache and not options and reader.kind in ("events", "samples")
    big = _big(path, st.st_size)
    if not use_cache:
        return _parse(path, reader, run_id, options, big=big)
    return parse_cache.cached(path, reader, run_id, lambda: _parse(path, reader, run_id, options, big=big))


def _big(path: Path, size: int) -> bool:
    """Whether the read makes frames large enough for small pages to matter
    (:func:`analysis.readers._memory.needs_small_pages`); the file's first bytes are looked
    at only when its size alone does not say."""
    plain = needs_small_pages(size, False)
    if plain or not needs_small_pages(size, True):
        return plain
    try:
        with open_binary(path) as fh:
            return fh.read(2) == GZIP_MAGIC
    except ReadError:  # the reader says what is wrong with the file
        return False


def _parse(path: Path, reader: Reader, run_id: str | None, options: dict, *, big: bool = False) -> pd.DataFrame:
    """``reader.read`` in time order and validated. What a parser raises from deep inside on
    damaged content (nesting too deep, numbers that overflow, text that is not Unicode, a
    value of an unexpected type) becomes a :class:`ReadError` naming the file; so does a
    frame that fails the schema. ``big``: the frame's arrays are built without huge pages
    (:func:`analysis.readers._memory.small_pages`)."""
    try:
        with small_pages(big):  # a large frame's fresh columns, first touched without compaction
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
