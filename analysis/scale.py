"""Experiments that outgrow one process: every core of a machine, or a Dask cluster.

Two engines run the same tasks, and give the same frames and warnings as serial reading:

* a **process pool** (``workers=N``, default: the machine's cores; ``workers=1`` is serial):
  each task runs in a worker process and sends its frame back as one Arrow IPC buffer
  (column by column, never pickled row by row);
* **Dask distributed** (``client=``), the engine for more than one machine (a SLURM
  cluster through ``dask-jobqueue``, ``docs/scale.md``): tasks run on the cluster's
  workers and only their results travel to the notebook. Needs ``pip install
  scalescope[scale]``; nothing here imports Dask unless a client is given.

A task is ``func(item)`` for one file, one rank file of a run directory, or one run;
results come back in the order of the items, whatever order they finished in, and the
warnings each task raised are raised again in the notebook in that same order. A progress
bar shows while more than one task runs (when stderr is a terminal, or with
``SCALESCOPE_PROGRESS=1``).

>>> from analysis import scale
>>> frames = scale.read_files(["rank0.json", "rank1.json"], workers=2)   # doctest: +SKIP
>>> table = scale.reduce_files(files, gpu_time_breakdown, client=client)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import os
import pickle
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import schema
from analysis.errors import recording

#: Marks a frame without rows in :func:`to_ipc` (an Arrow stream starts with 0xFFFFFFFF).
_EMPTY = b"scalescope-empty-frame\n"
#: With ``workers=None``, a process pool is used from this many bytes of input on.
POOL_MIN_BYTES = 64 << 20
#: Modules every pool worker imports once, before its first task.
_PRELOAD = ["analysis.readers", "analysis.metrics"]


def default_workers() -> int:
    """The cores this process may run on (``os.sched_getaffinity``), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


# --------------------------------------------------------------------------------------
# Frames across processes: Arrow IPC


def to_ipc(df: pd.DataFrame) -> bytes:
    """One Arrow IPC stream holding ``df`` (schema dtypes kept through pandas metadata).

    A frame without rows is pickled instead (it is tiny): Arrow drops the categories of an
    empty categorical column, which pandas keeps.
    """
    import pyarrow as pa

    if not len(df):
        return _EMPTY + pickle.dumps(df)
    table = pa.Table.from_pandas(df, preserve_index=False)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(buf: bytes) -> pd.DataFrame:
    """The frame :func:`to_ipc` wrote, with the same columns, dtypes and categories."""
    import pyarrow as pa

    if buf.startswith(_EMPTY):
        return pickle.loads(buf[len(_EMPTY):])
    table = pa.ipc.open_stream(io.BytesIO(buf)).read_all()
    df = table.to_pandas(split_blocks=True, self_destruct=True)
    del table
    for col in df.columns:  # Arrow gives category levels their own dtype; ours are object
        dtype = df[col].dtype
        if isinstance(dtype, pd.CategoricalDtype) and dtype.categories.dtype != object:
            df[col] = df[col].cat.set_categories(dtype.categories.astype(object))
    return df


# --------------------------------------------------------------------------------------
# Running tasks


class WithExtra(tuple):
    """A task's frame with a small picklable value beside it (``WithExtra((frame, extra))``):
    :func:`run_tasks` returns the frame and hands the value to its ``extras`` list."""


def _task(func: Callable[[Any], pd.DataFrame], item: Any) -> tuple[bytes, list[tuple[type, str]], Any]:
    """``func(item)`` in a worker: the frame as Arrow IPC, the warnings it raised, and the
    extra value of a :class:`WithExtra` result (None otherwise)."""
    with recording() as caught:
        try:
            out = func(item)
        except Exception as exc:
            try:
                pickle.dumps(exc)
            except Exception:  # it could not travel back: its type and message do
                raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
            raise
    out, extra = out if isinstance(out, WithExtra) else (out, None)
    return to_ipc(out), [(w.category, str(w.message)) for w in caught], extra


