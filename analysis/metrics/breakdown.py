"""Where the time of a training step goes (study 1).

All shares are measured on unions of intervals: overlapping intervals are never added up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from analysis.errors import ScalescopeError
from analysis.metrics import _intervals as iv
from analysis.metrics._common import NS_PER_S, end_ns, plain, require_columns
from analysis.metrics._mapping import maps_over
from analysis.metrics._stepparts import (  # noqa: F401 - COMPONENTS and covered_in_windows are public here
    COMPONENT_COLUMNS,
    COMPONENTS,
    component_codes,
    covered_in_windows,
    key_codes,
    ns_column,
    owned_sets,
    per_step_ns,
)
from analysis.metrics.fusion import dedupe_fused
from analysis.metrics.timesource import Source, one_source, run_sources, timed_view

SHARE_COLUMNS: tuple[str, ...] = (
    "data_frac",
    "forward_frac",
    "backward_frac",
    "sync_exposed_frac",
    "optimizer_frac",
    "other_frac",
)
#: ``cat`` of the ``comm`` records that mark a gradient collective in flight on a rank's
#: own trace: DDP's bucket allreduces and Horovod's in-flight span (the comm hooks).
IN_FLIGHT_CATS: tuple[str, ...] = ("ddp_hook", "hvd_hook")
#: Horovod timeline rows that mark a collective in flight (rank 0's ``sync_total``).
TIMELINE_CATS: tuple[str, ...] = ("negotiate", "op", "activity")
#: The default warm-up rule of every step-level study (``docs/metrics.md``, "Warm-up").
WARMUP = "auto"

_STEP_PHASES = ("data", "forward", "backward", "sync", "optimizer")


def _phases(events: pd.DataFrame) -> pd.DataFrame:
    require_columns(events, ("run_id", "rank", "kind", "name", "start_ns", "dur_ns", "step", "epoch"), "breakdown")
    ph = events[plain(events["kind"]) == "phase"]
    return ph.assign(name=plain(ph["name"]), run_id=plain(ph["run_id"]))


def _windows_one(ph: pd.DataFrame) -> pd.DataFrame:
    """Step windows of one (run, rank): from ``step`` phases, else from phase step numbers."""
    steps = ph[ph["name"] == "step"]
    if len(steps):
        out = pd.DataFrame(
            {
                "epoch": steps["epoch"].to_numpy(),
                "step": steps["step"].to_numpy(),
                "step_start_ns": steps["start_ns"].to_numpy(np.int64),
                "step_end_ns": end_ns(steps),
            }
        )
        return out.sort_values("step_start_ns", kind="stable").reset_index(drop=True)
    inner = ph[ph["name"].isin(_STEP_PHASES) & ph["step"].notna()]
    if inner.empty:
        return pd.DataFrame(columns=["epoch", "step", "step_start_ns", "step_end_ns"])
    inner = inner.assign(end_ns=end_ns(inner), epoch=inner["epoch"].astype("Int64"))
    g = inner.groupby(["epoch", "step"], dropna=False, sort=False)
    out = g.agg(step_start_ns=("start_ns", "min"), last_end_ns=("end_ns", "max")).reset_index()
    out = out.sort_values("step_start_ns", kind="stable").reset_index(drop=True)
    # a step lasts until the next one of the same epoch starts; the last one of an epoch
    # until its last phase ends
    nxt = out["step_start_ns"].shift(-1)
    next_epoch = out["epoch"].shift(-1).astype(object)
    same = [
        (a is pd.NA and b is pd.NA) or (a is not pd.NA and b is not pd.NA and a == b)
        for a, b in zip(out["epoch"].astype(object), next_epoch, strict=False)
    ]
    same = np.asarray(same, dtype=bool) & nxt.notna().to_numpy()
    end = out["last_end_ns"].to_numpy(np.int64).copy()
    end[same] = nxt.to_numpy()[same].astype(np.int64)
    out["step_end_ns"] = end
    return out[["epoch", "step", "step_start_ns", "step_end_ns"]]


def warmup_count(step_s: np.ndarray, warmup: int | str | None = WARMUP) -> int:
    """How many leading steps of one rank the warm-up rule drops.

    Parameters
    ----------
    step_s
        The rank's step times in time order.
    warmup
        ``"auto"`` (default), a number of steps, or ``0``/``None`` for none.

    Notes
    -----
    ``"auto"`` detects when the step time settles. With m the median of the rank's second
    half of steps (the steady state) and d = max(3 · (q75 - m), 5 % of m) over that half
    (the upper quartile only, so that short partial-batch steps do not widen it),
    a rank with at least 4 steps drops its first step (graph set-up, DDP's bucket rebuild,
    Horovod's first negotiation without its response cache) and every following one until
    the first step i that lies in [0.8 m, m + d] (a short partial-batch step says nothing
    about settling) and starts three steps whose median is at most m + d; at most half its
    steps. Fewer than 4 steps: nothing is dropped.
    :func:`warmup_steps` drops, on every rank of a run, the largest count of its ranks, so
    the ranks keep the same steps.
    """
    n = len(step_s)
    if warmup is None or warmup is False:
        return 0
    if isinstance(warmup, (int, np.integer)) and not isinstance(warmup, bool):
        if warmup < 0:
            raise ScalescopeError(f"warmup must be 'auto', a number of steps >= 0 or None, not {warmup!r}")
        return min(int(warmup), n)
    if warmup != "auto":
        raise ScalescopeError(f"warmup must be 'auto', a number of steps >= 0 or None, not {warmup!r}")
    if n < 4:
        return 0
    x = np.asarray(step_s, dtype=float)
    tail = x[n // 2:]
    med = float(np.median(tail))
    limit = med + max(3 * (float(np.quantile(tail, 0.75)) - med), 0.05 * med)
    k = 1
    while k < n // 2 and (not 0.8 * med <= x[k] <= limit or float(np.median(x[k:k + 3])) > limit):
        k += 1
    return k


def warmup_steps(windows: pd.DataFrame, warmup: int | str | None = WARMUP) -> pd.Series:
    """Boolean mask over :func:`step_times` rows: True for the warm-up steps to drop (the
    same number of leading steps on every rank of a run: the most any of its ranks needs)."""
    mask = np.zeros(len(windows), dtype=bool)
    if len(windows):
        order = windows.sort_values(["run_id", "rank", "step_start_ns"], kind="stable")
        # each rank's rows are contiguous in this order, and each run's ranks
        rank = order.groupby(["run_id", "rank"], sort=False, dropna=False, observed=True).ngroup().to_numpy()
        run = order.groupby("run_id", sort=False, dropna=False, observed=True).ngroup().to_numpy()
        bounds = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1], True])
        lo, hi = bounds[:-1], bounds[1:]
        x = order["step_time_s"].to_numpy(float)
        k = np.array([warmup_count(x[a:b], warmup) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)],
                     dtype=np.int64)
        most = np.zeros(int(run.max()) + 1, dtype=np.int64)
        np.maximum.at(most, run[lo], k)  # per run, the most any of its ranks needs
        take = np.minimum(most[run[lo]], hi - lo)
        if take.any():
            pos = np.concatenate([np.arange(a, a + t) for a, t in zip(lo.tolist(), take.tolist(), strict=True)])
            mask[windows.index.get_indexer(order.index[pos])] = True
    return pd.Series(mask, index=windows.index, name="warmup")


def warmup_summary(events: pd.DataFrame, *, warmup: int | str | None = WARMUP) -> pd.DataFrame:
    """What the warm-up rule drops: one row per (run_id, rank) with ``n_steps``,
    ``n_warmup``, ``warmup_s`` (their time) and ``warmup_frac`` (of all step time)."""
    w = step_times(events)
    w = w.assign(warmup=warmup_steps(w, warmup))
    g = w.groupby(["run_id", "rank"], sort=True, observed=True)
    out = g.agg(n_steps=("step", "size"), n_warmup=("warmup", "sum"),
                step_total_s=("step_time_s", "sum")).reset_index()
    out["warmup_s"] = w[w["warmup"]].groupby(["run_id", "rank"], observed=True)["step_time_s"].sum().reindex(
        pd.MultiIndex.from_frame(out[["run_id", "rank"]]), fill_value=0.0).to_numpy()
    out["warmup_frac"] = out["warmup_s"] / out["step_total_s"]
    return out.drop(columns=["step_total_s"])


@maps_over(unit="rank")
def step_times(events: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, rank, step): when each training step started and ended.

    Parameters
    ----------
    events
        Event frame (schema of :mod:`analysis.schema`) holding kind ``phase`` rows.
        Or a :class:`~analysis.runset.RunSet`: each run is read and reduced on its own
        (on the RunSet's process pool or Dask workers, ``docs/scale.md``); the same table.

    Returns
    -------
    pandas.DataFrame
        ``run_id``, ``rank``, ``epoch``, ``step``, ``step_start_ns``, ``step_end_ns``
        (int64, ns), ``step_time_s`` (float, s).

    Notes
    -----
    A step is the ``step`` phase when the trace has one. Otherwise it is the span from the
    earliest start of the phases carrying that step number (data, forward, backward, sync,
    optimizer) to the start of the next step of the same epoch; the last step of an epoch
    ends where its last phase ends.

    Examples
    --------
    >>> from analysis.schema import make_events
    >>> ev = make_events(run_id="r", rank=0, kind="phase", source="t",
    ...                  name=["forward", "backward", "forward"], step=[0, 0, 1], epoch=0,
    ...                  start_ns=[0, 10, 40], dur_ns=[10, 20, 10])
    >>> step_times(ev)["step_time_s"].tolist()
    [4e-08, 1e-08]
    """
    ph = _phases(events)
    frames = []
    if len(ph):
        group = key_codes(ph)
        is_step = (ph["name"] == "step").to_numpy(bool)
        stepped = np.zeros(int(group.max()) + 1, dtype=bool)
        stepped[group[is_step]] = True
        if is_step.any():  # the ranks with ``step`` phases, all at once
            frames.append(_step_windows(ph, group, is_step))
        rest = ~stepped[group]
        if rest.any():  # the others, from their phases' step numbers (rank by rank)
            other = ph[rest]
            for g, one in other.groupby(group[rest], sort=True):
                w = _windows_one(one)
                if w.empty:
                    continue
                first = one.iloc[0]
                w.insert(0, "rank", first["rank"])
                w.insert(0, "run_id", first["run_id"])
                w.insert(0, "_group", g)
                frames.append(w)
    if not frames:
        return pd.DataFrame(
            {
                "run_id": pd.Series(dtype=object),
                "rank": pd.Series(dtype="Int32"),
                "epoch": pd.Series(dtype="Int32"),
                "step": pd.Series(dtype="Int32"),
                "step_start_ns": pd.Series(dtype=np.int64),
                "step_end_ns": pd.Series(dtype=np.int64),
                "step_time_s": pd.Series(dtype=float),
            }
        )
    out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    # ranks in (run_id, rank) order, each rank's windows as it made them
    out = out.iloc[np.argsort(out["_group"].to_numpy(), kind="stable")].drop(columns="_group").reset_index(drop=True)
    out["rank"] = out["rank"].astype("Int32")
    out["epoch"] = out["epoch"].astype("Int32")
    out["step"] = out["step"].astype("Int32")
    out["step_start_ns"] = out["step_start_ns"].astype(np.int64)
    out["step_end_ns"] = out["step_end_ns"].astype(np.int64)
    out["step_time_s"] = (out["step_end_ns"] - out["step_start_ns"]) / NS_PER_S
    return out


def _step_windows(ph: pd.DataFrame, group: np.ndarray, is_step: np.ndarray) -> pd.DataFrame:
    """The windows of every rank with ``step`` phases: those phases, in start order per rank
    (:func:`_windows_one`'s first case, for all ranks at once)."""
    steps = ph[is_step]
    start = steps["start_ns"].to_numpy(np.int64)
    g = group[is_step]
    o = np.argsort(start, kind="stable")
    o = o[np.argsort(g[o], kind="stable")]
    steps = steps.iloc[o]
    return pd.DataFrame(
        {
            "_group": g[o],
            "run_id": steps["run_id"].to_numpy(),
            "rank": steps["rank"].array,
            "epoch": steps["epoch"].to_numpy(),
            "step": steps["step"].to_numpy(),
            "step_start_ns": start[o],
            "step_end_ns": end_ns(steps),
        }
    )


def _eq(series: pd.Series, value: object) -> pd.Series:
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return series.isna()
    return (series == value).fillna(False).astype(bool)


def _exclusive_sets(one: pd.DataFrame, comm: pd.DataFrame) -> dict[str, iv.Intervals]:
    """Per component, the time it owns after the priority rule (one rank's phases)."""
    return owned_sets(component_codes(one), one["start_ns"].to_numpy(np.int64), end_ns(one),
                  comm["start_ns"].to_numpy(np.int64), end_ns(comm))


def _by_rank(df: pd.DataFrame) -> dict[tuple, pd.DataFrame]:
    if df.empty:
        return {}
    return {(r, k): g for (r, k), g in df.groupby(["run_id", "rank"], sort=False, dropna=False, observed=True)}


def _timeline_rows(events: pd.DataFrame) -> dict[object, pd.DataFrame]:
    """Horovod timeline rows that mark a collective in flight, per run (rank 0's clock)."""
    if "source" not in events:
        return {}
    tl = events[(plain(events["source"]) == "horovod") & plain(events["cat"]).isin(list(TIMELINE_CATS))]
    tl = tl.assign(run_id=plain(tl["run_id"]))
    return {r: g for r, g in tl.groupby("run_id", sort=False)}


# warm-up is decided per run (every rank drops the steps the slowest-settling rank needs), so
# only a read without warm-up can be reduced rank by rank
@maps_over(unit=lambda options: "rank" if options.get("level") != "run" and not options.get("warmup", WARMUP)
           else "run", timeline_rank="timeline_rank")
def time_breakdown(
    events: pd.DataFrame,
    *,
    level: Literal["step", "rank", "run"] = "rank",
    comm_cats: Sequence[str] = IN_FLIGHT_CATS,
    warmup: int | str | None = WARMUP,
    timeline_rank: int | None = 0,
    source: Source = "auto",
) -> pd.DataFrame:
    """Shares of a training step: data, forward, backward, exposed sync, optimizer, other.

    Parameters
    ----------
    events
        Event frame with our own ``phase`` rows (and the comm hooks' ``comm`` records, and
        a Horovod timeline).
        Or a :class:`~analysis.runset.RunSet`: each run is read and reduced on its own
        (on the RunSet's process pool or Dask workers, ``docs/scale.md``); the same table.
    level
        ``"step"``: one row per (run, rank, step); ``"rank"``: per (run, rank);
        ``"run"``: per run (all ranks together).
    comm_cats
        ``cat`` values of ``comm`` rows on the rank's own trace that mark a gradient
        collective in flight (DDP's bucket allreduces, Horovod's in-flight span).
    warmup
        Warm-up steps dropped on every rank: ``"auto"`` (default, :func:`warmup_count`),
        a number of steps, or ``0``/``None``.
    timeline_rank
        The rank whose ``sync_total`` comes from the Horovod timeline when the run has one
        (the coordinator, rank 0, writes it on its own clock); ``None``: never.
    source
        ``"auto"`` (device time where CUDA events were recorded), ``"host"`` or ``"events"``
        (:mod:`analysis.metrics.timesource`).

    Returns
    -------
    pandas.DataFrame
        Keys (``run_id``, ``rank``, and ``epoch``/``step`` at step level), ``source``
        (``host`` or ``events``: where the run's time came from), ``n_steps``,
        ``step_time_s`` (sum of the step windows, s), ``step_mean_s``, ``data_s``,
        ``forward_s``, ``backward_s``, ``sync_exposed_s``, ``optimizer_s``, ``other_s``
        (s), the same as shares ``*_frac`` (0-1) that sum to 1, and ``sync_total_s`` (not
        a share: it overlaps compute).

    Notes
    -----
    ``docs/metrics.md`` defines every quantity. Per rank, each component's intervals are
    merged into a union; an instant covered by several goes to the first of data, forward,
    sync, backward, optimizer (an explicit ``sync`` phase is a wait, also nested in
    ``backward`` as DDP's is or in ``optimizer`` as Horovod's ``synchronize()``), measured
    inside every step window (:func:`step_times`): ``other_s`` is the unattributed rest and
    the shares sum to 1 exactly. A rank without ``sync`` phases but with in-flight records
    takes as exposed the in-flight time no other phase covers. ``sync_total_s``: the union
    of the rank's in-flight records (Horovod: the timeline on ``timeline_rank`` where that
    rank has none) and its sync waits, so ``sync_exposed_s <= sync_total_s``.
    """
    if level not in ("step", "rank", "run"):
        raise ScalescopeError(f"level must be 'step', 'rank' or 'run', not {level!r}")
    sources = run_sources(events, source)
    events = timed_view(events, sources)
    ph = _phases(events)
    comm_all = events[(plain(events["kind"]) == "comm") & plain(events["cat"]).isin(list(comm_cats))]
    comm_all = comm_all.assign(run_id=plain(comm_all["run_id"]))
    windows = step_times(events)
    windows = windows[~warmup_steps(windows, warmup)]
    timelines = _timeline_rows(events) if timeline_rank is not None else {}
    rows = [per_step_ns(windows, ph, comm_all, timelines, timeline_rank)] if len(windows) else []
    keys = list(_LEVEL_KEYS[level])
    if not rows:
        return pd.DataFrame(columns=[*keys, "source", *_VALUE_COLUMNS])
    out = _in_seconds(_summed_at(pd.concat(rows, ignore_index=True), keys), keys)
    out.insert(len(keys), "source", out["run_id"].map(sources).fillna("host"))
    return out


def _summed_at(per_step: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The per-step nanoseconds with ``n_steps``, summed per ``keys`` (as they are at step
    level)."""
    per_step["n_steps"] = 1
    if "step" in keys:
        return per_step
    ns_cols = ["step_ns", *(ns_column(COMPONENT_COLUMNS[c]) for c in COMPONENTS), "sync_total_ns"]
    return per_step.groupby(keys, sort=True)[[*ns_cols, "n_steps"]].sum().reset_index()


#: The columns of :func:`time_breakdown` after its keys and ``source``.
_VALUE_COLUMNS = ("n_steps", "step_time_s", "step_mean_s", *COMPONENT_COLUMNS.values(), "other_s", *SHARE_COLUMNS,
                  "sync_total_s")
#: The key columns of :func:`time_breakdown` at each level.
_LEVEL_KEYS = {"step": ("run_id", "rank", "epoch", "step"), "rank": ("run_id", "rank"), "run": ("run_id",)}


def _in_seconds(out: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """:func:`time_breakdown`'s table from the summed nanoseconds ``out`` (one row per
    ``keys``): seconds, ``other_s`` as the unattributed rest, and the shares of the step."""
    result = out[keys].copy()
    if "rank" in result:
        result["rank"] = result["rank"].astype("Int32")
    if "step" in keys:
        result["epoch"] = result["epoch"].astype("Int32")
        result["step"] = result["step"].astype("Int32")
    result["n_steps"] = out["n_steps"].astype(np.int64).to_numpy()
    step_ns = out["step_ns"].to_numpy(np.int64)
    result["step_time_s"] = step_ns / NS_PER_S
    result["step_mean_s"] = result["step_time_s"] / result["n_steps"]
    attributed = np.zeros(len(out), dtype=np.int64)
    for comp in ("data", "forward", "backward", "sync", "optimizer"):
        col = COMPONENT_COLUMNS[comp]
        vals = out[ns_column(col)].to_numpy(np.int64)
        attributed += vals
        result[col] = vals / NS_PER_S
    other = step_ns - attributed
    result["other_s"] = other / NS_PER_S
    with np.errstate(invalid="ignore", divide="ignore"):
        for comp in ("data", "forward", "backward", "sync", "optimizer"):
            col = COMPONENT_COLUMNS[comp]
            result[col[:-2] + "_frac"] = out[ns_column(col)].to_numpy(np.int64) / step_ns
        result["other_frac"] = other / step_ns
    result["sync_total_s"] = out["sync_total_ns"].to_numpy(np.int64) / NS_PER_S
    return result.reset_index(drop=True)


def warmup_end_ns(events: pd.DataFrame, *, warmup: int | str | None = WARMUP) -> dict[tuple, int]:
    """Per (run_id, rank): the end (ns) of the last step the warm-up rule drops; ranks with
    nothing dropped are absent. Records that start before it belong to the warm-up."""
    w = step_times(events)
    w = w[warmup_steps(w, warmup)]
    if w.empty:
        return {}
    ends = w.groupby(["run_id", "rank"], sort=False, observed=True)["step_end_ns"].max()
    return {(r, k): int(v) for (r, k), v in ends.items()}


def _drop_warmup(rows: pd.DataFrame, ends: dict[tuple, int], *, rank: int | None = None) -> pd.DataFrame:
    """``rows`` less those starting before their rank's warm-up end (``rank``: use that
    rank's end for every row, e.g. rank 0's for a Horovod timeline)."""
    if not ends or rows.empty:
        return rows
    keys = zip(plain(rows["run_id"]), rows["rank"].astype(object) if rank is None else [rank] * len(rows),
               strict=True)
    limit = np.array([ends.get(k, np.iinfo(np.int64).min) for k in keys], dtype=np.int64)
    return rows[rows["start_ns"].to_numpy(np.int64) >= limit]


def _rank_backward(events: pd.DataFrame, run_id: object, rank: int | None) -> iv.Intervals:
    ph = events[(plain(events["kind"]) == "phase") & (plain(events["name"]) == "backward")
                & (plain(events["run_id"]) == run_id)]
    if rank is not None:
        ph = ph[_eq(ph["rank"], rank)]
    return iv.union(ph["start_ns"].to_numpy(np.int64), end_ns(ph))


def horovod_allreduce(events: pd.DataFrame, *, source: str = "horovod", backward_rank: int = 0,
                      warmup: int | str | None = WARMUP) -> pd.DataFrame:
    """Total Horovod allreduce activity from the timeline, and its overlap with backward.

    Parameters
    ----------
    events
        Event frame holding Horovod timeline rows (``source == "horovod"``) and, for the
        overlap, our own ``backward`` phases.
    source
        The ``source`` value of timeline rows.
    backward_rank
        Rank whose ``backward`` phases are compared with the timeline (rank 0 writes the
        timeline, and its clock is the one the timeline was put on).
    warmup
        Timeline rows that start before the end of ``backward_rank``'s warm-up steps are
        left out (:func:`warmup_count`; runs without phase records keep every row).

    Returns
    -------
    pandas.DataFrame
        One row per run: ``n_activity_rows``, ``n_fusion_duplicates`` (activity rows dropped
        as duplicates), ``activity_sum_naive_s`` (durations added without deduplication:
        what a naive sum reports), ``negotiate_s``, ``memcpy_s``, ``collective_s``,
        ``wait_s``, ``other_activity_s``, ``allreduce_total_s`` (union of negotiation, ops
        and activities), ``overlap_backward_s``, ``overlap_backward_frac`` (0-1, of the
        total), ``exposed_s`` (total minus the overlap).

    Notes
    -----
    Horovod writes the same activity for every tensor of a fused batch, so activity rows
    are deduplicated on (name, start_ns) (:func:`~analysis.metrics.fusion.dedupe_fused`)
    before anything is measured; every quantity is the
    length of a union of intervals. ``memcpy_s`` covers fusion-buffer copies (kind
    ``memcpy``), ``collective_s`` the collective itself (kind ``comm`` activities such as
    ``NCCL_ALLREDUCE``/``GLOO_ALLREDUCE``), ``wait_s`` the ``sync_wait`` activities
    (``WAIT_FOR_DATA``, ``QUEUE``...).
    """
    require_columns(events, ("run_id", "source", "kind", "cat", "name", "start_ns", "dur_ns"), "horovod_allreduce")
    hv = events[plain(events["source"]) == source]
    hv = hv.assign(run_id=plain(hv["run_id"]), kind=plain(hv["kind"]), cat=plain(hv["cat"]),
                   name=plain(hv["name"]))
    hv = _drop_warmup(hv, warmup_end_ns(events, warmup=warmup), rank=backward_rank)
    rows = []
    for run_id, one in hv.groupby("run_id", sort=True):
        act = one[one["cat"] == "activity"]
        dedup = dedupe_fused(act)
        neg = one[one["kind"] == "negotiate"]
        ops = one[(one["cat"] == "op")]
        parts = {}
        for col, kinds in (("memcpy_s", ("memcpy",)), ("collective_s", ("comm",)),
                           ("wait_s", ("sync_wait",))):
            sel = dedup[dedup["kind"].isin(kinds)]
            parts[col] = iv.union_length(sel["start_ns"], end_ns(sel)) / NS_PER_S
        other = dedup[~dedup["kind"].isin(("memcpy", "comm", "sync_wait"))]
        parts["other_activity_s"] = iv.union_length(other["start_ns"], end_ns(other)) / NS_PER_S
        allrows = pd.concat([neg, ops, dedup])
        total = iv.union(allrows["start_ns"].to_numpy(np.int64), end_ns(allrows))
        back = _rank_backward(events, run_id, backward_rank)
        overlap = iv.length(iv.intersect(total, back))
        total_ns = iv.length(total)
        rows.append(
            {
                "run_id": run_id,
                "n_activity_rows": len(act),
                "n_fusion_duplicates": len(act) - len(dedup),
                "activity_sum_naive_s": int(act["dur_ns"].sum()) / NS_PER_S,
                "negotiate_s": iv.union_length(neg["start_ns"], end_ns(neg)) / NS_PER_S,
                **parts,
                "allreduce_total_s": total_ns / NS_PER_S,
                "overlap_backward_s": overlap / NS_PER_S,
                "overlap_backward_frac": overlap / total_ns if total_ns else np.nan,
                "exposed_s": (total_ns - overlap) / NS_PER_S,
            }
        )
    cols = ["run_id", "n_activity_rows", "n_fusion_duplicates", "activity_sum_naive_s", "negotiate_s",
            "memcpy_s", "collective_s", "wait_s", "other_activity_s", "allreduce_total_s",
            "overlap_backward_s", "overlap_backward_frac", "exposed_s"]
    return pd.DataFrame(rows, columns=cols)


def ddp_comm_overlap(events: pd.DataFrame, *, comm_cats: Sequence[str] = ("ddp_hook",),
                     warmup: int | str | None = WARMUP) -> pd.DataFrame:
    """DDP gradient allreduce time per rank from the comm-hook records, and how much of it
    ran under backward compute.

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, rank): ``n_buckets`` (records), ``comm_bytes`` (sum of bucket
        payloads), ``comm_s`` (union of the records), ``overlap_backward_s``,
        ``overlap_backward_frac`` (0-1 of ``comm_s``), ``exposed_s`` (comm time not under
        any data/forward/backward/optimizer phase).

    Notes
    -----
    Bucket records may overlap each other; every duration is the length of a union.
    Backward compute is the ``backward`` phase less the ``sync`` wait nested in it (the
    priority rule of :func:`time_breakdown`), so a bucket that can only start when the
    gradients are complete is not counted as overlapped. Bucket records of warm-up steps
    (``warmup``, :func:`warmup_count`) are left out.
    """
    require_columns(events, ("run_id", "rank", "kind", "cat", "start_ns", "dur_ns", "bytes"), "ddp_comm_overlap")
    comm = events[(plain(events["kind"]) == "comm") & plain(events["cat"]).isin(list(comm_cats))]
    comm = _drop_warmup(comm.assign(run_id=plain(comm["run_id"])), warmup_end_ns(events, warmup=warmup))
    ph = _phases(events)
    rows = []
    phases_of = _by_rank(ph)
    for (run_id, rank), c in comm.groupby(["run_id", "rank"], sort=True, dropna=False, observed=True):
        cu = iv.union(c["start_ns"].to_numpy(np.int64), end_ns(c))
        one = phases_of.get((run_id, rank), ph.iloc[0:0])
        owned = _exclusive_sets(one, c)
        # compute only: a sync wait nested in backward (DDP's) is not compute
        bu = owned["backward"]
        busy_u = iv.union_of(*(owned[k] for k in ("data", "forward", "backward", "optimizer")))
        total = iv.length(cu)
        ov = iv.length(iv.intersect(cu, bu))
        rows.append(
            {
                "run_id": run_id,
                "rank": rank,
                "n_buckets": len(c),
                "comm_bytes": int(c["bytes"].fillna(0).sum()),
                "comm_s": total / NS_PER_S,
                "overlap_backward_s": ov / NS_PER_S,
                "overlap_backward_frac": ov / total if total else np.nan,
                "exposed_s": iv.length(iv.subtract(cu, busy_u)) / NS_PER_S,
            }
        )
    out = pd.DataFrame(rows, columns=["run_id", "rank", "n_buckets", "comm_bytes", "comm_s",
                                      "overlap_backward_s", "overlap_backward_frac", "exposed_s"])
    out["rank"] = out["rank"].astype("Int32")
    return out


GPU_KINDS: dict[str, tuple[str, ...]] = {
    "compute": ("compute",),
    "comm": ("comm",),
    "memory": ("memcpy", "memset"),
}


_PROFILER_STEP = r"^ProfilerStep#\d+$"


def _launched_before_last_profiler_step(g: pd.DataFrame, host: pd.DataFrame) -> pd.DataFrame:
    """HTA's trace filter: the GPU rows ``g`` whose launching host call (same ``correlation``)
    started before the last ``ProfilerStep#N`` range of the rank; unchanged when the rank has
    fewer than two profiler steps (HTA does not filter then either)."""
    names = plain(host["name"]).astype(str)
    steps = host[(plain(host["kind"]) == "range") & names.str.match(_PROFILER_STEP)]
    if steps["name"].nunique() < 2:
        return g
    last_start = int(steps["start_ns"].max())
    launches = host[host["correlation"].notna() & (host["start_ns"] < last_start)]
    keep = g["correlation"].isin(set(launches["correlation"].astype(np.int64).tolist()))
    return g[keep.fillna(False).astype(bool).to_numpy()]


#: The columns of :func:`gpu_time_breakdown` after ``run_id`` and ``rank``.
_GPU_MEASURES = ("span_s", "compute_s", "comm_s", "memory_s", "idle_s", "non_compute_s", "comm_total_s",
                 "comm_overlapped_s", "compute_frac", "comm_frac", "memory_frac", "idle_frac")


def _gpu_shares(g: pd.DataFrame) -> dict[str, float]:
    """The temporal breakdown (:data:`_GPU_MEASURES`) of one rank's GPU rows ``g``."""
    sets = {k: iv.union(g.loc[g["kind"].isin(v), "start_ns"].to_numpy(np.int64),
                        end_ns(g[g["kind"].isin(v)])) for k, v in GPU_KINDS.items()}
    ends = end_ns(g)
    span = int(ends.max() - g["start_ns"].min())
    compute = iv.length(sets["compute"])
    comm_only = iv.subtract(sets["comm"], sets["compute"])
    comm = iv.length(comm_only)
    memory = iv.length(iv.subtract(sets["memory"], iv.union_of(sets["compute"], sets["comm"])))
    busy = iv.length(iv.union_of(*sets.values()))
    idle = span - busy
    return {
        "span_s": span / NS_PER_S,
        "compute_s": compute / NS_PER_S,
        "comm_s": comm / NS_PER_S,
        "memory_s": memory / NS_PER_S,
        "idle_s": idle / NS_PER_S,
        "non_compute_s": (comm + memory) / NS_PER_S,
        "comm_total_s": iv.length(sets["comm"]) / NS_PER_S,
        "comm_overlapped_s": iv.length(iv.intersect(sets["comm"], sets["compute"])) / NS_PER_S,
        "compute_frac": compute / span if span else np.nan,
        "comm_frac": comm / span if span else np.nan,
        "memory_frac": memory / span if span else np.nan,
        "idle_frac": idle / span if span else np.nan,
    }


