"""Study 5: device usage against ranks."""

from __future__ import annotations

import pandas as pd

from analysis import metrics as M
from analysis import plots as P
from analysis.studies._base import (
    Context,
    Section,
    Skip,
    comm_paths,
    usable_runs,
)


def study_usage(ctx: Context) -> Section:
    sec = Section(intro="Sampled GPU utilisation, memory and power (NVML), or CPU utilisation when no GPU was sampled; "
                  "dashed lines mark where the ranks spill onto another node.")
    try:
        samples = ctx.rs.samples
    except Exception as exc:
        raise Skip(f"the samples could not be read: {exc}") from None
    if samples.empty:
        raise Skip("no NVML or CPU samples (samples-<host>.csv) in the runs")
    rank_devices = ctx.rs.rank_devices
    usage = M.device_usage(samples, rank_devices=rank_devices)
    by_ranks = M.usage_by_ranks(usage, usable_runs(ctx))
    _own_gpus(ctx, sec, samples, rank_devices)
    sec.figures.append(("device_usage", P.plot_device_usage(by_ranks, boundaries=M.node_boundaries(usable_runs(ctx)))))
    sec.tables.append(("device_usage", by_ranks, "Means over devices / processes / nodes and runs; *_jump is the "
                                                 "change where a node joins."))
    paths = comm_paths(usable_runs(ctx))
    if len(paths):
        sec.tables.append(("comm_path", paths, "The communication path of each backend and rank count (NCCL "
                                               "transports per link class from its logs; Gloo/MPI from the manifest)."))
    return sec


def _own_gpus(ctx: Context, sec: Section, samples: pd.DataFrame, rank_devices: pd.DataFrame) -> None:
    """Per-GPU lines of the largest run, memory before against during training, idle GPUs."""
    if not samples["device"].notna().any():
        sec.notes.append("No GPU was sampled (CPU runs): the per-GPU figures are not shown.")
        return
    idle = M.idle_devices(samples, rank_devices)
    if len(idle):
        sec.tables.append(("idle_gpus", idle, "GPUs the node samplers saw that no rank of the run used (left out "
                                              "of the usage above)."))
    if rank_devices.empty:
        sec.notes.append("The runs record no rank-to-GPU mapping: every sampled GPU is counted.")
    runs = usable_runs(ctx)
    big = runs.sort_values("n_ranks", kind="stable")["run_id"].iloc[-1]
    lines = M.gpu_timeline(samples, rank_devices if len(rank_devices) else None, run_id=big)
    if len(lines):
        sec.figures.append(("gpu_lines", P.plot_gpu_lines(lines, title=f"Each GPU of {big} over time")))
    try:
        start = ctx.event_table("training_start")
    except Skip:
        return
    mem = M.gpu_memory_phases(samples, rank_devices, start)
    if len(mem):
        sec.figures.append(("gpu_memory_phases", P.plot_gpu_memory_phases(mem)))
        sec.tables.append(("gpu_memory_phases", mem, "extra_vs_others_mib: this GPU's peak minus the median peak "
                                                     "of the run's other GPUs (rank 0's GPU often holds more)."))
