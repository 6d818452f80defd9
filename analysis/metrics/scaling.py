"""Epoch time, throughput, speedup and efficiency against the number of ranks (study 3)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats

from analysis.errors import RecoveryWarning, ScalescopeError
from analysis.metrics._common import require_columns, spread
from analysis.metrics.stats import CONFIDENCE
from analysis.schema import MACHINE_AXES

#: Run metadata carried into per-run tables (plus every ``vary_*`` and ``label_*`` column).
RUN_META: tuple[str, ...] = (
    "run_id", "experiment", *MACHINE_AXES, "gpu_model", "gpus_per_node", "gpus_on_node", "nodes", "labels",
    "status",
    "framework", "backend", "config_backend", "requested_backend", "n_ranks", "n_nodes", "batch_size",
    "global_batch_size", "learning_rate", "lr_scaling", "inject", "repeat", "scaling", "batch_mode", "data_scale",
    "dataset_size", "n_params",
)

#: Where and how a run ran: the axes on which clusters, partitions and experiments are compared
#: (``by=``). A ``"none"`` baseline is taken from the same value of each of them in ``by``.
PLACEMENT_AXES: tuple[str, ...] = ("experiment", *MACHINE_AXES, "gpu_model", "gpus_per_node", "scaling")


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


def run_summary(runset, *, warmup_epochs: int = WARMUP_EPOCHS, measured: pd.DataFrame | None = None,
                steps: bool = True, step_rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per-run table: run metadata, :func:`epoch_times` and the step measures every study
    compares (usable runs only).

    Parameters
    ----------
    runset
        The :class:`~analysis.runset.RunSet`.
    warmup_epochs
        The first epochs of a run with more are left out of its epoch time (shown, never
        compared: every comparison uses the step measures).
    measured
        :func:`analysis.metrics.measures.measure_runs` of these runs, when already computed.
    steps
        Compute the step measures (reads the runs' traces) when ``measured`` is not given;
        runs whose traces cannot be read keep only the epoch columns.
    step_rows
        :func:`analysis.metrics.measures.step_table` of the runs' events (usable runs,
        their epochs, default warm-up and time source), already computed (e.g. run by run:
        ``RunSet.reduce_tables``): the step measures are made from it, without reading the
        traces.

    Returns
    -------
    pandas.DataFrame
        The :data:`RUN_META`, ``vary_*`` and ``label_*`` columns of ``runset.runs``, the
        columns of :func:`epoch_times` (``throughput_samples_per_s`` from the epochs), and,
        for runs with step records, :func:`~analysis.metrics.measures.measure_runs`'s
        ``n_steps``, ``n_partial_steps``, ``n_warmup_steps``, ``step_s``, ``data_s``,
        ``compute_s``, ``exposed_s``, ``straggler_s``, ``other_s``, ``sync_total_s``,
        ``samples_per_step``, ``work_source``, ``time_per_sample_s``, ``data_frac``,
        ``sync_exposed_frac``, ``outlier``, ``contention``, ``contention_evidence``,
        ``neighbour_cpu_pct``; there ``throughput_samples_per_s`` is the step-based one
        (n_ranks · samples_per_step / step_s) and ``global_batch_size`` the counted one
        (n_ranks · samples_per_step). Runs with neither epoch metrics nor step records are
        left out.
    """
    runs = runset.usable_runs()
    extra = [c for c in runs.columns if c.startswith(("vary_", "label_"))]
    meta = runs[[c for c in RUN_META if c in runs.columns] + extra]
    epochs = runset.epochs
    times = epoch_times(epochs, warmup_epochs=warmup_epochs) if len(epochs) else epoch_times(
        pd.DataFrame(columns=["run_id", "rank", "epoch", "epoch_time_s", "samples"]))
    out = meta.merge(times, on="run_id", how="inner").reset_index(drop=True)
    if measured is None and steps:
        from analysis.metrics.measures import measure_runs

        try:
            events = runset.events if step_rows is None else None
            measured = measure_runs(events, runs, epochs=runset.epochs, samples=runset.samples, steps=step_rows)
        except ScalescopeError as exc:  # traces without the records steps need: the epoch columns stay
            warnings.warn(f"run_summary: the step measures are left out ({exc}); the epoch columns are kept",
                          RecoveryWarning, stacklevel=2)
            measured = None
    if measured is None or measured.empty:
        return out
    keep = [c for c in STEP_COLUMNS if c in measured.columns]
    m = measured[keep].assign(run_id=measured["run_id"].astype(object))
    # runs without epoch metrics (fixed iterations, no dataset) are kept by their steps
    out = meta.assign(run_id=meta["run_id"].astype(object)).merge(
        times.assign(run_id=times["run_id"].astype(object)), on="run_id", how="left")
    out = out.merge(m, on="run_id", how="left", suffixes=("", "_steps"))
    out = out[out["epoch_time_s"].notna() | out["time_per_sample_s"].notna()].reset_index(drop=True)
    has = out["time_per_sample_s"].notna()
    out.loc[has, "throughput_samples_per_s"] = out.loc[has, "throughput_samples_per_s_steps"]
    if "global_batch_size_steps" in out:  # the counted global batch where the steps counted it
        from analysis.metrics.measures import whole

        out["global_batch_size"] = whole(out.pop("global_batch_size_steps").fillna(out["global_batch_size"]))
    return out.drop(columns=["throughput_samples_per_s_steps"])


