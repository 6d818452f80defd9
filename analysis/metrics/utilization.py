"""Device usage against the number of ranks (study 5): NVML GPU utilisation, memory and
power, or CPU utilisation when that is what was sampled."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics._common import plain, require_columns
from analysis.metrics._mapping import maps_over

GPU_METRICS: tuple[str, ...] = ("util_gpu_pct", "util_mem_pct", "mem_used_mib", "power_w")
CPU_METRICS: tuple[str, ...] = ("cpu_util_pct", "rss_mib")
#: The units of :func:`device_usage` in its row order, with the metrics each may have.
_UNITS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpu", GPU_METRICS + CPU_METRICS), ("rank", CPU_METRICS), ("host", ("cpu_util_pct",)))


@maps_over(table="samples", rank_devices=True, combine=lambda parts: _usage_of_runs(parts))
def device_usage(samples: pd.DataFrame, *, rank_devices: pd.DataFrame | None = None) -> pd.DataFrame:
    """Mean and peak of each sampled metric per device (GPU), per process (CPU, per rank)
    and per host (CPU host totals).

    Parameters
    ----------
    samples
        Sample frame (schema of :mod:`analysis.schema`). Or a
        :class:`~analysis.runset.RunSet`: each run's samples are summarised on their own
        (on the RunSet's process pool or Dask workers, ``docs/scale.md``), with the
        RunSet's ``rank_devices`` unless ``rank_devices`` is given; the same table as
        ``device_usage(rs.samples, rank_devices=rs.rank_devices)``.
    rank_devices
        ``RunSet.rank_devices``: when given, GPUs a run sampled but none of its ranks used
        (idle GPUs of a partly filled node) are left out (:func:`own_samples`).

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
    if rank_devices is not None:
        samples = own_samples(samples, rank_devices)
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


def _usage_of_runs(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """:func:`device_usage` tables of single runs (in ``run_id`` order) as one table of all
    the runs gives: rows by unit (gpu, rank, host) then run; a metric's columns where its
    unit first has them."""
    full = [p for p in parts if len(p)]
    if not full:
        return parts[0]
    out = pd.concat(full, ignore_index=True)
    cols = ["run_id", "host", "unit", "device", "rank", "n_samples"]
    for unit, metrics in _UNITS:
        rows = out[out["unit"] == unit]
        cols += [f"{m}_{s}" for m in metrics for s in ("mean", "max")
                 if f"{m}_mean" in rows and rows[f"{m}_mean"].notna().any() and f"{m}_mean" not in cols]
    order = np.argsort(out["unit"].map({u: i for i, (u, _) in enumerate(_UNITS)}).to_numpy(), kind="stable")
    return out.iloc[order][cols].reset_index(drop=True)


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


def _used(samples: pd.DataFrame, rank_devices: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(GPU row mask, used mask) of samples against the runs' rank-to-GPU mapping; GPU rows of
    runs without a mapping count as used."""
    require_columns(rank_devices, ("run_id", "host", "device"), "rank_devices")
    gpu = samples["device"].notna().to_numpy()
    keys = pd.MultiIndex.from_arrays([plain(samples["run_id"]).astype(str), plain(samples["host"]).astype(str),
                                      samples["device"].astype("Int64").fillna(-1).astype(int)])
    rd = rank_devices.dropna(subset=["device"])
    used_keys = pd.MultiIndex.from_arrays([rd["run_id"].astype(str), rd["host"].astype(str),
                                           rd["device"].astype(int)])
    mapped = keys.get_level_values(0).isin(set(rd["run_id"].astype(str)))
    used = keys.isin(used_keys) | ~mapped
    return gpu, np.asarray(used)


def own_samples(samples: pd.DataFrame, rank_devices: pd.DataFrame) -> pd.DataFrame:
    """The samples without the GPUs no rank of the run used.

    Parameters
    ----------
    samples
        Sample frame.
    rank_devices
        ``RunSet.rank_devices`` (``run_id``, ``host``, ``device``: NVML index per rank).

    Returns
    -------
    pandas.DataFrame
        A new sample frame: CPU rows, GPU rows of used devices, and GPU rows of runs that
        have no rank-to-GPU mapping (nothing is known about them, so nothing is dropped).
    """
    gpu, used = _used(samples, rank_devices)
    return samples[~gpu | used].reset_index(drop=True)


def idle_devices(samples: pd.DataFrame, rank_devices: pd.DataFrame) -> pd.DataFrame:
    """GPUs a run's node sampler saw that none of its ranks used (left out of the usage).

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, host, device): ``n_samples``, ``util_gpu_pct_mean``,
        ``mem_used_mib_mean``, ``power_w_mean``.
    """
    gpu, used = _used(samples, rank_devices)
    idle = samples[gpu & ~used]
    cols = ["run_id", "host", "device", "n_samples", "util_gpu_pct_mean", "mem_used_mib_mean", "power_w_mean"]
    if idle.empty:
        return pd.DataFrame(columns=cols)
    i = idle.assign(run_id=plain(idle["run_id"]), host=plain(idle["host"]))
    return (i.groupby(["run_id", "host", "device"], sort=True)
            .agg(n_samples=("ts_ns", "size"), util_gpu_pct_mean=("util_gpu_pct", "mean"),
                 mem_used_mib_mean=("mem_used_mib", "mean"), power_w_mean=("power_w", "mean"))
            .reset_index()[cols])


def training_start(events: pd.DataFrame) -> pd.Series:
    """Start of training per run: the first training-phase record (``kind == "phase"``), ns."""
    require_columns(events, ("run_id", "kind", "start_ns"), "training_start")
    ph = events[events["kind"].astype(object) == "phase"]
    return ph.assign(run_id=plain(ph["run_id"])).groupby("run_id")["start_ns"].min().rename("train_start_ns")


def gpu_memory_phases(samples: pd.DataFrame, rank_devices: pd.DataFrame,
                      train_start: pd.Series) -> pd.DataFrame:
    """Per used GPU: memory before training against during training, utilisation and power.

    Parameters
    ----------
    samples
        Sample frame with GPU rows (NVML).
    rank_devices
        ``RunSet.rank_devices``.
    train_start
        :func:`training_start` (ns per run_id).

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, host, device) a rank used: ``rank`` (the lowest rank on it),
        ``mem_before_mib`` (median of the samples before training), ``mem_during_mib`` (peak
        after), ``mem_growth_mib`` (during - before), ``extra_vs_others_mib`` (this GPU's
        peak minus the median peak of the run's other GPUs: the DGX-1 evaluation's extra GPU0
        memory), ``util_gpu_pct_mean`` and ``power_w_mean`` (during training).

    Notes
    -----
    "Before training" is every sample older than the run's first training phase; a run whose
    sampler started after that has NaN ``mem_before_mib``.
    """
    require_columns(samples, ("run_id", "host", "device", "ts_ns", "mem_used_mib"), "gpu_memory_phases")
    gpu, used = _used(samples, rank_devices)
    s = samples[gpu & used]
    s = s.assign(run_id=plain(s["run_id"]).astype(str), host=plain(s["host"]).astype(str),
                 device=s["device"].astype(int))
    s = s.assign(before=s["ts_ns"].to_numpy() < s["run_id"].map(train_start).fillna(-1).to_numpy())
    first_rank = rank_devices.dropna(subset=["device"]).assign(device=lambda d: d["device"].astype(int)).groupby(
        ["run_id", "host", "device"])["rank"].min()
    rows = []
    for (rid, host, dev), g in s.groupby(["run_id", "host", "device"], sort=True):
        during = g[~g["before"]]
        rows.append({"run_id": rid, "host": host, "device": dev, "rank": first_rank.get((rid, host, dev), pd.NA),
                     "mem_before_mib": g.loc[g["before"], "mem_used_mib"].median(),
                     "mem_during_mib": during["mem_used_mib"].max(),
                     "util_gpu_pct_mean": during["util_gpu_pct"].mean() if "util_gpu_pct" in g else np.nan,
                     "power_w_mean": during["power_w"].mean() if "power_w" in g else np.nan})
    out = pd.DataFrame(rows, columns=["run_id", "host", "device", "rank", "mem_before_mib", "mem_during_mib",
                                      "util_gpu_pct_mean", "power_w_mean"])
    out["mem_growth_mib"] = out["mem_during_mib"] - out["mem_before_mib"]
    others = []
    for i, r in out.iterrows():
        rest = out[(out["run_id"] == r["run_id"]) & (out.index != i)]["mem_during_mib"]
        others.append(r["mem_during_mib"] - rest.median() if len(rest) else np.nan)
    out["extra_vs_others_mib"] = others
    return out


def gpu_timeline(samples: pd.DataFrame, rank_devices: pd.DataFrame | None = None, *,
                 run_id: str | None = None) -> pd.DataFrame:
    """One run's GPU samples as per-device time series (the per-GPU lines).

    Returns
    -------
    pandas.DataFrame
        ``run_id``, ``host``, ``device``, ``gpu`` (``host:device``), ``t_s`` (seconds since
        the run's first sample), ``util_gpu_pct``, ``mem_used_mib``, ``power_w``; only the
        run's own GPUs when ``rank_devices`` is given.
    """
    s = samples[samples["device"].notna()]
    if rank_devices is not None:
        s = own_samples(s, rank_devices)
    if run_id is not None:
        s = s[plain(s["run_id"]).astype(str) == str(run_id)]
    s = s.assign(run_id=plain(s["run_id"]).astype(str), host=plain(s["host"]).astype(str))
    t0 = s.groupby("run_id")["ts_ns"].transform("min")
    out = s.assign(t_s=(s["ts_ns"] - t0) / 1e9, gpu=s["host"] + ":" + s["device"].astype("Int64").astype(str))
    return out[["run_id", "host", "device", "gpu", "t_s", "util_gpu_pct", "mem_used_mib", "power_w"]].sort_values(
        ["gpu", "t_s"]).reset_index(drop=True)
