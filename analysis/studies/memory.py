"""Study 8: compute against weight update, and memory per rank."""

from __future__ import annotations

from analysis import metrics as M
from analysis import plots as P
from analysis.studies._base import (
    Context,
    Section,
    Skip,
    config_by,
    full_step_breakdown,
    grouped,
    placement_axes,
    usable_runs,
)


def study_memory(ctx: Context) -> Section:
    sec = Section(intro="Forward+backward against optimizer time per step per rank count, and each rank's peak memory "
                  "(rank 0 often holds more).")
    got = False
    try:
        runs = usable_runs(ctx)
        by = tuple(c for c in config_by(ctx) if c in runs)
        cu = M.compute_update_breakdown(full_step_breakdown(ctx), runs, by=by)
        cu = M.compute_update_per_epoch(cu, ctx.per_run, by=by)
        sec.figures.append(("compute_update", P.plot_compute_update(cu)))
        sec.tables.append(("compute_update", cu, grouped(by, "Per step, pooled over ranks and repeats; per epoch: "
                                                             "per step × batches per rank per epoch.")))
        if cu["compute_per_epoch_s"].notna().any():
            sec.figures.append(("compute_update_epoch", P.plot_compute_update(cu, per="epoch")))
        got = True
    except Skip as exc:
        sec.notes.append(f"Compute against update: {exc}")
    epochs = ctx.rs.epochs
    if len(epochs) and epochs["peak_mem_mib"].notna().any():
        pm = M.peak_memory(epochs[epochs["peak_mem_mib"].notna()], usable_runs(ctx))
        sec.figures.append(("peak_memory", P.plot_memory(pm)))
        sec.tables.append(("peak_memory", pm, "rank0_extra_mib = rank 0's peak minus the other ranks' median."))
        _memory_by_batch(ctx, sec, epochs)
        got = True
    if not got:
        raise Skip("no phase traces and no peak-memory metrics")
    return sec


def _memory_by_batch(ctx: Context, sec: Section, epochs) -> None:
    """Peak memory against the per-rank batch and the largest batch that fits (the DGX-1
    evaluation's memory per GPU against batch size; ``--find-max batch-size=B`` searches it)."""
    runs = ctx.rs.runs
    by = (*(c for c in placement_axes(ctx) if c in runs.columns), "config_backend", "n_ranks")
    t = M.memory_by_batch(epochs, runs, by=by)
    if t.empty or not (t.groupby(list(by), dropna=False)["batch_size"].nunique() >= 2).any():
        sec.notes.append("No configuration ran with two or more batch sizes: no memory-against-batch curve "
                         "(scalescope sweep --batch-size 75,150,300, or --find-max batch-size=75 for the largest "
                         "batch that fits, docs/sweep.md).")
        return
    lim = M.memory_limit(t, by=by, find_max=[r for r in ctx.rs.find_max_records() if r.get("name") == "batch-size"])
    sec.figures.append(("memory_batch", P.plot_memory_batch(t, limit=lim, by=by)))
    sec.tables.append(("memory_batch", t, grouped(by, "Peak memory per rank (the largest rank's, median over "
                                                      "repeats) per batch size; n_oom: runs that ran out of memory.")))
    sec.tables.append(("memory_batch_limit", lim, grouped(by, "Largest batch that fitted, smallest that did not.")))
    if (t["peak_mem_kind"] == "rss").any():
        sec.notes.append("peak_mem_kind rss: on a CPU run the peak is the process's resident memory (RSS), which "
                         "holds the Python interpreter and libraries too; on a GPU it is the device allocator's "
                         "peak (docs/metrics.md, \"CPU runs against GPU runs\").")
