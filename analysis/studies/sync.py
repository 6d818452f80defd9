"""Study 2: the synchronisation cost against ranks."""

from __future__ import annotations

import pandas as pd

from analysis import metrics as M
from analysis import plots as P
from analysis.studies._base import (
    Context,
    Section,
    grouped,
    placement_axes,
    sync_cost,
    usable_runs,
)


def study_sync(ctx: Context) -> Section:
    sec = Section(intro="Time per synchronisation (sync_total: a gradient collective in flight, whether or not "
                  "compute hides it; dotted: sync_exposed, the wait the step pays), synchronisations per epoch "
                  "(batches per rank per epoch) and their product, the sync time per epoch. Ratios are relative "
                  "to the fewest ranks: a sync-per-epoch ratio below 1 means fewer synchronisations outpaced the "
                  "growing cost of each. Warm-up steps dropped; definitions in docs/metrics.md.")
    cost = sync_cost(ctx)
    runs = usable_runs(ctx)
    batch = M.batch_key(ctx.per_run)
    missing = [c for c in (*placement_axes(ctx), batch) if c not in cost.columns and c in runs.columns]
    if missing:  # every axis the runs differ on keeps its own lines (the one grouping rule)
        cost = cost.merge(runs[["run_id", *missing]].astype({"run_id": cost["run_id"].dtype}), on="run_id", how="left")
    axes = [c for c in placement_axes(ctx) if c in cost.columns]
    by = ("config_backend", batch, *axes)
    scal = M.sync_scaling(cost, by=by)
    if axes:
        scal = scal.assign(config=[", ".join("–" if pd.isna(v) else str(v) for v in row)
                                   for row in scal[["config_backend", *axes]].itertuples(index=False)])
    sec.figures.append(("sync", P.plot_sync(scal, by="config" if axes else "config_backend")))
    sec.tables.append(("sync_scaling", scal, grouped(by, "Repeats pooled.")))
    sec.tables.append(("sync_per_run", cost, "Per run."))
    return sec
