"""The one execution engine of ``analysis``: tasks run here one after the other, on a
process pool, or on a Dask cluster, with the same results, warnings and errors.

* **serial** (``workers=1``): ``[func(item) for item in items]`` in this process;
* a **process pool** (``workers=N``): each task runs in a worker process and sends its
  frame back as one Arrow IPC buffer (column by column, never pickled row by row);
* **Dask distributed** (``client=``), the engine for more than one machine (a SLURM
  cluster through ``dask-jobqueue``, ``docs/scale.md``): tasks run on the cluster's
  workers and only their results travel to the notebook. Needs ``pip install
  scalescope[scale]``; nothing here imports Dask unless a client is given.

A task is ``func(item)`` returning a frame, or a :class:`WithExtra` (a frame and a small
picklable value beside it): that is the one way results come back from a worker. Results
come back in the order of the items, whatever order they finished in, and the warnings
each task raised are raised again here in that same order. :func:`workers_for` is the one
place that decides how many processes to use. A progress bar shows while more than one
task runs (when stderr is a terminal, or with ``SCALESCOPE_PROGRESS=1``).

This module knows nothing of readers, metrics or RunSets; they give it functions.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import sys
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.errors import recording, replaying

#: Marks a frame without rows in :func:`to_ipc` (an Arrow stream starts with 0xFFFFFFFF).
_EMPTY = b"scalescope-empty-frame\n"
#: With ``workers=None``, a process pool is used from this many bytes of input on.
POOL_MIN_BYTES = 64 << 20
#: Modules every pool worker imports once, before its first task (forkserver only).
_PRELOAD = ["analysis.readers", "analysis.metrics"]


def default_workers() -> int:
    """The cores this process may run on (``os.sched_getaffinity``), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def workers_for(workers: int | None, *, n_tasks: int | None = None, n_bytes: int | None = None) -> int:
    """The processes to use, decided here only; the one meaning of ``workers=None`` in
    every function of ``analysis`` that takes it (``docs/scale.md``).

    ``workers`` when given (at least 1). ``None`` decides from the load: one task, or fewer
    than :data:`POOL_MIN_BYTES` of input in all, run here (1), which is quicker than
    starting a pool; otherwise the machine's cores (:func:`default_workers`). Where the
    input's size is not known (``n_bytes`` None: tasks that are not files), the machine's
    cores. :func:`run_tasks` never starts more processes than it has tasks.
    """
    if workers is not None:
        return max(1, int(workers))
    if n_tasks is not None and n_bytes is not None and (n_tasks < 2 or n_bytes < POOL_MIN_BYTES):
        return 1
    return default_workers()