#: The step measures :func:`run_summary` joins (from ``measure_runs``).
STEP_COLUMNS: tuple[str, ...] = (
    "run_id", "n_steps", "n_partial_steps", "n_warmup_steps", "step_s", "data_s", "compute_s", "exposed_s",
    "straggler_s", "other_s", "sync_total_s", "samples_per_step", "work_source", "global_batch_size",
    "time_per_sample_s", "throughput_samples_per_s", "data_frac",
    "sync_exposed_frac", "outlier", "contention", "contention_evidence", "rank_cpu_pct", "host_cpus",
    "ranks_per_host", "neighbour_cpu_pct", "disturbed", "n_repeats", "n_disturbed", "slowest_counts",
)


def _baseline_rows(
    per_run: pd.DataFrame, group: pd.DataFrame, baseline: str | Mapping[str, object], match: Sequence[str]
) -> pd.DataFrame:
    from analysis.metrics.measures import select_baseline

    # a baseline picked by name spans the placement axes (one baseline for every partition and
    # experiment), never the scaling mode: weak runs keep a weak baseline
    return select_baseline(per_run, group, baseline, match, placement=tuple(c for c in PLACEMENT_AXES if c != "scaling"))


def unit_time(per_run: pd.DataFrame, mode: str) -> pd.Series:
    """One rank's time per sample of each run (``time_per_sample_s`` where the steps gave it),
    else from the epochs: n · epoch time / samples per epoch; without samples, a quantity
    proportional to it (n · epoch time for strong scaling, n / throughput for weak), which
    gives the same speedups."""
    n = per_run["n_ranks"].astype(float)
    t = per_run["time_per_sample_s"].astype(float) if "time_per_sample_s" in per_run else pd.Series(np.nan, per_run.index)
    if "samples_per_epoch" in per_run:
        t = t.fillna(n * per_run["epoch_time_s"].astype(float) / per_run["samples_per_epoch"].astype(float))
    if not t.isna().any():
        return t
    weak = pd.Series(_row_modes(per_run, mode) == "weak", index=per_run.index)
    nan = pd.Series(np.nan, index=per_run.index)
    x = per_run["throughput_samples_per_s"].astype(float) if "throughput_samples_per_s" in per_run else nan
    e = per_run["epoch_time_s"].astype(float) if "epoch_time_s" in per_run else nan
    return t.fillna(pd.Series(np.where(weak, n / x, n * e), index=per_run.index))


def outlier_reasons(per_run: pd.DataFrame, by: Sequence[str], t: pd.Series) -> pd.Series:
    """Per run: None when it counts, else why it is an outlier (:mod:`analysis.metrics.stats`)."""
    if "outlier" in per_run:
        return per_run["outlier"]
    from analysis.metrics.measures import outliers

    return outliers(per_run.assign(_t=t), value="_t", extra=by)


