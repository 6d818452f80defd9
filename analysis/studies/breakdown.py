"""Study 1: the time breakdown of a training step."""

from __future__ import annotations

import pandas as pd

from analysis import plots as P
from analysis.studies._base import (
    Context,
    Section,
    breakdown_by_ranks,
    usable_runs,
)


def study_breakdown(ctx: Context) -> Section:
    sec = Section(intro="Shares of data loading, forward, backward, exposed gradient sync, optimizer and other/idle time "
                  "in the step time, measured as unions of intervals (overlaps counted once).")
    b = breakdown_by_ranks(ctx)
    sec.figures.append(("breakdown", P.plot_breakdown(b)))
    sec.tables.append(("breakdown_by_ranks", b, "Full steps after warm-up, pooled over ranks and repeats, per "
                                                "configuration and batch size; times are per step."))
    per_rank = ctx.event_table("breakdown_rank")
    sec.tables.append(("breakdown_per_rank", per_rank, "Per run and rank."))
    _one_run(ctx, sec, per_rank)
    hv = ctx.event_table("horovod_allreduce")
    if len(hv):
        sec.figures.append(("horovod_allreduce", P.plot_allreduce_activity(hv)))
        sec.tables.append(("horovod_allreduce", hv, "Horovod timeline activity (fusion duplicates removed on "
                                                     "(name, start)); overlap with rank 0's backward phases."))
    dd = ctx.event_table("ddp_comm_overlap")
    if len(dd):
        sec.tables.append(("ddp_comm_overlap", dd, "DDP bucket allreduces (comm hook) and their overlap with "
                                                   "backward."))
    gpu = ctx.event_table("gpu_breakdown")
    if len(gpu):
        sec.figures.append(("gpu_breakdown", P.plot_gpu_breakdown(gpu)))
        sec.tables.append(("gpu_breakdown", gpu, "GPU timeline per rank (HTA's temporal breakdown)."))
        kp = ctx.event_table("kernel_step_parts")
        if len(kp) and kp.groupby("run_id")["rank"].nunique().max() > 1:
            kp = kp.groupby(["run_id", "rank", "source"])[["step_s", "compute_s", "sync_s", "straggler_s",
                                                           "other_s"]].mean().reset_index()
            sec.tables.append(("kernel_step_parts", kp, "The profiled steps on the device from the kernel traces of "
                               "every rank (docs/metrics.md, \"Device timeline\"): exposed transfer (sync_s) apart "
                               "from exposed peer wait (straggler_s); mean per step."))
    else:
        sec.notes.append("No GPU kernel traces (Kineto / nsys) in this experiment: the GPU temporal breakdown "
                         "is not shown.")
    return sec


def _one_run(ctx: Context, sec: Section, per_rank: pd.DataFrame) -> None:
    """The per-rank shares and a few steps on a timeline of one run: the one with the most
    ranks, Horovod first, then DDP (notebook 01's run; only its events are read)."""
    runs = usable_runs(ctx)
    if runs.empty:
        return
    order = runs.assign(_fw=runs["framework"].map({"horovod": 0, "ddp": 1}).fillna(2))
    run_id = str(order.sort_values(["n_ranks", "_fw"], ascending=[False, True])["run_id"].iloc[0])
    mine = per_rank[per_rank["run_id"].astype(str) == run_id]
    if len(mine):
        sec.figures.append(("breakdown_one_run", P.plot_breakdown(mine.assign(config_backend=run_id), x="rank",
                                                                  title=f"Step time per rank: {run_id}")))
    events = ctx.rs.filter(run_id=lambda ids: ids.astype(str) == run_id).events
    if len(events):
        sec.figures.append(("timeline", P.plot_timeline(events)))
    sec.notes.append(f"Per-rank shares and timeline of one run: {run_id} (the run with the most ranks, Horovod "
                     "first, then DDP).")
