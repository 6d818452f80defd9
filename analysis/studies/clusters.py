"""Study 11: clusters and partitions."""

from __future__ import annotations

import pandas as pd

from analysis import metrics as M
from analysis import plots as P
from analysis.errors import ScalescopeError
from analysis.schema import MACHINE_AXES
from analysis.studies._base import (
    Context,
    Section,
    Skip,
    usable_runs,
)


def _placement_axis(pr: pd.DataFrame) -> str:
    for col in ("partition", "cluster", "gpu_model"):
        if col in pr.columns and pr[col].nunique() >= 2:
            return col
    raise Skip("needs runs on two or more clusters or partitions (SLURM's partition, or "
               "scalescope sweep --label partition=...)")


def study_clusters(ctx: Context) -> Section:
    sec = Section(intro="The same workload on several clusters or partitions: speedup of each against one "
                  "baseline (the first partition's one-process run without a framework, as the reference study "
                  "measured every partition against one baseline), the fitted speedup per added rank with its "
                  "95 % interval, and where each partition's ranks spill onto another node.")
    pr = ctx.per_run
    axis = _placement_axis(pr)
    first = sorted(pr[axis].dropna().unique())[0]
    base = {axis: first, "framework": "none"}
    if not ((pr[axis] == first) & (pr["framework"] == "none")).any():
        base = {axis: first, "n_ranks": int(pr.loc[pr[axis] == first, "n_ranks"].min())}
        sec.notes.append(f"{axis} {first} has no run without a framework: its fewest-rank runs are the baseline.")
    by = (axis, "config_backend", "batch_size")
    try:
        table = M.scaling_table(pr, baseline=base, by=by)
        points = M.run_speedups(pr, baseline=base, by=by)
    except ScalescopeError as exc:
        raise Skip(str(exc)) from None
    sec.notes.append(f"Baseline: {', '.join(f'{k}={v}' for k, v in base.items())}.")
    fw = table[table["framework"] != "none"]
    fit = M.fit_speedup(points[points["framework"] != "none"], by=(axis, "config_backend"))
    bounds = M.node_boundaries(usable_runs(ctx), by=(axis,))
    sec.figures.append(("clusters_scaling", P.plot_scaling(fw, fit=fit, boundaries=bounds,
                                                           by=(axis, "config_backend"),
                                                           title=f"Speedup per {axis} against one baseline")))
    sec.figures.append(("clusters_slopes", P.plot_speedup_slopes(fit, by=(axis, "config_backend"))))
    sec.tables.append(("clusters_slopes", fit, "Speedup per added rank (least squares, Student-t interval)."))
    sec.tables.append(("clusters_scaling", table, f"Against one baseline ({first})."))
    what = [c for c in (*MACHINE_AXES, "gpu_model", "gpus_per_node", "gpus_on_node", "nodes", "labels")
            if c in pr.columns]
    sec.tables.append(("clusters_what_differs", pr[[axis, *[c for c in what if c != axis]]].drop_duplicates()
                       .sort_values(axis).reset_index(drop=True), f"What each {axis} is, as recorded."))
    cmp = M.compare_groups(pr, axis=axis, keys=("config_backend", "batch_size", "n_ranks"))
    if len(cmp):
        sec.tables.append(("clusters_compare", cmp, f"Time per sample of each {axis} against {first} on the same "
                                                    "configuration: ratio, 95 % interval, verdict."))
    try:
        own = M.scaling_table(pr, baseline="none", by=by)
        sec.tables.append(("clusters_own_baseline", own, f"Each {axis} against its own one-process run."))
    except ScalescopeError as exc:
        sec.notes.append(f"Each {axis} against its own baseline: {exc}")
    _clusters_usage(ctx, sec, axis)
    return sec


def _clusters_usage(ctx: Context, sec: Section, axis: str) -> None:
    """Device usage per partition (the runs' own GPUs), as the reference study explained each
    partition's scaling with its GPU usage."""
    try:
        samples = ctx.rs.samples
    except Exception as exc:
        sec.notes.append(f"Device usage per {axis}: the samples could not be read ({exc}).")
        return
    if samples.empty:
        return
    usage = M.device_usage(samples, rank_devices=ctx.rs.rank_devices)
    by_ranks = M.usage_by_ranks(usage, usable_runs(ctx), by=(axis,))
    if len(by_ranks):
        sec.figures.append(("clusters_usage", P.plot_device_usage(by_ranks, by=axis,
                                                                  title=f"Device usage per {axis}")))
        sec.tables.append(("clusters_usage", by_ranks, f"Sampled usage per {axis} and rank count."))
