"""Stragglers (study 10): which rank holds the others up, and by how much."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics._common import NS_PER_S, end_ns, plain, require_columns
from analysis.metrics.breakdown import WARMUP


def negotiation_stragglers(events: pd.DataFrame, *, source: str = "horovod") -> pd.DataFrame:
    """The last rank to report a tensor ready in each Horovod negotiation.

    Parameters
    ----------
    events
        Event frame with Horovod timeline rows: readiness ticks (kind ``marker``, cat
        ``rank_ready``, ``rank`` = the ready rank, ``tensor``) and ``negotiate`` rows.

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, tensor, negotiation): ``negotiation`` (0, 1, ... per tensor),
        ``n_ranks_ready``, ``first_rank``, ``last_rank``, ``first_ready_ns``,
        ``last_ready_ns``, ``lag_s`` (last minus first tick), ``margin_s`` (last minus the
        second-to-last tick: how much earlier the negotiation could have ended without the
        straggler; NaN with one tick).

    Notes
    -----
    Ticks are assigned to the negotiation (``negotiate`` row of the same tensor) whose
    interval contains them; without negotiate rows, a new negotiation starts whenever a
    rank ticks again for the same tensor. Horovod writes ticks only for negotiations that
    miss its response cache (normally the first iterations).
    """
    require_columns(events, ("run_id", "kind", "cat", "rank", "tensor", "start_ns", "source"), "negotiation_stragglers")
    src = plain(events["source"]) == source
    ticks = events[src & (plain(events["kind"]) == "marker") & (plain(events["cat"]) == "rank_ready")]
    neg = events[src & (plain(events["kind"]) == "negotiate")]
    ticks = ticks.assign(run_id=plain(ticks["run_id"]), tensor=plain(ticks["tensor"]))
    neg = neg.assign(run_id=plain(neg["run_id"]), tensor=plain(neg["tensor"]))
    rows = []
    for (run_id, tensor), g in ticks.groupby(["run_id", "tensor"], sort=True):
        g = g.sort_values("start_ns", kind="stable")
        ts = g["start_ns"].to_numpy(np.int64)
        ranks = g["rank"].to_numpy()
        n = neg[(neg["run_id"] == run_id) & (neg["tensor"] == tensor)].sort_values("start_ns")
        if len(n):
            starts = n["start_ns"].to_numpy(np.int64)
            ends = end_ns(n)
            idx = np.searchsorted(starts, ts, side="right") - 1
            inside = (idx >= 0) & (ts <= ends[np.maximum(idx, 0)])
            label = np.where(inside, idx, -1)
        else:
            label = np.zeros(len(ts), dtype=int)
            seen: set = set()
            k = 0
            for i, r in enumerate(ranks):
                if r in seen:
                    k += 1
                    seen = set()
                seen.add(r)
                label[i] = k
        for k, (lab) in enumerate(pd.unique(label[label >= 0])):
            sel = label == lab
            t, r = ts[sel], ranks[sel]
            rows.append({
                "run_id": run_id, "tensor": tensor, "negotiation": k, "n_ranks_ready": len(set(r.tolist())),
                "first_rank": int(r[0]), "last_rank": int(r[-1]), "first_ready_ns": int(t[0]),
                "last_ready_ns": int(t[-1]), "lag_s": (t[-1] - t[0]) / NS_PER_S,
                "margin_s": (t[-1] - t[-2]) / NS_PER_S if len(t) > 1 else np.nan,
            })
    return pd.DataFrame(rows, columns=["run_id", "tensor", "negotiation", "n_ranks_ready", "first_rank", "last_rank",
                                       "first_ready_ns", "last_ready_ns", "lag_s", "margin_s"])


def phase_stragglers(events: pd.DataFrame, *, warmup: int | str | None = WARMUP) -> pd.DataFrame:
    """Per step, which rank finished its compute last and how long the others waited.

    Parameters
    ----------
    events
        Event frame with our ``phase`` rows of all ranks of a run.
    warmup
        Warm-up steps dropped on every rank (:func:`~analysis.metrics.breakdown.warmup_count`).

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, epoch, step, rank): ``busy_s`` (data + forward + backward in
        that step: the work before the gradient synchronisation), ``wait_s`` (= max over
        ranks of busy_s - own busy_s), ``is_last`` (this rank had the largest busy time).

    Notes
    -----
    ``busy_s`` comes from the step breakdown's exclusive sets
    (:func:`analysis.metrics.gap.rank_step_parts`), so a sync wait nested in ``backward``
    (DDP's) is not counted as work. Durations rather than end times are compared, so clock
    offsets between ranks do not matter: after each synchronisation all ranks start the next
    step together, and the rank with the most work is the one the others wait for in the
    next synchronisation.
    """
    from analysis.metrics.gap import rank_step_parts

    require_columns(events, ("run_id", "rank", "kind", "name", "step", "epoch", "start_ns", "dur_ns"), "phase_stragglers")
    p = rank_step_parts(events, warmup=warmup)
    out = p[["run_id", "epoch", "step", "rank", "busy_s", "wait_s"]].copy()
    mx = out.groupby(["run_id", "epoch", "step"], dropna=False, observed=True)["busy_s"].transform("max")
    out["is_last"] = out["busy_s"] == mx
    out = out.sort_values(["run_id", "epoch", "step", "rank"], kind="stable").reset_index(drop=True)
    for col in ("epoch", "step", "rank"):
        out[col] = out[col].astype("Int32")
    return out


def straggler_summary(per_step: pd.DataFrame, *, runs: pd.DataFrame | None = None,
                      by: Sequence[str] = ("config_backend", "n_ranks")) -> pd.DataFrame:
    """Per (run_id, rank): how often it was last (``n_last``, ``last_frac``), its mean and
    total wait (``wait_mean_s``, ``wait_total_s``), from :func:`phase_stragglers`; with
    ``runs``, the ``by`` columns of each run joined in front (e.g. ``partition``)."""
    require_columns(per_step, ("run_id", "rank", "wait_s", "is_last"), "straggler_summary")
    g = per_step.groupby(["run_id", "rank"], sort=True)
    out = g.agg(n_steps=("wait_s", "size"), n_last=("is_last", "sum"), wait_mean_s=("wait_s", "mean"),
                wait_total_s=("wait_s", "sum")).reset_index()
    out["last_frac"] = out["n_last"] / out["n_steps"]
    if runs is not None:
        require_columns(runs, ("run_id", *by), "straggler_summary")
        meta = runs[["run_id", *by]].assign(run_id=runs["run_id"].astype(object))
        out = meta.merge(out.assign(run_id=out["run_id"].astype(object)), on="run_id", how="inner")
    return out
