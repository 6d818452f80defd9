"""Epoch time, throughput, speedup and efficiency against the number of ranks (study 3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats

from analysis.errors import ScalescopeError
from analysis.metrics._common import require_columns, spread

#: Run metadata carried into per-run tables (plus every ``vary_*`` and ``label_*`` column).
RUN_META: tuple[str, ...] = (
    "run_id", "experiment", "cluster", "partition", "gpu_model", "gpus_per_node", "gpus_on_node", "nodes", "labels",
    "status",
    "framework", "backend", "config_backend", "requested_backend", "n_ranks", "n_nodes", "batch_size",
    "global_batch_size", "learning_rate", "lr_scaling", "inject", "repeat", "scaling", "data_scale",
    "dataset_size", "n_params",
)

#: Where and how a run ran: the axes on which clusters, partitions and experiments are compared
#: (``by=``). A ``"none"`` baseline is taken from the same value of each of them in ``by``.
PLACEMENT_AXES: tuple[str, ...] = ("experiment", "cluster", "partition", "gpu_model", "gpus_per_node", "scaling")


#: Epochs each epoch-level study drops as warm-up (when a run has more; ``docs/metrics.md``).
WARMUP_EPOCHS = 1


def epoch_times(epochs: pd.DataFrame, *, warmup_epochs: int = WARMUP_EPOCHS) -> pd.DataFrame:
    """Epoch time and throughput of each run from the per-rank epoch metrics.

    Parameters
    ----------
    epochs
        Per-rank epoch metrics (``RunSet.epochs``): ``run_id``, ``rank``, ``epoch``,
        ``epoch_time_s``, ``samples``.
    warmup_epochs
        Leave out each run's first ``warmup_epochs`` epochs (warm-up: the first epoch holds
        the first, slow steps) when it has more epochs than that; 0 keeps every epoch.

    Returns
    -------
    pandas.DataFrame
        One row per run: ``n_epochs``, ``epoch_time_s`` (median over epochs),
        ``epoch_time_min_s``, ``epoch_time_max_s``, ``samples_per_epoch`` (median),
        ``throughput_samples_per_s``.

    Notes
    -----
    An epoch of a data-parallel run ends when its slowest rank ends, so the epoch time is
    the maximum over ranks of each rank's ``epoch_time_s``; the samples of an epoch are
    summed over ranks. Throughput = samples per epoch / epoch time.

    Examples
    --------
    >>> e = pd.DataFrame({"run_id": "a", "rank": [0, 1], "epoch": 0,
    ...                   "epoch_time_s": [2.0, 2.5], "samples": [50, 50]})
    >>> epoch_times(e)[["epoch_time_s", "throughput_samples_per_s"]].values.tolist()
    [[2.5, 40.0]]
    """
    require_columns(epochs, ("run_id", "rank", "epoch", "epoch_time_s", "samples"), "epoch_times")
    e = epochs.assign(run_id=epochs["run_id"].astype(object))
    per_epoch = (
        e.groupby(["run_id", "epoch"], sort=True)
        # min_count=1: an epoch whose samples nobody recorded has no throughput, not 0 samples/s
        .agg(epoch_time_s=("epoch_time_s", "max"), samples=("samples", lambda s: s.sum(min_count=1)))
        .reset_index()
    )
    if warmup_epochs < 0:
        raise ScalescopeError(f"warmup_epochs must be >= 0, not {warmup_epochs!r}")
    if warmup_epochs:
        order = per_epoch.groupby("run_id")["epoch"].rank(method="first")
        many = per_epoch.groupby("run_id")["epoch"].transform("size") > warmup_epochs
        per_epoch = per_epoch[~((order <= warmup_epochs) & many)]
    out = (
        per_epoch.groupby("run_id", sort=True)
        .agg(
            n_epochs=("epoch", "size"),
            epoch_time_s=("epoch_time_s", "median"),
            epoch_time_min_s=("epoch_time_s", "min"),
            epoch_time_max_s=("epoch_time_s", "max"),
            samples_per_epoch=("samples", "median"),
        )
        .reset_index()
    )
    out["throughput_samples_per_s"] = out["samples_per_epoch"] / out["epoch_time_s"]
    return out


def run_summary(runset, *, warmup_epochs: int = WARMUP_EPOCHS) -> pd.DataFrame:
    """Per-run table: run metadata plus :func:`epoch_times` (usable runs only; the first
    ``warmup_epochs`` epochs of a run with more are warm-up and left out).

    Returns
    -------
    pandas.DataFrame
        The :data:`RUN_META`, ``vary_*`` and ``label_*`` columns of ``runset.runs`` and the
        columns of :func:`epoch_times`; runs without epoch metrics are left out.
    """
    runs = runset.usable_runs()
    extra = [c for c in runs.columns if c.startswith(("vary_", "label_"))]
    meta = runs[[c for c in RUN_META if c in runs.columns] + extra]
    times = epoch_times(runset.epochs, warmup_epochs=warmup_epochs)
    return meta.merge(times, on="run_id", how="inner").reset_index(drop=True)


def _baseline_rows(
    per_run: pd.DataFrame, group: pd.DataFrame, baseline: str | Mapping[str, object], match: Sequence[str]
) -> pd.DataFrame:
    if isinstance(baseline, Mapping):
        mask = pd.Series(True, index=per_run.index)
        for col, val in baseline.items():
            mask &= per_run[col].isin(list(val)) if isinstance(val, (list, tuple, set)) else per_run[col] == val
        cand = per_run[mask.fillna(False).astype(bool)]
        return _same_as_group(cand, group, [c for c in match if c not in baseline and c not in PLACEMENT_AXES])
    if baseline == "min":
        return group[group["n_ranks"] == group["n_ranks"].min()]
    if baseline == "none":
        return _same_as_group(per_run[per_run["framework"] == "none"], group, match)
    raise ScalescopeError(f"baseline must be 'none', 'min' or a mapping of run columns, not {baseline!r}")


def _same_as_group(cand: pd.DataFrame, group: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    """The candidate baseline rows that share each of ``cols`` with the group (where the
    group has one value of it)."""
    for col in cols:
        vals = group[col].dropna().unique()
        if len(vals) == 1:
            cand = cand[cand[col] == vals[0]]
    return cand


def run_speedups(
    per_run: pd.DataFrame,
    *,
    baseline: str | Mapping[str, object] = "none",
    mode: Literal["strong", "weak", "auto"] = "strong",
    by: Sequence[str] = ("config_backend", "batch_size"),
    match: Sequence[str] = ("batch_size",),
) -> pd.DataFrame:
    """Speedup and efficiency of every run against a baseline.

    Parameters
    ----------
    per_run
        One row per run with ``n_ranks``, ``epoch_time_s``, ``throughput_samples_per_s``,
        ``framework`` and the ``by`` columns (e.g. :func:`run_summary`).
    baseline
        ``"none"`` (default): the runs without a framework (``framework == "none"``) that
        agree with the group on the ``match`` columns; ``"min"``: the group's runs with the
        fewest ranks; a mapping ``{column: value}`` picks the baseline runs explicitly.
        Repeats of the baseline are combined by their median.
    mode
        ``"strong"`` (fixed problem): speedup = T(n0) / T(n) from epoch times;
        ``"weak"`` (fixed work per rank): speedup = X(n) / X(n0) from throughputs;
        ``"auto"``: each run's own ``scaling`` column (``scalescope sweep --scaling``), which
        is then added to ``by``.
    by
        Columns that define a configuration (one scaling curve each), e.g. ``("partition",
        "config_backend")`` for one curve per partition and backend.
    match
        Columns a ``"none"`` baseline must share with the configuration; the
        :data:`PLACEMENT_AXES` in ``by`` are added (each partition's own baseline). A mapping
        baseline such as ``{"partition": "alpha", "framework": "none", "n_ranks": 1}`` (one
        baseline for every partition, as the reference study did) shares the ``match``
        columns it does not name, but none of the placement axes.

    Returns
    -------
    pandas.DataFrame
        ``per_run`` plus ``baseline_n_ranks``, ``baseline_epoch_time_s``,
        ``baseline_throughput_samples_per_s``, ``speedup``, ``efficiency_frac``.

    Notes
    -----
    Strong scaling: speedup = T(n0)/T(n); weak scaling: speedup = X(n)/X(n0) (scaled
    speedup); in both, efficiency = speedup · n0/n, where n0 is the baseline's rank count.
    """
    by, match = _by_match(per_run, by, match, mode)
    require_columns(per_run, ("n_ranks", "epoch_time_s", "throughput_samples_per_s", "framework", *by),
                    "run_speedups")
    parts = []
    for _, group in per_run.groupby(list(by), sort=True, dropna=False):
        base = _baseline_rows(per_run, group, baseline, match)
        g = group.copy()
        if base.empty:
            raise ScalescopeError(
                f"no baseline runs ({baseline!r}) for configuration "
                + ", ".join(f"{c}={group[c].iloc[0]}" for c in by)
                + "; pass baseline='min' to compare with the fewest ranks instead"
            )
        g["baseline_n_ranks"] = float(base["n_ranks"].median())
        g["baseline_epoch_time_s"] = float(base["epoch_time_s"].median())
        g["baseline_throughput_samples_per_s"] = float(base["throughput_samples_per_s"].median())
        parts.append(g)
    out = pd.concat(parts).sort_index() if parts else per_run.iloc[0:0].copy()
    for col in ("baseline_n_ranks", "baseline_epoch_time_s", "baseline_throughput_samples_per_s"):
        if col not in out:
            out[col] = pd.Series(dtype=float)
    weak = _row_modes(out, mode) == "weak"
    out["speedup"] = np.where(weak, out["throughput_samples_per_s"] / out["baseline_throughput_samples_per_s"],
                              out["baseline_epoch_time_s"] / out["epoch_time_s"])
    out["efficiency_frac"] = out["speedup"] * out["baseline_n_ranks"] / out["n_ranks"].astype(float)
    return out.reset_index(drop=True)


def _by_match(per_run: pd.DataFrame, by: Sequence[str], match: Sequence[str],
              mode: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if mode not in ("strong", "weak", "auto"):
        raise ScalescopeError(f"mode must be 'strong', 'weak' or 'auto', not {mode!r}")
    by = tuple(by)
    if mode == "auto":
        require_columns(per_run, ("scaling",), "mode='auto'")
        if "scaling" not in by:
            by = (*by, "scaling")
    match = (*match, *(c for c in by if c in PLACEMENT_AXES and c not in match))
    return by, match


def _row_modes(df: pd.DataFrame, mode: str) -> np.ndarray:
    if mode == "auto":
        return df["scaling"].fillna("strong").astype(str).to_numpy()
    return np.full(len(df), mode, dtype=object)


def scaling_table(
    per_run: pd.DataFrame,
    *,
    baseline: str | Mapping[str, object] = "none",
    mode: Literal["strong", "weak", "auto"] = "strong",
    by: Sequence[str] = ("config_backend", "batch_size"),
    match: Sequence[str] = ("batch_size",),
) -> pd.DataFrame:
    """One row per configuration and rank count: epoch time, throughput, speedup and
    efficiency with the spread over repeats.

    Parameters are those of :func:`run_speedups`.

    Returns
    -------
    pandas.DataFrame
        The ``by`` columns, ``n_ranks``, ``framework`` (when the runs have it; ``none`` marks
        the baseline), ``n_nodes``, ``n_runs``, ``epoch_time_s_median/_min/_max/_std``,
        ``throughput_samples_per_s_median/_min/_max/_std``, ``baseline_n_ranks``,
        ``baseline_epoch_time_s``, ``speedup`` (from the median), ``speedup_min``,
        ``speedup_max`` (over repeats), ``efficiency_frac`` (0-1 for linear scaling and
        below), ``efficiency_min_frac``, ``efficiency_max_frac``.

    Notes
    -----
    Strong scaling: speedup = T(n0)/T̃(n) with T̃ the median epoch time over repeats;
    weak scaling: speedup = X̃(n)/X(n0). Efficiency = speedup · n0/n. The ``_min``/``_max``
    columns are the same formulas applied to each repeat.

    Examples
    --------
    >>> pr = pd.DataFrame({"framework": ["none", "ddp", "ddp"], "config_backend": ["none", "ddp", "ddp"],
    ...                    "n_ranks": [1, 1, 2], "epoch_time_s": [10.0, 11.0, 6.0],
    ...                    "throughput_samples_per_s": [10.0, 9.1, 16.7]})
    >>> t = scaling_table(pr, by=("config_backend",), match=())
    >>> t[["config_backend", "n_ranks", "speedup", "efficiency_frac"]].round(3).values.tolist()
    [['ddp', 1, 0.909, 0.909], ['ddp', 2, 1.667, 0.833], ['none', 1, 1.0, 1.0]]
    """
    sp = run_speedups(per_run, baseline=baseline, mode=mode, by=by, match=match)
    by, _ = _by_match(per_run, by, match, mode)
    rows = []
    for key, g in sp.groupby([*by, "n_ranks"], sort=True, dropna=False):
        row = dict(zip([*by, "n_ranks"], key if isinstance(key, tuple) else (key,), strict=False))
        if "framework" in g and "framework" not in row:
            row["framework"] = g["framework"].iloc[0]
        row["n_nodes"] = g["n_nodes"].max() if "n_nodes" in g else np.nan
        row["n_runs"] = len(g)
        row.update(spread(g["epoch_time_s"], "epoch_time_s"))
        row.update(spread(g["throughput_samples_per_s"], "throughput_samples_per_s"))
        n0 = float(g["baseline_n_ranks"].iloc[0])
        t0 = float(g["baseline_epoch_time_s"].iloc[0])
        x0 = float(g["baseline_throughput_samples_per_s"].iloc[0])
        row["baseline_n_ranks"] = n0
        row["baseline_epoch_time_s"] = t0
        if _row_modes(g.iloc[:1], mode)[0] == "strong":
            row["speedup"] = t0 / row["epoch_time_s_median"]
            row["speedup_min"] = t0 / row["epoch_time_s_max"]
            row["speedup_max"] = t0 / row["epoch_time_s_min"]
        else:
            row["speedup"] = row["throughput_samples_per_s_median"] / x0
            row["speedup_min"] = row["throughput_samples_per_s_min"] / x0
            row["speedup_max"] = row["throughput_samples_per_s_max"] / x0
        n = float(row["n_ranks"])
        row["efficiency_frac"] = row["speedup"] * n0 / n
        row["efficiency_min_frac"] = row["speedup_min"] * n0 / n
        row["efficiency_max_frac"] = row["speedup_max"] * n0 / n
        rows.append(row)
    return pd.DataFrame(rows)


def fit_speedup(
    points: pd.DataFrame,
    *,
    x: str = "n_ranks",
    y: str = "speedup",
    by: Sequence[str] = (),
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Least-squares line ``speedup = intercept + slope · n`` with a confidence interval
    for the slope (the speedup gained per added rank / GPU).

    Parameters
    ----------
    points
        One row per measurement, e.g. :func:`run_speedups` (each repeat is a point).
    by
        Fit one line per group.
    confidence
        Level of the two-sided interval for the slope.

    Returns
    -------
    pandas.DataFrame
        One row per group: ``n_points``, ``slope_per_rank``, ``slope_stderr``,
        ``slope_ci_low``, ``slope_ci_high``, ``intercept``, ``r2``, ``confidence``.

    Notes
    -----
    slope = Sxy/Sxx, intercept = ȳ - slope·x̄, standard error
    se = sqrt(RSS/(m-2) / Sxx), interval slope ± t_{(1+c)/2, m-2} · se (Student's t,
    ``scipy.stats.t``) for m points. With fewer than 3 points (or one distinct x) the
    interval is NaN.
    """
    require_columns(points, (x, y, *by), "fit_speedup")
    rows = []
    groups = points.groupby(list(by), sort=True, dropna=False) if by else [((), points)]
    for key, g in groups:
        g = g[[x, y]].dropna()
        xs = g[x].to_numpy(float)
        ys = g[y].to_numpy(float)
        m = len(xs)
        row = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=False))
        row.update(n_points=m, slope_per_rank=np.nan, slope_stderr=np.nan, slope_ci_low=np.nan,
                   slope_ci_high=np.nan, intercept=np.nan, r2=np.nan, confidence=confidence)
        if m >= 2 and np.ptp(xs) > 0:
            sxx = float(((xs - xs.mean()) ** 2).sum())
            slope = float(((xs - xs.mean()) * (ys - ys.mean())).sum() / sxx)
            intercept = float(ys.mean() - slope * xs.mean())
            resid = ys - (intercept + slope * xs)
            rss = float((resid**2).sum())
            tss = float(((ys - ys.mean()) ** 2).sum())
            row.update(slope_per_rank=slope, intercept=intercept, r2=1 - rss / tss if tss > 0 else np.nan)
            if m >= 3:
                se = float(np.sqrt(rss / (m - 2) / sxx))
                tq = float(stats.t.ppf((1 + confidence) / 2, m - 2))
                row.update(slope_stderr=se, slope_ci_low=slope - tq * se, slope_ci_high=slope + tq * se)
        rows.append(row)
    return pd.DataFrame(rows)