def _stop_profiler(dask_worker: Any) -> None:
    """Stops a Dask worker's statistical profiler. It samples every thread's frames every
    10 ms and keeps finished frames alive while it processes them, and with them records
    that the Chrome-JSON readers decode in place from their read buffer (``msgspec.Raw``
    views): the buffer then cannot be resized (``BufferError: memoryview has exported
    buffers``), seen on 50 MB Kineto traces."""
    for name in ("profile", "profile-cycle"):
        callback = dask_worker.periodic_callbacks.pop(name, None)
        if callback is not None:
            callback.stop()


def _progress(n: int, label: str):
    wanted = os.environ.get("SCALESCOPE_PROGRESS")
    if n < 2 or wanted == "0" or (wanted != "1" and not _isatty()):
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    progress = Progress(label, BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True,
                        console=Console(stderr=True, force_terminal=True if wanted == "1" else None))
    progress.start()
    progress.add_task(label, total=n)
    return progress


def _isatty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _pool(workers: int) -> ProcessPoolExecutor:
    # fork on Linux: a worker starts in milliseconds with the readers already imported, and
    # a calling script needs no ``if __name__ == "__main__"`` guard (forkserver and spawn
    # import it again in every worker). Elsewhere forkserver, or the platform's default.
    methods = multiprocessing.get_all_start_methods()
    method = "fork" if sys.platform.startswith("linux") else "forkserver" if "forkserver" in methods else None
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx)


def run_tasks(
    func: Callable[[Any], pd.DataFrame],
    items: Sequence[Any],
    *,
    workers: int | None = None,
    client: Any = None,
    label: str = "tasks",
    cost: Sequence[float] | None = None,
    extras: list | None = None,
) -> list[pd.DataFrame]:
    """``[func(item) for item in items]`` on a process pool or a Dask cluster.

    Parameters
    ----------
    func
        A module-level function (it is sent to the workers) returning a DataFrame.
    items
        Its arguments, one task each (paths, run descriptions).
    workers
        Processes of the pool: ``None`` uses :func:`default_workers`, ``1`` runs the tasks
        here, one after the other. Ignored with ``client``.
    client
        A ``distributed.Client``: the tasks run on its workers.
    label
        Shown on the progress bar.
    cost
        An estimate of each task's work (e.g. its file's size): the dearest tasks start
        first, so that a large file given last does not run alone at the end.
    extras
        A list that receives, in the order of ``items``, the extra value of each task that
        returned a :class:`WithExtra` (None for the others).

    Returns
    -------
    list of pandas.DataFrame
        The frames in the order of ``items``. The warnings of each task are raised again
        here (same category and message), in the order of ``items``; an exception raised by
        a task is raised here, the first in the order of ``items``.
    """
    items = list(items)
    if client is None:
        n = min(workers or default_workers(), len(items))
        if n <= 1:
            here = [func(item) for item in items]
            if extras is not None:
                extras.extend(out[1] if isinstance(out, WithExtra) else None for out in here)
            return [out[0] if isinstance(out, WithExtra) else out for out in here]
    results: list[tuple[bytes, list] | None] = [None] * len(items)
    start = list(range(len(items)))
    if cost is not None:
        start.sort(key=lambda i: -cost[i])  # stable: equal costs keep their order
    progress = _progress(len(items), label)
    try:
        if client is not None:
            from distributed import as_completed as dask_completed

            client.run(_stop_profiler)  # every worker now; cheap when already stopped
            task = partial(_task, func)
            # earlier in ``start``: higher priority (Dask runs the highest first)
            futures = [client.submit(task, items[i], pure=False, priority=len(start) - k)
                       for k, i in enumerate(start)]
            index = {f.key: i for i, f in zip(start, futures, strict=True)}
            for fut in dask_completed(futures):
                if fut.status == "error":
                    fut.result()  # raises the task's exception
                results[index[fut.key]] = fut.result()
                if progress is not None:
                    progress.advance(progress.task_ids[0])
        else:
            with _pool(n) as pool:
                futures = {pool.submit(_task, func, items[i]): i for i in start}
                for fut in as_completed(futures):
                    results[futures[fut]] = fut.result()
                    if progress is not None:
                        progress.advance(progress.task_ids[0])
    finally:
        if progress is not None:
            progress.stop()
    frames = []
    for i in range(len(items)):
        buf, caught, extra = results[i]
        results[i] = None  # each buffer is freed once its frame is built
        if extras is not None:
            extras.append(extra)
        for category, message in caught:
            warnings.warn(message, category, stacklevel=2)
        frames.append(from_ipc(buf))
    return frames


