"""The Summary: speedup, efficiency and the exposed sync and data shares."""

from __future__ import annotations

import pandas as pd

from analysis import metrics as M
from analysis.errors import ScalescopeError
from analysis.studies._base import (
    Context,
    Section,
    config_by,
    reporting_notes,
    scaling_and_base,
    thread_notes,
)


def _runs_table(ctx: Context) -> pd.DataFrame:
    """Each run's own speedup and efficiency against the baseline mean (the individual runs
    shown where fewer than 3 repeats allow no interval)."""
    pr = ctx.per_run
    by = config_by(ctx)
    try:
        pts = M.run_speedups(pr, baseline="none" if (pr["framework"] == "none").any() else "min", by=by)
    except ScalescopeError:
        pts = M.run_speedups(pr, baseline="min", by=by)
    cols = [c for c in ("run_id", *by, "n_ranks", "repeat", "time_per_sample_s", "speedup", "efficiency_frac",
                        "outlier") if c in pts.columns]
    return pts[cols].sort_values([c for c in (*by, "n_ranks", "repeat") if c in pts.columns]).reset_index(drop=True)


def study_summary(ctx: Context) -> Section:
    sec = Section(intro="Speedup and efficiency against the base case with their 95 % intervals and verdicts, and the "
                  "share of the step spent in exposed gradient synchronisation and in data loading, per "
                  "configuration and rank count. The same numbers as in \"Why not ideal?\" (one definition, "
                  "docs/metrics.md).")
    table, base = scaling_and_base(ctx)
    by = list(config_by(ctx))
    cols = [*by, "n_ranks", "n_nodes", "n_runs", "n_outliers", "time_per_sample_s", "throughput_samples_per_s",
            "speedup", "speedup_ci_low", "speedup_ci_high", "efficiency_frac", "efficiency_frac_ci_low",
            "efficiency_frac_ci_high", "efficiency_frac_verdict", "sync_exposed_frac", "data_frac", "repeats_for_5pct",
            "work_source", "unreliable"]
    t = table[[c for c in cols if c in table.columns]]
    t = t.drop(columns=[c for c in ("n_outliers", "unreliable") if c in t and not t[c].fillna(0).astype(bool).any()])
    sec.notes.extend([*reporting_notes(ctx, base), *M.explain_work(table)])
    sec.notes.extend(thread_notes(ctx))
    for r in table.dropna(subset=["outliers"]).itertuples() if "outliers" in table else []:
        sec.notes.append(f"Outlier repeat(s) left out of {r.config_backend} at {int(r.n_ranks)} rank(s): {r.outliers}.")
    sec.tables.append(("summary", t, "Speedup and efficiency: means over repeats against the base case; "
                                     "efficiency_frac_verdict: is the loss against ideal distinguishable from "
                                     "run-to-run noise; repeats_for_5pct: repeats per side that would resolve a "
                                     "5 % difference."))
    if "efficiency_frac_ci_low" in table and table["efficiency_frac_ci_low"].isna().any():
        sec.notes.append("Some rows have fewer than 3 repeats on a side: no interval can be given; each run's own "
                         "numbers are listed below instead.")
        sec.tables.append(("summary_runs", _runs_table(ctx), "Each run against the base case's mean."))
    return sec
