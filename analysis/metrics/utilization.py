"""Device usage against the number of ranks (study 5): NVML GPU utilisation, memory and
power, or CPU utilisation when that is what was sampled."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics._common import plain, require_columns

GPU_METRICS: tuple[str, ...] = ("util_gpu_pct", "util_mem_pct", "mem_used_mib", "power_w")
CPU_METRICS: tuple[str, ...] = ("cpu_util_pct", "rss_mib")


def device_usage(samples: pd.DataFrame) -> pd.DataFrame:
    """Mean and peak of each sampled metric per device (GPU), per process (CPU, per rank)
    and per host (CPU host totals).

    Parameters
    ----------
    samples
        Sample frame (schema of :mod:`analysis.schema`).

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, host, unit): ``unit`` is ``"gpu"`` (one device), ``"rank"``
        (one training process) or ``"host"`` (CPU total of a node); ``device``, ``rank``,
        ``n_samples``, and for each metric present ``<metric>_mean`` and ``<metric>_max``
        (units as in the metric name, e.g. ``util_gpu_pct_mean``, ``mem_used_mib_max``).

    Notes
    -----
    Means are plain averages of the samples (the sampler's interval is constant); per-core
    CPU rows are left out (the host total already covers them).
    """
    require_columns(samples, ("run_id", "host", "device", "cpu_core", "rank", "ts_ns"), "device_usage")
    s = samples.assign(run_id=plain(samples["run_id"]), host=plain(samples["host"]))
    s = s[s["cpu_core"].isna()]
    gpu = s[s["device"].notna()].assign(unit="gpu")
    proc = s[s["device"].isna() & s["rank"].notna()].assign(unit="rank")
    host = s[s["device"].isna() & s["rank"].isna() & s["cpu_util_pct"].notna()].assign(unit="host")
    frames = []
    for part, metrics in ((gpu, GPU_METRICS + CPU_METRICS), (proc, CPU_METRICS), (host, ("cpu_util_pct",))):
        if part.empty:
            continue
        present = [m for m in metrics if part[m].notna().any()]
        keys = ["run_id", "host", "unit", "device", "rank"]
        p = part.assign(device=part["device"].astype("Int64").astype(object),
                        rank=part["rank"].astype("Int64").astype(object))
        agg = {"n_samples": ("ts_ns", "size")}
        for m in present:
            agg[f"{m}_mean"] = (m, "mean")
            agg[f"{m}_max"] = (m, "max")
        frames.append(p.groupby(keys, sort=True, dropna=False).agg(**agg).reset_index())
    if not frames:
        return pd.DataFrame(columns=["run_id", "host", "unit", "device", "rank", "n_samples"])
    out = pd.concat(frames, ignore_index=True)
    out["device"] = pd.array(out["device"].where(out["device"].notna(), None), dtype="Int16")
    out["rank"] = pd.array(out["rank"].where(out["rank"].notna(), None), dtype="Int32")
    return out


def usage_by_ranks(
    usage: pd.DataFrame, runs: pd.DataFrame, *, by: Sequence[str] = ("config_backend",)
) -> pd.DataFrame:
    """Device usage against the rank count, with the jump where another node joins.

    Parameters
    ----------
    usage
        :func:`device_usage` output.
    runs
        Runs table (``run_id``, ``n_ranks``, ``n_nodes`` and the ``by`` columns).

    Returns
    -------
    pandas.DataFrame
        One row per (configuration, ``n_ranks``, ``unit``): ``n_nodes``, ``n_units`` and,
        for each ``<metric>_mean`` of ``usage``, its mean over devices/processes/hosts and
        runs; plus ``<metric>_mean_jump`` (change from the previous rank count, NaN
        elsewhere) on the rows where ``n_nodes`` grew (``new_node`` True).
    """
    require_columns(runs, ("run_id", "n_ranks", "n_nodes", *by), "usage_by_ranks")
    meta = runs[["run_id", "n_ranks", "n_nodes", *by]]
    u = usage.merge(meta, on="run_id", how="inner")
    metrics = [c for c in usage.columns if c.endswith("_mean")]
    keys = [*by, "n_ranks", "unit"]
    agg = {"n_nodes": ("n_nodes", "max"), "n_units": ("run_id", "size")}
    for m in metrics:
        agg[m] = (m, "mean")
    out = u.groupby(keys, sort=True, dropna=False).agg(**agg).reset_index()
    parts = []
    for _, g in out.groupby([*by, "unit"], sort=True, dropna=False):
        g = g.sort_values("n_ranks").copy()
        g["new_node"] = g["n_nodes"].diff().fillna(0) > 0
        for m in metrics:
            g[f"{m}_jump"] = np.where(g["new_node"], g[m].diff(), np.nan)
        parts.append(g)
    return pd.concat(parts, ignore_index=True) if parts else out
