"""Study 3: scaling, speedup and efficiency."""

from __future__ import annotations

from analysis import metrics as M
from analysis import plots as P
from analysis.errors import ScalescopeError
from analysis.studies._base import (
    Context,
    Section,
    config_by,
    need_distinct,
    placement_axes,
    reporting_notes,
    runs_mode,
    scaling_and_base,
    thread_notes,
    usable_runs,
)


def study_scaling(ctx: Context) -> Section:
    sec = Section(intro="Speedup = X(n)/X(n0), the throughput ratio, and efficiency = speedup · n0/n, means over "
                  "repeats with 95 % intervals (bars: the individual repeats' range); the dashed line is a "
                  "least-squares fit of speedup per added rank with its 95 % confidence interval. The epoch time "
                  "is shown as recorded beside the mode's ideal epoch time.")
    table, base = scaling_and_base(ctx)
    sec.notes.extend(reporting_notes(ctx, base))
    sec.notes.extend(thread_notes(ctx))
    pr = ctx.per_run
    fw = pr[pr["framework"] != "none"]
    need_distinct(fw["n_ranks"], 2, "runs at two or more rank counts")
    baseline = "none" if (pr["framework"] == "none").any() else "min"
    axes = placement_axes(ctx)
    by = config_by(ctx)
    try:
        points = M.run_speedups(pr, baseline=baseline, by=by)
    except ScalescopeError:
        points = M.run_speedups(pr, baseline="min", by=by)
    points = points[points["outlier"].isna()] if "outlier" in points else points
    # one fit per configuration, batch size included (never pooled over batch sizes)
    fit = M.fit_speedup(points[points["framework"] != "none"], by=tuple(c for c in by if c in points))
    bounds = M.node_boundaries(usable_runs(ctx), by=axes)
    mode, _ = runs_mode(ctx)
    t = table if mode in ("strong", "weak") else table.drop(columns=["ideal_epoch_time_s"], errors="ignore")
    sec.figures.append(("scaling", P.plot_scaling(t[t["framework"] != "none"], fit=fit,
                                                  boundaries=bounds, by=(*axes, "config_backend"))))
    sec.tables.append(("scaling", t, "Time per sample (s, one rank), throughput (samples/s), speedup and "
                                     "efficiency with intervals; epoch time as recorded (s)."))
    sec.tables.append(("speedup_fit", fit, "Linear fit of speedup against ranks (Student-t interval)."))
    return sec
