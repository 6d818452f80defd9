"""Study 2: the synchronisation cost against ranks."""

from __future__ import annotations

from analysis import metrics as M
from analysis import plots as P
from analysis.studies._base import (
    Context,
    Section,
    placement_axes,
    sync_cost,
)


def study_sync(ctx: Context) -> Section:
    sec = Section(intro="Time per synchronisation (sync_total: a gradient collective in flight, whether or not "
                  "compute hides it; dotted: sync_exposed, the wait the step pays), synchronisations per epoch "
                  "(batches per rank per epoch) and their product, the sync time per epoch. Ratios are relative "
                  "to the fewest ranks: a sync-per-epoch ratio below 1 means fewer synchronisations outpaced the "
                  "growing cost of each. Warm-up steps dropped; definitions in docs/metrics.md.")
    cost = sync_cost(ctx)
    axes = [c for c in placement_axes(ctx) if c in cost.columns]
    scal = M.sync_scaling(cost, by=("config_backend", "batch_size", *axes))
    if axes:
        scal = scal.assign(config=scal[["config_backend", *axes]].astype(str).agg(", ".join, axis=1))
    sec.figures.append(("sync", P.plot_sync(scal, by="config" if axes else "config_backend")))
    sec.tables.append(("sync_scaling", scal, "Repeats pooled."))
    sec.tables.append(("sync_per_run", cost, "Per run."))
    return sec
