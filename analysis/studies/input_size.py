"""Study 13: input size and the memory limit."""

from __future__ import annotations

from analysis import metrics as M
from analysis import plots as P
from analysis.studies._base import (
    Context,
    Section,
    Skip,
    grouped,
    placement_axes,
)


def study_input_size(ctx: Context) -> Section:
    sec = Section(intro="Throughput against an input size swept with --vary or searched with --find-max, and the "
                  "largest size that fits in memory: runs that ran out of memory are marked at their size.")
    runs = ctx.rs.runs
    axes = M.size_axes(runs)
    if not axes:
        raise Skip("no numeric --vary / --find-max axis with two or more values")
    for size in axes:
        # one curve per GPU type, partition, experiment and other swept value (the one grouping rule)
        by = (*(c for c in placement_axes(ctx) if c != size and c in runs.columns), "config_backend", "n_ranks")
        t = M.input_size_table(runs, ctx.per_run, size=size, by=by)
        name = size.removeprefix("vary_")
        lim = M.memory_limit(t, by=by, find_max=[r for r in ctx.rs.find_max_records() if r.get("name") == name])
        sec.figures.append((f"input_size_{name}", P.plot_input_size(t, by=by, limit=lim, size_label=f"--{name}")))
        sec.tables.append((f"input_size_{name}", t, grouped(by, "Throughput per size; n_oom: runs that ran out of "
                                                                "memory.")))
        sec.tables.append((f"memory_limit_{name}", lim, grouped(by, "Largest size that fitted, smallest that did "
                                                                    "not.")))
    return sec
