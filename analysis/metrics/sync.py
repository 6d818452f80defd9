"""Synchronisation cost against the number of ranks (study 2).

The reference work's central finding: adding ranks makes each gradient synchronisation
dearer, but each rank also synchronises fewer times per epoch (it runs fewer batches);
whether the sync time per epoch falls depends on which effect wins.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics import _intervals as iv
from analysis.metrics._common import NS_PER_S, end_ns, group_keys, plain, require_columns
from analysis.metrics.breakdown import _eq, covered_in_windows, step_times


def sync_times(events: pd.DataFrame, *, comm_cats: Sequence[str] = ("ddp_hook",), skip_steps: int = 0) -> pd.DataFrame:
    """Time of every gradient synchronisation: one per rank and step.

    Parameters
    ----------
    events
        Event frame with our ``phase`` rows (and DDP ``comm`` hook records).
    comm_cats
        ``cat`` values of ``comm`` rows used when a rank has no ``sync`` phase.
    skip_steps
        Leave out the first steps of every rank (warm-up).

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, rank, epoch, step): ``sync_s`` (s). Ranks without any
        synchronisation record (runs without a framework) give no rows.

    Notes
    -----
    The synchronisation of a step is the union of its ``sync`` phases inside the step
    window (:func:`~analysis.metrics.breakdown.step_times`); for a rank that records no
    ``sync`` phase, the union of its gradient communication records (DDP bucket
    allreduces), whether or not they overlap backward.
    """
    require_columns(events, ("run_id", "rank", "kind", "name", "cat", "start_ns", "dur_ns"), "sync_times")
    kind, name, cat = plain(events["kind"]), plain(events["name"]), plain(events["cat"])
    sync_ph = events[(kind == "phase") & (name == "sync")]
    comm = events[(kind == "comm") & cat.isin(list(comm_cats))]
    windows = step_times(events)
    rows = []
    for run_id, rank in group_keys(windows, ("run_id", "rank")):
        w = windows[(windows["run_id"] == run_id) & _eq(windows["rank"], rank)].iloc[skip_steps:]
        src = sync_ph[(plain(sync_ph["run_id"]) == run_id) & _eq(sync_ph["rank"], rank)]
        if src.empty:
            src = comm[(plain(comm["run_id"]) == run_id) & _eq(comm["rank"], rank)]
        if src.empty or w.empty:
            continue
        u = iv.union(src["start_ns"].to_numpy(np.int64), end_ns(src))
        cov = covered_in_windows(u, w["step_start_ns"].to_numpy(np.int64), w["step_end_ns"].to_numpy(np.int64))
        rows.append(pd.DataFrame({"run_id": run_id, "rank": rank, "epoch": w["epoch"].to_numpy(),
                                  "step": w["step"].to_numpy(), "sync_s": cov / NS_PER_S}))
    if not rows:
        return pd.DataFrame({"run_id": pd.Series(dtype=object), "rank": pd.Series(dtype="Int32"),
                             "epoch": pd.Series(dtype="Int32"), "step": pd.Series(dtype="Int32"),
                             "sync_s": pd.Series(dtype=float)})
    out = pd.concat(rows, ignore_index=True)
    for col in ("rank", "epoch", "step"):
        out[col] = out[col].astype("Int32")
    return out


def sync_cost(syncs: pd.DataFrame, *, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run: time per synchronisation, synchronisations per epoch, sync time per epoch.

    Parameters
    ----------
    syncs
        :func:`sync_times` output.
    runs
        Optional runs table; its ``n_ranks``, ``n_nodes``, ``config_backend``,
        ``framework``, ``backend``, ``batch_size``, ``repeat`` columns are joined on.

    Returns
    -------
    pandas.DataFrame
        One row per run: ``n_syncs``, ``n_rank_epochs``, ``sync_median_s``,
        ``sync_q25_s``, ``sync_q75_s``, ``sync_min_s``, ``sync_max_s``, ``sync_mean_s``,
        ``sync_total_s``, ``syncs_per_epoch``, ``sync_per_epoch_s``.

    Notes
    -----
    With S the sum of all synchronisation times of a run, k the number of
    synchronisations and E the number of (rank, epoch) pairs:
    ``sync_mean_s = S/k``, ``syncs_per_epoch = k/E`` (= batches per rank per epoch),
    ``sync_per_epoch_s = S/E = syncs_per_epoch · sync_mean_s``. Median and quartiles are
    over all synchronisations of all ranks.
    """
    require_columns(syncs, ("run_id", "rank", "epoch", "sync_s"), "sync_cost")
    s = syncs.assign(run_id=syncs["run_id"].astype(object))
    rows = []
    for run_id, g in s.groupby("run_id", sort=True):
        v = g["sync_s"].to_numpy(float)
        n_re = len(g[["rank", "epoch"]].astype(object).drop_duplicates())
        total = float(v.sum())
        rows.append({
            "run_id": run_id,
            "n_syncs": len(v),
            "n_rank_epochs": n_re,
            "sync_median_s": float(np.median(v)),
            "sync_q25_s": float(np.quantile(v, 0.25)),
            "sync_q75_s": float(np.quantile(v, 0.75)),
            "sync_min_s": float(v.min()),
            "sync_max_s": float(v.max()),
            "sync_mean_s": total / len(v),
            "sync_total_s": total,
            "syncs_per_epoch": len(v) / n_re,
            "sync_per_epoch_s": total / n_re,
        })
    out = pd.DataFrame(rows, columns=["run_id", "n_syncs", "n_rank_epochs", "sync_median_s", "sync_q25_s",
                                      "sync_q75_s", "sync_min_s", "sync_max_s", "sync_mean_s", "sync_total_s",
                                      "syncs_per_epoch", "sync_per_epoch_s"])
    if runs is not None:
        meta = [c for c in ("run_id", "framework", "backend", "config_backend", "n_ranks", "n_nodes",
                            "batch_size", "repeat") if c in runs.columns]
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
        ``sync_max_s``, ``sync_per_epoch_s``, and relative to the configuration's smallest
        rank count: ``syncs_ratio``, ``time_per_sync_ratio``, ``sync_per_epoch_ratio``
        (their product), ``fewer_syncs_win`` (True when the sync time per epoch fell).

    Notes
    -----
    Repeats are pooled (sums of S, k and E, see :func:`sync_cost`) so that
    ``sync_per_epoch_s = syncs_per_epoch · sync_mean_s`` holds per row and
    ``sync_per_epoch_ratio = syncs_ratio · time_per_sync_ratio`` exactly.
    """
    require_columns(cost, ("n_ranks", "n_syncs", "n_rank_epochs", "sync_total_s", *by), "sync_scaling")
    rows = []
    for key, g in cost.groupby([*by, "n_ranks"], sort=True, dropna=False):
        k, e, s = g["n_syncs"].sum(), g["n_rank_epochs"].sum(), g["sync_total_s"].sum()
        row = dict(zip([*by, "n_ranks"], key, strict=False))
        row.update({
            "n_nodes": g["n_nodes"].max() if "n_nodes" in g else np.nan,
            "n_runs": len(g),
            "syncs_per_epoch": k / e,
            "sync_mean_s": s / k,
            "sync_median_s": float(g["sync_median_s"].median()),
            "sync_min_s": float(g["sync_min_s"].min()),
            "sync_max_s": float(g["sync_max_s"].max()),
            "sync_per_epoch_s": s / e,
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
