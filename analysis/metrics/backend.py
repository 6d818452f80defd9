"""Backend comparison (study 6): NCCL, MPI, Gloo, DDP against Horovod on the same
configurations, within one node and across nodes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics._common import require_columns


def backend_comparison(
    per_run: pd.DataFrame,
    *,
    sync: pd.DataFrame | None = None,
    by: Sequence[str] = ("batch_size", "n_ranks", "n_nodes"),
) -> pd.DataFrame:
    """Epoch time and sync time per step of each backend on the same configuration.

    Parameters
    ----------
    per_run
        One row per run with ``run_id``, ``config_backend``, ``epoch_time_s`` and the
        ``by`` columns (e.g. :func:`analysis.metrics.scaling.run_summary`).
    sync
        Optional :func:`analysis.metrics.sync.sync_cost` output (``run_id``,
        ``sync_mean_s``, ``exposed_mean_s``).
    by
        Columns that make two runs the same configuration; ``n_nodes`` separates
        intra-node (1) from inter-node runs.

    Returns
    -------
    pandas.DataFrame
        One row per configuration and ``config_backend``: ``n_runs``, ``epoch_time_s``
        (median over repeats), ``sync_per_step_s`` (median over repeats of the runs' mean
        ``sync_total`` per step: the cost of a synchronisation; NaN without ``sync``),
        ``exposed_per_step_s`` (the same for ``sync_exposed``: what the step pays), ``placement`` (``intra-node`` /
        ``inter-node``), ``relative_epoch_time`` (epoch time / the fastest backend's on
        that configuration, >= 1) and ``is_fastest``.

    Notes
    -----
    relative_epoch_time = T_backend / min over backends of T, per configuration.
    """
    require_columns(per_run, ("run_id", "config_backend", "epoch_time_s", *by), "backend_comparison")
    t = per_run
    if sync is not None:
        t = t.merge(sync[["run_id", "sync_mean_s", "exposed_mean_s"]], on="run_id", how="left")
    else:
        t = t.assign(sync_mean_s=np.nan, exposed_mean_s=np.nan)
    keys = [*by, "config_backend"]
    out = (
        t.groupby(keys, sort=True, dropna=False)
        .agg(n_runs=("run_id", "size"), epoch_time_s=("epoch_time_s", "median"),
             sync_per_step_s=("sync_mean_s", "median"), exposed_per_step_s=("exposed_mean_s", "median"))
        .reset_index()
    )
    if "n_nodes" in out:
        out["placement"] = np.where(out["n_nodes"] > 1, "inter-node", "intra-node")
    best = out.groupby(list(by), dropna=False)["epoch_time_s"].transform("min")
    out["relative_epoch_time"] = out["epoch_time_s"] / best
    out["is_fastest"] = out["epoch_time_s"] == best
    return out
