"""The RunSet's loader, private to it: reading and reducing its runs here or on the engine
(:mod:`analysis.parallel`), with the same frames, warnings and damage either way.

* :func:`table`: a RunSet's ``events``, ``samples``, ``epochs`` or ``rank_devices`` (the
  events one task per rank file of every run, the samples one task per run, when
  :func:`in_tasks`; else every run read here, one after the other);
* :func:`per_run` / :func:`per_run_tables` / :func:`map_metric`: a metric of a RunSet, one
  rank file or one run per task as the metric declares (``@maps_over``,
  :mod:`analysis.metrics._mapping`); only the metric's tables come back;
* :func:`dask_events`: a Dask DataFrame over the run cache, one partition per run.

Control goes one way: the RunSet calls this module, which reads its runs table and notes
damage on it (``_runs_to_read``, ``_note_read_error``, ``_adopt_damage``...), never the
other way round. Each task returns its table with its warnings and damage; the parent raises
them again in the order reading the runs one by one meets them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import parallel, rundir, runtable, schema
from analysis.errors import recording, replaying
from analysis.readers.cache import run_entry
from analysis.readers.rundir import (
    TIMELINE,
    join_run_frames,
    read_run_dir,
    read_run_part,
    run_dir_parts,
    warn_missing_ranks,
)
from analysis.rundir import EPOCH_COLUMNS, read_epochs
from analysis.runtable import RANK_DEVICE_COLUMNS, read_rank_devices


def in_tasks(runset: Any) -> bool:
    """Whether a RunSet's runs are read in separate tasks: on its Dask client, or on a pool
    of more than one process (:func:`analysis.parallel.workers_for` of its rank files and
    their bytes when its ``workers`` is None)."""
    if runset.client is not None:
        return True
    if runset.workers is not None:
        return parallel.workers_for(runset.workers) > 1
    paths = [p for p in runset.usable_runs()["path"] if p is not None and Path(p).is_dir()]
    # a task per rank file: one run of many ranks is worth a pool too
    n_tasks = sum(max(1, len(rundir.trace_files(p))) for p in paths)
    return parallel.workers_for(None, n_tasks=n_tasks, n_bytes=sum(parallel.input_bytes(p) for p in paths)) > 1


def _engine(runset: Any) -> dict[str, Any]:
    if runset.client is not None:
        return {"client": runset.client}
    return {"workers": runset.workers if in_tasks(runset) else 1}


def _by_id(runs: list[Any]) -> list[Any]:
    """One-run RunSets in ``run_id`` order, the order in which the metrics sort their groups."""
    return sorted(runs, key=lambda one: str(one.runs["run_id"].iloc[0]))


def _run_data(one: Any, *, which: str) -> parallel.WithExtra:
    """A one-run RunSet's table, with the damage found reading it (for the parent RunSet)."""
    table = getattr(one, which)
    return parallel.WithExtra((table, one._damage_records()))


def _reduce_run(one: Any, *, metric: Callable[..., pd.DataFrame], which: str,
                rank_devices: bool, options: dict) -> parallel.WithExtra:
    if rank_devices:
        options = {**options, "rank_devices": one.rank_devices}
    out = metric(getattr(one, which), **options)
    one._unload(which)  # serially the one-run RunSets live until the last run is done
    return parallel.WithExtra((out, one._damage_records()))


def _adopt_all(runset: Any, extras: list) -> None:
    """Damage the runs' tasks found goes into the RunSet's ``damaged`` table (their
    warnings were raised again already)."""
    for records in extras:
        runset._adopt_damage(records or [])


def table(runset: Any, which: str) -> pd.DataFrame:
    """The RunSet's ``which`` table (``events``, ``samples``, ``epochs``, ``rank_devices``)
    of its usable runs, in the runs table's order: the events and samples on its engine
    when :func:`in_tasks` (:func:`load_table`), else every run read here."""
    if which in ("events", "samples") and in_tasks(runset):
        return load_table(runset, which)
    if which == "epochs":
        frames = []
        for row in runset._runs_to_read(which):
            found: list[dict] = []
            frames.append(read_epochs(row.path, run_id=row.run_id, damage=found))
            runset._note_damage(row.run_id, found, "the epochs in this file")
        return _joined_runs(which, frames)
    return _assembled(runset, which, partial(_read_here, which=which))


def _read_here(row: Any, *, which: str) -> pd.DataFrame:
    """Run ``row``'s ``which`` table read from its directory in this process."""
    if which == "rank_devices":
        return read_rank_devices(row.path, run_id=row.run_id)
    return read_run_dir(row.path, kind=which)