def node_boundaries(runs: pd.DataFrame, *, by: Sequence[str] = ()) -> pd.DataFrame:
    """Where ranks spill onto another node.

    Parameters
    ----------
    runs
        Any table with ``n_ranks`` and ``n_nodes`` (runs table, scaling table).
    by
        Columns whose groups have their own boundaries, e.g. ``("partition",)`` (partitions
        with different GPUs per node spill at different rank counts).

    Returns
    -------
    pandas.DataFrame
        One row per increase of the node count along increasing rank counts:
        ``n_ranks_before``, ``n_ranks_after``, ``n_nodes_before``, ``n_nodes_after``,
        ``x`` (midway, where a figure draws the boundary); with ``by``, also the ``by``
        columns and ``group`` (their values joined by `` · ``).
    """
    require_columns(runs, ("n_ranks", "n_nodes", *by), "node_boundaries")
    if by:
        parts = []
        for key, g in runs.groupby(list(by), sort=True, dropna=False):
            b = node_boundaries(g)
            key = key if isinstance(key, tuple) else (key,)
            for c, v in zip(by, key, strict=True):
                b[c] = v
            b["group"] = " · ".join("–" if pd.isna(v) else str(v) for v in key)
            parts.append(b)
        cols = ["n_ranks_before", "n_ranks_after", "n_nodes_before", "n_nodes_after", "x", *by, "group"]
        return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
    t = runs[["n_ranks", "n_nodes"]].dropna().groupby("n_ranks")["n_nodes"].max().sort_index()
    rows = []
    prev_n, prev_nodes = None, None
    for n, nodes in t.items():
        if prev_nodes is not None and nodes > prev_nodes:
            rows.append({"n_ranks_before": int(prev_n), "n_ranks_after": int(n), "n_nodes_before": int(prev_nodes),
                         "n_nodes_after": int(nodes), "x": (prev_n + n) / 2})
        prev_n, prev_nodes = n, nodes
    return pd.DataFrame(rows, columns=["n_ranks_before", "n_ranks_after", "n_nodes_before", "n_nodes_after", "x"])
