"""Reading a scalescope run directory into one frame: every rank's trace joined with the
manifest (rank, local rank, host, device, clock offsets), the Horovod timeline, or the
samples. :func:`analysis.read_many` calls :func:`read_run_dir` for any run directory, and
RunSet's loader reads the same events part by part.

The layout (file names, globs) and the manifests are :mod:`analysis.rundir`'s; the format of
each file is its reader's (:mod:`analysis.readers.scalescope` for the rank traces and
samples, :mod:`analysis.readers.horovod` for the timeline).

Part by part, so that each rank's trace can be read on another worker: :func:`run_dir_parts`
(the cheap run-level pre-pass: ``run.json``, its clock offsets and rank table, the trace
files), :func:`read_run_part` (one rank's rows exactly as in the whole run, clock offset
included; or the timeline), then :func:`warn_missing_ranks` and :func:`join_run_frames`.
:func:`read_run_dir` is built from them.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import schema
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers.file import read
from analysis.readers.registry import REGISTRY
from analysis.readers.scalescope import parse_trace, read_samples
from analysis.rundir import (
    TIMELINE,
    clock_offsets,
    profiler_files,
    read_manifest,
    sample_files,
    trace_files,
)

__all__ = ["TIMELINE", "RunDirParts", "join_run_frames", "read_run_dir", "read_run_part", "run_dir_parts",
           "warn_missing_ranks"]


def read_run_dir(
    path: str | os.PathLike[str],
    *,
    kind: str = "events",
    run_id: str | None = None,
    include_profilers: bool = False,
) -> pd.DataFrame:
    """Read a scalescope run directory into one event (or sample) frame.

    Parameters
    ----------
    path
        The run directory (holding ``run.json``).
    kind
        ``"events"``: every rank's trace plus the Horovod timeline; ``"samples"``: every
        ``samples-*.csv``.
    run_id
        Defaults to ``run.json``'s ``run_id``, else the directory name.
    include_profilers
        Also read the outside profilers' per-rank outputs (``docs/profilers.md``):
        ``torch_profiler/*.pt.trace.json[.gz]`` with the ``kineto`` reader and
        ``nsys/*.sqlite`` with the ``nsys_sqlite`` reader. Their rows keep their own
        ``source``; each rank's clock offset is added as for its trace (both profilers
        stamp with the host's wall clock, as our recorder does).

    Returns
    -------
    pandas.DataFrame
        Event or sample schema. Times are on rank 0's clock: each rank's ``start_ns`` (and
        each node sampler's ``ts_ns``) has ``clock.offsets_ns[rank]`` added. ``rank``,
        ``local_rank``, ``host`` and ``device`` come from the manifest.

    Notes
    -----
    A rank listed in ``run.json`` without a trace, or a trace of a killed rank, gives a
    :class:`RecoveryWarning`. The Horovod timeline needs the ``horovod`` reader; if it
    is not registered the timeline is skipped with a warning.
    """
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise ReadError(run_dir, "not a directory")
    manifest = read_manifest(run_dir)
    run_id = run_id or manifest.get("run_id") or run_dir.name
    offsets = clock_offsets(manifest)
    ranks = {r["rank"]: r for r in manifest.get("ranks") or [] if type(r.get("rank")) is int}
    if kind == "samples":
        return _read_run_samples(run_dir, manifest, run_id, offsets)
    if kind != "events":
        raise ValueError(f"kind must be 'events' or 'samples', not {kind!r}")
    parts = _parts(run_dir, run_id, offsets, ranks)
    frames, seen = [], set()
    for name in parts.traces:
        found, rank = read_run_part(parts, name)
        frames.extend(found)
        seen.add(rank)
    warn_missing_ranks(parts, seen)
    if parts.timeline:
        frames.extend(read_run_part(parts, TIMELINE)[0])
    if include_profilers:
        frames.extend(_read_profilers(run_dir, run_id, offsets, ranks))
    return join_run_frames(frames)


# -- a run directory part by part (one task per rank file: analysis.runset's loader) -------------
@dataclass(frozen=True)
class RunDirParts:
    """What :func:`read_run_dir` reads of a run directory's events, from ``run.json`` and
    the listing: each rank's trace and the Horovod timeline, read one by one with
    :func:`read_run_part` (on different workers), then joined with
    :func:`warn_missing_ranks` and :func:`join_run_frames` in this order:
    ``traces`` (file order), the missing ranks' warning, the timeline."""

    path: Path
    run_id: str
    offsets: dict[int, int]
    ranks: dict[int, dict]
    traces: tuple[str, ...]
    timeline: bool


def run_dir_parts(path: str | os.PathLike[str], *, run_id: str | None = None) -> RunDirParts:
    """The cheap run-level pre-pass of :func:`read_run_dir` (``run.json`` validated, the
    clock offsets and rank table, the trace files listed); raises what it raises."""
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise ReadError(run_dir, "not a directory")
    manifest = read_manifest(run_dir)
    run_id = run_id or manifest.get("run_id") or run_dir.name
    ranks = {r["rank"]: r for r in manifest.get("ranks") or [] if type(r.get("rank")) is int}
    return _parts(run_dir, run_id, clock_offsets(manifest), ranks)


def _parts(run_dir: Path, run_id: str, offsets: dict[int, int], ranks: dict[int, dict]) -> RunDirParts:
    return RunDirParts(run_dir, run_id, offsets, ranks, tuple(f.name for f in trace_files(run_dir)),
                       (run_dir / TIMELINE).exists())


def read_run_part(parts: RunDirParts, name: str) -> tuple[list[pd.DataFrame], int | None]:
    """One part of a run directory, as :func:`read_run_dir` has its rows: a rank's trace
    (``name`` from ``parts.traces``) on rank 0's clock with the manifest's host, local rank
    and device, and its rank; or the Horovod timeline (``name`` :data:`TIMELINE`; no frame
    when it is skipped with a warning) and None."""
    if name == TIMELINE:
        return [_fill_hosts(tl, parts.ranks) for tl in _read_timeline(parts.path / TIMELINE, parts.run_id)], None
    frames, seen = _read_rank_traces(parts.path, parts.run_id, parts.offsets, parts.ranks,
                                     files=[parts.path / name])
    return frames, seen.pop()


def warn_missing_ranks(parts: RunDirParts, seen: set[int]) -> None:
    """The :class:`RecoveryWarning` of :func:`read_run_dir` for ranks of ``run.json``
    whose trace was not among those read (``seen``)."""
    missing = sorted(set(parts.ranks) - seen)
    if missing:
        warnings.warn(f"{parts.path}: no trace for rank(s) {missing} listed in run.json",
                      RecoveryWarning, stacklevel=3)


def join_run_frames(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The parts of a run directory as one validated event frame (in the parts' order)."""
    if not frames:
        return schema.empty_events()
    return schema.validate_events(schema.concat(frames))


def _read_run_samples(run_dir: Path, manifest: dict, run_id: str,
                      offsets: dict[int, int]) -> pd.DataFrame:
    """Every node sampler's ``samples-*.csv`` of a run directory, on rank 0's clock."""
    frames = []
    hosts = ((manifest.get("sampler") or {}).get("hosts")) or {}
    for f in sample_files(run_dir):
        df = read_samples(f, run_id=run_id)
        host = next((h for h, s in hosts.items() if s.get("file") == f.name), None)
        rank = hosts[host].get("rank") if host is not None else None
        if rank is not None and offsets.get(int(rank)):
            df["ts_ns"] = df["ts_ns"] + offsets[int(rank)]
        frames.append(df)
    if not frames:
        return schema.empty_samples()
    return schema.validate_samples(schema.concat(frames))


def _read_rank_traces(run_dir: Path, run_id: str, offsets: dict[int, int], ranks: dict[int, dict],
                      files: list[Path] | None = None) -> tuple[list[pd.DataFrame], set[int]]:
    """Every rank's trace of a run directory (or those ``files`` of it) on rank 0's clock,
    with the manifest's host, local rank and device; and the ranks seen."""
    frames, seen = [], set()
    for f in trace_files(run_dir) if files is None else files:
        df, info = parse_trace(f, run_id)
        rank = int(info["clock"].get("rank", 0))
        seen.add(rank)
        if offsets.get(rank):
            df["start_ns"] = df["start_ns"] + offsets[rank]
        r = ranks.get(rank)
        if r is not None and len(df):
            if r.get("host") is not None:
                df["host"] = schema.as_category(r["host"], len(df))
            if r.get("local_rank") is not None:
                df["local_rank"] = pd.array([int(r["local_rank"])] * len(df), dtype="Int32")
            if r.get("device") is not None:
                df["device"] = pd.array([int(r["device"])] * len(df), dtype="Int16")
        frames.append(df)
    return frames, seen


def _read_profilers(run_dir: Path, run_id: str, offsets: dict[int, int],
                    ranks: dict[int, dict]) -> list[pd.DataFrame]:
    """Kineto traces in ``torch_profiler/`` and nsys SQLite exports in ``nsys/``."""
    out = []
    for f, fmt in profiler_files(run_dir):
        df = read(f, fmt, run_id=run_id)
        if len(df) and df["rank"].notna().any():
            ranks_in = df["rank"].dropna().astype(int).unique()
            if len(ranks_in) == 1 and offsets.get(int(ranks_in[0])):
                df = df.copy()
                df["start_ns"] = df["start_ns"] + offsets[int(ranks_in[0])]
        out.append(_fill_hosts(df, ranks))
    return out


def _fill_hosts(df: pd.DataFrame, ranks: dict[int, dict]) -> pd.DataFrame:
    """Host and local rank from the manifest for rows that name a rank but no host."""
    if not len(df) or not ranks:
        return df
    need = df["rank"].notna() & df["host"].isna()
    if not need.any():
        return df
    df = df.copy()
    r = df.loc[need, "rank"].astype(int)
    hosts = df["host"].astype(object).where(df["host"].notna(), None)
    hosts.loc[need] = r.map(lambda k: (ranks.get(k) or {}).get("host")).to_numpy()
    df["host"] = schema.as_category(hosts.tolist(), len(df))
    lr = df["local_rank"].astype(object)
    lr.loc[need & df["local_rank"].isna()] = r.map(
        lambda k: (ranks.get(k) or {}).get("local_rank")).to_numpy()
    df["local_rank"] = pd.array(lr.tolist(), dtype="Int32")
    return df


def _read_timeline(path: Path, run_id: str) -> list[pd.DataFrame]:
    if "horovod" not in REGISTRY:
        try:
            import analysis.readers.horovod  # noqa: F401
        except ModuleNotFoundError as exc:
            if exc.name != "analysis.readers.horovod":
                raise
    if "horovod" not in REGISTRY:
        warnings.warn(f"{path}: skipped, the 'horovod' reader is not available",
                      RecoveryWarning, stacklevel=3)
        return []
    if path.stat().st_size == 0:
        # Horovod >= 0.20.1 writes '[' only with its first event: an empty file is a
        # timeline that recorded nothing.
        warnings.warn(f"{path}: empty (Horovod recorded no timeline events); skipped",
                      RecoveryWarning, stacklevel=3)
        return []
    return [read(path, "horovod", run_id=run_id)]
