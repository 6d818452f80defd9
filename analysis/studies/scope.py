"""What scalescope covers, and why a CPU-only run differs from a GPU run (issue 35)."""

from __future__ import annotations

import pandas as pd

from analysis.studies._base import Context, Section, usable_runs

#: What the report measures and what it does not (README.md, "Scope").
SCOPE = ("scalescope studies data parallelism: every rank holds the whole model and a share of each global "
         "batch, and the gradients are averaged by Horovod (over Gloo, MPI or NCCL) or torch.distributed "
         "(DDP). Model parallelism (layers split across devices), pipeline parallelism (micro-batches "
         "flowing through stages; its bubble (N-1)/(N+K-1) is only computed, analysis.metrics.pipeline_bubble) "
         "and intra-layer (tensor) parallelism are out of scope: no study measures them, and a run that uses "
         "them is analysed as if each rank were a data-parallel replica.")


def study_scope(ctx: Context) -> Section:
    sec = Section(intro=SCOPE)
    runs = usable_runs(ctx)
    pr = ctx.per_run
    cpu = "gpu_model" not in runs or runs["gpu_model"].isna().all()
    if not cpu:
        sec.notes.append("The runs had GPUs: the CPU caveats below do not apply.")
        return sec
    sec.notes.append("Every run here is a CPU run (no GPU model recorded): one rank is one process on CPU cores, "
                     "the analogue of one GPU. Where this changes a result against the reference work's GPUs:")
    one_hvd = pr[(pr["framework"] == "horovod") & (pr["n_ranks"] == 1)] if "framework" in pr else pr.iloc[0:0]
    if len(one_hvd):
        cpus = runs["host_cpus"].dropna() if "host_cpus" in runs else pd.Series(dtype=float)
        threads = runs["threads_per_rank"].dropna() if "threads_per_rank" in runs else pd.Series(dtype=float)
        spare = len(cpus) and len(threads) and int(cpus.min()) > int(threads.max())
        sec.notes.append("Framework overhead at one rank: a one-rank Horovod run starts a background thread that "
                         "negotiates and launches the collectives; on a GPU it competes with the training loop "
                         "for the host (the reference measured +17 %), on a CPU run it can take a core the "
                         "baseline leaves idle, and the overhead can come out near 0 or negative (study 4 "
                         "gives this experiment's number)" + (f" (here {int(cpus.min())} CPUs for {int(threads.max())} thread(s) per rank)"
                                       if spare else "") + ".")
    if "peak_mem_kind" in ctx.rs.epochs and (ctx.rs.epochs["peak_mem_kind"] == "rss").any():
        sec.notes.append("Memory: peak_mem_kind rss is the process's resident memory (the interpreter, libraries "
                         "and data included), standing in for the GPU memory a CUDA run reports from its "
                         "allocator (peak_mem_kind cuda); rank 0's extra and the largest batch that fits are in RSS.")
    try:
        samples = ctx.rs.samples
    except Exception:  # the usage study reports unreadable samples
        samples = pd.DataFrame()
    if len(samples) and "device" in samples and samples["device"].isna().all():
        sec.notes.append("Utilisation: the device-usage study shows CPU utilisation of the rank processes, not "
                         "GPU utilisation (NVML's share of time a kernel ran); the two are not comparable.")
    if "config_backend" in runs and not runs["config_backend"].astype(str).str.contains("nccl").any():
        sec.notes.append("Communication: Gloo and MPI over shared memory or loopback TCP; NCCL (the GPU "
                         "backend, NVLink/PCIe/InfiniBand) cannot run without GPUs, so sync times and their "
                         "alpha-beta fits are not those of a GPU cluster.")
    sec.notes.append("Time: the phases are host time, which on a GPU run the analysis replaces by device time "
                     "where CUDA events were recorded (docs/metrics.md, \"Device time\").")
    return sec