def input_bytes(path: str | os.PathLike[str]) -> int:
    """Size of a file, or of every file below a directory (0 when it does not exist)."""
    path = Path(path)
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size if path.exists() else 0


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
    # text columns that were object (not pandas' str dtype) come back as str: made object again
    was_object = {c["name"] for c in (table.schema.pandas_metadata or {}).get("columns", [])
                  if c.get("numpy_type") == "object"}
    df = table.to_pandas(split_blocks=True, self_destruct=True)
    del table
    for col in df.columns:  # Arrow gives category levels their own dtype; ours are object
        dtype = df[col].dtype
        if isinstance(dtype, pd.CategoricalDtype) and dtype.categories.dtype != object:
            df[col] = df[col].cat.set_categories(dtype.categories.astype(object))
        elif col in was_object and isinstance(dtype, pd.StringDtype):
            values = df[col]
            df[col] = values.astype(object).where(values.notna(), None)
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
    """``[func(item) for item in items]`` here, on a process pool or on a Dask cluster.

    Parameters
    ----------
    func
        A module-level function (it is sent to the workers) returning a DataFrame, or a
        :class:`WithExtra`.
    items
        Its arguments, one task each (paths, run descriptions).
    workers
        Processes of the pool; ``None`` decides from the load (:func:`workers_for`, with
        ``cost`` as the input's bytes when given: a pool from 64 MiB on); ``1`` runs the
        tasks here, one after the other. Ignored with ``client``.
    client
        A ``distributed.Client``: the tasks run on its workers.
    label
        Shown on the progress bar.
    cost
        Each task's input in bytes (its file's size): the dearest tasks start first, so
        that a large file given last does not run alone at the end.
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
        n_bytes = int(sum(cost)) if cost is not None else None
        n = min(workers_for(workers, n_tasks=len(items), n_bytes=n_bytes), len(items))
        if n <= 1:
            here = [func(item) for item in items]
            if extras is not None:
                extras.extend(out[1] if isinstance(out, WithExtra) else None for out in here)
            return [out[0] if isinstance(out, WithExtra) else out for out in here]
    start = list(range(len(items)))
    if cost is not None:
        start.sort(key=lambda i: -cost[i])  # stable: equal costs keep their order
    progress = _progress(len(items), label)
    try:
        if client is not None:
            results = _on_dask(client, func, items, start, progress)
        else:
            results = _on_pool(n, func, items, start, progress)
    finally:
        if progress is not None:
            progress.stop()
    frames = []
    for i in range(len(items)):
        frame, caught, extra = results[i]
        results[i] = None
        if extras is not None:
            extras.append(extra)
        with replaying():
            for category, message in caught:
                warnings.warn(message, category, stacklevel=2)
        frames.append(frame)
    return frames


def _built(result: tuple[bytes, list, Any]) -> tuple[pd.DataFrame, list, Any]:
    """A task's result (:func:`_task`) with its frame built from the Arrow IPC buffer."""
    buf, caught, extra = result
    return from_ipc(buf), caught, extra


def _on_dask(client: Any, func: Callable[[Any], Any], items: list, start: list[int], progress: Any) -> list:
    """The tasks' results (:func:`_task`) from the workers of a Dask ``client``, in item order."""
    from distributed import as_completed as dask_completed

    client.run(_stop_profiler)  # every worker now; cheap when already stopped
    task = partial(_task, func)
    # earlier in ``start``: higher priority (Dask runs the highest first)
    futures = [client.submit(task, items[i], pure=False, priority=len(start) - k)
               for k, i in enumerate(start)]
    index = {f.key: i for i, f in zip(start, futures, strict=True)}
    results: list = [None] * len(items)
    errors: dict[int, BaseException] = {}
    for fut in dask_completed(futures):
        try:
            results[index[fut.key]] = _built(fut.result())
        except Exception as exc:  # raised below, the first in item order (not in finishing order)
            errors[index[fut.key]] = exc
        if progress is not None:
            progress.advance(progress.task_ids[0])
    if errors:
        raise errors[min(errors)]
    return results


def _on_pool(n: int, func: Callable[[Any], Any], items: list, start: list[int], progress: Any) -> list:
    """The tasks' results (:func:`_task`) from a pool of ``n`` processes, in item order."""
    results: list = [None] * len(items)
    errors: dict[int, BaseException] = {}
    with _pool(n) as pool:
        futures = {pool.submit(_task, func, items[i]): i for i in start}
        for fut in as_completed(futures):
            # the frame is built as its result arrives, while the workers go on with the
            # other tasks, and its buffer freed (not all of them held until the last)
            try:
                results[futures[fut]] = _built(fut.result())
            except Exception as exc:  # raised below, the first in item order (not in finishing order)
                errors[futures[fut]] = exc
            if progress is not None:
                progress.advance(progress.task_ids[0])
    if errors:
        raise errors[min(errors)]
    return results


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


def concat_tables(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Result tables of several tasks as one (empty parts left out, dtypes kept)."""
    full = [f for f in frames if len(f)]
    if not full:
        return frames[0] if frames else pd.DataFrame()
    return pd.concat(full, ignore_index=True) if len(full) > 1 else full[0].reset_index(drop=True)
