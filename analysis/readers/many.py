"""Reading many files and run directories (:func:`read_many`): the one public door for
loading many files, on the engine of :mod:`analysis.parallel` (here, a process pool, or a
Dask cluster), into one frame or, with ``reduce=``, into a metric's table of each file.

A RunSet (:mod:`analysis.runset`) loads the runs of experiments on the same engine with
the same ``workers=``/``client=`` meaning; :func:`analysis.scale.read_files` and
:func:`analysis.scale.reduce_files` are deprecated aliases of this door."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from analysis import parallel, rundir, schema
from analysis._io import check_file
from analysis.errors import ReadError, RecoveryWarning, UnknownFormatError
from analysis.readers.file import read
from analysis.readers.registry import REGISTRY, describe_formats, load_builtins, sniff
from analysis.readers.rundir import read_run_dir


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


def _jobs(paths: list[Path], format: str | None, kind: str, cache: bool | None,
          ) -> tuple[list[tuple[Callable[[Path], pd.DataFrame], Path]], list[Path]]:
    """What to read, in order (a reading function and its path), and the files no reader
    recognises."""
    jobs: list[tuple[Callable[[Path], pd.DataFrame], Path]] = []  # what to read, in order
    unknown: list[Path] = []
    for p in paths:
        if rundir.kind_of(p) == "run":
            jobs.append((partial(read_run_dir, kind=kind), p))
            continue
        if p.is_dir():
            runs = rundir.run_dirs_below(p)
            if runs:
                for d in runs:
                    jobs.append((partial(read_run_dir, kind=kind), d))
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
            jobs.append((partial(read, format=fmt, cache=cache), f))
    return jobs, unknown


#: Formats whose file is one rank's trace (its rank read from the file): ``read_many``
#: reads one file per rank of them over any time span.
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
    client: Any = None,
    reduce: Callable[..., pd.DataFrame] | None = None,
    **options: object,
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
        least 64 MiB (:func:`analysis.parallel.workers_for`, the one meaning of ``None``),
        ``1`` reads in this process. Frames and warnings are those of serial reading, in
        the same order.
    client
        A ``distributed.Client``: the files are read (and reduced) on its workers.
    reduce
        A metric of an event frame (e.g. :func:`analysis.metrics.gpu_time_breakdown`):
        ``reduce(frame, **options)`` of each file (each run directory) on the worker that
        read it, and only these tables travel back; returned concatenated in the order of
        the inputs. For a per-rank metric over one file per rank this equals
        ``reduce(read_many(paths), **options)`` when the files are given in run/rank order.
        Files of one rank over overlapping spans are not dropped in this mode (each file
        is reduced on its own).
    **options
        Passed to ``reduce``.
    """
    load_builtins()
    if kind not in ("events", "samples"):
        raise ValueError(f"kind must be 'events' or 'samples', not {kind!r}")
    if format is not None and format not in REGISTRY:
        raise ValueError(f"unknown format {format!r}. Known formats: {describe_formats()}")
    if options and reduce is None:
        raise TypeError(f"read_many() got unexpected keyword argument(s) {sorted(options)} (options go to reduce=)")
    jobs, unknown = _jobs(_expand(paths), format, kind, cache)
    if reduce is not None:
        jobs = [(partial(_reduced, read=func, metric=reduce, options=options), p) for func, p in jobs]
    if client is not None:
        frames = parallel.run_calls(jobs, client=client)
    else:
        n = parallel.workers_for(workers, n_tasks=len(jobs), n_bytes=sum(parallel.input_bytes(p) for _, p in jobs))
        frames = [func(p) for func, p in jobs] if n <= 1 else parallel.run_calls(jobs, workers=n)
    if kind == "events" and reduce is None:
        frames = _drop_duplicate_ranks(frames, jobs)
    if unknown:
        shown = ", ".join(str(u) for u in unknown[:10])
        more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        warnings.warn(f"skipped {len(unknown)} file(s) no reader recognises: {shown}{more}", stacklevel=2)
    if reduce is not None:
        if not frames:
            return reduce(schema.empty_events() if kind == "events" else schema.empty_samples(), **options)
        return parallel.concat_tables(frames)
    if not frames:
        return schema.empty_events() if kind == "events" else schema.empty_samples()
    return schema.concat(frames)


def _reduced(path: Path, *, read: Callable[[Path], pd.DataFrame], metric: Callable[..., pd.DataFrame],
             options: dict) -> pd.DataFrame:
    """``metric`` of one input's frame (on the worker that read it)."""
    return metric(read(path), **options)
