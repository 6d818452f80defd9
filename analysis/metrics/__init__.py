"""Metrics: pure functions from tidy frames (or a RunSet) to new tidy frames.

One module per study family; every function takes its options keyword-only, never
changes its inputs, and documents its formula in a ``Notes`` section.
"""

from __future__ import annotations

from analysis.metrics._mapping import maps_over
from analysis.metrics.backend import backend_comparison
from analysis.metrics.batch import (
    batch_by_ranks,
    batch_size_epoch_time,
    batch_speedup,
    equal_batch_comparison,
    final_losses,
    lr_rule_curves,
    scaled_learning_rate,
    time_to_target,
    validation_curves,
)
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
from analysis.metrics.collectives import (
    blocking_calls,
    collectives,
    explain_blocking,
    exposed_comm,
    kernel_step_parts,
    launched_work,
    sync_outside_steps,
)
from analysis.metrics.fusion import dedupe_fused
from analysis.metrics.gap import explain_loss, rank_step_parts, scaling_loss
from analysis.metrics.grouping import baseline_match, batch_key, config_by, grouped_by, study_axes
from analysis.metrics.measures import measure_runs, scaling_mode, select_baseline, step_table
from analysis.metrics.memory import (
    compute_update_breakdown,
    compute_update_per_epoch,
    memory_by_batch,
    peak_memory,
)
from analysis.metrics.model import (
    ALLREDUCE_MODELS,
    allreduce_models,
    fit_alpha_beta,
    pipeline_bubble,
    predict_scaling,
    predict_sync,
    what_if,
)
from analysis.metrics.overhead import framework_overhead
from analysis.metrics.scaling import (
    compare_groups,
    epoch_times,
    explain_work,
    fit_speedup,
    node_boundaries,
    run_speedups,
    run_summary,
    scaling_table,
)
from analysis.metrics.sizes import (
    input_size_table,
    memory_limit,
    size_axes,
    strong_weak_table,
)
from analysis.metrics.stragglers import negotiation_stragglers, phase_stragglers, straggler_summary
from analysis.metrics.sync import sync_cost, sync_scaling, sync_times
from analysis.metrics.timesource import (
    SOURCES,
    between_steps,
    event_arrivals,
    run_sources,
    timed_view,
)
from analysis.metrics.utilization import (
    device_usage,
    gpu_memory_phases,
    gpu_timeline,
    idle_devices,
    own_samples,
    training_start,
    usage_by_ranks,
)

__all__ = [
    "ALLREDUCE_MODELS",
    "SOURCES",
    "allreduce_models",
    "backend_comparison",
    "baseline_match",
    "batch_by_ranks",
    "batch_key",
    "batch_size_epoch_time",
    "batch_speedup",
    "between_steps",
    "blocking_calls",
    "breakdown_by_ranks",
    "collectives",
    "compare_groups",
    "compute_update_breakdown",
    "compute_update_per_epoch",
    "config_by",
    "ddp_comm_overlap",
    "dedupe_fused",
    "device_usage",
    "epoch_times",
    "equal_batch_comparison",
    "event_arrivals",
    "explain_blocking",
    "explain_loss",
    "explain_work",
    "exposed_comm",
    "final_losses",
    "fit_alpha_beta",
    "fit_speedup",
    "framework_overhead",
    "gpu_memory_phases",
    "gpu_time_breakdown",
    "gpu_timeline",
    "grouped_by",
    "horovod_allreduce",
    "idle_devices",
    "input_size_table",
    "kernel_step_parts",
    "launched_work",
    "lr_rule_curves",
    "maps_over",
    "measure_runs",
    "memory_by_batch",
    "memory_limit",
    "negotiation_stragglers",
    "node_boundaries",
    "own_samples",
    "peak_memory",
    "phase_stragglers",
    "pipeline_bubble",
    "predict_scaling",
    "predict_sync",
    "rank_step_parts",
    "run_sources",
    "run_speedups",
    "run_summary",
    "scaled_learning_rate",
    "scaling_loss",
    "scaling_mode",
    "scaling_table",
    "select_baseline",
    "size_axes",
    "step_table",
    "step_times",
    "straggler_summary",
    "strong_weak_table",
    "study_axes",
    "sync_cost",
    "sync_outside_steps",
    "sync_scaling",
    "sync_times",
    "time_breakdown",
    "time_to_target",
    "timed_view",
    "training_start",
    "usage_by_ranks",
    "validation_curves",
    "warmup_count",
    "warmup_summary",
    "what_if",
]
