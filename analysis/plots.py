"""Figure builders: each takes the frame a metric returned and gives back a
``plotly.graph_objects.Figure`` (never shown here), styled by :func:`apply_theme`.

Builders only draw: they never compute a metric they could receive. Units are in every
axis title; shares are drawn in percent.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.errors import ScalescopeError

#: Okabe-Ito colour-blind-safe palette (prints well in grey too).
PALETTE: tuple[str, ...] = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
                            "#000000")
#: Colours of the step components, fixed so that every breakdown figure agrees.
COMPONENT_COLOURS: dict[str, str] = {
    "data": "#56B4E9",
    "forward": "#0072B2",
    "backward": "#009E73",
    "sync_exposed": "#D55E00",
    "optimizer": "#E69F00",
    "other": "#BBBBBB",
    "compute": "#009E73",
    "comm": "#D55E00",
    "memory": "#E69F00",
    "idle": "#BBBBBB",
}
COMPONENT_LABELS: dict[str, str] = {
    "data": "data loading",
    "forward": "forward",
    "backward": "backward",
    "sync_exposed": "gradient sync (exposed)",
    "optimizer": "optimizer",
    "other": "other / idle",
    "compute": "computation",
    "comm": "communication",
    "memory": "memory",
    "idle": "idle",
}
RANKS_TITLE = "ranks (processes)"
#: Timeline-only colours (steps as a light band behind the phases' row).
TIMELINE_COLOURS: dict[str, str] = {"step": "#DDDDDD", "allreduce": "#CC79A7"}


def apply_theme(fig: go.Figure, *, width: int = 800, height: int = 520) -> go.Figure:
    """Print-friendly style: white background, black axes with outside ticks, light grid,
    a serif-free 13 pt font, the Okabe-Ito palette, legend above the plot. Returns ``fig``
    (changed in place, so it can be chained)."""
    fig.update_layout(
        template="simple_white",
        width=width,
        height=height,
        font={"family": "Helvetica, Arial, sans-serif", "size": 13, "color": "#000000"},
        title={"font": {"size": 15}, "x": 0.0, "xanchor": "left"},
        colorway=list(PALETTE),
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "xanchor": "left", "x": 0.0,
                "bgcolor": "rgba(255,255,255,0)"},
        margin={"l": 80, "r": 20, "t": 70, "b": 150},
        bargap=0.25,
    )
    fig.update_xaxes(showline=True, linecolor="#000000", ticks="outside", mirror=False, showgrid=False,
                     zeroline=False)
    fig.update_yaxes(showline=True, linecolor="#000000", ticks="outside", showgrid=True, gridcolor="#E5E5E5",
                     zeroline=False)
    return fig


def _need(df: pd.DataFrame, cols: Sequence[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ScalescopeError(f"{what} needs column(s) {missing}; the table has {list(df.columns)}")


def _groups(df: pd.DataFrame, by: str | Sequence[str] | None):
    """(label, rows) per group; ``by`` may name several columns (label ``"a · b"``)."""
    cols = [by] if isinstance(by, str) else list(by or ())
    cols = [c for c in cols if c in df.columns]
    if not cols:
        yield None, df
        return
    if len(cols) == 1:
        yield from df.groupby(cols[0], sort=True, dropna=False)
        return
    for key, g in df.groupby(cols, sort=True, dropna=False):
        yield " · ".join("–" if pd.isna(k) else str(k) for k in key), g


def _group_label(row: pd.Series, by: str | Sequence[str] | None) -> str | None:
    cols = [by] if isinstance(by, str) else list(by or ())
    cols = [c for c in cols if c in row.index]
    return " · ".join("–" if pd.isna(row[c]) else str(row[c]) for c in cols) if cols else None


def _bar_labels(df: pd.DataFrame, x: str, by: str | None) -> list[str]:
    many = by is not None and by in df.columns and df[by].nunique(dropna=False) > 1
    labels = []
    for _, r in df.iterrows():
        lab = f"{r[x]}"
        if "n_nodes" in df.columns and pd.notna(r["n_nodes"]) and r["n_nodes"] > 1:
            lab += f" ({int(r['n_nodes'])} nodes)"
        labels.append(f"{r[by]} · {lab}" if many else lab)
    return labels


def _vlines(fig: go.Figure, boundaries: pd.DataFrame | None, *, cols: Sequence[int] = (1,), row: int = 1) -> None:
    if boundaries is None or boundaries.empty:
        return
    for _, b in boundaries.iterrows():
        for c in cols:
            fig.add_vline(x=float(b["x"]), line_dash="dash", line_color="#666666", line_width=1, row=row, col=c)
        group = f"{b['group']}: " if "group" in b.index and pd.notna(b["group"]) else ""
        fig.add_annotation(x=float(b["x"]), y=0.0, yref="paper", xref="x", showarrow=False, yanchor="bottom",
                           xanchor="left", text=f" {group}{int(b['n_nodes_after'])} nodes →",
                           font={"size": 11, "color": "#666666"})


#: Colours and words of the scaling-gap causes (:mod:`analysis.metrics.gap`).
CAUSE_COLOURS: dict[str, str] = {
    "framework": "#CC79A7",
    "sync": "#D55E00",
    "straggler": "#E69F00",
    "data": "#56B4E9",
    "contention": "#F0E442",
    "compute": "#009E73",
    "other": "#BBBBBB",
}
CAUSE_LABELS: dict[str, str] = {
    "framework": "framework overhead (1 rank)",
    "sync": "exposed sync",
    "straggler": "waiting for the slowest rank",
    "data": "data loading",
    "contention": "CPU contention",
    "compute": "compute",
    "other": "other / idle",
}


def _config_label(row: object, by: Sequence[str]) -> str:
    parts = []
    for c in by:
        v = getattr(row, c, None)
        if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
            continue
        parts.append(f"bs {v}" if c == "batch_size" else (f"inject {v}" if c == "inject" else str(v)))
    return ", ".join(parts)


def plot_scaling_loss(loss: pd.DataFrame, *, by: Sequence[str] = ("config_backend", "batch_size", "inject"),
                      title: str = "Why not ideal? Step time from the ideal to the measured") -> go.Figure:
    """One waterfall per configuration and rank count above one: the ideal step time, each
    cause of the gap (ms per step, one colour per cause, negative causes hang down), the
    measured step time (:func:`analysis.metrics.gap.scaling_loss`; causes sum to the gap)."""
    from analysis.metrics.gap import CAUSES

    _need(loss, ["n_ranks", "ideal_step_s", "measured_step_s", *CAUSES], "plot_scaling_loss")
    by = [c for c in by if c in loss.columns]
    rows = loss[loss["n_ranks"] > 1]
    if rows.empty:
        raise ScalescopeError("plot_scaling_loss needs a configuration at more than one rank")
    groups = [f"{_config_label(r, by)}, {int(r.n_ranks)} ranks" for r in rows.itertuples(index=False)]
    fig = go.Figure()

    def total(name: str, col: str, colour: str) -> None:
        fig.add_trace(go.Bar(name=name, x=[groups, [name] * len(groups)], y=(rows[col] * 1e3).tolist(),
                             marker_color=colour, text=[f"{v:.2f}" for v in rows[col] * 1e3],
                             textposition="outside"))

    total("ideal", "ideal_step_s", "#0072B2")
    running = rows["ideal_step_s"].to_numpy(float) * 1e3
    for c in CAUSES:
        key = c[:-2]
        v = rows[c].to_numpy(float) * 1e3
        fig.add_trace(go.Bar(name=CAUSE_LABELS[key], x=[groups, [CAUSE_LABELS[key]] * len(groups)], y=v.tolist(),
                             base=running.tolist(), marker_color=CAUSE_COLOURS[key],
                             text=[f"{x:+.2f}" for x in v], textposition="outside"))
        running = running + v
    total("measured", "measured_step_s", "#333333")
    fig.update_layout(title=title, barmode="overlay", bargap=0.15)
    fig.update_xaxes(title_text="configuration: ideal → causes of the gap → measured", tickangle=-40)
    fig.update_yaxes(title_text="time per step (ms)", rangemode="tozero")
    fig = apply_theme(fig, width=min(1200, max(800, 200 * len(rows) + 300)), height=640)
    fig.update_traces(textfont_size=10)
    fig.update_layout(margin={"b": 200}, showlegend=False)  # the axis names every bar
    return fig


def plot_lost_speedup(loss: pd.DataFrame, *, by: Sequence[str] = ("config_backend", "batch_size", "inject"),
                      title: str = "Where the lost speedup goes") -> go.Figure:
    """Stacked bars per configuration and rank count: the efficiency reached and the share
    of the ideal lost to each cause (percent of the measured step; they add up to 100 %)
    (:func:`analysis.metrics.gap.scaling_loss`)."""
    from analysis.metrics.gap import CAUSES

    _need(loss, ["n_ranks", "measured_step_s", "efficiency", *CAUSES], "plot_lost_speedup")
    by = [c for c in by if c in loss.columns]
    t = loss.sort_values([*by, "n_ranks"])
    x = [f"{_config_label(r, by)} · {int(r.n_ranks)}" for r in t.itertuples(index=False)]
    fig = go.Figure()
    fig.add_trace(go.Bar(name="efficiency reached", x=x, y=(100 * t["efficiency"]).tolist(),
                         marker_color="#0072B2"))
    for c in CAUSES:
        key = c[:-2]
        fig.add_trace(go.Bar(name=CAUSE_LABELS[key], x=x, y=(100 * t[c] / t["measured_step_s"]).tolist(),
                             marker_color=CAUSE_COLOURS[key]))
    fig.update_layout(barmode="relative", title=title)
    fig.update_xaxes(title_text="configuration · ranks", type="category", tickangle=-30)
    fig.update_yaxes(title_text="share of the measured step (%)")
    fig = apply_theme(fig, width=max(800, 90 * len(x) + 300), height=620)
    fig.update_layout(margin={"b": 220}, legend={"y": -0.5})
    return fig


def plot_breakdown(table: pd.DataFrame, *, x: str = "n_ranks", by: str | None = "config_backend",
                   title: str = "Where a training step's time goes") -> go.Figure:
    """Stacked bars of step-time shares (%) against the rank count.

    Parameters
    ----------
    table
        :func:`analysis.metrics.breakdown.breakdown_by_ranks` (or any table with ``x`` and
        the ``*_frac`` share columns); one bar per row.
    """
    comps = ["data", "forward", "backward", "sync_exposed", "optimizer", "other"]
    _need(table, [x, *[f"{c}_frac" for c in comps]], "plot_breakdown")
    t = table.sort_values([c for c in (by, x) if c and c in table.columns])
    labels = _bar_labels(t, x, by)
    fig = go.Figure()
    for c in comps:
        fig.add_trace(go.Bar(name=COMPONENT_LABELS[c], x=labels, y=(t[f"{c}_frac"] * 100).tolist(),
                             marker_color=COMPONENT_COLOURS[c],
                             hovertemplate="%{x}: %{y:.1f} %<extra>" + COMPONENT_LABELS[c] + "</extra>"))
    fig.update_layout(barmode="stack", title=title)
    many = by is not None and by in t.columns and t[by].nunique(dropna=False) > 1  # as _bar_labels
    fig.update_xaxes(title_text=f"configuration · {RANKS_TITLE}" if many else RANKS_TITLE, type="category")
    fig.update_yaxes(title_text="share of step time (%)", range=[0, 100])
    apply_theme(fig)
    if many:  # slanted category labels need the room the legend had
        fig.update_layout(legend={"y": -0.42}, margin={"b": 200}, height=580)
    return fig


def plot_gpu_breakdown(table: pd.DataFrame, *, title: str = "GPU time per rank (HTA temporal breakdown)") -> go.Figure:
    """Stacked bars of computation, communication, memory and idle shares (%) per rank
    (:func:`analysis.metrics.breakdown.gpu_time_breakdown`)."""
    comps = ["compute", "comm", "memory", "idle"]
    _need(table, ["run_id", "rank", *[f"{c}_frac" for c in comps]], "plot_gpu_breakdown")
    t = table.sort_values(["run_id", "rank"])
    many = t["run_id"].nunique() > 1
    labels = [f"{r.run_id} · rank {r.rank}" if many else f"rank {r.rank}" for r in t.itertuples()]
    fig = go.Figure()
    for c in comps:
        fig.add_trace(go.Bar(name=COMPONENT_LABELS[c], x=labels, y=(t[f"{c}_frac"] * 100).tolist(),
                             marker_color=COMPONENT_COLOURS[c]))
    fig.update_layout(barmode="stack", title=title)
    fig.update_xaxes(title_text="rank", type="category")
    fig.update_yaxes(title_text="share of GPU time span (%)", range=[0, 100])
    return apply_theme(fig)


def plot_allreduce_activity(table: pd.DataFrame, *, title: str = "Horovod allreduce activity") -> go.Figure:
    """Bars per run of negotiation, fusion-buffer copies, collective and wait time (ms),
    plus the part of the total hidden under backward
    (:func:`analysis.metrics.breakdown.horovod_allreduce`)."""
    parts = [("negotiate_s", "negotiation"), ("memcpy_s", "fusion-buffer copies"), ("collective_s", "collective"),
             ("wait_s", "waiting"), ("overlap_backward_s", "overlapped with backward"), ("exposed_s", "exposed")]
    _need(table, ["run_id", *[p for p, _ in parts]], "plot_allreduce_activity")
    fig = go.Figure()
    for col, name in parts:
        fig.add_trace(go.Bar(name=name, x=table["run_id"].astype(str).tolist(), y=(table[col] * 1e3).tolist()))
    fig.update_layout(barmode="group", title=title)
    fig.update_xaxes(title_text="run")
    fig.update_yaxes(title_text="time over the run (ms)")
    return apply_theme(fig)


def plot_scaling(
    table: pd.DataFrame,
    *,
    fit: pd.DataFrame | None = None,
    boundaries: pd.DataFrame | None = None,
    by: str | Sequence[str] = "config_backend",
    title: str = "Speedup and efficiency",
) -> go.Figure:
    """Speedup (left) and efficiency (right, %) against ranks, with the ideal line, the
    spread over repeats as error bars, an optional fitted line and node boundaries.

    Parameters
    ----------
    table
        :func:`analysis.metrics.scaling.scaling_table`.
    fit
        :func:`analysis.metrics.scaling.fit_speedup` with the ``by`` columns (one line each).
    boundaries
        :func:`analysis.metrics.scaling.node_boundaries` (with a ``group`` column, e.g. the
        partition, when each group has its own).
    by
        Column(s) that make one line each, e.g. ``("partition", "config_backend")``.
    """
    _need(table, ["n_ranks", "speedup", "efficiency_frac", "baseline_n_ranks"], "plot_scaling")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("speedup", "efficiency"), horizontal_spacing=0.12)
    n_all = np.sort(table["n_ranks"].dropna().unique().astype(float))
    for i, (key, g) in enumerate(_groups(table, by)):
        g = g.sort_values("n_ranks")
        colour = PALETTE[i % len(PALETTE)]
        name = str(key) if key is not None else "measured"
        err = {}
        if {"speedup_min", "speedup_max"} <= set(g.columns):
            err = {"error_y": {"type": "data", "symmetric": False,
                               "array": (g["speedup_max"] - g["speedup"]).tolist(),
                               "arrayminus": (g["speedup"] - g["speedup_min"]).tolist()}}
        fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=g["speedup"].tolist(), mode="lines+markers", name=name,
                                 legendgroup=name, line={"color": colour}, **err), row=1, col=1)
        fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=(g["efficiency_frac"] * 100).tolist(),
                                 mode="lines+markers", name=name, legendgroup=name, showlegend=False,
                                 line={"color": colour}), row=1, col=2)
    n0 = float(table["baseline_n_ranks"].iloc[0]) if len(table) else 1.0
    if len(n_all):
        fig.add_trace(go.Scatter(x=n_all.tolist(), y=(n_all / n0).tolist(), mode="lines", name="ideal",
                                 line={"color": "#000000", "dash": "dot"}), row=1, col=1)
        fig.add_trace(go.Scatter(x=n_all.tolist(), y=[100.0] * len(n_all), mode="lines", name="ideal",
                                 showlegend=False, line={"color": "#000000", "dash": "dot"}), row=1, col=2)
    if fit is not None and len(fit) and len(n_all):
        for _, f in fit.iterrows():
            if not np.isfinite(f["slope_per_rank"]):
                continue
            group = _group_label(f, by)
            label = f"fit {group}" if group else "fit"
            ci = ""
            if np.isfinite(f.get("slope_ci_low", np.nan)):
                ci = f" [{f['slope_ci_low']:.2f}, {f['slope_ci_high']:.2f}]"
            xs = np.array([n_all.min(), n_all.max()])
            fig.add_trace(go.Scatter(x=xs.tolist(), y=(f["intercept"] + f["slope_per_rank"] * xs).tolist(),
                                     mode="lines", line={"dash": "dash", "color": "#666666"},
                                     name=f"{label}: {f['slope_per_rank']:.2f} per rank{ci}"), row=1, col=1)
    _vlines(fig, boundaries, cols=(1, 2))
    fig.update_layout(title=title)
    fig.update_xaxes(title_text=RANKS_TITLE)
    fig.update_yaxes(title_text="speedup (×, relative to the baseline)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="efficiency (%)", row=1, col=2, rangemode="tozero")
    return apply_theme(fig, width=1000)


def plot_sync(table: pd.DataFrame, *, by: str = "config_backend",
              title: str = "Gradient synchronisation against ranks") -> go.Figure:
    """Three panels: time per synchronisation (``sync_total``, ms, median with min-max
    bars; the mean ``sync_exposed`` dotted when the table has it), synchronisations per
    epoch, sync time per epoch (``sync_total``, ms)
    (:func:`analysis.metrics.sync.sync_scaling`; ``docs/metrics.md`` defines both)."""
    _need(table, ["n_ranks", "sync_median_s", "syncs_per_epoch", "sync_per_epoch_s"], "plot_sync")
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.1,
                        subplot_titles=("sync_total per synchronisation", "synchronisations per epoch",
                                        "sync_total per epoch"))
    for i, (key, g) in enumerate(_groups(table, by)):
        g = g.sort_values("n_ranks")
        name = str(key) if key is not None else "measured"
        colour = PALETTE[i % len(PALETTE)]
        err = {}
        if {"sync_min_s", "sync_max_s"} <= set(g.columns):
            err = {"error_y": {"type": "data", "symmetric": False,
                               "array": ((g["sync_max_s"] - g["sync_median_s"]) * 1e3).tolist(),
                               "arrayminus": ((g["sync_median_s"] - g["sync_min_s"]) * 1e3).tolist()}}
        x = g["n_ranks"].tolist()
        fig.add_trace(go.Scatter(x=x, y=(g["sync_median_s"] * 1e3).tolist(), mode="lines+markers", name=name,
                                 legendgroup=name, line={"color": colour}, **err), row=1, col=1)
        if "exposed_mean_s" in g:
            fig.add_trace(go.Scatter(x=x, y=(g["exposed_mean_s"] * 1e3).tolist(), mode="lines+markers",
                                     name=f"{name} (exposed)", legendgroup=name,
                                     line={"color": colour, "dash": "dot"}), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=g["syncs_per_epoch"].tolist(), mode="lines+markers", name=name,
                                 legendgroup=name, showlegend=False, line={"color": colour}), row=1, col=2)
        fig.add_trace(go.Scatter(x=x, y=(g["sync_per_epoch_s"] * 1e3).tolist(), mode="lines+markers", name=name,
                                 legendgroup=name, showlegend=False, line={"color": colour}), row=1, col=3)
    fig.update_layout(title=title)
    fig.update_xaxes(title_text=RANKS_TITLE)
    fig.update_yaxes(title_text="sync_total per sync (ms)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="syncs per epoch (count)", row=1, col=2, rangemode="tozero")
    fig.update_yaxes(title_text="sync_total per epoch (ms)", row=1, col=3, rangemode="tozero")
    return apply_theme(fig, width=1100)


def plot_overhead(table: pd.DataFrame, *, title: str = "Framework overhead at one rank") -> go.Figure:
    """Bars of the baseline's and each framework's one-rank epoch time (s), labelled with
    the overhead in % (:func:`analysis.metrics.overhead.framework_overhead`)."""
    _need(table, ["config_backend", "epoch_time_s", "baseline_epoch_time_s", "overhead_pct"], "plot_overhead")
    labels = table["config_backend"].astype(str).tolist()
    # the overhead is measured on the time per sample where the runs have it (docs/metrics.md)
    per_sample = "time_per_sample_s" in table and table["time_per_sample_s"].notna().all()
    col, scale, unit = ("time_per_sample_s", 1e6, "time per sample (µs)") if per_sample else \
        ("epoch_time_s", 1.0, "epoch time (s)")
    fig = go.Figure()
    fig.add_trace(go.Bar(name="baseline (no framework)", x=labels, y=(table[f"baseline_{col}"] * scale).tolist(),
                         marker_color="#BBBBBB"))
    fig.add_trace(go.Bar(name="framework, 1 rank", x=labels, y=(table[col] * scale).tolist(),
                         marker_color=PALETTE[0], text=[f"+{v:.1f} %" if v >= 0 else f"{v:.1f} %"
                                                        for v in table["overhead_pct"]],
                         textposition="outside"))
    fig.update_layout(barmode="group", title=title)
    fig.update_xaxes(title_text="configuration")
    fig.update_yaxes(title_text=unit, rangemode="tozero")
    return apply_theme(fig)


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
    _need(table, ["n_ranks", "unit"], "plot_device_usage")
    if not metrics:
        raise ScalescopeError("plot_device_usage: the table has no sampled metric columns (*_mean)")
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[t.split(" (")[0] for _, t in metrics],
                        horizontal_spacing=0.08)
    unit_names = {"gpu": "per GPU", "rank": "per process", "host": "per node"}
    i = 0
    for key, g in _groups(table, by):
        for unit, gu in g.groupby("unit", sort=True):
            name = f"{key} {unit_names.get(unit, unit)}" if key is not None else unit_names.get(unit, unit)
            colour = PALETTE[i % len(PALETTE)]
            i += 1
            gu = gu.sort_values("n_ranks")
            for c, (m, _) in enumerate(metrics, start=1):
                if gu[m].notna().any():
                    fig.add_trace(go.Scatter(x=gu["n_ranks"].tolist(), y=gu[m].tolist(), mode="lines+markers",
                                             name=name, legendgroup=name, showlegend=c == 1 or m == metrics[0][0],
                                             line={"color": colour}), row=1, col=c)
    for c, (_, t) in enumerate(metrics, start=1):
        fig.update_yaxes(title_text=t, row=1, col=c, rangemode="tozero")
    _vlines(fig, boundaries, cols=range(1, len(metrics) + 1))
    fig.update_xaxes(title_text=RANKS_TITLE)
    fig.update_layout(title=title)
    return apply_theme(fig, width=max(800, 330 * len(metrics)))


def plot_backends(table: pd.DataFrame, *, title: str = "Backend comparison") -> go.Figure:
    """Grouped bars per configuration (ranks, nodes): epoch time (s, left) and
    ``sync_total`` per step (ms, right), one colour per backend
    (:func:`analysis.metrics.backend.backend_comparison`)."""
    _need(table, ["n_ranks", "config_backend", "epoch_time_s", "sync_per_step_s"], "plot_backends")
    t = table.sort_values(["n_ranks", "config_backend"])
    t = t.assign(_label=[f"{int(r.n_ranks)} ranks" + (f", {int(r.n_nodes)} nodes" if "n_nodes" in t.columns
                                                      and pd.notna(r.n_nodes) and r.n_nodes > 1 else "")
                         + (f", bs {int(r.batch_size)}" if "batch_size" in t.columns and pd.notna(r.batch_size)
                            and t["batch_size"].nunique() > 1 else "")
                         for r in t.itertuples()])
    fig = make_subplots(rows=1, cols=2, subplot_titles=("epoch time", "sync_total per step"))
    for i, (key, g) in enumerate(t.groupby("config_backend", sort=True)):
        colour = PALETTE[i % len(PALETTE)]
        fig.add_trace(go.Bar(name=str(key), x=g["_label"].tolist(), y=g["epoch_time_s"].tolist(),
                             marker_color=colour, legendgroup=str(key)), row=1, col=1)
        fig.add_trace(go.Bar(name=str(key), x=g["_label"].tolist(), y=(g["sync_per_step_s"] * 1e3).tolist(),
                             marker_color=colour, legendgroup=str(key), showlegend=False), row=1, col=2)
    fig.update_layout(barmode="group", title=title)
    fig.update_xaxes(title_text="configuration", type="category")
    fig.update_yaxes(title_text="epoch time (s)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="sync_total per step (ms)", row=1, col=2, rangemode="tozero")
    return apply_theme(fig, width=1000)


def plot_batch_size(table: pd.DataFrame, *, by: str = "config_backend",
                    title: str = "Epoch time against batch size") -> go.Figure:
    """Epoch time (s) against the per-rank batch size, with min-max bars
    (:func:`analysis.metrics.batch.batch_size_epoch_time`)."""
    _need(table, ["batch_size", "epoch_time_s"], "plot_batch_size")
    fig = go.Figure()
    for key, g in _groups(table, by):
        g = g.sort_values("batch_size")
        err = {}
        if {"epoch_time_min_s", "epoch_time_max_s"} <= set(g.columns):
            err = {"error_y": {"type": "data", "symmetric": False,
                               "array": (g["epoch_time_max_s"] - g["epoch_time_s"]).tolist(),
                               "arrayminus": (g["epoch_time_s"] - g["epoch_time_min_s"]).tolist()}}
        fig.add_trace(go.Scatter(x=g["batch_size"].tolist(), y=g["epoch_time_s"].tolist(), mode="lines+markers",
                                 name=str(key) if key is not None else "measured", **err))
    fig.update_layout(title=title)
    fig.update_xaxes(title_text="batch size per rank (samples)", type="log")
    fig.update_yaxes(title_text="epoch time (s)", rangemode="tozero")
    return apply_theme(fig)


def plot_validation(curves: pd.DataFrame, *, x: str = "epoch", metric: str = "val_metric",
                    title: str | None = None) -> go.Figure:
    """Validation metric against epochs (``x="epoch"``) or wall time (``x="wall_s"``), one
    line per run labelled by its global batch size
    (:func:`analysis.metrics.batch.validation_curves`)."""
    _need(curves, ["run_id", x, metric], "plot_validation")
    if x not in ("epoch", "wall_s"):
        raise ScalescopeError("x must be 'epoch' or 'wall_s'")
    fig = go.Figure()
    for run_id, g in curves.groupby("run_id", sort=True):
        g = g.sort_values(x)
        label = str(run_id)
        if "global_batch_size" in g.columns and pd.notna(g["global_batch_size"].iloc[0]):
            label = f"batch {int(g['global_batch_size'].iloc[0])} · {run_id}"
        fig.add_trace(go.Scatter(x=g[x].tolist(), y=g[metric].tolist(), mode="lines+markers", name=label))
    ylab = {"val_metric": "validation metric", "val_loss": "validation loss", "train_loss": "training loss"}
    fig.update_layout(title=title or f"{ylab.get(metric, metric)} against {'epochs' if x == 'epoch' else 'time'}")
    fig.update_xaxes(title_text="epoch" if x == "epoch" else "training time (s)")
    fig.update_yaxes(title_text=ylab.get(metric, metric) + " (as logged)")
    return apply_theme(fig)


def plot_compute_update(table: pd.DataFrame, *, by: str = "config_backend",
                        title: str = "Compute against weight update per step") -> go.Figure:
    """Stacked bars per rank count: forward+backward, optimizer and exposed sync time per
    step (ms) (:func:`analysis.metrics.memory.compute_update_breakdown`)."""
    _need(table, ["n_ranks", "compute_per_step_s", "update_per_step_s", "sync_per_step_s"], "plot_compute_update")
    t = table.sort_values([c for c in (by, "n_ranks") if c in table.columns])
    labels = _bar_labels(t, "n_ranks", by)
    fig = go.Figure()
    for col, name, colour in (("compute_per_step_s", "forward + backward", COMPONENT_COLOURS["backward"]),
                              ("update_per_step_s", "optimizer (weight update)", COMPONENT_COLOURS["optimizer"]),
                              ("sync_per_step_s", "gradient sync (exposed)", COMPONENT_COLOURS["sync_exposed"])):
        fig.add_trace(go.Bar(name=name, x=labels, y=(t[col] * 1e3).tolist(), marker_color=colour))
    fig.update_layout(barmode="stack", title=title)
    fig.update_xaxes(title_text=RANKS_TITLE, type="category")
    fig.update_yaxes(title_text="time per step (ms)")
    return apply_theme(fig)


def plot_memory(table: pd.DataFrame, *, title: str = "Peak memory per rank") -> go.Figure:
    """Peak memory (MiB) of every rank, grouped by run
    (:func:`analysis.metrics.memory.peak_memory`)."""
    _need(table, ["run_id", "rank", "peak_mem_mib"], "plot_memory")
    fig = go.Figure()
    for rank, g in table.groupby("rank", sort=True):
        fig.add_trace(go.Bar(name=f"rank {rank}", x=g["run_id"].astype(str).tolist(), y=g["peak_mem_mib"].tolist()))
    kind = ""
    if "peak_mem_kind" in table.columns and table["peak_mem_kind"].nunique() == 1:
        kind = {"cuda": "GPU ", "rss": "resident "}.get(str(table["peak_mem_kind"].iloc[0]), "")
    fig.update_layout(barmode="group", title=title)
    fig.update_xaxes(title_text="run")
    fig.update_yaxes(title_text=f"peak {kind}memory (MiB)", rangemode="tozero")
    return apply_theme(fig)


def plot_model(measured: pd.DataFrame, predicted: pd.DataFrame, *, measured_speedup: pd.DataFrame | None = None,
               title: str = "Measured against the alpha-beta model") -> go.Figure:
    """Sync time per step (ms) measured (points) and predicted (line) against ranks; with
    ``measured_speedup`` a second panel compares speedups.

    Parameters
    ----------
    measured
        ``n_ranks`` and ``sync_s`` per measurement.
    predicted
        :func:`analysis.metrics.model.predict_scaling` (``n_ranks``, ``sync_pred_s``,
        ``speedup``).
    measured_speedup
        ``n_ranks`` and ``speedup`` (e.g. a scaling table).
    """
    _need(measured, ["n_ranks", "sync_s"], "plot_model")
    _need(predicted, ["n_ranks", "sync_pred_s"], "plot_model")
    two = measured_speedup is not None and "speedup" in predicted.columns
    fig = make_subplots(rows=1, cols=2 if two else 1,
                        subplot_titles=("sync time per step", "speedup") if two else None)
    p = predicted.sort_values("n_ranks")
    fig.add_trace(go.Scatter(x=measured["n_ranks"].tolist(), y=(measured["sync_s"] * 1e3).tolist(), mode="markers",
                             name="measured", marker={"color": PALETTE[0], "size": 9}), row=1, col=1)
    fig.add_trace(go.Scatter(x=p["n_ranks"].tolist(), y=(p["sync_pred_s"] * 1e3).tolist(), mode="lines",
                             name="model", line={"color": PALETTE[3]}), row=1, col=1)
    fig.update_yaxes(title_text="sync time per step (ms)", row=1, col=1, rangemode="tozero")
    if two:
        ms = measured_speedup.sort_values("n_ranks")
        fig.add_trace(go.Scatter(x=ms["n_ranks"].tolist(), y=ms["speedup"].tolist(), mode="markers",
                                 name="measured speedup", marker={"color": PALETTE[0], "symbol": "square",
                                                                  "size": 9}), row=1, col=2)
        fig.add_trace(go.Scatter(x=p["n_ranks"].tolist(), y=p["speedup"].tolist(), mode="lines",
                                 name="model speedup", line={"color": PALETTE[3], "dash": "dash"}), row=1, col=2)
        fig.update_yaxes(title_text="speedup (×)", row=1, col=2, rangemode="tozero")
    fig.update_xaxes(title_text=RANKS_TITLE)
    fig.update_layout(title=title)
    return apply_theme(fig, width=1000 if two else 800)


def plot_stragglers(summary: pd.DataFrame, *, title: str = "Waiting for the slowest rank") -> go.Figure:
    """Mean wait per step (ms) of each rank, one bar group per run, with how often the rank
    was the last (:func:`analysis.metrics.stragglers.straggler_summary`)."""
    _need(summary, ["run_id", "rank", "wait_mean_s", "last_frac"], "plot_stragglers")
    fig = go.Figure()
    for rank, g in summary.groupby("rank", sort=True):
        fig.add_trace(go.Bar(name=f"rank {rank}", x=g["run_id"].astype(str).tolist(),
                             y=(g["wait_mean_s"] * 1e3).tolist(),
                             customdata=(g["last_frac"] * 100).tolist(),
                             hovertemplate="wait %{y:.2f} ms, last in %{customdata:.0f} % of steps"))
    fig.update_layout(barmode="group", title=title)
    fig.update_xaxes(title_text="run")
    fig.update_yaxes(title_text="mean wait per step (ms)", rangemode="tozero")
    return apply_theme(fig)


def plot_negotiation(table: pd.DataFrame, *, title: str = "Horovod negotiation: last rank ready") -> go.Figure:
    """How late the last rank reported ready (ms) in each negotiation, coloured by which
    rank was last (:func:`analysis.metrics.stragglers.negotiation_stragglers`)."""
    _need(table, ["tensor", "last_rank", "lag_s", "first_ready_ns"], "plot_negotiation")
    fig = go.Figure()
    t0 = table["first_ready_ns"].min() if len(table) else 0
    for rank, g in table.groupby("last_rank", sort=True):
        fig.add_trace(go.Scatter(x=((g["first_ready_ns"] - t0) / 1e9).tolist(), y=(g["lag_s"] * 1e3).tolist(),
                                 mode="markers", name=f"rank {rank} last", text=g["tensor"].astype(str).tolist()))
    fig.update_layout(title=title)
    fig.update_xaxes(title_text="time since the first negotiation (s)")
    fig.update_yaxes(title_text="last minus first ready (ms)", rangemode="tozero")
    return apply_theme(fig)


def plot_timeline(events: pd.DataFrame, *, steps: Sequence[int] | None = None, max_steps: int = 3,
                  title: str = "Timeline of a few training steps") -> go.Figure:
    """Gantt-style view of a few steps of one run: one row per rank (phases) plus rows for
    communication records (DDP buckets, Horovod timeline activity), time relative to the
    first shown step's start.

    Parameters
    ----------
    events
        Events of **one** run (e.g. ``RunSet.filter(run_id=...).events``).
    steps
        The steps to show; default the first ``max_steps`` steps after the first one (the
        first step includes warm-up).
    """
    _need(events, ["run_id", "rank", "name", "kind", "cat", "start_ns", "dur_ns", "step"], "plot_timeline")
    if events["run_id"].nunique() > 1:
        raise ScalescopeError("plot_timeline shows one run; filter the events to a single run_id first")
    ph = events[(events["kind"] == "phase") & events["step"].notna() & (events["name"] != "epoch")]
    if ph.empty:
        raise ScalescopeError("no training-phase records with a step number to show")
    if steps is None:
        all_steps = sorted(ph["step"].dropna().unique())
        steps = all_steps[1:1 + max_steps] if len(all_steps) > max_steps else all_steps[:max_steps]
    chosen = set(steps)
    shown = ph[ph["step"].isin(chosen)]
    t0, t1 = int(shown["start_ns"].min()), int((shown["start_ns"] + shown["dur_ns"]).max())
    ev = events[(events["start_ns"] < t1) & (events["start_ns"] + events["dur_ns"] > t0)]
    rows = []
    for r in ev.itertuples(index=False):
        if r.kind == "phase" and (r.name == "epoch" or r.step not in chosen):
            continue  # only the chosen steps' phases; comm records by time
        if r.kind == "phase":
            lane = f"rank {r.rank}" if r.name != "step" else f"rank {r.rank} step"
        elif r.kind == "comm" and r.cat == "ddp_hook":
            lane = f"rank {r.rank} allreduce"
        elif getattr(r, "source", None) == "horovod" and r.cat in ("op", "activity") and r.kind != "marker":
            lane = f"horovod {r.cat}"
        else:
            continue
        rows.append((lane, str(r.name), (r.start_ns - t0) / 1e6, r.dur_ns / 1e6))
    df = pd.DataFrame(rows, columns=["lane", "name", "start_ms", "dur_ms"])
    fig = go.Figure()
    for i, (name, g) in enumerate(df.groupby("name", sort=False)):
        fig.add_trace(go.Bar(y=g["lane"], x=g["dur_ms"], base=g["start_ms"], orientation="h", name=name,
                             marker_color=TIMELINE_COLOURS.get(name) or COMPONENT_COLOURS.get(
                                 "sync_exposed" if name == "sync" else name, PALETTE[i % len(PALETTE)]),
                             hovertemplate=f"{name}<br>start %{{base:.3f}} ms<br>%{{x:.3f}} ms<extra></extra>"))
    lanes = sorted(df["lane"].unique(), key=lambda s: (not s.startswith("rank"), s))
    fig.update_layout(title=title, barmode="overlay", xaxis_title="time since the first shown step (ms)",
                      yaxis_title="track", yaxis={"categoryorder": "array", "categoryarray": lanes[::-1]})
    return apply_theme(fig)


# ---------------------------------------------------------------- issue 13: partitions, sizes, batch and LR

def plot_speedup_slopes(fit: pd.DataFrame, *, by: str | Sequence[str] = "partition",
                        title: str = "Speedup per added rank") -> go.Figure:
    """The fitted speedup per added rank of each group (bars) with its confidence interval
    (:func:`analysis.metrics.scaling.fit_speedup`), e.g. one bar per partition as in the
    reference study's 0.45 / 0.28 / 0.38 table."""
    _need(fit, ["slope_per_rank", "slope_ci_low", "slope_ci_high"], "plot_speedup_slopes")
    labels = [_group_label(r, by) or "all" for _, r in fit.iterrows()]
    fig = go.Figure(go.Bar(
        x=labels, y=fit["slope_per_rank"].tolist(), marker_color=PALETTE[0], name="slope",
        error_y={"type": "data", "symmetric": False,
                 "array": (fit["slope_ci_high"] - fit["slope_per_rank"]).fillna(0).tolist(),
                 "arrayminus": (fit["slope_per_rank"] - fit["slope_ci_low"]).fillna(0).tolist()}))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#000000", annotation_text="ideal (1 per rank)")
    level = f"{fit['confidence'].iloc[0]:.0%} " if "confidence" in fit.columns and len(fit) else ""
    fig.update_layout(title=title)
    fig.update_xaxes(title_text=" · ".join([by] if isinstance(by, str) else list(by)), type="category")
    fig.update_yaxes(title_text=f"speedup per added rank (×/rank, {level}interval)", rangemode="tozero")
    return apply_theme(fig)