@maps_over(unit="rank")
def gpu_time_breakdown(events: pd.DataFrame, *, drop_last_profiler_step: bool = False) -> pd.DataFrame:
    """GPU timeline per rank: computation, communication, memory and idle time.

    Parameters
    ----------
    events
        Event frame from Kineto or nsys traces: GPU rows are those of kind ``compute``,
        ``comm``, ``memcpy`` or ``memset`` with a ``device`` or ``stream``.
        Or a :class:`~analysis.runset.RunSet`: each run is read and reduced on its own
        (on the RunSet's process pool or Dask workers, ``docs/scale.md``); the same table.
    drop_last_profiler_step
        Apply Holistic Trace Analysis' default trace filter first (``TraceAnalysis(...,
        include_last_profiler_step=False)``): when a rank's Kineto trace has two or more
        ``ProfilerStep#N`` ranges, keep only the GPU rows launched (runtime call with the
        same ``correlation``) before the last one starts. The last profiler step is usually
        cut short by the profiler's stop, and GPU rows without a launching call in the
        trace are dropped too. Default ``False``: every GPU row counts.

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, rank): ``span_s`` (first GPU activity start to last end),
        ``compute_s``, ``comm_s`` (communication not overlapped by compute), ``memory_s``
        (copies and sets not overlapped by compute or communication), ``idle_s``,
        ``non_compute_s`` (= ``comm_s + memory_s``), ``comm_total_s`` (all communication),
        ``comm_overlapped_s`` (communication under compute), and ``*_frac`` shares of
        ``span_s`` for compute, comm, memory and idle (summing to 1).

    Notes
    -----
    Follows Holistic Trace Analysis' temporal breakdown
    (``BreakdownAnalysis.get_temporal_breakdown``): over all GPU streams of a rank, the
    time range is ``max(end) - min(start)``; idle time is the range minus the union of all
    GPU activity; compute time is the union of computation kernels; non-compute time is
    the range minus compute minus idle. Here non-compute is further split into
    communication (union of comm kernels minus compute) and memory (the rest), so
    communication overlapped by compute is counted once, as compute.
    """
    require_columns(events, ("run_id", "rank", "kind", "device", "stream", "start_ns", "dur_ns"), "gpu_time_breakdown")
    kinds = plain(events["kind"])
    on_gpu = kinds.isin(["compute", "comm", "memcpy", "memset"]) & (
        events["device"].notna() | events["stream"].notna())
    gpu = events[on_gpu]
    gpu = gpu.assign(run_id=plain(gpu["run_id"]), kind=plain(gpu["kind"]))
    if drop_last_profiler_step:
        require_columns(events, ("name", "correlation"), "gpu_time_breakdown")
        host = events[events["device"].isna() & events["stream"].isna()]
        host_of = _by_rank(host.assign(run_id=plain(host["run_id"])))
    rows = []
    for (run_id, rank), g in gpu.groupby(["run_id", "rank"], sort=True, dropna=False, observed=True):
        if drop_last_profiler_step:
            g = _launched_before_last_profiler_step(g, host_of.get((run_id, rank), host.iloc[0:0]))
            if g.empty:
                continue
        rows.append({"run_id": run_id, "rank": rank, **_gpu_shares(g)})
    out = pd.DataFrame(rows, columns=["run_id", "rank", *_GPU_MEASURES])
    out["rank"] = out["rank"].astype("Int32")
    return out


