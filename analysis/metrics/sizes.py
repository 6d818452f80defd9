"""Input size against throughput, and where memory runs out (``--vary`` numeric axes and
``scalescope sweep --find-max``); strong against weak scaling, each with its own ideal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from analysis.errors import ScalescopeError
from analysis.metrics._common import require_columns
from analysis.metrics.scaling import scaling_table

#: Statuses that say a run ran out of memory (``scalescope sweep`` classifies them).
OOM_STATUS = "oom"


def size_axes(runs: pd.DataFrame) -> list[str]:
    """The ``vary_*`` columns of a runs table whose values are all numbers (input-size axes)."""
    out = []
    for c in runs.columns:
        if c.startswith("vary_"):
            v = pd.to_numeric(runs[c].dropna(), errors="coerce")
            if len(v) and v.notna().all() and v.nunique() > 1:
                out.append(c)
    return out


def input_size_table(runs: pd.DataFrame, per_run: pd.DataFrame, *, size: str,
                     by: Sequence[str] = ("config_backend", "n_ranks")) -> pd.DataFrame:
    """Throughput against an input-size axis, with the runs that ran out of memory marked.

    Parameters
    ----------
    runs
        The runs table (every run, failed ones included: ``RunSet.runs``).
    per_run
        :func:`analysis.metrics.scaling.run_summary` (the runs that finished).
    size
        The size column, e.g. ``"vary_curve-length"`` (a ``--vary`` or ``--find-max`` option).
    by
        Columns that make one curve each.

    Returns
    -------
    pandas.DataFrame
        One row per (``by``, size value): ``size`` (the value, float), ``n_runs``,
        ``n_ok``, ``n_oom``, ``status`` (``ok``, ``oom``, or ``mixed``/another status),
        ``throughput_samples_per_s`` (median over the ok runs; NaN where none finished),
        ``time_per_sample_s`` (1 / throughput), ``epoch_time_s`` (median),
        ``throughput_rel`` (throughput / the curve's throughput at its smallest size).

    Notes
    -----
    Throughput is samples per second of the whole run (all ranks) as in
    :func:`analysis.metrics.scaling.epoch_times`; an ``oom`` run has none, so it appears
    only through ``n_oom`` and ``status`` at its size.
    """
    require_columns(runs, ("run_id", "status", size, *by), "input_size_table")
    r = runs[runs[size].notna()].assign(size=lambda d: pd.to_numeric(d[size], errors="coerce"))
    if r["size"].isna().any():
        raise ScalescopeError(f"{size} is not numeric: {sorted(r.loc[r['size'].isna(), size].astype(str))[:5]}")
    pr = per_run[["run_id", "throughput_samples_per_s", "epoch_time_s"]] if len(per_run) else \
        pd.DataFrame(columns=["run_id", "throughput_samples_per_s", "epoch_time_s"])
    r = r.merge(pr, on="run_id", how="left")
    rows = []
    for key, g in r.groupby([*by, "size"], sort=True, dropna=False):
        row = dict(zip([*by, "size"], key, strict=True))
        ok = g[g["status"] == "ok"]
        statuses = sorted(set(g["status"]))
        row.update(n_runs=len(g), n_ok=len(ok), n_oom=int((g["status"] == OOM_STATUS).sum()),
                   status=statuses[0] if len(statuses) == 1 else "mixed",
                   throughput_samples_per_s=float(ok["throughput_samples_per_s"].median()) if len(ok) else np.nan,
                   epoch_time_s=float(ok["epoch_time_s"].median()) if len(ok) else np.nan)
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["time_per_sample_s"] = 1.0 / out["throughput_samples_per_s"]
    first = out.dropna(subset=["throughput_samples_per_s"]).groupby(list(by), dropna=False)[
        "throughput_samples_per_s"].first()
    out["throughput_rel"] = out["throughput_samples_per_s"] / out.set_index(list(by)).index.map(first).to_numpy(float)
    return out


def memory_limit(table: pd.DataFrame, *, by: Sequence[str] = ("config_backend", "n_ranks"),
                 find_max: Sequence[Mapping] = ()) -> pd.DataFrame:
    """The largest size that fitted and the smallest that ran out of memory, per curve.

    Parameters
    ----------
    table
        :func:`input_size_table`.
    find_max
        ``experiment.json``'s ``find_max`` records (:func:`analysis.rundir.find_max_records`), shown beside.

    Returns
    -------
    pandas.DataFrame
        One row per ``by`` group: ``largest_ok``, ``smallest_oom`` (NaN when no run ran out
        of memory), ``bracket_frac`` ((smallest_oom - largest_ok) / largest_ok), ``n_sizes``,
        and ``find_max_largest_ok`` where a ``--find-max`` search recorded one.

    Notes
    -----
    largest_ok counts only sizes below the smallest oom size, so an ok run above an oom one
    (memory noise near the limit) does not move the limit up.
    """
    require_columns(table, ("size", "n_ok", "n_oom", *by), "memory_limit")
    rows = []
    for key, g in table.groupby(list(by), sort=True, dropna=False):
        row = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True))
        oom = g.loc[g["n_oom"] > 0, "size"]
        small_oom = float(oom.min()) if len(oom) else np.nan
        ok = g.loc[(g["n_ok"] > 0) & ~(g["size"] >= small_oom), "size"]
        big_ok = float(ok.max()) if len(ok) else np.nan
        row.update(largest_ok=big_ok, smallest_oom=small_oom, bracket_frac=(small_oom - big_ok) / big_ok,
                   n_sizes=len(g))
        rows.append(row)
    out = pd.DataFrame(rows)
    if len(out) and find_max:
        found = [r.get("largest_ok") for r in find_max if r.get("largest_ok") is not None]
        out["find_max_largest_ok"] = float(max(found)) if found else np.nan
    return out


def strong_weak_table(per_run: pd.DataFrame, *, baseline: str | Mapping[str, object] = "none",
                      by: Sequence[str] = ("config_backend",),
                      match: Sequence[str] = ("batch_size",)) -> pd.DataFrame:
    """Strong and weak scaling side by side, each against its own ideal.

    Parameters
    ----------
    per_run
        :func:`analysis.metrics.scaling.run_summary` with a ``scaling`` column
        (``strong`` or ``weak``, from ``scalescope sweep --scaling``).

    Returns
    -------
    pandas.DataFrame
        :func:`analysis.metrics.scaling.scaling_table` with ``mode="auto"`` (``scaling`` among
        the key columns) plus ``ideal_epoch_time_s`` and ``ideal_speedup``.

    Notes
    -----
    Strong scaling (fixed dataset): ideal epoch time T(n0)·n0/n, speedup T(n0)/T(n).
    Weak scaling (dataset grown with n): ideal epoch time T(n0), scaled speedup
    X(n)/X(n0), so its efficiency is T(n0)/T(n) (Gustafson). Both ideals of the speedup are n/n0.
    """
    require_columns(per_run, ("scaling",), "strong_weak_table")
    t = scaling_table(per_run, baseline=baseline, mode="auto", by=by, match=match)
    n, n0 = t["n_ranks"].astype(float), t["baseline_n_ranks"].astype(float)
    t["ideal_epoch_time_s"] = np.where(t["scaling"] == "weak", t["baseline_epoch_time_s"],
                                       t["baseline_epoch_time_s"] * n0 / n)
    t["ideal_speedup"] = n / n0
    return t