def _call(job: tuple[Callable[[Any], pd.DataFrame], Any]) -> pd.DataFrame:
    func, arg = job
    return func(arg)


def run_calls(
    calls: Sequence[tuple[Callable[[Any], pd.DataFrame], Any]],
    *,
    workers: int | None = None,
    client: Any = None,
    label: str = "reading",
) -> list[pd.DataFrame]:
    """``[func(arg) for func, arg in calls]`` as :func:`run_tasks` runs one function: for
    tasks of different kinds (a run directory here, a file there) in one pool. Paths among
    the arguments start in the order of their size (largest first)."""
    calls = list(calls)
    cost = [input_bytes(arg) if isinstance(arg, (str, os.PathLike)) else 0 for _, arg in calls]
    return run_tasks(_call, calls, workers=workers, client=client, label=label, cost=cost)


def pool_workers(workers: int | None, *, n_tasks: int, n_bytes: int) -> int:
    """The processes to use: ``workers`` when given; else the machine's cores for more than
    one task over at least :data:`POOL_MIN_BYTES` (smaller loads are quicker here than
    starting a pool), else 1."""
    if workers is not None:
        return workers
    if n_tasks > 1 and n_bytes >= POOL_MIN_BYTES:
        return default_workers()
    return 1


def input_bytes(path: str | os.PathLike[str]) -> int:
    """Size of a file, or of every file below a directory."""
    path = Path(path)
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size if path.exists() else 0


# --------------------------------------------------------------------------------------
# Files


def _read_one(path: Path, *, format: str | None, cache: bool | None,
              parts: int | None = 1) -> pd.DataFrame:
    from analysis.readers import read

    return read(path, format, cache=cache, workers=parts)


def _file_parts(n_files: int, workers: int | None, client: Any) -> int | None:
    """``workers=`` of each file's read: a single file on a process pool is read in parts
    (as :func:`analysis.read` does, ``None``: its default); files that are tasks of their
    own, or on Dask, are read each by one process."""
    return workers if n_files == 1 and client is None else 1


def read_files(
    paths: Iterable[str | os.PathLike[str]],
    *,
    format: str | None = None,
    cache: bool | None = None,
    workers: int | None = None,
    client: Any = None,
) -> list[pd.DataFrame]:
    """:func:`analysis.read` of every file, in parallel; frames in the order of ``paths``.
    A single file is read in parts on ``workers`` processes (``docs/scale.md``)."""
    paths = [Path(p) for p in paths]
    task = partial(_read_one, format=format, cache=cache, parts=_file_parts(len(paths), workers, client))
    return run_tasks(task, paths, workers=workers, client=client, label="reading",
                     cost=[input_bytes(p) for p in paths])


def _reduce_one(item: tuple[Path, Callable[..., pd.DataFrame]], *, format: str | None,
                cache: bool | None, options: dict, parts: int | None = 1) -> pd.DataFrame:
    path, metric = item
    return metric(_read_one(path, format=format, cache=cache, parts=parts), **options)


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
    """``metric(read(path), **options)`` for every file on the workers.

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
        As in :func:`run_tasks`; a single file is read in parts on ``workers`` processes.
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
    paths = [Path(p) for p in paths]
    metrics = [metric] * len(paths) if callable(metric) else list(metric)
    if len(metrics) != len(paths):
        raise ValueError(f"{len(metrics)} metrics for {len(paths)} paths")
    task = partial(_reduce_one, format=format, cache=cache, options=dict(options),
                   parts=_file_parts(len(paths), workers, client))
    frames = run_tasks(task, list(zip(paths, metrics, strict=True)), workers=workers, client=client,
                       label="reducing", cost=[input_bytes(p) for p in paths])
    return concat_tables(frames) if callable(metric) else frames


def concat_tables(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Result tables of several tasks as one (empty parts left out, dtypes kept)."""
    full = [f for f in frames if len(f)]
    if not full:
        return frames[0] if frames else pd.DataFrame()
    return pd.concat(full, ignore_index=True) if len(full) > 1 else full[0].reset_index(drop=True)