def breakdown_by_ranks(
    breakdown: pd.DataFrame, runs: pd.DataFrame, *, by: Sequence[str] = ("config_backend",)
) -> pd.DataFrame:
    """Step-time shares per configuration and rank count (repeats and ranks pooled).

    Parameters
    ----------
    breakdown
        :func:`time_breakdown` at level ``"rank"`` or ``"run"``.
    runs
        Runs table (``run_id``, ``n_ranks``, ``n_nodes`` and the ``by`` columns).

    Returns
    -------
    pandas.DataFrame
        One row per (configuration, ``n_ranks``): ``n_nodes``, ``n_runs``, ``source``
        (``mixed`` where its runs differ), ``n_steps``,
        ``step_mean_s``, the component times per step (``data_s``... ``other_s``, mean per
        rank-step) and their shares ``*_frac`` summing to 1.

    Notes
    -----
    Pooled: each share is the sum of that component over all steps of all ranks and
    repeats divided by the sum of their step times.
    """
    comp = [*COMPONENT_COLUMNS.values(), "other_s"]
    require_columns(breakdown, ("run_id", "n_steps", "step_time_s", *comp), "breakdown_by_ranks")
    meta = runs[["run_id", "n_ranks", "n_nodes", *by]]
    b = breakdown.merge(meta, on="run_id", how="inner")
    keys = [*by, "n_ranks"]
    g = b.groupby(keys, sort=True, dropna=False)
    out = g[["n_steps", "step_time_s", *comp]].sum().reset_index()
    out.insert(len(keys), "n_nodes", g["n_nodes"].max().to_numpy())
    out.insert(len(keys) + 1, "n_runs", g["run_id"].nunique().to_numpy())
    if "source" in b:
        out.insert(len(keys) + 2, "source", g["source"].agg(one_source).to_numpy())
    total = out["step_time_s"].to_numpy(float)
    for col in comp:
        out[col[:-2] + "_frac"] = out[col] / total
        out[col] = out[col] / out["n_steps"]
    out["step_mean_s"] = out["step_time_s"] / out["n_steps"]
    return out.drop(columns=["step_time_s"])
