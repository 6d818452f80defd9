"""Experiments that outgrow one process: every core of a machine, or a Dask cluster.

Loading many runs has one public door for files, :func:`analysis.read_many` (``workers=``,
``client=``, ``reduce=``), and one for experiments, :class:`analysis.runset.RunSet`
(``workers=``, ``client=``, and the metrics given a RunSet, run file by file or run by run
on its engine). Both run on :mod:`analysis.parallel`, the one engine (serial, process pool,
Dask) and the one worker policy (:func:`~analysis.parallel.workers_for`). Here:
:func:`slurm_cluster` for ``dask-jobqueue``, the engine's names, and two deprecated aliases
(:func:`read_files`, :func:`reduce_files`).

Results, warnings and errors are those of serial reading, in the order of the inputs
(``docs/scale.md``).

>>> import analysis
>>> table = analysis.read_many(files, reduce=gpu_time_breakdown, client=client)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import parallel
from analysis.parallel import (
    POOL_MIN_BYTES,
    WithExtra,
    concat_tables,
    default_workers,
    from_ipc,
    input_bytes,
    run_calls,
    run_tasks,
    to_ipc,
    workers_for,
)
from analysis.readers import cache_dir as default_cache
from analysis.readers import read

__all__ = ["POOL_MIN_BYTES", "WithExtra", "concat_tables", "default_workers", "from_ipc",
           "input_bytes", "read_files", "reduce_files", "run_calls", "run_tasks",
           "slurm_cluster", "to_ipc", "workers_for"]


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"analysis.scale.{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)


# --------------------------------------------------------------------------------------
# Files


def _read_one(path: Path, *, format: str | None, cache: bool | None) -> pd.DataFrame:
    return read(path, format, cache=cache)


def read_files(
    paths: Iterable[str | os.PathLike[str]],
    *,
    format: str | None = None,
    cache: bool | None = None,
    workers: int | None = None,
    client: Any = None,
) -> list[pd.DataFrame]:
    """Deprecated: :func:`analysis.read` of every file, in parallel (one file per task);
    frames in the order of ``paths``. Use :func:`analysis.read_many` (one frame) or
    ``read_many(paths, reduce=...)`` (a metric of each file)."""
    _deprecated("read_files", "analysis.read_many(paths, workers=, client=)")
    paths = [Path(p) for p in paths]
    task = partial(_read_one, format=format, cache=cache)
    return parallel.run_tasks(task, paths, workers=workers, client=client, label="reading",
                     cost=[parallel.input_bytes(p) for p in paths])


def _reduce_one(item: tuple[Path, Callable[..., pd.DataFrame]], *, format: str | None,
                cache: bool | None, options: dict) -> pd.DataFrame:
    path, metric = item
    return metric(_read_one(path, format=format, cache=cache), **options)


def reduce_files(
    paths: Iterable[str | os.PathLike[str]],
    metric: Callable[..., pd.DataFrame] | Sequence[Callable[..., pd.DataFrame]],
    *,
    format: str | None = None,
    cache: bool | None = None,
    workers: int | None = None,
    client: Any = None,
    **options: object,
) -> pd.DataFrame | list[pd.DataFrame]:
    """Deprecated alias of ``analysis.read_many(paths, reduce=metric)``:
    ``metric(read(path), **options)`` for every file on the workers.

    Parameters
    ----------
    paths
        The files.
    metric
        A metric of an event frame (e.g. :func:`analysis.metrics.gpu_time_breakdown`), or
        one metric per path (a Kineto trace per rank and a Horovod timeline in one pool).
    format, cache
        As in :func:`analysis.read`.
    workers, client
        As in :func:`analysis.parallel.run_tasks`.
    **options
        Passed to every metric.

    Returns
    -------
    pandas.DataFrame or list of pandas.DataFrame
        With one metric: its tables concatenated in the order of ``paths``. For per-rank
        metrics over one file per rank (Kineto, nsys), this equals ``metric(read_many(paths))``
        when the files are given in run/rank order. With a metric per path: the list of
        their tables. Only these tables travel back: the notebook never holds a file's events.
    """
    _deprecated("reduce_files", "analysis.read_many(paths, reduce=metric, workers=, client=)")
    paths = [Path(p) for p in paths]
    metrics = [metric] * len(paths) if callable(metric) else list(metric)
    if len(metrics) != len(paths):
        raise ValueError(f"{len(metrics)} metrics for {len(paths)} paths")
    task = partial(_reduce_one, format=format, cache=cache, options=dict(options))
    frames = parallel.run_tasks(task, list(zip(paths, metrics, strict=True)), workers=workers, client=client,
                       label="reducing", cost=[parallel.input_bytes(p) for p in paths])
    return parallel.concat_tables(frames) if callable(metric) else frames


# --------------------------------------------------------------------------------------
# SLURM


def slurm_cluster(
    *,
    cores: int,
    memory: str,
    processes: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    **kwargs: object,
) -> Any:
    """A ``dask_jobqueue.SLURMCluster`` whose workers run this scalescope.

    Parameters
    ----------
    cores, memory
        Per SLURM job (one job = one node's share): e.g. ``cores=32, memory="128GB"``.
    processes
        Worker processes per job; default one per core (the readers hold the GIL, so one
        single-threaded process per core reads fastest).
    cache_dir
        The parse cache the workers write each run's events to (``$SCALESCOPE_CACHE``);
        it must be on a file system the notebook sees too. Default: the notebook's
        :func:`analysis.readers.cache_dir`.
    **kwargs
        Passed to ``SLURMCluster`` (``queue``, ``account``, ``walltime``,
        ``job_extra_directives``, ``log_directory``...).

    Returns
    -------
    dask_jobqueue.SLURMCluster
        Not yet scaled: call ``cluster.scale(jobs=N)`` (or ``adapt``) and connect a
        ``distributed.Client(cluster)``. ``cluster.job_script()`` shows what is submitted.
    """
    from dask_jobqueue import SLURMCluster  # optional: pip install scalescope[scale]

    cache = Path(cache_dir) if cache_dir is not None else default_cache()
    prologue = [f"export SCALESCOPE_CACHE={cache}", "export SCALESCOPE_PROGRESS=0",
                *list(kwargs.pop("job_script_prologue", None) or [])]
    kwargs.setdefault("python", sys.executable)  # the notebook's environment, on the nodes too
    return SLURMCluster(cores=cores, memory=memory, processes=processes or cores,
                        job_script_prologue=prologue, **kwargs)
