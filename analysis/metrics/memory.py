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


def compute_update_per_epoch(table: pd.DataFrame, per_run: pd.DataFrame, *,
                             by: Sequence[str] = ("config_backend", "batch_size")) -> pd.DataFrame:
    """Per-epoch totals on one rank of :func:`compute_update_breakdown`'s per-step times
    (the reference's FP+BP against WU per epoch).

    Returns
    -------
    pandas.DataFrame
        ``table`` plus ``batches_per_epoch`` (per rank, median over the group's runs),
        ``compute_per_epoch_s``, ``update_per_epoch_s`` and ``sync_per_epoch_s`` (NaN where
        ``per_run`` lacks ``samples_per_epoch``).

    Notes
    -----
    batches per rank per epoch = ceil(samples per epoch / (ranks · batch per rank)), the same
    count as the synchronisations per epoch; X_per_epoch = X_per_step · batches per epoch
    (a partial last batch counted as a full step: its time is not measured apart).
    With the per-rank batch fixed the update per step stays, while the batches per epoch
    fall as 1/n: the update per epoch falls with the ranks.

    Examples
    --------
    >>> cu = pd.DataFrame({"config_backend": "ddp", "batch_size": 75, "n_ranks": [1, 2],
    ...                    "compute_per_step_s": 0.1, "update_per_step_s": 0.01, "sync_per_step_s": [0.0, 0.02]})
    >>> pr = pd.DataFrame({"config_backend": "ddp", "batch_size": 75, "n_ranks": [1, 2], "samples_per_epoch": 750})
    >>> compute_update_per_epoch(cu, pr)[["batches_per_epoch", "update_per_epoch_s"]].values.tolist()
    [[10.0, 0.1], [5.0, 0.05]]
    """
    require_columns(table, ("n_ranks", "compute_per_step_s", "update_per_step_s", "sync_per_step_s", *by),
                    "compute_update_per_epoch")
    keys = [*by, "n_ranks"]
    out = table.copy()
    if "samples_per_epoch" in per_run and not set(keys) - set(per_run.columns):
        pr = per_run.assign(_b=np.ceil(per_run["samples_per_epoch"].astype(float)
                                       / (per_run["n_ranks"].astype(float) * per_run["batch_size"].astype(float))))
        b = pr.groupby(keys, sort=True, dropna=False)["_b"].median().rename("batches_per_epoch").reset_index()
        out = out.merge(b.astype({k: out[k].dtype for k in keys}, errors="ignore"), on=keys, how="left")
    else:
        out["batches_per_epoch"] = np.nan
    for what in ("compute", "update", "sync"):
        out[f"{what}_per_epoch_s"] = out[f"{what}_per_step_s"] * out["batches_per_epoch"]
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


def memory_by_batch(epochs: pd.DataFrame, runs: pd.DataFrame, *,
                    by: Sequence[str] = ("config_backend", "n_ranks")) -> pd.DataFrame:
    """Peak memory per rank against the per-rank batch size, with the runs that ran out of
    memory (the reference's memory per GPU against batch size, and the largest batch that fits).

    Parameters
    ----------
    epochs
        Per-rank epoch metrics (``peak_mem_mib``, ``peak_mem_kind``).
    runs
        The runs table with every run, the ones that ran out of memory (status ``oom``) too.

    Returns
    -------
    pandas.DataFrame
        One row per (``by``, ``batch_size``): ``size`` (the batch size, for
        :func:`analysis.metrics.sizes.memory_limit`), ``n_runs``, ``n_ok``, ``n_oom``,
        ``peak_mem_mib`` (per run the largest rank's peak over epochs, median over the ok
        runs; NaN where none finished) and ``peak_mem_kind`` (``cuda``: the device's
        allocator; ``rss``: the process's resident memory, on a CPU run).

    Examples
    --------
    >>> ep = pd.DataFrame({"run_id": ["a", "b"], "rank": 0, "peak_mem_mib": [100.0, 180.0], "peak_mem_kind": "rss"})
    >>> runs = pd.DataFrame({"run_id": ["a", "b", "c"], "status": ["ok", "ok", "oom"], "config_backend": "none",
    ...                      "n_ranks": 1, "batch_size": [75, 150, 300]})
    >>> memory_by_batch(ep, runs)[["batch_size", "peak_mem_mib", "n_oom"]].values.tolist()
    [[75.0, 100.0, 0.0], [150.0, 180.0, 0.0], [300.0, nan, 1.0]]
    """
    from analysis.metrics.sizes import OOM_STATUS

    require_columns(runs, ("run_id", "status", "batch_size", *by), "memory_by_batch")
    peak = (peak_memory(epochs[epochs["peak_mem_mib"].notna()]).groupby("run_id")
            .agg(peak_mem_mib=("peak_mem_mib", "max"), peak_mem_kind=("peak_mem_kind", "first")).reset_index())
    r = runs.assign(run_id=runs["run_id"].astype(object))
    if "vary_batch-size" in r:  # --find-max batch-size=B: a run that died before recording its batch
        r["batch_size"] = r["batch_size"].fillna(pd.to_numeric(r["vary_batch-size"], errors="coerce"))
    r = r[r["batch_size"].notna()]
    r = r.merge(peak, on="run_id", how="left")
    rows = []
    for key, g in r.groupby([*by, "batch_size"], sort=True, dropna=False):
        ok = g[g["status"] == "ok"]
        kinds = sorted(set(ok["peak_mem_kind"].dropna()))
        rows.append({**dict(zip([*by, "batch_size"], key, strict=True)), "size": float(key[-1]), "n_runs": len(g),
                     "n_ok": len(ok), "n_oom": int((g["status"] == OOM_STATUS).sum()),
                     "peak_mem_mib": float(ok["peak_mem_mib"].median()) if ok["peak_mem_mib"].notna().any() else np.nan,
                     "peak_mem_kind": "/".join(kinds) or None})
    return pd.DataFrame(rows)