def run_speedups(
    per_run: pd.DataFrame,
    *,
    baseline: str | Mapping[str, object] = "none",
    mode: Literal["strong", "weak", "auto"] = "strong",
    by: Sequence[str] = ("config_backend", "batch_size"),
    match: Sequence[str] = ("batch_size",),
) -> pd.DataFrame:
    """Speedup and efficiency of every run against its baseline's mean.

    Parameters
    ----------
    per_run
        One row per run with ``n_ranks``, ``framework``, the ``by`` columns and
        ``time_per_sample_s`` (:func:`run_summary`), or else ``epoch_time_s`` and
        ``throughput_samples_per_s``.
    baseline
        ``"none"`` (default): the one-process runs without a framework that agree with the
        group on the ``match`` columns; ``"min"``: the group's runs with the fewest ranks; a
        mapping ``{column: value}`` picks the baseline runs explicitly
        (:func:`analysis.metrics.measures.select_baseline`, the one rule).
    mode
        ``"strong"``, ``"weak"`` or ``"auto"`` (each run's ``scaling`` column, then added to
        ``by``). With ``time_per_sample_s`` the numbers are the same in every mode; the mode
        matters only for runs without it (see Notes).
    by
        Columns that define a configuration.
    match
        Columns a ``"none"`` baseline must share with the configuration; the
        :data:`PLACEMENT_AXES` in ``by`` are added (each partition's own baseline).

    Returns
    -------
    pandas.DataFrame
        ``per_run`` plus ``baseline_n_ranks``, ``baseline_epoch_time_s``,
        ``baseline_throughput_samples_per_s``, ``speedup``, ``efficiency_frac`` and
        ``outlier``.

    Notes
    -----
    With t a run's time per sample on one rank and t̄0 the mean over the baseline's runs
    (outliers left out): speedup = (n/n0) · t̄0/t = X(n)/X(n0), the throughput ratio;
    efficiency = speedup · n0/n = t̄0/t. Without ``time_per_sample_s``, t = n · T /
    samples per epoch from the epoch time T; without samples either, n·T (strong: speedup
    T0/T) or n/X (weak: X/X0).
    """
    by, match = _by_match(per_run, by, match, mode)
    require_columns(per_run, ("n_ranks", "framework", *by), "run_speedups")
    if "time_per_sample_s" not in per_run:
        require_columns(per_run, ("epoch_time_s", "throughput_samples_per_s"), "run_speedups")
    pr = per_run.reset_index(drop=True)
    pr["_t"] = unit_time(pr, mode)
    pr["outlier"] = outlier_reasons(pr, by, pr["_t"]).to_numpy()
    ok = pr[pr["outlier"].isna()]
    parts = []
    for _, group in pr.groupby(list(by), sort=True, dropna=False):
        base = _baseline_rows(ok, group[group["outlier"].isna()], baseline, match)
        g = group.copy()
        if base.empty:
            raise ScalescopeError(
                f"no baseline runs ({baseline!r}) for configuration "
                + ", ".join(f"{c}={group[c].iloc[0]}" for c in by)
                + "; pass baseline='min' to compare with the fewest ranks instead"
            )
        g["baseline_n_ranks"] = float(base["n_ranks"].astype(float).mean())
        g["_t0"] = float(base["_t"].mean())
        g["baseline_epoch_time_s"] = float(base["epoch_time_s"].mean()) if "epoch_time_s" in base else np.nan
        g["baseline_throughput_samples_per_s"] = (float(base["throughput_samples_per_s"].mean())
                                                  if "throughput_samples_per_s" in base else np.nan)
        g["_base_ids"] = ",".join(map(str, base.index))
        parts.append(g)
    out = pd.concat(parts).sort_index() if parts else pr.iloc[0:0].assign(_t0=np.nan, _base_ids="")
    for col in ("baseline_n_ranks", "baseline_epoch_time_s", "baseline_throughput_samples_per_s"):
        if col not in out:
            out[col] = pd.Series(dtype=float)
    n = out["n_ranks"].astype(float)
    out["efficiency_frac"] = out["_t0"] / out["_t"]
    out["speedup"] = out["efficiency_frac"] * n / out["baseline_n_ranks"]
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
    # every placement axis and swept option the configuration is grouped by (the one rule,
    # analysis.metrics.grouping): each experiment, partition, mode and --vary value its own baseline
    match = (*match, *(c for c in by if (c in PLACEMENT_AXES or str(c).startswith("vary_")) and c not in match))
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
    confidence: float = CONFIDENCE,
) -> pd.DataFrame:
    """One row per configuration and rank count: time per sample, throughput, speedup and
    efficiency with intervals over the repeats of both sides, and the epoch time.

    Parameters are those of :func:`run_speedups`; ``confidence`` is the level of the
    intervals.

    Returns
    -------
    pandas.DataFrame
        The ``by`` columns, ``n_ranks``, ``framework`` (``none`` marks the baseline),
        ``n_nodes``, ``n_runs`` (repeats used), ``n_outliers`` and ``outliers`` (repeats
        left out, by name), ``epoch_time_s_median/_min/_max/_std`` (as recorded, over
        repeats), ``throughput_samples_per_s_median/_min/_max/_std`` (per run),
        ``time_per_sample_s`` and ``throughput_samples_per_s`` (= n / time_per_sample_s)
        where the runs have step measures, ``baseline_n_ranks``, ``baseline_epoch_time_s``,
        ``ideal_epoch_time_s`` (strong: baseline epoch · n0/n; weak: baseline epoch),
        ``speedup`` and ``efficiency_frac`` (0-1 for linear scaling and below) with
        ``_ci_low``/``_ci_high``, ``speedup_min``/``speedup_max`` and
        ``efficiency_min_frac``/``efficiency_max_frac`` (the individual repeats),
        ``efficiency_frac_verdict`` (is the loss against ideal, 1, distinguishable from noise),
        ``repeats_for_5pct``, ``work_source`` (``counted``: the samples each step processed;
        ``batch_size``: the configured batch; ``mixed``) and ``unreliable`` (why speedup and
        efficiency are not given, NaN: half or more of a side's repeats ran beside other
        processes, :func:`analysis.metrics.measures.unreliable`).

    Notes
    -----
    Speedup = (n/n0) · t̄0/t̄ = X(n)/X(n0) and efficiency = speedup · n0/n = t̄0/t̄, with t̄ the
    mean time per sample over the configuration's repeats and t̄0 the baseline's (outliers
    left out, :func:`run_speedups`). Intervals: :func:`analysis.metrics.stats.delta_interval`
    over both sides' runs; none below 3 repeats on a side.

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
    steps = "time_per_sample_s" in sp and sp["time_per_sample_s"].notna().any()
    rows = []
    for key, g_all in sp.groupby([*by, "n_ranks"], sort=True, dropna=False):
        row = dict(zip([*by, "n_ranks"], key if isinstance(key, tuple) else (key,), strict=False))
        g = g_all[g_all["outlier"].isna()]
        if g.empty:
            continue
        row.update(_repeat_columns(g_all, g, framework="framework" not in row))
        n = float(row["n_ranks"])
        n0 = float(g["baseline_n_ranks"].iloc[0])
        if steps:
            row["time_per_sample_s"] = float(g["_t"].mean())
            row["throughput_samples_per_s"] = n / row["time_per_sample_s"]
        row["baseline_n_ranks"] = n0
        row["baseline_epoch_time_s"] = float(g["baseline_epoch_time_s"].iloc[0])
        mode_here = _row_modes(g.iloc[:1], mode)[0]
        row["ideal_epoch_time_s"] = row["baseline_epoch_time_s"] * (n0 / n if mode_here == "strong" else 1.0)
        base = _baseline_runs_of(sp, g)
        row.update(_speedup_columns(g, base, n, n0, confidence))
        row["repeats_for_5pct"] = _repeats_for_5pct(g, base)
        row.update(_step_shares(g))
        row.update(_trust(g_all, g, base, n))
        rows.append(row)
    return pd.DataFrame(rows)


def _trust(g_all: pd.DataFrame, g: pd.DataFrame, base: pd.DataFrame, n: float) -> dict:
    """``work_source`` (counted or the configured batch) and ``unreliable`` (why the
    speedup and efficiency are not given: most repeats of a side disturbed; they are then
    NaN) of one row."""
    from analysis.metrics.measures import unreliable, work_source

    if len(base) and set(base.index) == set(g.index):  # the baseline's own row: 1 by definition
        return {"work_source": work_source([g]), "unreliable": None}
    why = unreliable([*([("the baseline", base)] if len(base) else []), (f"the runs at {int(n)} rank(s)", g_all)])
    out: dict = {"work_source": work_source([g, base]), "unreliable": why}
    if why:
        out.update({c: np.nan for c in ("speedup", "speedup_ci_low", "speedup_ci_high", "efficiency_frac",
                                         "efficiency_frac_ci_low", "efficiency_frac_ci_high")})
        out["efficiency_frac_verdict"] = None
    return out


def _repeat_columns(g_all: pd.DataFrame, g: pd.DataFrame, *, framework: bool) -> dict:
    """What the repeats ``g_all`` of one configuration and rank count are (``g``: those kept):
    ``framework`` (when asked), ``n_nodes``, the counts and names of the outliers, and the
    spread of the recorded epoch time and throughput."""
    row = {}
    if "framework" in g and framework:
        row["framework"] = g["framework"].iloc[0]
    row["n_nodes"] = g["n_nodes"].max() if "n_nodes" in g else np.nan
    row["n_runs"] = len(g)
    row["n_outliers"] = len(g_all) - len(g)
    row["outliers"] = "; ".join(f"{r}: {w}" for r, w in zip(g_all["run_id"], g_all["outlier"], strict=True)
                                if w is not None and w == w) or None if "run_id" in g_all else None
    if "epoch_time_s" in g:
        row.update(spread(g["epoch_time_s"], "epoch_time_s"))
    if "throughput_samples_per_s" in g:
        row.update(spread(g["throughput_samples_per_s"], "throughput_samples_per_s"))
    return row


def _baseline_runs_of(sp: pd.DataFrame, g: pd.DataFrame) -> pd.DataFrame:
    """The baseline runs of the rows ``g`` of :func:`run_speedups`' table ``sp`` (by its
    ``_base_ids``)."""
    if "_base_ids" not in g:
        return g.iloc[0:0]
    return sp.loc[[int(i) for i in str(g["_base_ids"].iloc[0]).split(",") if i != ""]]


def _speedup_columns(g: pd.DataFrame, base: pd.DataFrame, n: float, n0: float, confidence: float) -> dict:
    """Speedup and efficiency of the kept repeats ``g`` at ``n`` ranks against the baseline
    runs ``base`` at ``n0``: estimates, intervals over both sides, the repeats' range and the
    efficiency's verdict against 1 (exactly 1, no verdict, when the baseline is ``g`` itself)."""
    from analysis.metrics.stats import delta_interval, verdict

    def fn(means):
        eff = means[0][0] / means[1][0]
        return np.array([eff * n / n0, eff])

    base_t = base["_t"].to_numpy(float)[:, None] if len(base) else np.array([[float(g["_t0"].iloc[0])]])
    est, lo, hi = delta_interval(fn, [base_t, g["_t"].to_numpy(float)[:, None]], confidence=confidence, log=True)
    same = set(base.index) == set(g.index)
    if same:  # the baseline is this row itself: exactly 1, no interval needed
        est, lo, hi = np.array([n / n0, 1.0]), np.array([n / n0, 1.0]), np.array([n / n0, 1.0])
    return {
        "speedup": float(est[0]), "speedup_ci_low": float(lo[0]), "speedup_ci_high": float(hi[0]),
        "speedup_min": float(g["speedup"].min()), "speedup_max": float(g["speedup"].max()),
        "efficiency_frac": float(est[1]),
        "efficiency_frac_ci_low": float(lo[1]), "efficiency_frac_ci_high": float(hi[1]),
        "efficiency_min_frac": float(g["efficiency_frac"].min()),
        "efficiency_max_frac": float(g["efficiency_frac"].max()),
        "efficiency_frac_verdict": None if same else verdict(lo[1], hi[1], 1.0),
    }


