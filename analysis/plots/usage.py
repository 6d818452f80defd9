"""Figures of device usage, memory and stragglers."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.errors import ScalescopeError
from analysis.plots._theme import (
    PALETTE,
    apply_theme,
    groups,
    hover,
    node_lines,
    rank_axis,
    require_columns,
)


def plot_device_usage(table: pd.DataFrame, *, boundaries: pd.DataFrame | None = None, by: str = "config_backend",
                      title: str = "Device usage against ranks") -> go.Figure:
    """One panel per sampled metric (GPU utilisation %, memory MiB, power W, CPU
    utilisation %) against ranks, one line per configuration and unit
    (:func:`analysis.metrics.utilization.usage_by_ranks`)."""
    metrics = [(m, t) for m, t in (("util_gpu_pct_mean", "GPU utilisation (%)"),
                                   ("mem_used_mib_mean", "GPU memory used (MiB)"),
                                   ("power_w_mean", "GPU power (W)"),
                                   ("cpu_util_pct_mean", "CPU utilisation (%)"),
                                   ("rss_mib_mean", "resident memory (MiB)"))
               if m in table.columns and table[m].notna().any()]
    require_columns(table, ["n_ranks", "unit"], "plot_device_usage")
    if not metrics:
        raise ScalescopeError("plot_device_usage: the table has no sampled metric columns (*_mean)")
    ncols = 1 if len(metrics) == 1 else 2
    nrows = -(-len(metrics) // ncols)
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=[t.split(" (")[0] for _, t in metrics],
                        horizontal_spacing=0.15, vertical_spacing=0.5 / nrows if nrows > 1 else 0.1)
    cell = {m: (k // ncols + 1, k % ncols + 1) for k, (m, _) in enumerate(metrics)}
    unit_names = {"gpu": "per GPU", "rank": "per process", "host": "per node"}
    i = 0
    for key, g in groups(table, by):
        for unit, gu in g.groupby("unit", sort=True):
            name = f"{key} {unit_names.get(unit, unit)}" if key is not None else unit_names.get(unit, unit)
            colour = PALETTE[i % len(PALETTE)]
            i += 1
            gu = gu.sort_values("n_ranks")
            shown = False
            for m, t in metrics:
                if gu[m].notna().any():
                    what, _, unit_ = t.partition(" (")
                    fig.add_trace(go.Scatter(x=gu["n_ranks"].tolist(), y=gu[m].tolist(), mode="lines+markers",
                                             name=name, legendgroup=name, showlegend=not shown,
                                             line={"color": colour},
                                             hovertemplate=hover(what, ".3g", unit_.rstrip(")"))),
                                  row=cell[m][0], col=cell[m][1])
                    shown = True
    for m, t in metrics:
        fig.update_yaxes(title_text=t, row=cell[m][0], col=cell[m][1],
                         rangemode="tozero")
    for r in range(1, nrows + 1):
        node_lines(fig, boundaries, cols=[c for c in range(1, ncols + 1) if (r, c) in cell.values()], row=r)
    rank_axis(fig, table["n_ranks"])
    fig.update_layout(title=title)
    return apply_theme(fig, height=120 + 300 * nrows)


#: Above this many runs, per-run bars lie down (run names on the y axis, readable at any width).
MAX_UPRIGHT_RUNS = 6


def _run_bars(fig: go.Figure, table: pd.DataFrame, value: pd.Series, *, what: str, unit: str,
              extra: str = "", customdata: pd.Series | None = None) -> bool:
    """Grouped bars of ``value`` per run, one trace per rank; horizontal when there are more
    than :data:`MAX_UPRIGHT_RUNS` runs. Returns whether they are horizontal."""
    runs = list(dict.fromkeys(table["run_id"].astype(str)))
    flat = len(runs) > MAX_UPRIGHT_RUNS
    for rank, g in table.assign(_v=value).groupby("rank", sort=True):
        names, vals = g["run_id"].astype(str).tolist(), g["_v"].tolist()
        tip = ("<b>%{y}</b>" if flat else "<b>%{x}</b>") + f", rank {rank}<br>{what}: " \
            + ("%{x:.3g}" if flat else "%{y:.3g}") + f" {unit}{extra}<extra></extra>"
        kw = {"customdata": customdata.loc[g.index].tolist()} if customdata is not None else {}
        fig.add_trace(go.Bar(name=f"rank {rank}", x=vals if flat else names, y=names if flat else vals,
                             orientation="h" if flat else "v", hovertemplate=tip, **kw))
    fig.update_layout(barmode="group")
    cat = {"type": "category", "categoryorder": "array", "categoryarray": runs[::-1] if flat else runs}
    if flat:
        fig.update_yaxes(title_text=None, showgrid=False, **cat)
    else:
        fig.update_xaxes(title_text="run", tickangle=-30 if len(runs) > 2 else 0, **cat)
    return flat


def _run_bar_figure(table: pd.DataFrame, values: pd.Series, *, what: str, unit: str, title: str,
                    **bars) -> go.Figure:
    """A figure of :func:`_run_bars` (one bar per rank, grouped by run) with its value axis
    from 0 and a height that grows with the bars when they lie flat."""
    fig = go.Figure()
    flat = _run_bars(fig, table, values, what=what, unit=unit, **bars)
    axis = fig.update_xaxes if flat else fig.update_yaxes
    axis(title_text=f"{what} ({unit})", rangemode="tozero", showgrid=True, gridcolor="#E5E5E5")
    fig.update_layout(title=title)
    n = table["run_id"].nunique() * max(1, table["rank"].nunique())
    return apply_theme(fig, height=160 + 16 * n if flat else 480)


def plot_memory(table: pd.DataFrame, *, title: str = "Peak memory per rank") -> go.Figure:
    """Peak memory (MiB) of every rank, grouped by run
    (:func:`analysis.metrics.memory.peak_memory`)."""
    require_columns(table, ["run_id", "rank", "peak_mem_mib"], "plot_memory")
    kind = ""
    if "peak_mem_kind" in table.columns and table["peak_mem_kind"].nunique() == 1:
        kind = {"cuda": "GPU ", "rss": "resident "}.get(str(table["peak_mem_kind"].iloc[0]), "")
    return _run_bar_figure(table, table["peak_mem_mib"], what=f"peak {kind}memory", unit="MiB", title=title)


def plot_stragglers(summary: pd.DataFrame, *, title: str = "Waiting for the slowest rank") -> go.Figure:
    """Mean wait per step (ms) of each rank, one bar group per run, with how often the rank
    was the last (:func:`analysis.metrics.stragglers.straggler_summary`)."""
    require_columns(summary, ["run_id", "rank", "wait_mean_s", "last_frac"], "plot_stragglers")
    return _run_bar_figure(summary, summary["wait_mean_s"] * 1e3, what="mean wait per step", unit="ms",
                           title=title, extra="<br>last in %{customdata:.0f} % of steps",
                           customdata=summary["last_frac"] * 100)


def plot_negotiation(table: pd.DataFrame, *, title: str = "Horovod negotiation: last rank ready") -> go.Figure:
    """How late the last rank reported ready (ms) in each negotiation, coloured by which
    rank was last (:func:`analysis.metrics.stragglers.negotiation_stragglers`)."""
    require_columns(table, ["tensor", "last_rank", "lag_s", "first_ready_ns"], "plot_negotiation")
    fig = go.Figure()
    t0 = table["first_ready_ns"].min() if len(table) else 0
    for rank, g in table.groupby("last_rank", sort=True):
        fig.add_trace(go.Scatter(x=((g["first_ready_ns"] - t0) / 1e9).tolist(), y=(g["lag_s"] * 1e3).tolist(),
                                 mode="markers", name=f"rank {rank} last", text=g["tensor"].astype(str).tolist(),
                                 hovertemplate="<b>%{text}</b><br>%{x:.3f} s since the first negotiation<br>"
                                               "last ready %{y:.2f} ms after the first<extra>%{fullData.name}"
                                               "</extra>"))
    fig.update_layout(title=title)
    fig.update_xaxes(title_text="time since the first negotiation (s)")
    fig.update_yaxes(title_text="last minus first ready (ms)", rangemode="tozero")
    return apply_theme(fig)


def plot_gpu_lines(timeline: pd.DataFrame, *, title: str = "Each GPU of the run over time") -> go.Figure:
    """Utilisation (%), memory used (MiB) and power (W) against time, one line per GPU
    (:func:`analysis.metrics.utilization.gpu_timeline`)."""
    require_columns(timeline, ["gpu", "t_s"], "plot_gpu_lines")
    panels = [(m, t) for m, t in (("util_gpu_pct", "GPU utilisation (%)"), ("mem_used_mib", "memory used (MiB)"),
                                  ("power_w", "power (W)")) if m in timeline.columns and timeline[m].notna().any()]
    if not panels:
        raise ScalescopeError("plot_gpu_lines: the timeline has no GPU metric (util_gpu_pct, mem_used_mib, power_w)")
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.06)
    for i, (gpu, g) in enumerate(timeline.groupby("gpu", sort=True)):
        colour = PALETTE[i % len(PALETTE)]
        for row, (m, t) in enumerate(panels, start=1):
            what, _, unit = t.partition(" (")
            fig.add_trace(go.Scatter(x=g["t_s"].tolist(), y=g[m].tolist(), mode="lines", name=f"GPU {gpu}",
                                     legendgroup=str(gpu), showlegend=row == 1, line={"color": colour},
                                     hovertemplate=hover(what, ".3g", unit.rstrip(")"), x="%{x:.1f} s")),
                          row=row, col=1)
    for row, (_, t) in enumerate(panels, start=1):
        fig.update_yaxes(title_text=t, row=row, col=1, rangemode="tozero")
    fig.update_xaxes(title_text="time since the first sample (s)", row=len(panels), col=1)
    fig.update_layout(title=title)
    return apply_theme(fig, height=260 * len(panels) + 150)


def plot_gpu_memory_phases(table: pd.DataFrame, *,
                           title: str = "GPU memory before and during training") -> go.Figure:
    """Memory used (MiB) of each GPU before training and at its peak during training
    (:func:`analysis.metrics.utilization.gpu_memory_phases`)."""
    require_columns(table, ["run_id", "host", "device", "mem_before_mib", "mem_during_mib"], "plot_gpu_memory_phases")
    t = table.sort_values(["run_id", "host", "device"])
    labels = [f"{r.run_id} · {r.host}:{int(r.device)}" + (f" (rank {int(r.rank)})" if "rank" in t.columns
                                                           and pd.notna(r.rank) else "") for r in t.itertuples()]
    fig = go.Figure()
    fig.add_trace(go.Bar(name="before training", x=labels, y=t["mem_before_mib"].tolist(), marker_color=PALETTE[5],
                         hovertemplate=hover("memory used before training", ".4g", "MiB", x="%{x}")))
    fig.add_trace(go.Bar(name="peak during training", x=labels, y=t["mem_during_mib"].tolist(),
                         marker_color=PALETTE[0], hovertemplate=hover("peak memory used", ".4g", "MiB", x="%{x}")))
    fig.update_layout(barmode="group", title=title)
    fig.update_xaxes(title_text="run · GPU", type="category", tickangle=-30)
    fig.update_yaxes(title_text="GPU memory used (MiB)", rangemode="tozero")
    return apply_theme(fig)
