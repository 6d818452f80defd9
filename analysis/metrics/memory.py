"""Compute against weight update per rank count, and memory per rank (study 8)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics._common import require_columns
from analysis.schema import MACHINE_AXES


def compute_update_breakdown(breakdown: pd.DataFrame, runs: pd.DataFrame, *,
                             by: Sequence[str] = ("config_backend", "batch_size")) -> pd.DataFrame:
    """Forward+backward against optimizer (weight update) time per step, per rank count.

    Parameters
    ----------
    breakdown
        :func:`analysis.metrics.breakdown.time_breakdown` at level ``"rank"`` or ``"run"``.
    runs
        Runs table.

    Returns
    -------
    pandas.DataFrame
        One row per (configuration, ``n_ranks``): ``compute_per_step_s`` (forward +
        backward), ``update_per_step_s`` (optimizer), ``sync_per_step_s`` (exposed sync),
        ``update_to_compute_ratio``.

    Notes
    -----
    Per-step values are totals over the group's steps divided by its number of steps
    (rank-steps), i.e. means per step.
    """
    require_columns(breakdown, ("run_id", "n_steps", "forward_s", "backward_s", "optimizer_s", "sync_exposed_s"),
                    "compute_update_breakdown")
    b = breakdown.merge(runs[["run_id", "n_ranks", *by]], on="run_id", how="inner")
    g = b.groupby([*by, "n_ranks"], sort=True, dropna=False)[
        ["n_steps", "forward_s", "backward_s", "optimizer_s", "sync_exposed_s"]].sum().reset_index()
    out = g[[*by, "n_ranks"]].copy()
    out["compute_per_step_s"] = (g["forward_s"] + g["backward_s"]) / g["n_steps"]
    out["update_per_step_s"] = g["optimizer_s"] / g["n_steps"]
    out["sync_per_step_s"] = g["sync_exposed_s"] / g["n_steps"]
    out["update_to_compute_ratio"] = out["update_per_step_s"] / out["compute_per_step_s"]
    return out


def peak_memory(epochs: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Peak memory per rank and the extra on rank 0.

    Parameters
    ----------
    epochs
        Per-rank epoch metrics (``peak_mem_mib``, ``peak_mem_kind``).
    runs
        Optional runs table to join (``n_ranks``, ``config_backend``, ``partition``...).

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, rank): ``peak_mem_mib`` (max over epochs), ``peak_mem_kind``
        (``cuda`` or ``rss``), ``rank0_extra_mib`` (rank 0's peak minus the median of the
        other ranks' peaks; NaN for one-rank runs, repeated on each row of the run).
    """
    require_columns(epochs, ("run_id", "rank", "peak_mem_mib", "peak_mem_kind"), "peak_memory")
    e = epochs.assign(run_id=epochs["run_id"].astype(object))
    out = (e.groupby(["run_id", "rank"], sort=True)
           .agg(peak_mem_mib=("peak_mem_mib", "max"), peak_mem_kind=("peak_mem_kind", "first")).reset_index())
    extra = {}
    for run_id, g in out.groupby("run_id"):
        r0 = g.loc[g["rank"] == 0, "peak_mem_mib"]
        others = g.loc[g["rank"] != 0, "peak_mem_mib"]
        extra[run_id] = float(r0.iloc[0] - others.median()) if len(r0) and len(others) else np.nan
    out["rank0_extra_mib"] = out["run_id"].map(extra).astype(float)
    if runs is not None:
        meta = [c for c in ("run_id", "experiment", *MACHINE_AXES, "gpu_model", "config_backend", "n_ranks",
                            "n_nodes", "batch_size") if c in runs.columns]
        out = runs[meta].merge(out, on="run_id", how="inner")
    return out