def _assembled(runset: Any, which: str, read: Callable[[Any], pd.DataFrame]) -> pd.DataFrame:
    """``read(row)`` of each run to read, in the runs table's order, keyed by the runs
    table's ``run_id`` (it differs from the run's own when two experiments collide); a run
    whose reading raises is the run's damage (recorded and warned), and the others go on."""
    frames = []
    for row in runset._runs_to_read(which):
        try:
            df = read(row)
        except Exception as exc:
            runset._note_read_error(row, which, exc)
            continue
        if which != "rank_devices" and len(df):
            df = df.copy()
            df["run_id"] = schema.as_category(np.full(len(df), row.run_id, dtype=object), len(df))
        frames.append(df)
    return _joined_runs(which, frames)


def _joined_runs(which: str, frames: list[pd.DataFrame]) -> pd.DataFrame:
    if which in ("epochs", "rank_devices"):
        cols = EPOCH_COLUMNS if which == "epochs" else RANK_DEVICE_COLUMNS
        frames = [f for f in frames if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else runtable.empty_frame(cols)
    if not frames:
        return schema.empty_events() if which == "events" else schema.empty_samples()
    return schema.concat(frames)


def load_table(runset: Any, which: str) -> pd.DataFrame:
    """A RunSet's ``events`` or ``samples`` read on its client or its process pool; the
    same frame, warnings and damage as reading the runs one after the other.

    The events are read one rank file at a time (each rank's trace, and the Horovod
    timeline: :func:`analysis.readers.rundir.read_run_part`), so one run of many ranks
    keeps every worker busy; the runs are joined here in the runs table's order. The
    samples (one file per node) are read run by run."""
    if which not in ("events", "samples"):
        raise ValueError(f"which must be 'events' or 'samples', not {which!r}")
    if which == "events":
        return _load_events(runset)
    extras: list = []
    frames = parallel.run_tasks(partial(_run_data, which=which), runset._split(), label="reading runs",
                       extras=extras, **_engine(runset))
    _adopt_all(runset, extras)
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

    * the metrics declared per rank (``@maps_over(unit="rank")``,
      :mod:`analysis.metrics._mapping`: :func:`~analysis.metrics.step_times`,
      :func:`~analysis.metrics.time_breakdown` at level ``step`` or ``rank``,
      :func:`~analysis.metrics.sync_times`, :func:`~analysis.metrics.gpu_time_breakdown`),
      whose groups are a run and a rank, reduce each rank file in its own task (the
      Horovod timeline goes with the rank the declaration names); the tables come back in
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
        out = _per_rank(runset, metric, timeline_rank, dict(options))
        runset._read_all(which)
        return out
    runs = _by_id(runset._split())
    if not runs:
        empty = schema.empty_samples() if which == "samples" else schema.empty_events()
        return metric(empty, **options)
    task = partial(_reduce_run, metric=metric, which=which, rank_devices=rank_devices, options=dict(options))
    extras: list = []
    parts = parallel.run_tasks(task, runs, label=getattr(metric, "__name__", "runs"), extras=extras, **_engine(runset))
    _adopt_all(runset, extras)
    runset._read_all(which)
    return (combine or parallel.concat_tables)(parts)



def _tables_of_run(one: Any, *, func: Callable[..., dict], options: dict) -> parallel.WithExtra:
    """``func`` of a one-run RunSet's events (a dict of tables), with the damage found
    reading it; the run's events are dropped when the task ends."""
    tables = func(one.events, **options)
    one._unload("events")  # serially the one-run RunSets live until the last run is done
    return parallel.WithExtra((pd.DataFrame(), (one._damage_records(), tables)))


def per_run_tables(runset: Any, func: Callable[..., dict], **options: object) -> dict[str, Any]:
    """``func(events_of_one_run, **options)`` (a dict of named tables: frames or series) of
    every usable run, one run per task on the RunSet's engine, each name's parts joined in
    ``run_id`` order (series keep their index). Only the tables travel back: no process
    holds more than one run's events. Warnings and damage are those of reading the runs one
    by one, in ``run_id`` order."""
    runs = _by_id(runset._split())
    extras: list = []
    parallel.run_tasks(partial(_tables_of_run, func=func, options=dict(options)), runs,
                       label=getattr(func, "__name__", "runs"), extras=extras, **_engine(runset))
    parts: dict[str, list] = {}
    for damage, tables in extras:
        runset._adopt_damage(damage or [])
        for name, table in tables.items():
            parts.setdefault(name, []).append(table)
    runset._read_all("events")
    return {name: _joined(ts) for name, ts in parts.items()}


def _joined(parts: list) -> Any:
    """One name's tables of the runs as one; the first exception a run's gave instead
    (``func`` returned it, for its caller to raise where the table is needed)."""
    error = next((t for t in parts if isinstance(t, BaseException)), None)
    if error is not None:
        return error
    if isinstance(parts[0], pd.Series):  # indexed by run: the index is kept
        return pd.concat([t for t in parts if len(t)] or parts[:1])
    return parallel.concat_tables(parts)


def _rank_unit(metric: Callable[..., pd.DataFrame], options: dict) -> tuple[bool, int | None]:
    """Whether ``metric(events, **options)`` is per (run, rank), as the metric declares
    (``@maps_over``, :mod:`analysis.metrics._mapping`): its tables of single ranks, in
    (run_id, rank) order, are its table of all events. And the rank whose rows also need
    the run's Horovod timeline (None: none). Metrics that declare nothing, or per run, are
    reduced run by run."""
    mapping = getattr(metric, "mapping", None)
    if mapping is None or mapping.unit_of(options) != "rank":
        return False, None
    return True, mapping.timeline_rank_of(metric, options)


def map_metric(runset: Any, metric: Callable[..., pd.DataFrame], mapping: Any, options: dict) -> pd.DataFrame:
    """``metric(runset, **options)`` for a metric that declared how it maps over runs
    (``mapping``, from ``@maps_over``): :func:`per_run` of its table, with the RunSet's
    ``rank_devices`` when it asks for them and the caller gave none, joined by its
    ``combine``."""
    options = dict(options)
    wants_devices = mapping.rank_devices and options.get("rank_devices") is None
    if wants_devices:
        options.pop("rank_devices", None)
    return per_run(runset, metric, which=mapping.table, rank_devices=wants_devices, combine=mapping.combine,
                   **options)


def _run_parquet(one: Any) -> pd.DataFrame:
    """One run's events written to the run cache (:func:`analysis.readers.cache.run_entry`);
    the entry's path."""
    path, run_id = str(one.runs["path"].iloc[0]), str(one.runs["run_id"].iloc[0])
    return pd.DataFrame({"path": [str(run_entry(path, run_id, lambda: one.events))]})


# --------------------------------------------------------------------------------------
# Rank files of a RunSet's runs: one task each


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
    with replaying():
        for category, message in caught:
            warnings.warn(message, category, stacklevel=4)
    if error is not None:
        raise _PartError(*error)


def _read_part(item: tuple[Any, str]) -> parallel.WithExtra:
    """One part of a run directory (a rank trace or the timeline) with its warnings, rank
    and problem (:func:`_replay_run` raises them in serial reading's order)."""
    parts, name = item
    out, caught, error = _caught(partial(read_run_part, parts, name))
    frames, rank = out if out is not None else ([], None)
    frame = frames[0] if len(frames) == 1 else schema.concat(frames) if frames else schema.empty_events()
    return parallel.WithExtra((frame, {"rank": rank, "read": (caught, error), "n": len(frames), "timeline": None}))


def _reduce_part(item: tuple[Any, str, str, bool], *, metric: Callable[..., pd.DataFrame],
                 options: dict) -> parallel.WithExtra:
    """``metric`` of one rank trace's rows (with the run's Horovod timeline when
    ``with_timeline``), as they are in the run's events; or, for the timeline alone, its
    warnings and problem only (no table)."""
    parts, name, run_id, with_timeline = item
    out, caught, error = _caught(partial(read_run_part, parts, name))
    extra = {"rank": None, "read": (caught, error), "timeline": None, "metric": [], "invalid": False, "n": 0}
    if error is not None or name == TIMELINE:
        return parallel.WithExtra((pd.DataFrame(), extra))
    frames, extra["rank"] = out
    if with_timeline:
        tl, tl_caught, tl_error = _caught(partial(read_run_part, parts, TIMELINE))
        extra["timeline"] = (tl_caught, tl_error)
        if tl_error is not None:
            return parallel.WithExtra((pd.DataFrame(), extra))
        frames = [*frames, *tl[0]]
    try:
        events = join_run_frames(frames)
    except Exception:  # the whole run's check names the problem: it is read as one (_per_rank)
        extra["invalid"] = True
        return parallel.WithExtra((pd.DataFrame(), extra))
    if len(events):
        events["run_id"] = schema.as_category(np.full(len(events), run_id, dtype=object), len(events))
    with recording() as got:
        table = metric(events, **options)
    extra["metric"], extra["n"] = [(w.category, str(w.message)) for w in got], 1
    return parallel.WithExtra((table, extra))


def _replay_run(parts: Any, results: list[tuple[pd.DataFrame, dict]]) -> list[tuple[pd.DataFrame, dict]]:
    """The parts of one run (its traces in file order, then the timeline's own task if it
    had one) as serial reading meets them: each part's warnings, then its exception (the
    run's damage: later parts are not looked at), the missing ranks' warning, the
    timeline's. The traces' and the timeline task's results, the timeline's last."""
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
    """Each run's :class:`~analysis.readers.rundir.RunDirParts` (its ``run.json`` and
    listing, read here: cheap), or the exception that reading met."""
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
    out = parallel.run_tasks(task, items, label=label, extras=extras,
                    cost=[_size(item[0].path / item[1]) for item in items], **_engine(runset))
    results: dict[str, list] = {}
    for run_id, value, extra in zip(owners, out, extras, strict=True):
        results.setdefault(run_id, []).append((value, extra))
    return results


def _load_events(runset: Any) -> pd.DataFrame:
    rows = runset._runs_to_read("events")
    plans = _plan(runset, rows)
    results = _rank_tasks(
        runset, rows, plans,
        lambda parts, row: [(parts, name) for name in [*parts.traces, *([TIMELINE] if parts.timeline else [])]],
        _read_part, "reading ranks")

    def joined(row: Any) -> pd.DataFrame:
        done = _replay_run(plans[row.run_id], results.get(row.run_id, []))
        return join_run_frames([frame for frame, extra in done if extra["n"]])

    return _assembled(runset, "events", joined)


def _per_rank(runset: Any, metric: Callable[..., pd.DataFrame], timeline_rank: int | None,
              options: dict) -> pd.DataFrame:
    """:func:`per_run` of a per-rank metric: one task per rank trace of every run."""
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
        by_id = {one.runs["run_id"].iloc[0]: one for one in runset._split()}
        ones = [by_id[row.run_id] for row in whole]
        task = partial(_reduce_run_caught, metric=metric, options=options)
        more: list = []
        outs = parallel.run_tasks(task, ones, label=getattr(metric, "__name__", "runs"), extras=more, **_engine(runset))
        fallback = {row.run_id: (out, extra) for row, out, extra in zip(whole, outs, more, strict=True)}
    parts_out: list[pd.DataFrame] = []
    for row in rows:
        if row.run_id in fallback:
            out, (records, caught) = fallback[row.run_id]
            _again(caught)
            runset._adopt_damage(records or [])
            parts_out.append(out)
            continue
        try:
            done = _replay_run(plans[row.run_id], results.get(row.run_id, []))
        except Exception as exc:
            runset._note_read_error(row, "events", exc)
            continue
        for table, extra in sorted((part for part in done if part[1]["n"]), key=lambda part: part[1]["rank"]):
            _again(extra["metric"])
            parts_out.append(table)
    if not parts_out:
        return metric(schema.empty_events(), **options)
    return parallel.concat_tables(parts_out)


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


def _reduce_run_caught(one: Any, *, metric: Callable[..., pd.DataFrame], options: dict) -> parallel.WithExtra:
    """:func:`_reduce_run` with its warnings kept beside its damage (raised again in order)."""
    with recording() as caught:
        out = metric(one.events, **options)
    one._unload("events")
    return parallel.WithExtra((out, (one._damage_records(), [(w.category, str(w.message)) for w in caught])))


def dask_events(runset: Any) -> Any:
    """A Dask DataFrame over the events of a RunSet's usable runs, one partition per run.

    Each run's events are read on a worker of ``runset.client`` and written once to the
    Parquet cache (``$SCALESCOPE_CACHE/runs``, keyed by the fingerprints of the run's files);
    the frame reads them from there lazily. On a cluster the workers and the notebook must
    see the same cache directory (a shared file system).
    """
    import dask.dataframe as dd

    runs = [one for one in runset._split() if one.runs["path"].iloc[0] is not None
            and Path(one.runs["path"].iloc[0]).is_dir()]
    if not runs:
        return dd.from_pandas(schema.empty_events(), npartitions=1)
    done = parallel.run_tasks(_run_parquet, runs, client=runset.client, label="caching runs")
    return dd.read_parquet([f["path"].iloc[0] for f in done], engine="pyarrow")