# --------------------------------------------------------------------------------------
# Runs of a RunSet

def is_runset(obj: object) -> bool:
    """Whether ``obj`` is an :class:`analysis.runset.RunSet` (the metrics' dispatch)."""
    from analysis.runset import RunSet

    return isinstance(obj, RunSet)


def parallel(runset: Any) -> bool:
    """Whether a RunSet's runs are read in separate tasks: on its Dask client, or on a pool
    of :func:`pool_workers` processes (more than one; its tasks are the runs' rank files)."""
    if runset.client is not None:
        return True
    if runset.workers is not None:
        return runset.workers > 1
    paths = [p for p in runset.usable_runs()["path"] if p is not None and Path(p).is_dir()]
    # a task per rank file: one run of many ranks is worth a pool too
    n_tasks = sum(max(1, len(list(Path(p).glob("rank-*.trace.json*")))) for p in paths)
    return pool_workers(None, n_tasks=n_tasks, n_bytes=sum(input_bytes(p) for p in paths)) > 1


def _engine(runset: Any) -> dict[str, Any]:
    if runset.client is not None:
        return {"client": runset.client}
    return {"workers": runset.workers if parallel(runset) else 1}


def _by_id(runs: list[Any]) -> list[Any]:
    """One-run RunSets in ``run_id`` order, the order in which the metrics sort their groups."""
    return sorted(runs, key=lambda one: str(one.runs["run_id"].iloc[0]))


def _run_data(one: Any, *, which: str) -> WithExtra:
    """A one-run RunSet's table, with the damage found reading it (for the parent RunSet)."""
    table = getattr(one, which)
    return WithExtra((table, one.damage_records()))


def _reduce_run(one: Any, *, metric: Callable[..., pd.DataFrame], which: str,
                rank_devices: bool, options: dict) -> WithExtra:
    if rank_devices:
        options = {**options, "rank_devices": one.rank_devices}
    out = metric(getattr(one, which), **options)
    return WithExtra((out, one.damage_records()))


def _adopt_damage(runset: Any, extras: list) -> None:
    """Damage the runs' tasks found goes into the RunSet's ``damaged`` table (their
    warnings were raised again already)."""
    for records in extras:
        runset.adopt_damage(records or [])


def load_table(runset: Any, which: str) -> pd.DataFrame:
    """A RunSet's ``events`` or ``samples`` read on its client or its process pool; the
    same frame, warnings and damage as reading the runs one after the other.

    The events are read one rank file at a time (each rank's trace, and the Horovod
    timeline: :func:`analysis.readers.scalescope.read_run_part`), so one run of many ranks
    keeps every worker busy; the runs are joined here in the runs table's order. The
    samples (one file per node) are read run by run."""
    if which not in ("events", "samples"):
        raise ValueError(f"which must be 'events' or 'samples', not {which!r}")
    if which == "events":
        return _load_events(runset)
    extras: list = []
    frames = run_tasks(partial(_run_data, which=which), runset.split(), label="reading runs",
                       extras=extras, **_engine(runset))
    _adopt_damage(runset, extras)
    if not frames:
        return schema.empty_samples()
    return schema.concat(frames)


