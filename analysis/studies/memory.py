"""Study 8: compute against weight update, and memory per rank."""

from __future__ import annotations

from analysis import metrics as M
from analysis import plots as P
from analysis.studies._base import (
    Context,
    Section,
    Skip,
    full_step_breakdown,
    usable_runs,
)


def study_memory(ctx: Context) -> Section:
    sec = Section(intro="Forward+backward against optimizer time per step per rank count, and each rank's peak memory "
                  "(rank 0 often holds more).")
    got = False
    try:
        cu = M.compute_update_breakdown(full_step_breakdown(ctx), usable_runs(ctx))
        sec.figures.append(("compute_update", P.plot_compute_update(cu)))
        sec.tables.append(("compute_update", cu, "Per step, pooled over ranks and repeats."))
        got = True
    except Skip as exc:
        sec.notes.append(f"Compute against update: {exc}")
    epochs = ctx.rs.epochs
    if len(epochs) and epochs["peak_mem_mib"].notna().any():
        pm = M.peak_memory(epochs[epochs["peak_mem_mib"].notna()], usable_runs(ctx))
        sec.figures.append(("peak_memory", P.plot_memory(pm)))
        sec.tables.append(("peak_memory", pm, "rank0_extra_mib = rank 0's peak minus the other ranks' median."))
        got = True
    if not got:
        raise Skip("no phase traces and no peak-memory metrics")
    return sec
