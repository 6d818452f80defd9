"""Synchronisation cost against the number of ranks (study 2).

The reference work's central finding: adding ranks makes each gradient synchronisation
dearer, but each rank also synchronises fewer times per epoch (it runs fewer batches);
whether the sync time per epoch falls depends on which effect wins.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics._common import plain, require_columns
from analysis.metrics._mapping import maps_over
from analysis.metrics.breakdown import (
    IN_FLIGHT_CATS,
    WARMUP,
    step_times,
    time_breakdown,
    warmup_steps,
)
from analysis.metrics.timesource import run_sources, timed_view
from analysis.schema import MACHINE_AXES


# time_breakdown's mapping, with its default timeline_rank: per run unless warm-up is off
@maps_over(unit=lambda options: "rank" if options.get("keep_warmup") or not options.get("warmup", WARMUP)
           else "run", timeline_rank=0)
def sync_times(events: pd.DataFrame, *, comm_cats: Sequence[str] = IN_FLIGHT_CATS,
               warmup: int | str | None = WARMUP, keep_warmup: bool = False) -> pd.DataFrame:
    """Both gradient-synchronisation times of every step: one row per rank and step.

    Parameters
    ----------
    events
        Event frame with our ``phase`` rows (and the comm hooks' records, and a Horovod
        timeline).
        Or a :class:`~analysis.runset.RunSet`: each run is read and reduced on its own
        (on the RunSet's process pool or Dask workers, ``docs/scale.md``); the same table.
    comm_cats
        ``cat`` values of ``comm`` rows that mark a gradient collective in flight.
    warmup
        Warm-up steps dropped on every rank (see
        :func:`~analysis.metrics.breakdown.warmup_count`).
    keep_warmup
        Keep the warm-up steps too, flagged in a ``warmup`` column (so that
        :func:`sync_cost` counts every synchronisation of an epoch but times only the
        kept ones); an event frame only.

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, rank, epoch, step): ``source`` (host or device time, as
        :func:`~analysis.metrics.breakdown.time_breakdown` chose it), ``sync_total_s`` (a
        gradient collective in flight) and ``sync_exposed_s`` (the training thread, or on
        device time the stream, waiting for it), in s (and ``warmup`` with ``keep_warmup``). Ranks without any synchronisation record (runs
        without a framework) give no rows.

    Notes
    -----
    Both are measured inside the step window as in
    :func:`~analysis.metrics.breakdown.time_breakdown`; ``docs/metrics.md`` defines them
    for Horovod and DDP alike.
    """
    require_columns(events, ("run_id", "rank", "kind", "name", "cat", "start_ns", "dur_ns"), "sync_times")
    kind, name, cat = plain(events["kind"]), plain(events["name"]), plain(events["cat"])
    has = events[((kind == "phase") & (name == "sync")) | ((kind == "comm") & cat.isin(list(comm_cats)))]
    ranks = set(zip(plain(has["run_id"]), has["rank"].astype(object), strict=True))
    if "source" in events:
        tl_runs = set(plain(events.loc[plain(events["source"]) == "horovod", "run_id"]))
        ranks |= {(r, k) for r, k in zip(plain(events["run_id"]), events["rank"].astype(object), strict=True)
                  if r in tl_runs and k == 0}
    per_step = time_breakdown(events, level="step", comm_cats=comm_cats, warmup=0 if keep_warmup else warmup)
    keep = [(r, k) in ranks for r, k in zip(per_step["run_id"], per_step["rank"].astype(object), strict=True)]
    out = per_step.loc[keep, ["run_id", "rank", "epoch", "step", "source", "sync_total_s", "sync_exposed_s"]]
    if keep_warmup:
        w = step_times(timed_view(events, run_sources(events)))
        k4 = ["run_id", "rank", "epoch", "step"]
        w = w.assign(warmup=warmup_steps(w, warmup))[[*k4, "warmup"]].astype({c: object for c in k4})
        out = out.astype({c: object for c in k4}).merge(w.drop_duplicates(k4), on=k4, how="left")
        out["warmup"] = out["warmup"].fillna(False).astype(bool)
        out = out.astype({"rank": "Int32", "epoch": "Int32", "step": "Int32"})
    return out.reset_index(drop=True)


def sync_cost(syncs: pd.DataFrame, *, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run: time per synchronisation, synchronisations per epoch, sync time per epoch.

    Parameters
    ----------
    syncs
        :func:`sync_times` output.
    runs
        Optional runs table; its ``n_ranks``, ``n_nodes``, ``config_backend``,
        ``framework``, ``backend``, ``batch_size``, ``repeat``, ``cluster``, ``partition``
        and ``gpu_model`` columns are joined on.

    Returns
    -------
    pandas.DataFrame
        One row per run: ``n_syncs`` (timed), ``n_batches`` (all), ``n_rank_epochs``; on ``sync_total`` (the cost of a
        synchronisation): ``sync_median_s``, ``sync_q25_s``, ``sync_q75_s``,
        ``sync_min_s``, ``sync_max_s``, ``sync_mean_s``, ``sync_sum_s``,
        ``syncs_per_epoch``, ``sync_per_epoch_s``; on ``sync_exposed`` (what the step
        pays): ``exposed_mean_s``, ``exposed_sum_s``, ``exposed_per_epoch_s`` and
        ``exposed_frac_of_total`` (exposed / total: 1 when nothing overlaps compute).

    Notes
    -----
    With S the sum of the ``sync_total`` times of a run's kept (not warm-up) steps, k their
    number, K the number of all its synchronisations (warm-up included: ``n_batches``; the
    rows given when ``syncs`` has no ``warmup`` column) and E the number of (rank, epoch)
    pairs: ``sync_mean_s = S/k``, ``syncs_per_epoch = K/E`` (exactly the batches per rank
    per epoch), ``sync_per_epoch_s = syncs_per_epoch · sync_mean_s``; the ``exposed_*``
    columns are the same with the ``sync_exposed`` times. Median and quartiles are over
    the kept synchronisations of all ranks.
    """
    require_columns(syncs, ("run_id", "rank", "epoch", "sync_total_s", "sync_exposed_s"), "sync_cost")
    s = syncs.assign(run_id=syncs["run_id"].astype(object))
    rows = []
    for run_id, g_all in s.groupby("run_id", sort=True):
        g = g_all[~g_all["warmup"].astype(bool)] if "warmup" in g_all else g_all
        if g.empty:
            continue
        v = g["sync_total_s"].to_numpy(float)
        x = g["sync_exposed_s"].to_numpy(float)
        n_re = len(g_all[["rank", "epoch"]].astype(object).drop_duplicates())
        total, exposed = float(v.sum()), float(x.sum())
        per_epoch = len(g_all) / n_re
        rows.append({
            "run_id": run_id,
            "n_syncs": len(v),
            "n_batches": len(g_all),
            "n_rank_epochs": n_re,
            "sync_median_s": float(np.median(v)),
            "sync_q25_s": float(np.quantile(v, 0.25)),
            "sync_q75_s": float(np.quantile(v, 0.75)),
            "sync_min_s": float(v.min()),
            "sync_max_s": float(v.max()),
            "sync_mean_s": total / len(v),
            "sync_sum_s": total,
            "syncs_per_epoch": per_epoch,
            "sync_per_epoch_s": per_epoch * total / len(v),
            "exposed_mean_s": exposed / len(v),
            "exposed_sum_s": exposed,
            "exposed_per_epoch_s": per_epoch * exposed / len(v),
            "exposed_frac_of_total": exposed / total if total > 0 else np.nan,
        })
    out = pd.DataFrame(rows, columns=["run_id", "n_syncs", "n_batches", "n_rank_epochs", "sync_median_s", "sync_q25_s",
                                      "sync_q75_s", "sync_min_s", "sync_max_s", "sync_mean_s", "sync_sum_s",
                                      "syncs_per_epoch", "sync_per_epoch_s", "exposed_mean_s", "exposed_sum_s",
                                      "exposed_per_epoch_s", "exposed_frac_of_total"])
    if runs is not None:
        # placement columns only where recorded (no empty columns posing as data)
        meta = [c for c in ("run_id", "framework", "backend", "config_backend", "n_ranks", "n_nodes",
                            "batch_size", "repeat", *MACHINE_AXES, "gpu_model") if c in runs.columns
                and (c not in (*MACHINE_AXES, "gpu_model") or runs[c].notna().any())]
        out = runs[meta].merge(out, on="run_id", how="inner")
    return out