def per_run(
    runset: Any,
    metric: Callable[..., pd.DataFrame],
    *,
    which: str = "events",
    rank_devices: bool = False,
    combine: Callable[[list[pd.DataFrame]], pd.DataFrame] | None = None,
    **options: object,
) -> pd.DataFrame:
    """``metric`` of a RunSet's events (or ``which`` table), one run, or one rank, at a time.

    When the table is in memory (given to the RunSet, loaded, or cut by
    :meth:`~analysis.runset.RunSet.select`) the metric runs on it here. Otherwise the data
    is read and reduced on the workers, on the RunSet's Dask client or process pool (one
    task after the other here with ``workers=1`` or a small experiment), so the notebook
    never holds more than one run's table (none with a pool or a cluster), and only the
    results travel back:

    * the per-rank metrics (:func:`~analysis.metrics.step_times`,
      :func:`~analysis.metrics.time_breakdown` at level ``step`` or ``rank``,
      :func:`~analysis.metrics.sync_times`, :func:`~analysis.metrics.gpu_time_breakdown`),
      whose groups are a run and a rank, reduce each rank file in its own task (the
      Horovod timeline goes with the rank that uses it); the tables come back in
      (``run_id``, ``rank``) order;
    * the others reduce each run in one task; the tables come back in ``run_id`` order
      (or are merged by ``combine``).

    Either way this is what the metric gives on all runs at once. Warnings and damage are
    those of reading the runs one by one, in ``run_id`` order.

    ``rank_devices=True`` passes the RunSet's ``rank_devices`` table as that keyword.
    """
    table = runset.loaded(which)
    if table is not None:
        if rank_devices:
            options = {**options, "rank_devices": runset.rank_devices}
        return metric(table, **options)
    by_rank, timeline_rank = _rank_unit(metric, options)
    if which == "events" and by_rank and not rank_devices and combine is None:
        return _per_rank(runset, metric, timeline_rank, dict(options))
    runs = _by_id(runset.split())
    if not runs:
        empty = schema.empty_samples() if which == "samples" else schema.empty_events()
        return metric(empty, **options)
    task = partial(_reduce_run, metric=metric, which=which, rank_devices=rank_devices, options=dict(options))
    extras: list = []
    parts = run_tasks(task, runs, label=getattr(metric, "__name__", "runs"), extras=extras, **_engine(runset))
    _adopt_damage(runset, extras)
    return (combine or concat_tables)(parts)


# --------------------------------------------------------------------------------------
# Rank files of a RunSet's runs: one task each

def _rank_unit(metric: Callable[..., pd.DataFrame], options: dict) -> tuple[bool, int | None]:
    """Whether ``metric(events, **options)`` is per (run, rank): its groups are a run and a
    rank, so its tables of single ranks, in (run_id, rank) order, are its table of all
    events. And the rank whose rows also need the run's Horovod timeline (None: none).

    ``time_breakdown(level="run")`` adds the ranks of a run up (per run); metrics not listed
    here are reduced run by run."""
    import inspect

    from analysis.metrics import breakdown, sync

    if metric is breakdown.step_times or metric is breakdown.gpu_time_breakdown:
        return True, None
    if metric is breakdown.time_breakdown and options.get("level", "rank") == "run":
        return False, None
    if metric is breakdown.time_breakdown or metric is sync.sync_times:
        # sync_times calls time_breakdown with its default timeline_rank
        default = inspect.signature(breakdown.time_breakdown).parameters["timeline_rank"].default
        return True, options.get("timeline_rank", default) if metric is breakdown.time_breakdown else default
    return False, None


class _PartError(Exception):
    """The exception a part's task met, as its run's damage records it (``problem``, ``path``)."""

    def __init__(self, problem: str, path: Any):
        super().__init__(problem)
        self.problem, self.path = problem, path


def _caught(func: Callable[[], Any]) -> tuple[Any, list[tuple[type, str]], tuple[str, Any] | None]:
    """``func()``, the warnings it raised, and the problem and path of its exception (then
    the result is None): serial reading notes any exception as the run's damage."""
    with recording() as caught:
        try:
            out, error = func(), None
        except Exception as exc:
            out = None
            error = (getattr(exc, "problem", None) or f"{type(exc).__name__}: {exc}", getattr(exc, "path", None))
    return out, [(w.category, str(w.message)) for w in caught], error


def _again(caught: list[tuple[type, str]], error: tuple[str, Any] | None = None) -> None:
    """A part's warnings raised here, then its exception."""
    for category, message in caught:
        warnings.warn(message, category, stacklevel=4)
    if error is not None:
        raise _PartError(*error)


