"""Figures of batch size, learning rate, validation curves and input size."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.errors import ScalescopeError
from analysis.plots._theme import (
    PALETTE,
    apply_theme,
    groups,
    hover,
    require_columns,
    spread_bars,
    time_axis,
)


def plot_batch_size(table: pd.DataFrame, *, by: str = "config_backend",
                    title: str = "Epoch time against batch size") -> go.Figure:
    """Epoch time (s) against the per-rank batch size, with min-max bars
    (:func:`analysis.metrics.batch.batch_size_epoch_time`)."""
    require_columns(table, ["batch_size", "epoch_time_s"], "plot_batch_size")
    fig = go.Figure()
    unit, k = time_axis(table["epoch_time_s"])
    for key, g in groups(table, by, x="batch_size"):
        g = g.sort_values("batch_size")
        err = spread_bars(g, "epoch_time_s", "epoch_time_min_s", "epoch_time_max_s", k=k)
        fig.add_trace(go.Scatter(x=g["batch_size"].tolist(), y=(g["epoch_time_s"] * k).tolist(),
                                 mode="lines+markers", name=str(key) if key is not None else "measured",
                                 hovertemplate=hover("epoch time", ".3g", unit, x="batch %{x}"), **err))
    fig.update_layout(title=title)
    fig.update_xaxes(title_text="batch size per rank (samples)", type="log")
    fig.update_yaxes(title_text=f"epoch time ({unit})", rangemode="tozero")
    return apply_theme(fig)


def plot_validation(curves: pd.DataFrame, *, x: str = "epoch", metric: str = "val_metric",
                    title: str | None = None) -> go.Figure:
    """Validation metric against epochs (``x="epoch"``) or wall time (``x="wall_s"``), one
    line per run labelled by its global batch size
    (:func:`analysis.metrics.batch.validation_curves`)."""
    require_columns(curves, ["run_id", x, metric], "plot_validation")
    if x not in ("epoch", "wall_s"):
        raise ScalescopeError("x must be 'epoch' or 'wall_s'")
    fig = go.Figure()
    for run_id, g in curves.groupby("run_id", sort=True):
        g = g.sort_values(x)
        label = str(run_id)
        if "global_batch_size" in g.columns and pd.notna(g["global_batch_size"].iloc[0]):
            label = f"batch {int(g['global_batch_size'].iloc[0])} · {run_id}"
        fig.add_trace(go.Scatter(x=g[x].tolist(), y=g[metric].tolist(), mode="lines+markers", name=label,
                                 hovertemplate=hover(metric.replace("_", " "), ".4g",
                                                     x="epoch %{x}" if x == "epoch" else "%{x:.1f} s")))
    ylab = {"val_metric": "validation metric (val_metric)", "val_loss": "validation loss", "train_loss": "training loss"}
    fig.update_layout(title=title or f"{ylab.get(metric, metric)} against {'epochs' if x == 'epoch' else 'time'}")
    fig.update_xaxes(title_text="epoch" if x == "epoch" else "training time (s)")
    fig.update_yaxes(title_text=ylab.get(metric, metric) + " (as logged)")
    return apply_theme(fig)


def plot_input_size(table: pd.DataFrame, *, by: str | Sequence[str] = ("config_backend", "n_ranks"),
                    limit: pd.DataFrame | None = None, size_label: str = "input size",
                    title: str = "Throughput against input size") -> go.Figure:
    """Throughput (samples/s) against the input size on a log x axis; sizes whose runs ran
    out of memory are marked with a cross on the axis, and the memory limit
    (:func:`analysis.metrics.sizes.memory_limit`) as a dashed line
    (:func:`analysis.metrics.sizes.input_size_table`)."""
    require_columns(table, ["size", "throughput_samples_per_s", "n_oom"], "plot_input_size")
    fig = go.Figure()
    for i, (key, g) in enumerate(groups(table, by)):
        g = g.sort_values("size")
        colour = PALETTE[i % len(PALETTE)]
        name = str(key) if key is not None else "measured"
        ok = g[g["throughput_samples_per_s"].notna()]
        fig.add_trace(go.Scatter(x=ok["size"].tolist(), y=ok["throughput_samples_per_s"].tolist(),
                                 hovertemplate=hover("throughput", ".4g", "samples/s", x=f"{size_label} %{{x}}"),
                                 mode="lines+markers", name=name, line={"color": colour}))
        oom = g[g["n_oom"] > 0]
        if len(oom):
            fig.add_trace(go.Scatter(x=oom["size"].tolist(), y=[0.0] * len(oom), mode="markers",
                                     name=f"out of memory ({name})",
                                     marker={"symbol": "x", "size": 12, "color": colour}))
    if limit is not None:
        for _, r in limit.iterrows():
            # a limit only where a larger size ran out of memory (else it is just the largest tried)
            if np.isfinite(r.get("largest_ok", np.nan)) and np.isfinite(r.get("smallest_oom", np.nan)):
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
    require_columns(table, ["batch_size", "speedup"], "plot_batch_speedup")
    fig = go.Figure()
    for key, g in groups(table, by, x="batch_size"):
        g = g.sort_values("batch_size")
        fig.add_trace(go.Scatter(x=g["batch_size"].tolist(), y=g["speedup"].tolist(), mode="lines+markers",
                                 name=str(key) if key is not None else "measured",
                                 hovertemplate=hover("speedup", ".2f", "×", x="batch %{x}")))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#000000")
    fig.update_layout(title=title)
    fig.update_xaxes(title_text="batch size per rank (samples)", type="log")
    fig.update_yaxes(title_text="speedup (×, time per sample at the reference batch / at this batch)", rangemode="tozero")
    return apply_theme(fig)


def plot_equal_batch(table: pd.DataFrame, *, title: str = "The same global batch on 1 and on N ranks") -> go.Figure:
    """Epoch time (s, left) and final validation loss (right, log) of each way to reach a
    global batch (:func:`analysis.metrics.batch.equal_batch_comparison`)."""
    require_columns(table, ["global_batch_size", "n_ranks", "batch_size", "epoch_time_s", "final_val_loss"],
          "plot_equal_batch")
    t = table.sort_values(["global_batch_size", "n_ranks"])
    lr = t["lr_scaling"].astype(str) if "lr_scaling" in t.columns else pd.Series("", index=t.index)
    t = t.assign(_x=[f"{int(r.n_ranks)} × {int(r.batch_size)}" for r in t.itertuples()], _lr=lr)
    unit, k = time_axis(t["epoch_time_s"])
    fig = make_subplots(rows=1, cols=2, subplot_titles=("epoch time", "final validation loss"),
                        horizontal_spacing=0.15)
    for i, (rule, g) in enumerate(t.groupby("_lr", sort=True)):
        name = f"lr {rule}" if rule else "runs"
        colour = PALETTE[i % len(PALETTE)]
        fig.add_trace(go.Bar(name=name, x=g["_x"].tolist(), y=(g["epoch_time_s"] * k).tolist(), marker_color=colour,
                             legendgroup=name, hovertemplate=hover("epoch time", ".3g", unit, x="%{x} (ranks × batch)")),
                      row=1, col=1)
        fig.add_trace(go.Bar(name=name, x=g["_x"].tolist(), y=g["final_val_loss"].tolist(), marker_color=colour,
                             legendgroup=name, showlegend=False,
                             hovertemplate=hover("final validation MSE", ".4g", x="%{x} (ranks × batch)")),
                      row=1, col=2)
    fig.update_layout(barmode="group", title=title)
    fig.update_xaxes(title_text="ranks × batch per rank", type="category")
    fig.update_yaxes(title_text=f"epoch time ({unit})", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="validation MSE (log)", row=1, col=2, type="log", dtick="D2", tickformat=".1g")
    return apply_theme(fig)


def plot_lr_curves(table: pd.DataFrame, *, x: str = "epoch", metric: str = "val_loss",
                   by: Sequence[str] = ("lr_scaling", "n_ranks", "batch_size"), budget_s: float | None = None,
                   title: str | None = None) -> go.Figure:
    """Validation loss (MSE, log axis) against epochs (``x="epoch"``) or training time
    (``x="wall_s"``), one line per learning-rate rule and configuration with the min-max
    band over repeats (:func:`analysis.metrics.batch.lr_rule_curves`); ``budget_s`` draws a
    fixed time budget."""
    med, lo, hi = f"{metric}_median", f"{metric}_min", f"{metric}_max"
    require_columns(table, ["epoch", "wall_s_median", med, lo, hi], "plot_lr_curves")
    if x not in ("epoch", "wall_s"):
        raise ScalescopeError("x must be 'epoch' or 'wall_s'")
    xcol = "epoch" if x == "epoch" else "wall_s_median"
    fig = go.Figure()
    for i, (key, g) in enumerate(groups(table, by)):
        g = g.sort_values("epoch")
        colour = PALETTE[i % len(PALETTE)]
        dash = ("solid", "dash", "dot")[i // len(PALETTE) % 3]  # more lines than colours
        name = str(key) if key is not None else metric
        xs = g[xcol].tolist()
        fig.add_trace(go.Scatter(x=xs + xs[::-1], y=g[hi].tolist() + g[lo].tolist()[::-1], fill="toself",
                                 fillcolor=colour, opacity=0.15, line={"width": 0}, hoverinfo="skip",
                                 showlegend=False, legendgroup=name))
        fig.add_trace(go.Scatter(x=xs, y=g[med].tolist(), mode="lines+markers", name=name, legendgroup=name,
                                 hovertemplate=hover(f"{metric.replace('_', ' ')} (median)", ".4g",
                                                     x="epoch %{x}" if x == "epoch" else "%{x:.1f} s"),
                                 line={"color": colour, "dash": dash}))
    if budget_s is not None and x == "wall_s":
        fig.add_vline(x=budget_s, line_dash="dash", line_color="#666666", annotation_text="time budget")
    label = {"val_loss": "validation MSE", "train_loss": "training MSE"}.get(metric, metric)
    fig.update_layout(title=title or f"{label} against {'epochs' if x == 'epoch' else 'training time'} "
                                     "(band: min-max of repeats)")
    fig.update_xaxes(title_text="epoch" if x == "epoch" else "training time (s, median over repeats)")
    fig.update_yaxes(title_text=f"{label} (log)", type="log", dtick="D2", tickformat=".1g")
    return apply_theme(fig)