def _repeats_for_5pct(g: pd.DataFrame, base: pd.DataFrame) -> float:
    """Repeats per side that would resolve a 5% difference, from the pooled run-to-run CV
    of the two sides (NaN when neither has one)."""
    from analysis.metrics.stats import repeats_to_resolve, run_cv

    cvs = [c for c in (run_cv(g["_t"]), run_cv(base["_t"]) if len(base) else np.nan) if np.isfinite(c)]
    return repeats_to_resolve(float(np.sqrt(np.mean(np.square(cvs))))) if cvs else np.nan


def _step_shares(g: pd.DataFrame) -> dict[str, float]:
    """``data_frac`` and ``sync_exposed_frac`` of the repeats' mean step, where they have them."""
    out = {}
    for c in ("data_frac", "sync_exposed_frac"):
        if c in g and {"data_s", "exposed_s", "step_s"} <= set(g.columns):
            num = "data_s" if c == "data_frac" else "exposed_s"
            out[c] = float(g[num].mean() / g["step_s"].mean())
    return out


def compare_groups(
    per_run: pd.DataFrame,
    *,
    axis: str,
    keys: Sequence[str] = ("config_backend", "batch_size", "n_ranks"),
    reference: object = None,
    confidence: float = CONFIDENCE,
) -> pd.DataFrame:
    """Each value of ``axis`` against a reference value on the same configuration: the
    ratio of mean times per sample with its interval and a verdict.

    Parameters
    ----------
    per_run
        :func:`run_summary` (``time_per_sample_s``), or epoch times.
    axis
        What is compared: ``partition``, ``batch_size``, ``config_backend``, a ``vary_*`` or
        ``label_*`` column (an A/A test: the same configuration under two labels).
    keys
        Columns that must be equal for two runs to be compared (``axis`` left out).
    reference
        The axis value every other is compared with; default the first in sort order (the
        smallest batch size).

    Returns
    -------
    pandas.DataFrame
        One row per ``keys`` and ``axis`` value: ``n_runs`` (outliers left out),
        ``time_per_sample_s`` (mean), ``relative_time`` (t̄ / t̄ of the reference) with
        ``relative_time_ci_low``/``_ci_high``, ``relative_time_verdict`` (against 1; None on
        the reference row) and ``repeats_for_5pct``.
    """
    from analysis.metrics.stats import pooled_repeats, ratio, verdict

    keys = [k for k in keys if k != axis]
    require_columns(per_run, (axis, "n_ranks", *keys), "compare_groups")
    pr = per_run.reset_index(drop=True)
    pr["_t"] = unit_time(pr, "strong") if ("time_per_sample_s" in pr or "samples_per_epoch" in pr) \
        else pr["epoch_time_s"].astype(float)
    pr = pr[outlier_reasons(pr, [*keys, axis], pr["_t"]).isna().to_numpy() & pr["_t"].notna().to_numpy()]
    rows = []
    for key, g in pr.groupby(keys, sort=True, dropna=False) if keys else [((), pr)]:
        key = key if isinstance(key, tuple) else (key,)
        values = g[axis].dropna().unique().tolist()
        try:
            values = sorted(values)
        except TypeError:
            values = sorted(values, key=str)
        if len(values) < 2:
            continue
        ref = reference if reference is not None and reference in values else values[0]
        r0 = g[g[axis] == ref]
        for v in values:
            gv = g[g[axis] == v]
            est, lo, hi = ratio(gv["_t"], r0["_t"], same=v == ref, confidence=confidence)
            rows.append({**dict(zip(keys, key, strict=True)), axis: v, "reference": v == ref, "n_runs": len(gv),
                         "time_per_sample_s": float(gv["_t"].mean()), "relative_time": est,
                         "relative_time_ci_low": lo, "relative_time_ci_high": hi,
                         "relative_time_verdict": None if v == ref else verdict(lo, hi, 1.0),
                         "repeats_for_5pct": pooled_repeats(gv["_t"], r0["_t"])})
    return pd.DataFrame(rows, columns=[*keys, axis, "reference", "n_runs", "time_per_sample_s", "relative_time",
                                       "relative_time_ci_low", "relative_time_ci_high", "relative_time_verdict",
                                       "repeats_for_5pct"])


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