def _read_part(item: tuple[Any, str]) -> WithExtra:
    """One part of a run directory (a rank trace or the timeline) with its warnings, rank
    and problem (:func:`_replay_run` raises them in serial reading's order)."""
    from analysis.readers.scalescope import read_run_part

    parts, name = item
    out, caught, error = _caught(partial(read_run_part, parts, name))
    frames, rank = out if out is not None else ([], None)
    frame = frames[0] if len(frames) == 1 else schema.concat(frames) if frames else schema.empty_events()
    return WithExtra((frame, {"rank": rank, "read": (caught, error), "n": len(frames), "timeline": None}))


def _reduce_part(item: tuple[Any, str, str, bool], *, metric: Callable[..., pd.DataFrame],
                 options: dict) -> WithExtra:
    """``metric`` of one rank trace's rows (with the run's Horovod timeline when
    ``with_timeline``), as they are in the run's events; or, for the timeline alone, its
    warnings and problem only (no table)."""
    from analysis.readers.scalescope import TIMELINE, join_run_frames, read_run_part

    parts, name, run_id, with_timeline = item
    out, caught, error = _caught(partial(read_run_part, parts, name))
    extra = {"rank": None, "read": (caught, error), "timeline": None, "metric": [], "invalid": False, "n": 0}
    if error is not None or name == TIMELINE:
        return WithExtra((pd.DataFrame(), extra))
    frames, extra["rank"] = out
    if with_timeline:
        tl, tl_caught, tl_error = _caught(partial(read_run_part, parts, TIMELINE))
        extra["timeline"] = (tl_caught, tl_error)
        if tl_error is not None:
            return WithExtra((pd.DataFrame(), extra))
        frames = [*frames, *tl[0]]
    try:
        events = join_run_frames(frames)
    except Exception:  # the whole run's check names the problem: it is read as one (_per_rank)
        extra["invalid"] = True
        return WithExtra((pd.DataFrame(), extra))
    if len(events):
        events["run_id"] = schema._as_category(np.full(len(events), run_id, dtype=object), len(events))
    with recording() as got:
        table = metric(events, **options)
    extra["metric"], extra["n"] = [(w.category, str(w.message)) for w in got], 1
    return WithExtra((table, extra))


def _replay_run(parts: Any, results: list[tuple[pd.DataFrame, dict]]) -> list[tuple[pd.DataFrame, dict]]:
    """The parts of one run (its traces in file order, then the timeline's own task if it
    had one) as serial reading meets them: each part's warnings, then its exception (the
    run's damage: later parts are not looked at), the missing ranks' warning, the
    timeline's. The traces' and the timeline task's results, the timeline's last."""
    from analysis.readers.scalescope import warn_missing_ranks

    if isinstance(parts, Exception):  # the run-level pre-pass failed
        raise parts
    n = len(parts.traces)
    seen, timeline = set(), None
    for _, extra in results[:n]:
        _again(*extra["read"])
        seen.add(extra["rank"])
        timeline = extra["timeline"] or timeline
    warn_missing_ranks(parts, seen)
    for _, extra in results[n:]:
        timeline = extra["read"]
    if timeline is not None:
        _again(*timeline)
    return results


def _plan(runset: Any, rows: list[Any]) -> dict[str, Any]:
    """Each run's :class:`~analysis.readers.scalescope.RunDirParts` (its ``run.json`` and
    listing, read here: cheap), or the exception that reading met."""
    from analysis.readers.scalescope import run_dir_parts

    plans: dict[str, Any] = {}
    for row in rows:
        try:
            plans[row.run_id] = run_dir_parts(row.path)
        except Exception as exc:
            plans[row.run_id] = exc
    return plans


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _rank_tasks(runset: Any, rows: list, plans: dict[str, Any],
                items_of: Callable[[Any, Any], list[tuple]], task: Callable[[Any], Any],
                label: str) -> dict[str, list[tuple[Any, Any]]]:
    """``task`` on every item ``items_of(parts, row)`` gives for the runs that planned
    (an item starts with the run's parts and a file name in it, the task's cost); the
    ``(result, extra)`` pairs by ``run_id``, in item order."""
    items, owners = [], []
    for row in rows:
        parts = plans[row.run_id]
        if isinstance(parts, Exception):
            continue
        mine = items_of(parts, row)
        items += mine
        owners += [row.run_id] * len(mine)
    extras: list = []
    out = run_tasks(task, items, label=label, extras=extras,
                    cost=[_size(item[0].path / item[1]) for item in items], **_engine(runset))
    results: dict[str, list] = {}
    for run_id, value, extra in zip(owners, out, extras, strict=True):
        results.setdefault(run_id, []).append((value, extra))
    return results


