"""Study 10: stragglers."""

from __future__ import annotations

from analysis import metrics as M
from analysis import plots as P
from analysis.studies._base import (
    Context,
    Section,
    Skip,
    usable_runs,
)


def study_stragglers(ctx: Context) -> Section:
    sec = Section(intro="Per step, which rank finished its data+forward+backward work last and how long the others "
                  "waited; and, from Horovod's negotiation ticks, which rank reported each tensor ready last.")
    multi = usable_runs(ctx)
    multi_ids = set(multi.loc[multi["n_ranks"] > 1, "run_id"])
    got = False
    per_step = ctx.event_table("phase_stragglers")  # of every run's phases: the multi-rank runs' kept
    if len(per_step):
        per_step = per_step[per_step["run_id"].astype(object).isin(multi_ids)].reset_index(drop=True)
    if len(per_step):
        summ = M.straggler_summary(per_step)
        sec.figures.append(("stragglers", P.plot_stragglers(summ)))
        sec.tables.append(("stragglers", summ, "wait = slowest rank's busy time - own busy time, per step."))
        got = True
    neg = ctx.event_table("negotiation")
    if len(neg):
        sec.figures.append(("negotiation", P.plot_negotiation(neg)))
        counts = neg.groupby(["run_id", "last_rank"]).agg(n_last=("tensor", "size"), lag_mean_s=("lag_s", "mean"),
                                                         margin_mean_s=("margin_s", "mean")).reset_index()
        sec.tables.append(("negotiation_last_rank", counts, "How often each rank was the last one ready."))
        got = True
    if not got:
        raise Skip("needs multi-rank runs with phase traces or Horovod negotiation ticks")
    return sec