def sync_scaling(cost: pd.DataFrame, *, by: Sequence[str] = ("config_backend", "batch_size")) -> pd.DataFrame:
    """Does having fewer synchronisations outpace the growing cost of each?

    Parameters
    ----------
    cost
        :func:`sync_cost` joined with the runs table (needs ``n_ranks`` and ``by``).
    by
        Columns that define one configuration.

    Returns
    -------
    pandas.DataFrame
        One row per configuration and ``n_ranks``: ``n_runs``, ``syncs_per_epoch``,
        ``sync_mean_s``, ``sync_median_s`` (median of the runs' medians), ``sync_min_s``,
        ``sync_max_s``, ``sync_per_epoch_s`` (all on ``sync_total``), ``exposed_mean_s``
        and ``exposed_per_epoch_s`` (on ``sync_exposed``), and relative to the configuration's smallest
        rank count: ``syncs_ratio``, ``time_per_sync_ratio``, ``sync_per_epoch_ratio``
        (their product), ``fewer_syncs_win`` (True when the sync time per epoch fell).

    Notes
    -----
    Repeats are pooled (sums of S, k, K and E, see :func:`sync_cost`) so that
    ``sync_per_epoch_s = syncs_per_epoch · sync_mean_s`` holds per row and
    ``sync_per_epoch_ratio = syncs_ratio · time_per_sync_ratio`` exactly.
    """
    require_columns(cost, ("n_ranks", "n_syncs", "n_rank_epochs", "sync_sum_s", *by), "sync_scaling")
    rows = []
    for key, g in cost.groupby([*by, "n_ranks"], sort=True, dropna=False):
        k, e, s = g["n_syncs"].sum(), g["n_rank_epochs"].sum(), g["sync_sum_s"].sum()
        kk = g["n_batches"].sum() if "n_batches" in g else k
        x = g["exposed_sum_s"].sum() if "exposed_sum_s" in g else np.nan
        row = dict(zip([*by, "n_ranks"], key, strict=False))
        row.update({
            "n_nodes": g["n_nodes"].max() if "n_nodes" in g else np.nan,
            "n_runs": len(g),
            "syncs_per_epoch": kk / e,
            "sync_mean_s": s / k,
            "sync_median_s": float(g["sync_median_s"].median()),
            "sync_min_s": float(g["sync_min_s"].min()),
            "sync_max_s": float(g["sync_max_s"].max()),
            "sync_per_epoch_s": kk / e * s / k,
            "exposed_mean_s": x / k,
            "exposed_per_epoch_s": kk / e * x / k,
        })
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    parts = []
    for _, g in out.groupby(list(by), sort=True, dropna=False):
        g = g.sort_values("n_ranks").copy()
        ref = g.iloc[0]
        g["syncs_ratio"] = g["syncs_per_epoch"] / ref["syncs_per_epoch"]
        g["time_per_sync_ratio"] = g["sync_mean_s"] / ref["sync_mean_s"]
        g["sync_per_epoch_ratio"] = g["syncs_ratio"] * g["time_per_sync_ratio"]
        g["fewer_syncs_win"] = g["sync_per_epoch_ratio"] < 1
        parts.append(g)
    return pd.concat(parts, ignore_index=True)