def _load_events(runset: Any) -> pd.DataFrame:
    from analysis.readers.scalescope import TIMELINE, join_run_frames

    rows = runset._runs_to_read("events")
    plans = _plan(runset, rows)
    results = _rank_tasks(
        runset, rows, plans,
        lambda parts, row: [(parts, name) for name in [*parts.traces, *([TIMELINE] if parts.timeline else [])]],
        _read_part, "reading ranks")

    def joined(row: Any) -> pd.DataFrame:
        done = _replay_run(plans[row.run_id], results.get(row.run_id, []))
        return join_run_frames([frame for frame, extra in done if extra["n"]])

    return runset._load("events", read=joined)


def _per_rank(runset: Any, metric: Callable[..., pd.DataFrame], timeline_rank: int | None,
              options: dict) -> pd.DataFrame:
    """:func:`per_run` of a per-rank metric: one task per rank trace of every run."""
    from analysis.readers.scalescope import TIMELINE

    rows = sorted(runset._runs_to_read("events"), key=lambda row: str(row.run_id))
    plans = _plan(runset, rows)

    def items_of(parts: Any, row: Any) -> list[tuple]:
        carrier = None
        if parts.timeline and timeline_rank is not None:
            carrier = next((name for name in parts.traces if name.split(".")[0] == f"rank-{timeline_rank:05d}"), None)
        items = [(parts, name, row.run_id, name == carrier) for name in parts.traces]
        if parts.timeline and carrier is None:
            items.append((parts, TIMELINE, row.run_id, False))
        return items

    results = _rank_tasks(runset, rows, plans, items_of,
                          partial(_reduce_part, metric=metric, options=options),
                          getattr(metric, "__name__", "ranks"))
    # a run whose ranks do not split cleanly is reduced whole, as before (exact, rare)
    whole = [row for row in rows if _needs_whole(plans[row.run_id], results.get(row.run_id, []), timeline_rank)]
    fallback: dict[str, tuple] = {}
    if whole:
        ones = [runset._subset(runset.usable_runs()[runset.usable_runs()["run_id"] == row.run_id],
                               workers=1, client=None) for row in whole]
        task = partial(_reduce_run_caught, metric=metric, options=options)
        more: list = []
        outs = run_tasks(task, ones, label=getattr(metric, "__name__", "runs"), extras=more, **_engine(runset))
        fallback = {row.run_id: (out, extra) for row, out, extra in zip(whole, outs, more, strict=True)}
    parts_out: list[pd.DataFrame] = []
    for row in rows:
        if row.run_id in fallback:
            out, (records, caught) = fallback[row.run_id]
            _again(caught)
            runset.adopt_damage(records or [])
            parts_out.append(out)
            continue
        done = runset._read_noting_damage(
            row, "events", lambda row: _replay_run(plans[row.run_id], results.get(row.run_id, [])))
        if done is None:
            continue
        for table, extra in sorted((part for part in done if part[1]["n"]), key=lambda part: part[1]["rank"]):
            _again(extra["metric"])
            parts_out.append(table)
    if not parts_out:
        return metric(schema.empty_events(), **options)
    return concat_tables(parts_out)


