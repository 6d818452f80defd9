"""Metrics: pure functions from tidy frames (or a RunSet) to new tidy frames.

One module per study family; every function takes its options keyword-only, never
changes its inputs, and documents its formula in a ``Notes`` section.
"""

from __future__ import annotations

from analysis.metrics.backend import backend_comparison
from analysis.metrics.batch import batch_size_epoch_time, scaled_learning_rate, validation_curves
from analysis.metrics.breakdown import (
    breakdown_by_ranks,
    ddp_comm_overlap,
    gpu_time_breakdown,
    horovod_allreduce,
    step_times,
    time_breakdown,
    warmup_count,
    warmup_summary,
)
from analysis.metrics.gap import explain_loss, rank_step_parts, scaling_loss
from analysis.metrics.memory import compute_update_breakdown, peak_memory
from analysis.metrics.model import (
    fit_alpha_beta,
    pipeline_bubble,
    predict_scaling,
    predict_sync,
    what_if,
)
from analysis.metrics.overhead import framework_overhead
from analysis.metrics.scaling import (
    epoch_times,
    fit_speedup,
    node_boundaries,
    run_speedups,
    run_summary,
    scaling_table,
)
from analysis.metrics.stragglers import negotiation_stragglers, phase_stragglers, straggler_summary
from analysis.metrics.sync import sync_cost, sync_scaling, sync_times
from analysis.metrics.utilization import device_usage, usage_by_ranks

__all__ = [
    "backend_comparison",
    "batch_size_epoch_time",
    "breakdown_by_ranks",
    "compute_update_breakdown",
    "ddp_comm_overlap",
    "device_usage",
    "epoch_times",
    "explain_loss",
    "fit_alpha_beta",
    "fit_speedup",
    "framework_overhead",
    "gpu_time_breakdown",
    "horovod_allreduce",
    "negotiation_stragglers",
    "node_boundaries",
    "peak_memory",
    "phase_stragglers",
    "pipeline_bubble",
    "predict_scaling",
    "predict_sync",
    "rank_step_parts",
    "run_speedups",
    "run_summary",
    "scaled_learning_rate",
    "scaling_loss",
    "scaling_table",
    "step_times",
    "straggler_summary",
    "sync_cost",
    "sync_scaling",
    "sync_times",
    "time_breakdown",
    "usage_by_ranks",
    "validation_curves",
    "warmup_count",
    "warmup_summary",
    "what_if",
]
