"""Backend comparison (study 6): NCCL, MPI, Gloo, DDP against Horovod on the same
configurations, within one node and across nodes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics._common import require_columns
from analysis.metrics.stats import CONFIDENCE, pooled_repeats, ratio, verdict


def backend_comparison(
    per_run: pd.DataFrame,
    *,
    sync: pd.DataFrame | None = None,
    by: Sequence[str] = ("batch_size", "n_ranks", "n_nodes"),
    confidence: float = CONFIDENCE,
) -> pd.DataFrame:
    """Time per sample, epoch time and sync time per step of each backend on the same
    configuration, each against the fastest with a verdict.

    Parameters
    ----------
    per_run
        One row per run with ``run_id``, ``config_backend``, the ``by`` columns and
        ``time_per_sample_s`` (:func:`analysis.metrics.scaling.run_summary`), or else
        ``epoch_time_s``.
    sync
        Optional :func:`analysis.metrics.sync.sync_cost` output (``run_id``,
        ``sync_mean_s``, ``exposed_mean_s``).
    by
        Columns that make two runs the same configuration; ``n_nodes`` separates
        intra-node (1) from inter-node runs.
    confidence
        Level of the intervals.

    Returns
    -------
    pandas.DataFrame
        One row per configuration and ``config_backend``: ``n_runs``, ``time_per_sample_s``
        (mean over repeats, outliers left out; NaN without step measures), ``epoch_time_s``
        (as recorded, mean), ``sync_per_step_s`` (mean over repeats of the runs' mean
        ``sync_total`` per step: the cost of a synchronisation; NaN without ``sync``),
        ``exposed_per_step_s`` (the same for ``sync_exposed``: what the step pays),
        ``placement`` (``intra-node`` / ``inter-node``), ``relative_time`` (t̄ / the fastest
        backend's t̄ on that configuration, >= 1) with ``relative_time_ci_low`` /
        ``relative_time_ci_high`` and ``relative_time_verdict`` (is it distinguishable from
        the fastest), ``is_fastest`` and ``repeats_for_5pct``.

    Notes
    -----
    t is a run's time per sample on one rank (:func:`analysis.metrics.scaling.run_speedups`;
    the epoch time when the runs have no step measures: the same configuration processes
    the same samples per epoch). relative_time = t̄_backend / min over backends of t̄.
    """
    require_columns(per_run, ("run_id", "config_backend", *by), "backend_comparison")
    if "time_per_sample_s" not in per_run:
        require_columns(per_run, ("epoch_time_s",), "backend_comparison")
    t = _kept_unit_times(per_run, sync, by)
    rows = []
    for key, cfg in t.groupby(list(by), sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        best = cfg.groupby("config_backend")["_t"].mean().idxmin()
        fastest = cfg[cfg["config_backend"] == best]
        for backend, g in cfg.groupby("config_backend", sort=True):
            rows.append({**dict(zip(by, key, strict=True)), "config_backend": backend,
                         **_backend_row(g, fastest, is_fastest=backend == best)})
    out = pd.DataFrame(rows)
    if "n_nodes" in out:
        out.insert(out.columns.get_loc("config_backend") + 1, "placement",
                   np.where(out["n_nodes"] > 1, "inter-node", "intra-node"))
    return out


def _kept_unit_times(per_run: pd.DataFrame, sync: pd.DataFrame | None, by: Sequence[str]) -> pd.DataFrame:
    """The runs with their sync columns and ``_t`` (time per sample, else the epoch time),
    outlier repeats left out."""
    from analysis.metrics.scaling import outlier_reasons, unit_time

    t = per_run.reset_index(drop=True)
    if sync is not None:
        t = t.merge(sync[["run_id", "sync_mean_s", "exposed_mean_s"]], on="run_id", how="left")
    else:
        t = t.assign(sync_mean_s=np.nan, exposed_mean_s=np.nan)
    t["_t"] = unit_time(t.assign(throughput_samples_per_s=np.nan) if "throughput_samples_per_s" not in t else t,
                         "strong")
    t["_t"] = np.where(t["time_per_sample_s"].notna(), t["_t"], t["epoch_time_s"]) \
        if "time_per_sample_s" in t else t["epoch_time_s"]
    return t[outlier_reasons(t, ["config_backend", *by], t["_t"]).isna().to_numpy()]


def _backend_row(g: pd.DataFrame, fastest: pd.DataFrame, *, is_fastest: bool) -> dict:
    """The measures of one backend's runs ``g`` on a configuration, against the fastest
    backend's runs there."""
    r, lo, hi = ratio(g["_t"], fastest["_t"], same=is_fastest)
    return {
        "n_runs": len(g),
        "time_per_sample_s": float(g["time_per_sample_s"].mean()) if "time_per_sample_s" in g else np.nan,
        "epoch_time_s": float(g["epoch_time_s"].mean()) if "epoch_time_s" in g else np.nan,
        "sync_per_step_s": float(g["sync_mean_s"].mean()), "exposed_per_step_s": float(g["exposed_mean_s"].mean()),
        "relative_time": r, "relative_time_ci_low": lo, "relative_time_ci_high": hi,
        "relative_time_verdict": None if is_fastest else verdict(lo, hi, 1.0),
        "is_fastest": is_fastest, "repeats_for_5pct": pooled_repeats(g["_t"], fastest["_t"]),
    }