def _needs_whole(parts: Any, results: list[tuple[pd.DataFrame, dict]], timeline_rank: int | None) -> bool:
    """Whether a run's per-rank tables might not be its rows of the metric of all its events:
    a part failed the schema check, two files hold one rank, or the timeline went to a file
    of another rank than ``timeline_rank``."""
    if isinstance(parts, Exception):
        return False
    read = [extra for _, extra in results[:len(parts.traces)]]
    if any(extra["read"][1] is not None for extra in read):
        return False  # damaged: the first problem in file order is the run's, as serially
    ranks = [extra["rank"] for extra in read]
    if len(set(ranks)) < len(ranks) or any(extra["invalid"] for extra in read):
        return True
    return any(extra["timeline"] is not None and extra["rank"] != timeline_rank for extra in read)


def _reduce_run_caught(one: Any, *, metric: Callable[..., pd.DataFrame], options: dict) -> WithExtra:
    """:func:`_reduce_run` with its warnings kept beside its damage (raised again in order)."""
    with recording() as caught:
        out = metric(one.events, **options)
    return WithExtra((out, (one.damage_records(), [(w.category, str(w.message)) for w in caught])))


def _run_key(path: str, run_id: str) -> str:
    """Cache key of one run's events: every file's name and fingerprint (size, mtime and
    ctime, inode, a digest of its first and last 64 KiB: the parse cache's own test, so a
    rewrite with the same size and a restored mtime still changes the key)."""
    from analysis.readers import CACHE_VERSION, _fingerprint

    parts = [str(Path(path).resolve()), run_id, str(CACHE_VERSION)]
    for f in sorted(Path(path).rglob("*")):
        if f.is_file():
            parts.append(f"{f.relative_to(path)}:{sorted(_fingerprint(f).items())}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def _run_parquet(one: Any) -> pd.DataFrame:
    """Writes one run's events to the Parquet cache (unless a readable entry is there; a
    damaged one is written again, with a warning); returns its path."""
    import pyarrow.parquet as pq

    from analysis.readers import cache_dir

    path, run_id = str(one.runs["path"].iloc[0]), str(one.runs["run_id"].iloc[0])
    out = cache_dir() / "runs" / f"{_run_key(path, run_id)}.parquet"
    if out.exists():
        try:
            pq.read_metadata(out)
            return pd.DataFrame({"path": [str(out)]})
        except Exception as exc:  # truncated or not Parquet: never trusted
            warnings.warn(f"run cache entry {out} is unreadable ({type(exc).__name__}); the run "
                          "is read again", stacklevel=2)
    df = one.events
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    df.to_parquet(tmp, index=False, compression="lz4")
    os.replace(tmp, out)
    return pd.DataFrame({"path": [str(out)]})


def dask_events(runset: Any) -> Any:
    """A Dask DataFrame over the events of a RunSet's usable runs, one partition per run.

    Each run's events are read on a worker of ``runset.client`` and written once to the
    Parquet cache (``$SCALESCOPE_CACHE/runs``, keyed by the fingerprints of the run's files);
    the frame reads them from there lazily. On a cluster the workers and the notebook must
    see the same cache directory (a shared file system).
    """
    import dask.dataframe as dd

    runs = [one for one in runset.split() if one.runs["path"].iloc[0] is not None
            and Path(one.runs["path"].iloc[0]).is_dir()]
    if not runs:
        return dd.from_pandas(schema.empty_events(), npartitions=1)
    done = run_tasks(_run_parquet, runs, client=runset.client, label="caching runs")
    return dd.read_parquet([f["path"].iloc[0] for f in done], engine="pyarrow")


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
    from dask_jobqueue import SLURMCluster

    from analysis.readers import cache_dir as default_cache

    cache = Path(cache_dir) if cache_dir is not None else default_cache()
    prologue = [f"export SCALESCOPE_CACHE={cache}", "export SCALESCOPE_PROGRESS=0",
                *list(kwargs.pop("job_script_prologue", None) or [])]
    kwargs.setdefault("python", sys.executable)  # the notebook's environment, on the nodes too
    return SLURMCluster(cores=cores, memory=memory, processes=processes or cores,
                        job_script_prologue=prologue, **kwargs)
