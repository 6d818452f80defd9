"""RunSet: many runs of one or several experiments as a runs table plus lazily loaded
events, samples and per-rank epoch metrics.

>>> from analysis.runset import RunSet
>>> rs = RunSet.from_dirs(["runs/EXP"])                 # doctest: +SKIP
>>> rs.runs[["run_id", "status", "n_ranks"]]            # doctest: +SKIP
>>> rs.filter(framework="horovod", n_ranks=[1, 2]).events  # doctest: +SKIP

The runs table comes from the manifests only (``experiment.json`` and each ``run.json``,
see ``docs/run-directory.md``); nothing in it is guessed from the data. Runs that failed or
never finished stay in :attr:`RunSet.runs` with their status; their data is left out of
:attr:`RunSet.events`, :attr:`RunSet.samples` and :attr:`RunSet.epochs` unless
``include_failed=True``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import runtable
from analysis.errors import RecoveryWarning, ScalescopeError
from analysis.rundir import (
    EPOCH_COLUMNS,
    FORMAT_VERSION,
    RUN_MANIFEST,
    find_max_records,
    read_epochs,
)
from analysis.runset import _load
from analysis.runtable import (
    DAMAGE_COLUMNS,
    OK_STATUS,
    RUN_COLUMNS,
    read_rank_devices,
    thread_mismatches,
)

__all__ = ["DAMAGE_COLUMNS", "EPOCH_COLUMNS", "FORMAT_VERSION", "RUN_COLUMNS", "RunSet", "read_epochs",
           "read_rank_devices", "thread_mismatches"]


class RunSet:
    """Runs of one or more experiments: a runs table and lazily loaded data tables.

    Parameters
    ----------
    runs
        The runs table (see :meth:`from_dirs`).
    events, samples, epochs
        Already loaded tables; ``None`` loads them on first access from each run's ``path``.
    include_failed
        Use the data of runs whose status is not ``ok`` as well.
    workers
        Processes that read the runs (and compute the metrics given this RunSet) in
        parallel, one rank file or one run per task: ``None`` uses the machine's cores once
        the runs hold at least 64 MiB in more than one rank file, ``1`` reads in this
        process (``docs/scale.md``).
    client
        A ``distributed.Client``: runs are read and reduced on its workers, and
        :attr:`events` is a Dask DataFrame over the Parquet cache (``docs/scale.md``).

    Attributes
    ----------
    runs
        One row per run: ``run_id``, ``experiment``, ``path``, ``status``, ``exit_code``,
        ``log_tail``, ``framework``, ``backend``, ``config_backend`` (e.g.
        ``horovod-gloo``), ``n_ranks`` (the manifest's ``world_size``), ``n_nodes``,
        ``batch_size`` (per rank), ``global_batch_size``, ``learning_rate``,
        ``lr_scaling``, ``inject`` (the example's ``--inject`` specs, None without), ``repeat``, ``epochs``, ``dataset_size``, ``n_params``,
        ``sampler_kind``, ``sampler_interval_s``, ``gpu_model``, ``horovod_controller``,
        ``time_origin``, ``start_time``, ``end_time``, ``wall_s`` and one ``vary_<name>``
        column per varied sweep parameter. Where and how it ran: ``cluster`` and
        ``partition`` (SLURM's, else the sweep's ``--label cluster=/partition=``), ``nodes``
        (host names), ``gpus_per_node`` (GPUs the ranks used on a node), ``gpus_on_node``
        (GPUs NVML listed there), ``labels`` and one ``label_<key>`` column per other label;
        ``requested_backend`` (the sweep's label) beside ``config_backend`` (what ran: a
        Horovod run with NCCL tensor operations is ``horovod-nccl``), ``horovod_tensor_op``,
        ``scaling`` (``strong``/``weak``), ``data_scale`` and ``time_budget_s``. Threads:
        ``threads_per_rank`` (the largest torch intra-op count of the ranks, else the
        manifest's), ``host_cpus``, ``threads_mixed`` (the ranks disagree; see
        :func:`thread_mismatches`); ``resumed_from_epoch`` (the first epoch label when not 0)
        and ``baseline_kind`` (``no_framework`` / ``framework_one_process`` for baselines).
    """

    def __init__(
        self,
        runs: pd.DataFrame,
        *,
        events: pd.DataFrame | None = None,
        samples: pd.DataFrame | None = None,
        epochs: pd.DataFrame | None = None,
        rank_devices: pd.DataFrame | None = None,
        include_failed: bool = False,
        damaged: pd.DataFrame | None = None,
        workers: int | None = None,
        client: Any = None,
    ):
        if "run_id" not in runs.columns:
            raise ScalescopeError("a runs table needs a run_id column")
        if runs["run_id"].duplicated().any():
            dup = sorted(runs.loc[runs["run_id"].duplicated(), "run_id"].astype(str))
            raise ScalescopeError(f"duplicate run_id(s) in the runs table: {dup}")
        self._runs = runs.reset_index(drop=True)
        self._tables: dict[str, pd.DataFrame | None] = {"events": events, "samples": samples, "epochs": epochs,
                                                        "rank_devices": rank_devices}
        self.include_failed = include_failed
        self._damage: list[dict] = [] if damaged is None else damaged.to_dict("records")
        #: The tables whose reading of every usable run is over, so their damage is all in
        #: ``_damage``: loaded, or reduced run by run (:meth:`reduce`, :meth:`reduce_tables`).
        self._damage_known: set[str] = set()
        self.workers = workers
        self.client = client
        self._dask_events: Any = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dirs(
        cls,
        paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
        *,
        include_failed: bool = False,
        workers: int | None = None,
        client: Any = None,
    ) -> RunSet:
        """Load experiment directories (``experiment.json``), run directories (``run.json``),
        directories of run directories, or directories of experiment directories.

        A run listed in ``experiment.json`` whose directory or ``run.json`` is missing is
        kept in :attr:`runs` with the status the launcher recorded. When two experiments hold
        the same ``run_id``, both are renamed ``<experiment>/<run_id>``. ``workers`` and
        ``client`` choose where the runs' data is read (see :class:`RunSet`).
        """
        runs, damage = runtable.runs_table(paths)
        for d in damage:
            warnings.warn(runtable.damage_message(d), RecoveryWarning, stacklevel=2)
        return cls(runs, include_failed=include_failed, damaged=runtable.damage_frame(damage),
                   workers=workers, client=client)

    # ------------------------------------------------------------------ tables
    @property
    def runs(self) -> pd.DataFrame:
        """The runs table (one row per run, failed ones included)."""
        return self._runs

    def usable_runs(self) -> pd.DataFrame:
        """Runs whose data is used: status ``ok`` (all runs with ``include_failed``), and a
        known number of ranks (a run without one is listed in :attr:`damaged`)."""
        runs = self._runs if self.include_failed else self._runs[self._runs["status"] == OK_STATUS]
        return runs[runs["n_ranks"].notna()].reset_index(drop=True)

    def failed_runs(self) -> pd.DataFrame:
        """Runs whose status is not ``ok`` (failed, oom, timeout, killed, running...)."""
        return self._runs[self._runs["status"] != OK_STATUS].reset_index(drop=True)

    def _runs_to_read(self, which: str) -> list[Any]:
        """The usable runs whose ``which`` table is read (rows of the runs table): those
        with a run directory, and for all but the epochs a usable ``run.json`` (a run
        without one, recorded when scanned, has no events, samples or GPU mapping)."""
        no_manifest = {d["run_id"] for d in self._damage if d["part"] in (RUN_MANIFEST, "run directory")}
        return [row for row in self.usable_runs().itertuples(index=False)
                if row.path is not None and Path(row.path).is_dir()
                and (which == "epochs" or row.run_id not in no_manifest)]

    def _note_read_error(self, row: Any, which: str, exc: Exception) -> None:
        """Reading the ``which`` table of run ``row`` raised ``exc``: the run's damage,
        recorded and warned; one damaged run never takes the others down."""
        reason = getattr(exc, "problem", None) or f"{type(exc).__name__}: {exc}"
        path = getattr(exc, "path", None) or row.path
        self._note_damage(row.run_id, [{"part": which, "path": path, "reason": reason}],
                          f"{which} of run {row.run_id}", stacklevel=6)

    def _note_damage(self, run_id: str, found: list[dict], excluded: str, *, stacklevel: int = 5) -> None:
        for d in found:
            rec = {"run_id": run_id, "excluded": excluded, **d}  # a part may name its own
            if rec in self._damage:  # a subset loading a table again
                continue
            self._damage.append(rec)
            warnings.warn(runtable.damage_message(rec), RecoveryWarning, stacklevel=stacklevel)

    def _damage_records(self) -> list[dict]:
        """The damage found so far, as records (what a worker hands back to its parent)."""
        return [dict(d) for d in self._damage]

    def _adopt_damage(self, records: list[dict]) -> None:
        """Add damage found by a task that read some of these runs elsewhere (a process of
        the pool, a Dask worker); its warning was raised there and again here already."""
        for rec in records:
            if rec not in self._damage:
                self._damage.append(dict(rec))

    @property
    def damaged(self) -> pd.DataFrame:
        """The damaged or missing parts of these runs (:data:`DAMAGE_COLUMNS`), one row each.

        Found while scanning (a missing run directory, a damaged or missing ``run.json`` or
        ``experiment.json``, a run directory with neither) and while loading the data (a
        rank trace, samples or epochs file that cannot be read): so this first reads the
        events, samples, epochs and GPU mapping that neither loading nor :meth:`reduce` /
        :meth:`reduce_tables` has read yet (after the report's run-by-run reduction, the
        events are never loaded for this). Each damaged part leaves out only the data named
        in ``excluded``; the rest of the run is used.
        """
        for which in ("events", "samples", "epochs", "rank_devices"):
            if which not in self._damage_known:
                self._table(which)
        return runtable.damage_frame(self._damage)

    def _table(self, which: str) -> pd.DataFrame:
        if self._tables[which] is None:
            self._tables[which] = _load.table(self, which)
            self._damage_known.add(which)
        return self._tables[which]

    def _read_all(self, which: str) -> None:
        """Every usable run's ``which`` table has been read (reduced run by run): its damage
        is known."""
        self._damage_known.add(which)

    def loaded(self, which: str) -> pd.DataFrame | None:
        """The ``events``/``samples``/``epochs``/``rank_devices`` table if it is in memory
        (given, loaded, or cut by :meth:`select`), else ``None``; never loads it."""
        return self._tables[which]

    def _unload(self, which: str) -> None:
        """Forget the ``which`` table read from the runs (it is read again when next asked
        for): the loader drops each run's events once its tables are made."""
        self._tables[which] = None

    def _split(self) -> list[RunSet]:
        """One RunSet per usable run, in the runs table's order, read in this process
        (``workers=1``, no client): the units the loader (:mod:`analysis.runset._load`)
        hands to its workers for what it reduces run by run (the events of the per-rank
        metrics go one rank file per task instead)."""
        return [self._subset(self.usable_runs().iloc[[i]], workers=1, client=None)
                for i in range(len(self.usable_runs()))]

    @property
    def events(self) -> pd.DataFrame:
        """All events of the usable runs (tidy schema), loaded on first access.

        With a Dask ``client`` it is a Dask DataFrame (one partition per run, read from the
        Parquet cache the workers write) for ad hoc queries; the metrics given this RunSet
        never need it.
        """
        if self.client is not None and self._tables["events"] is None:
            if self._dask_events is None:
                self._dask_events = _load.dask_events(self)
            return self._dask_events
        return self._table("events")

    @property
    def samples(self) -> pd.DataFrame:
        """All NVML / CPU samples of the usable runs, loaded on first access."""
        return self._table("samples")

    @property
    def epochs(self) -> pd.DataFrame:
        """Per-rank epoch metrics of the usable runs (:data:`EPOCH_COLUMNS`)."""
        return self._table("epochs")

    @property
    def rank_devices(self) -> pd.DataFrame:
        """The GPU each rank of the usable runs used (:func:`read_rank_devices`)."""
        return self._table("rank_devices")

    # ------------------------------------------------------------------ subsets
    def _subset(self, runs: pd.DataFrame, **engine: Any) -> RunSet:
        keep = set(runs["run_id"])
        tables = {}
        for name, df in self._tables.items():
            if df is None:
                tables[name] = None
            else:
                tables[name] = df[df["run_id"].astype(object).isin(keep)].reset_index(drop=True)
        dmg = runtable.damage_frame([d for d in self._damage if d["run_id"] is None or d["run_id"] in keep])
        engine = {"workers": self.workers, "client": self.client, **engine}
        sub = RunSet(runs.reset_index(drop=True), include_failed=self.include_failed, damaged=dmg, **engine,
                     **tables)
        sub._damage_known = set(self._damage_known)  # its runs are some of these: their damage is known too
        return sub

    def filter(self, **meta: object) -> RunSet:
        """Runs whose columns match: a scalar is compared for equality, a list/tuple/set
        is a membership test, a callable gets the column and returns a boolean mask.

        >>> rs.filter(framework="horovod", n_ranks=[2, 4])      # doctest: +SKIP
        >>> rs.filter(n_ranks=lambda n: n > 1)                  # doctest: +SKIP
        """
        mask = pd.Series(True, index=self._runs.index)
        for col, want in meta.items():
            if col not in self._runs.columns:
                raise ScalescopeError(f"no run column {col!r}; columns are {list(self._runs.columns)}")
            values = self._runs[col]
            if callable(want):
                m = pd.Series(want(values), index=self._runs.index).fillna(False).astype(bool)
            elif isinstance(want, (list, tuple, set, frozenset)):
                m = values.isin(list(want)).fillna(False).astype(bool)
            elif want is None:
                m = values.isna()
            else:
                m = (values == want).fillna(False).astype(bool)
            mask &= m
        return self._subset(self._runs[mask])

    def select(self, **columns: object) -> RunSet:
        """Keep only the event rows whose columns match (same rules as :meth:`filter`),
        e.g. ``select(kind="phase", name=["forward", "backward"])``; the runs are kept."""
        ev = self._table("events")  # pandas, also on a Dask RunSet
        mask = pd.Series(True, index=ev.index)
        for col, want in columns.items():
            if col not in ev.columns:
                raise ScalescopeError(f"no event column {col!r}; columns are {list(ev.columns)}")
            values = ev[col]
            if callable(want):
                m = pd.Series(want(values), index=ev.index)
            elif isinstance(want, (list, tuple, set, frozenset)):
                m = values.astype(object).isin(list(want))
            else:
                m = values.astype(object) == want
            mask &= m.fillna(False).astype(bool)
        tables = dict(self._tables)
        tables["events"] = ev[mask].reset_index(drop=True)
        cut = RunSet(self._runs, include_failed=self.include_failed, damaged=runtable.damage_frame(self._damage),
                     workers=self.workers, client=self.client, **tables)
        cut._damage_known = set(self._damage_known)
        return cut

    def groupby(self, col: str) -> Iterator[tuple[object, RunSet]]:
        """``(value, RunSet)`` for each distinct value of a runs column, in sorted order."""
        if col not in self._runs.columns:
            raise ScalescopeError(f"no run column {col!r}; columns are {list(self._runs.columns)}")
        for value, part in self._runs.groupby(col, sort=True, dropna=False):
            yield value, self._subset(part)

    def reduce(self, metric: Callable[..., pd.DataFrame], *, which: str = "events", **options: object) -> pd.DataFrame:
        """``metric(table, **options)`` of these runs' ``which`` table (``events`` or
        ``samples``), computed one run (or, for a metric declared per rank with
        ``@maps_over``, one rank file) at a time on this RunSet's engine (``workers``,
        ``client``): only the metric's tables come back, so the events of every run are never
        in memory at once. Equal to ``metric(rs.events, **options)`` for a metric whose groups
        are runs (or ranks) and whose table is sorted by ``run_id``; warnings and damage are
        those of reading the runs one by one. A metric given the RunSet itself
        (``time_breakdown(rs)``) comes here when it declares how it maps."""
        return _load.per_run(self, metric, which=which, **options)

    def reduce_tables(self, func: Callable[..., dict], **options: object) -> dict[str, Any]:
        """:meth:`reduce` of a function giving several tables of one run's events (a dict
        of frames or series by name), each joined over the runs in ``run_id`` order: many
        per-run tables from one reading of each run (the report's studies use it so that
        the events of every run are never in memory at once)."""
        return _load.per_run_tables(self, func, **options)

    def find_max_records(self) -> list[dict]:
        """The ``--find-max`` records of these runs' experiments
        (:func:`analysis.rundir.find_max_records`), for :func:`analysis.metrics.memory_limit`."""
        return find_max_records(self._runs)

    def apply(self, func: Callable[[RunSet], pd.DataFrame]) -> pd.DataFrame:
        """Call ``func`` on this RunSet (convenience for method chains)."""
        return func(self)

    def __scalescope_metric__(self, metric: Callable[..., pd.DataFrame], mapping: Any,
                              options: dict) -> pd.DataFrame:
        """``metric(self, **options)`` for a metric declared with ``@maps_over``
        (:mod:`analysis.metrics._mapping`): read and reduced one rank file or one run per
        task on this RunSet's engine (the loader, :mod:`analysis.runset._load`); the table the
        metric gives on all the events, with the same warnings and damage."""
        return _load.map_metric(self, metric, mapping, options)

    def __len__(self) -> int:
        return len(self._runs)

    def __repr__(self) -> str:
        status = self._runs["status"].value_counts().to_dict()
        return f"RunSet({len(self._runs)} runs: {status})"