def plot_strong_weak(table: pd.DataFrame, *, by: str | Sequence[str] = "config_backend",
                     title: str = "Strong and weak scaling") -> go.Figure:
    """Epoch time (left) against ranks with each mode's own ideal (dotted: T(n0)·n0/n for
    strong, T(n0) for weak) and efficiency (right, %)
    (:func:`analysis.metrics.sizes.strong_weak_table`)."""
    _need(table, ["scaling", "n_ranks", "epoch_time_s_median", "ideal_epoch_time_s", "efficiency_frac"],
          "plot_strong_weak")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("epoch time", "efficiency"), horizontal_spacing=0.12)
    cols = ["scaling", *([by] if isinstance(by, str) else list(by))]
    for i, (key, g) in enumerate(_groups(table, cols)):
        g = g.sort_values("n_ranks")
        colour = PALETTE[i % len(PALETTE)]
        name = str(key)
        fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=g["epoch_time_s_median"].tolist(), mode="lines+markers",
                                 name=name, legendgroup=name, line={"color": colour}), row=1, col=1)
        fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=g["ideal_epoch_time_s"].tolist(), mode="lines",
                                 name=f"ideal {name}", legendgroup=name, line={"color": colour, "dash": "dot"}),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=(g["efficiency_frac"] * 100).tolist(),
                                 mode="lines+markers", name=name, legendgroup=name, showlegend=False,
                                 line={"color": colour}), row=1, col=2)
    fig.add_hline(y=100.0, line_dash="dot", line_color="#000000", row=1, col=2)
    fig.update_layout(title=title)
    fig.update_xaxes(title_text=RANKS_TITLE)
    fig.update_yaxes(title_text="epoch time (s, median over repeats)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="efficiency (%, each mode against its ideal)", row=1, col=2, rangemode="tozero")
    return apply_theme(fig, width=1000)


def plot_input_size(table: pd.DataFrame, *, by: str | Sequence[str] = ("config_backend", "n_ranks"),
                    limit: pd.DataFrame | None = None, size_label: str = "input size",
                    title: str = "Throughput against input size") -> go.Figure:
    """Throughput (samples/s) against the input size on a log x axis; sizes whose runs ran
    out of memory are marked with a cross on the axis, and the memory limit
    (:func:`analysis.metrics.sizes.memory_limit`) as a dashed line
    (:func:`analysis.metrics.sizes.input_size_table`)."""
    _need(table, ["size", "throughput_samples_per_s", "n_oom"], "plot_input_size")
    fig = go.Figure()
    for i, (key, g) in enumerate(_groups(table, by)):
        g = g.sort_values("size")
        colour = PALETTE[i % len(PALETTE)]
        name = str(key) if key is not None else "measured"
        ok = g[g["throughput_samples_per_s"].notna()]
        fig.add_trace(go.Scatter(x=ok["size"].tolist(), y=ok["throughput_samples_per_s"].tolist(),
                                 mode="lines+markers", name=name, line={"color": colour}))
        oom = g[g["n_oom"] > 0]
        if len(oom):
            fig.add_trace(go.Scatter(x=oom["size"].tolist(), y=[0.0] * len(oom), mode="markers",
                                     name=f"out of memory ({name})",
                                     marker={"symbol": "x", "size": 12, "color": colour}))
    if limit is not None:
        for _, r in limit.iterrows():
            if np.isfinite(r.get("largest_ok", np.nan)):
                top = float(np.nanmax(table["throughput_samples_per_s"])) if table["n_ok"].sum() else 1.0
                fig.add_trace(go.Scatter(x=[float(r["largest_ok"])] * 2, y=[0.0, top], mode="lines",
                                         line={"dash": "dash", "color": "#666666"},
                                         name=f"largest that fits: {r['largest_ok']:g}"))
    fig.update_layout(title=title)
    fig.update_xaxes(title_text=size_label, type="log")
    fig.update_yaxes(title_text="throughput (samples/s)", rangemode="tozero")
    return apply_theme(fig)


def plot_batch_speedup(table: pd.DataFrame, *, by: str = "config_backend",
                       title: str = "Speedup over the reference batch at one rank") -> go.Figure:
    """Epoch-time speedup against the per-rank batch size (log x), 1 at the reference
    batch (:func:`analysis.metrics.batch.batch_speedup`)."""
    _need(table, ["batch_size", "speedup"], "plot_batch_speedup")
    fig = go.Figure()
    for key, g in _groups(table, by):
        g = g.sort_values("batch_size")
        fig.add_trace(go.Scatter(x=g["batch_size"].tolist(), y=g["speedup"].tolist(), mode="lines+markers",
                                 name=str(key) if key is not None else "measured"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#000000")
    fig.update_layout(title=title)
    fig.update_xaxes(title_text="batch size per rank (samples)", type="log")
    fig.update_yaxes(title_text="speedup (×, epoch time at the reference batch / epoch time)", rangemode="tozero")
    return apply_theme(fig)


def plot_equal_batch(table: pd.DataFrame, *, title: str = "The same global batch on 1 and on N ranks") -> go.Figure:
    """Epoch time (s, left) and final validation loss (right, log) of each way to reach a
    global batch (:func:`analysis.metrics.batch.equal_batch_comparison`)."""
    _need(table, ["global_batch_size", "n_ranks", "batch_size", "epoch_time_s", "final_val_loss"],
          "plot_equal_batch")
    t = table.sort_values(["global_batch_size", "n_ranks"])
    lr = t["lr_scaling"].astype(str) if "lr_scaling" in t.columns else pd.Series("", index=t.index)
    t = t.assign(_x=[f"{int(r.n_ranks)} × {int(r.batch_size)}" for r in t.itertuples()], _lr=lr)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("epoch time", "final validation loss"))
    for i, (rule, g) in enumerate(t.groupby("_lr", sort=True)):
        name = f"lr {rule}" if rule else "runs"
        colour = PALETTE[i % len(PALETTE)]
        fig.add_trace(go.Bar(name=name, x=g["_x"].tolist(), y=g["epoch_time_s"].tolist(), marker_color=colour,
                             legendgroup=name), row=1, col=1)
        fig.add_trace(go.Bar(name=name, x=g["_x"].tolist(), y=g["final_val_loss"].tolist(), marker_color=colour,
                             legendgroup=name, showlegend=False), row=1, col=2)
    fig.update_layout(barmode="group", title=title)
    fig.update_xaxes(title_text="ranks × batch per rank", type="category")
    fig.update_yaxes(title_text="epoch time (s)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="validation MSE (log)", row=1, col=2, type="log")
    return apply_theme(fig, width=1000)


def plot_lr_curves(table: pd.DataFrame, *, x: str = "epoch", metric: str = "val_loss",
                   by: Sequence[str] = ("lr_scaling", "n_ranks", "batch_size"), budget_s: float | None = None,
                   title: str | None = None) -> go.Figure:
    """Validation loss (MSE, log axis) against epochs (``x="epoch"``) or training time
    (``x="wall_s"``), one line per learning-rate rule and configuration with the min-max
    band over repeats (:func:`analysis.metrics.batch.lr_rule_curves`); ``budget_s`` draws a
    fixed time budget."""
    med, lo, hi = f"{metric}_median", f"{metric}_min", f"{metric}_max"
    _need(table, ["epoch", "wall_s_median", med, lo, hi], "plot_lr_curves")
    if x not in ("epoch", "wall_s"):
        raise ScalescopeError("x must be 'epoch' or 'wall_s'")
    xcol = "epoch" if x == "epoch" else "wall_s_median"
    fig = go.Figure()
    for i, (key, g) in enumerate(_groups(table, by)):
        g = g.sort_values("epoch")
        colour = PALETTE[i % len(PALETTE)]
        name = str(key) if key is not None else metric
        xs = g[xcol].tolist()
        fig.add_trace(go.Scatter(x=xs + xs[::-1], y=g[hi].tolist() + g[lo].tolist()[::-1], fill="toself",
                                 fillcolor=colour, opacity=0.15, line={"width": 0}, hoverinfo="skip",
                                 showlegend=False, legendgroup=name))
        fig.add_trace(go.Scatter(x=xs, y=g[med].tolist(), mode="lines+markers", name=name, legendgroup=name,
                                 line={"color": colour}))
    if budget_s is not None and x == "wall_s":
        fig.add_vline(x=budget_s, line_dash="dash", line_color="#666666", annotation_text="time budget")
    label = {"val_loss": "validation MSE", "train_loss": "training MSE"}.get(metric, metric)
    fig.update_layout(title=title or f"{label} against {'epochs' if x == 'epoch' else 'training time'} "
                                     "(median over repeats, band: min-max)")
    fig.update_xaxes(title_text="epoch" if x == "epoch" else "training time (s, median over repeats)")
    fig.update_yaxes(title_text=f"{label} (log)", type="log")
    return apply_theme(fig)


def plot_gpu_lines(timeline: pd.DataFrame, *, title: str = "Each GPU of the run over time") -> go.Figure:
    """Utilisation (%), memory used (MiB) and power (W) against time, one line per GPU
    (:func:`analysis.metrics.utilization.gpu_timeline`)."""
    _need(timeline, ["gpu", "t_s"], "plot_gpu_lines")
    panels = [(m, t) for m, t in (("util_gpu_pct", "GPU utilisation (%)"), ("mem_used_mib", "memory used (MiB)"),
                                  ("power_w", "power (W)")) if m in timeline.columns and timeline[m].notna().any()]
    if not panels:
        raise ScalescopeError("plot_gpu_lines: the timeline has no GPU metric (util_gpu_pct, mem_used_mib, power_w)")
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.06)
    for i, (gpu, g) in enumerate(timeline.groupby("gpu", sort=True)):
        colour = PALETTE[i % len(PALETTE)]
        for row, (m, _) in enumerate(panels, start=1):
            fig.add_trace(go.Scatter(x=g["t_s"].tolist(), y=g[m].tolist(), mode="lines", name=f"GPU {gpu}",
                                     legendgroup=str(gpu), showlegend=row == 1, line={"color": colour}),
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
    _need(table, ["run_id", "host", "device", "mem_before_mib", "mem_during_mib"], "plot_gpu_memory_phases")
    t = table.sort_values(["run_id", "host", "device"])
    labels = [f"{r.run_id} · {r.host}:{int(r.device)}" + (f" (rank {int(r.rank)})" if "rank" in t.columns
                                                           and pd.notna(r.rank) else "") for r in t.itertuples()]
    fig = go.Figure()
    fig.add_trace(go.Bar(name="before training", x=labels, y=t["mem_before_mib"].tolist(), marker_color=PALETTE[5]))
    fig.add_trace(go.Bar(name="peak during training", x=labels, y=t["mem_during_mib"].tolist(),
                         marker_color=PALETTE[0]))
    fig.update_layout(barmode="group", title=title)
    fig.update_xaxes(title_text="run · GPU", type="category")
    fig.update_yaxes(title_text="GPU memory used (MiB)", rangemode="tozero")
    return apply_theme(fig)