def explain_work(table: pd.DataFrame) -> list[str]:
    """Sentences for :func:`scaling_table`'s notes: what its work per step is (counted or
    the configured batch, ``work_source``) and which rows are ``unreliable`` and why."""
    notes = []
    src = set(table["work_source"].dropna()) if "work_source" in table else set()
    if src:
        words = {"counted": "the samples each step processed, counted per rank",
                 "batch_size": "the configured batch size (nothing counted: the fallback)",
                 "mixed": "counted for some runs, the configured batch size for others"}
        notes.append("Work per step (time per sample, throughput, speedup, efficiency): "
                     + "; ".join(f"{words.get(s, s)}" for s in sorted(src)) + " (column work_source).")
    for r in table.dropna(subset=["unreliable"]).to_dict("records") if "unreliable" in table else []:
        notes.append(f"Warning: {r.get('config_backend', 'a configuration')} at {int(r['n_ranks'])} rank(s): "
                     f"speedup and efficiency not given, unreliable: {r['unreliable']}.")
    many = table["repeats_for_5pct"] if "repeats_for_5pct" in table else pd.Series(dtype=float)
    if (many > PRACTICAL_REPEATS).any():
        notes.append(f"Up to {int(many.max()):,} repeats per side would be needed to resolve a 5 % difference: the "
                     "runs vary too much from one to the next for repeats to help. Make each run steadier instead: "
                     "more steps per run (longer epochs, more epochs), a machine without other load (see the runs' "
                     "neighbour CPU), threads pinned per rank (--threads).")
    return notes


#: Beyond this many repeats for a 5 % difference, the advice is to steady the runs, not repeat them.
PRACTICAL_REPEATS = 20
