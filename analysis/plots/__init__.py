"""Figure builders: each takes the frame a metric returned and gives back a
``plotly.graph_objects.Figure`` (never shown here), styled by :func:`apply_theme`.

Builders only draw: they never compute a metric they could receive. Units are in every
axis title and hover text; shares are drawn in percent; rank axes have integer ticks; one
trace per configuration (batch sizes are never stacked or pooled). Figures have no fixed
width: they fill the report page or a notebook's output area, and the static export
(:func:`analysis.export.export_many`) draws them at a thesis' single-column width
(:data:`analysis.export.PRINT_WIDTH_IN` inches at :data:`analysis.export.PRINT_DPI` dpi).

The builders live in submodules by study; every public name is importable from here.
"""

from __future__ import annotations

from analysis.plots._theme import (
    CAUSE_COLOURS,
    CAUSE_LABELS,
    COMPONENT_COLOURS,
    COMPONENT_LABELS,
    PALETTE,
    RANKS_TITLE,
    TIMELINE_COLOURS,
    apply_theme,
)
from analysis.plots.batch import (
    plot_batch_size,
    plot_batch_speedup,
    plot_equal_batch,
    plot_input_size,
    plot_lr_curves,
    plot_validation,
)
from analysis.plots.breakdown import (
    plot_allreduce_activity,
    plot_breakdown,
    plot_compute_update,
    plot_gpu_breakdown,
    plot_timeline,
)
from analysis.plots.gap import plot_lost_speedup, plot_scaling_loss
from analysis.plots.placement import (
    plot_allreduce_models,
    plot_epoch_time,
    plot_memory_batch,
    plot_topology,
)
from analysis.plots.scaling import (
    plot_backends,
    plot_model,
    plot_overhead,
    plot_scaling,
    plot_speedup_slopes,
    plot_strong_weak,
    plot_sync,
)
from analysis.plots.usage import (
    plot_device_usage,
    plot_gpu_lines,
    plot_gpu_memory_phases,
    plot_memory,
    plot_negotiation,
    plot_stragglers,
)

__all__ = [
    "CAUSE_COLOURS", "CAUSE_LABELS", "COMPONENT_COLOURS", "COMPONENT_LABELS", "PALETTE", "RANKS_TITLE",
    "TIMELINE_COLOURS", "apply_theme", "plot_allreduce_activity", "plot_allreduce_models", "plot_backends",
    "plot_batch_size", "plot_batch_speedup", "plot_breakdown", "plot_compute_update", "plot_device_usage",
    "plot_epoch_time", "plot_equal_batch", "plot_gpu_breakdown", "plot_gpu_lines", "plot_gpu_memory_phases",
    "plot_input_size", "plot_lost_speedup", "plot_lr_curves", "plot_memory", "plot_memory_batch", "plot_model",
    "plot_negotiation", "plot_overhead", "plot_scaling", "plot_scaling_loss", "plot_speedup_slopes",
    "plot_stragglers", "plot_strong_weak", "plot_sync", "plot_timeline", "plot_topology", "plot_validation",
]
