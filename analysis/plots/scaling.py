"""Figures of scaling against ranks: speedup and efficiency, sync cost, framework overhead,
backends, the alpha-beta model, fitted slopes, strong against weak scaling."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.plots._theme import (
    PALETTE,
    apply_theme,
    group_label,
    groups,
    hover,
    node_lines,
    rank_axis,
    require_columns,
    spread_bars,
    time_axis,
)


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
    require_columns(table, ["n_ranks", "speedup", "efficiency_frac", "baseline_n_ranks"], "plot_scaling")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("speedup against the baseline", "efficiency"),
                        horizontal_spacing=0.16)
    n_all = np.sort(table["n_ranks"].dropna().unique().astype(float))
    for i, (key, g) in enumerate(groups(table, by)):
        g = g.sort_values("n_ranks")
        colour = PALETTE[i % len(PALETTE)]
        name = str(key) if key is not None else "measured"
        err = spread_bars(g, "speedup", "speedup_min", "speedup_max")
        fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=g["speedup"].tolist(), mode="lines+markers", name=name,
                                 legendgroup=name, line={"color": colour}, hovertemplate=hover("speedup", ".2f", "×"),
                                 **err), row=1, col=1)
        fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=(g["efficiency_frac"] * 100).tolist(),
                                 mode="lines+markers", name=name, legendgroup=name, showlegend=False,
                                 line={"color": colour}, hovertemplate=hover("efficiency", ".1f", "%")), row=1, col=2)
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
            group = group_label(f, by)
            by_cols = [by] if isinstance(by, str) else list(by or ())
            if "batch_size" in f.index and "batch_size" not in by_cols and pd.notna(f["batch_size"]):
                group = f"{group} · bs {int(f['batch_size'])}" if group else f"bs {int(f['batch_size'])}"
            label = f"fit {group}" if group else "fit"
            ci = ""
            if np.isfinite(f.get("slope_ci_low", np.nan)):
                ci = f" [{f['slope_ci_low']:.2f}, {f['slope_ci_high']:.2f}]"
            xs = np.array([n_all.min(), n_all.max()])
            fig.add_trace(go.Scatter(x=xs.tolist(), y=(f["intercept"] + f["slope_per_rank"] * xs).tolist(),
                                     mode="lines", line={"dash": "dash", "color": "#666666"},
                                     name=f"{label}: {f['slope_per_rank']:.2f} per rank{ci}"), row=1, col=1)
    node_lines(fig, boundaries, cols=(1, 2))
    fig.update_layout(title=title)
    rank_axis(fig, table["n_ranks"])
    fig.update_yaxes(title_text="speedup (×)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="efficiency (%)", row=1, col=2, rangemode="tozero")
    return apply_theme(fig)


def plot_sync(table: pd.DataFrame, *, by: str = "config_backend",
              title: str = "Gradient synchronisation against ranks") -> go.Figure:
    """Three panels: time per synchronisation (``sync_total``, ms, median with min-max
    bars; the mean ``sync_exposed`` dotted when the table has it), synchronisations per
    epoch, sync time per epoch (``sync_total``, ms)
    (:func:`analysis.metrics.sync.sync_scaling`; ``docs/metrics.md`` defines both)."""
    require_columns(table, ["n_ranks", "sync_median_s", "syncs_per_epoch", "sync_per_epoch_s"], "plot_sync")
    fig = make_subplots(rows=3, cols=1, vertical_spacing=0.1, shared_xaxes=True,
                        subplot_titles=("sync_total per synchronisation", "synchronisations per epoch",
                                        "sync_total per epoch"))
    for i, (key, g) in enumerate(groups(table, by)):
        g = g.sort_values("n_ranks")
        name = str(key) if key is not None else "measured"
        colour = PALETTE[i % len(PALETTE)]
        err = spread_bars(g, "sync_median_s", "sync_min_s", "sync_max_s", k=1e3)
        x = g["n_ranks"].tolist()
        fig.add_trace(go.Scatter(x=x, y=(g["sync_median_s"] * 1e3).tolist(), mode="lines+markers", name=name,
                                 legendgroup=name, line={"color": colour},
                                 hovertemplate=hover("sync_total per sync (median)", ".2f", "ms"), **err), row=1, col=1)
        if "exposed_mean_s" in g:
            fig.add_trace(go.Scatter(x=x, y=(g["exposed_mean_s"] * 1e3).tolist(), mode="lines+markers",
                                     name=f"{name} (exposed)", legendgroup=name,
                                     hovertemplate=hover("sync_exposed per sync (mean)", ".2f", "ms"),
                                     line={"color": colour, "dash": "dot"}), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=g["syncs_per_epoch"].tolist(), mode="lines+markers", name=name,
                                 legendgroup=name, showlegend=False, line={"color": colour},
                                 hovertemplate=hover("syncs per epoch", ".0f")), row=2, col=1)
        fig.add_trace(go.Scatter(x=x, y=(g["sync_per_epoch_s"] * 1e3).tolist(), mode="lines+markers", name=name,
                                 legendgroup=name, showlegend=False, line={"color": colour},
                                 hovertemplate=hover("sync_total per epoch", ".1f", "ms")), row=3, col=1)
    fig.update_layout(title=title)
    rank_axis(fig, table["n_ranks"], title=None)
    rank_axis(fig, table["n_ranks"], row=3, col=1)
    fig.update_yaxes(title_text="sync_total per sync (ms)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="syncs per epoch (count)", row=2, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="sync_total per epoch (ms)", row=3, col=1, rangemode="tozero")
    return apply_theme(fig, height=760)


def plot_overhead(table: pd.DataFrame, *, title: str = "Framework overhead at one rank") -> go.Figure:
    """Bars of the baseline's and each framework's one-rank time per sample (µs; epoch time
    where the table has no time per sample), one pair per configuration (framework and batch
    size: never stacked or pooled), labelled with the overhead in %
    (:func:`analysis.metrics.overhead.framework_overhead`: the overhead is measured on the
    time per sample, ``docs/metrics.md``)."""
    require_columns(table, ["config_backend", "epoch_time_s", "baseline_epoch_time_s", "overhead_pct"], "plot_overhead")
    t = table.sort_values([c for c in ("config_backend", "batch_size") if c in table.columns])
    many_bs = "batch_size" in t.columns and t["batch_size"].nunique() > 1
    labels = [f"{r.config_backend}, bs {r.batch_size}" if many_bs else str(r.config_backend)
              for r in t.itertuples(index=False)]
    per_sample = all(c in t.columns and t[c].notna().all()
                     for c in ("time_per_sample_s", "baseline_time_per_sample_s"))
    col, what = ("time_per_sample_s", "time per sample") if per_sample else ("epoch_time_s", "epoch time")
    unit, k = ("µs", 1e6) if per_sample else time_axis(pd.concat([t["epoch_time_s"], t["baseline_epoch_time_s"]]))
    base, own = (t[f"baseline_{col}"] * k).tolist(), (t[col] * k).tolist()
    fig = go.Figure()
    fig.add_trace(go.Bar(name="baseline (no framework)", x=labels, y=base, marker_color="#BBBBBB",
                         hovertemplate=f"<b>%{{x}}</b><br>baseline {what}: %{{y:.3g}} {unit}<extra></extra>"))
    fig.add_trace(go.Bar(name="framework, 1 rank", x=labels, y=own, marker_color=PALETTE[0],
                         text=[f"+{v:.1f} %" if v >= 0 else f"{v:.1f} %" for v in t["overhead_pct"]],
                         textposition="outside", cliponaxis=False, textfont={"size": 12},
                         customdata=t["overhead_pct"].tolist(),
                         hovertemplate=f"<b>%{{x}}</b><br>{what}: %{{y:.3g}} {unit}<br>overhead: "
                                       "%{customdata:+.1f} %<extra></extra>"))
    top = max([*base, *own, 0.0])
    fig.update_layout(barmode="group", title=title)
    fig.update_xaxes(title_text="configuration", type="category", tickangle=-30 if many_bs else 0)
    fig.update_yaxes(title_text=f"{what} ({unit})", range=[0, top * 1.15 if top > 0 else 1])
    return apply_theme(fig)


def plot_backends(table: pd.DataFrame, *, title: str = "Backend comparison") -> go.Figure:
    """Grouped bars per configuration (ranks, nodes): epoch time (s, left) and
    ``sync_total`` per step (ms, right), one colour per backend
    (:func:`analysis.metrics.backend.backend_comparison`)."""
    require_columns(table, ["n_ranks", "config_backend", "epoch_time_s", "sync_per_step_s"], "plot_backends")
    t = table.sort_values(["n_ranks", "config_backend"])
    t = t.assign(_label=[f"{int(r.n_ranks)} ranks" + (f", {int(r.n_nodes)} nodes" if "n_nodes" in t.columns
                                                      and pd.notna(r.n_nodes) and r.n_nodes > 1 else "")
                         + (f", bs {int(r.batch_size)}" if "batch_size" in t.columns and pd.notna(r.batch_size)
                            and t["batch_size"].nunique() > 1 else "")
                         for r in t.itertuples()])
    unit, k = time_axis(t["epoch_time_s"])
    fig = make_subplots(rows=1, cols=2, subplot_titles=("epoch time", "sync_total per step"),
                        horizontal_spacing=0.15)
    for i, (key, g) in enumerate(t.groupby("config_backend", sort=True)):
        colour = PALETTE[i % len(PALETTE)]
        fig.add_trace(go.Bar(name=str(key), x=g["_label"].tolist(), y=(g["epoch_time_s"] * k).tolist(),
                             marker_color=colour, legendgroup=str(key),
                             hovertemplate=hover("epoch time", ".3g", unit, x="%{x}")), row=1, col=1)
        fig.add_trace(go.Bar(name=str(key), x=g["_label"].tolist(), y=(g["sync_per_step_s"] * 1e3).tolist(),
                             marker_color=colour, legendgroup=str(key), showlegend=False,
                             hovertemplate=hover("sync_total per step", ".3g", "ms", x="%{x}")), row=1, col=2)
    fig.update_layout(barmode="group", title=title)
    fig.update_xaxes(title_text="configuration", type="category")
    fig.update_yaxes(title_text=f"epoch time ({unit})", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="sync_total per step (ms)", row=1, col=2, rangemode="tozero")
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
    require_columns(measured, ["n_ranks", "sync_s"], "plot_model")
    require_columns(predicted, ["n_ranks", "sync_pred_s"], "plot_model")
    two = measured_speedup is not None and "speedup" in predicted.columns
    fig = make_subplots(rows=1, cols=2 if two else 1,
                        subplot_titles=("sync time per step", "speedup") if two else None)
    p = predicted.sort_values("n_ranks")
    fig.add_trace(go.Scatter(x=measured["n_ranks"].tolist(), y=(measured["sync_s"] * 1e3).tolist(), mode="markers",
                             name="measured", marker={"color": PALETTE[0], "size": 9},
                             hovertemplate=hover("sync time per step", ".3g", "ms")), row=1, col=1)
    fig.add_trace(go.Scatter(x=p["n_ranks"].tolist(), y=(p["sync_pred_s"] * 1e3).tolist(), mode="lines",
                             name="model", line={"color": PALETTE[3]},
                             hovertemplate=hover("predicted sync per step", ".3g", "ms")), row=1, col=1)
    fig.update_yaxes(title_text="sync time per step (ms)", row=1, col=1, rangemode="tozero")
    if two:
        ms = measured_speedup.sort_values("n_ranks")
        fig.add_trace(go.Scatter(x=ms["n_ranks"].tolist(), y=ms["speedup"].tolist(), mode="markers",
                                 name="measured speedup", marker={"color": PALETTE[0], "symbol": "square",
                                                                  "size": 9},
                                 hovertemplate=hover("speedup", ".2f", "×")), row=1, col=2)
        fig.add_trace(go.Scatter(x=p["n_ranks"].tolist(), y=p["speedup"].tolist(), mode="lines",
                                 name="model speedup", line={"color": PALETTE[3], "dash": "dash"},
                                 hovertemplate=hover("predicted speedup", ".2f", "×")), row=1, col=2)
        fig.update_yaxes(title_text="speedup (×)", row=1, col=2, rangemode="tozero")
    ranks = pd.concat([measured["n_ranks"], p["n_ranks"]])
    rank_axis(fig, ranks)
    fig.update_layout(title=title)
    return apply_theme(fig)


def plot_speedup_slopes(fit: pd.DataFrame, *, by: str | Sequence[str] = "partition",
                        title: str = "Speedup per added rank") -> go.Figure:
    """The fitted speedup per added rank of each group (bars) with its confidence interval
    (:func:`analysis.metrics.scaling.fit_speedup`), e.g. one bar per partition as in the
    reference study's 0.45 / 0.28 / 0.38 table."""
    require_columns(fit, ["slope_per_rank", "slope_ci_low", "slope_ci_high"], "plot_speedup_slopes")
    labels = [group_label(r, by) or "all" for _, r in fit.iterrows()]
    fig = go.Figure(go.Bar(
        x=labels, y=fit["slope_per_rank"].tolist(), marker_color=PALETTE[0], name="slope",
        hovertemplate="<b>%{x}</b><br>speedup per added rank: %{y:.2f} ×/rank<extra></extra>",
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
    require_columns(table, ["scaling", "n_ranks", "epoch_time_s_median", "ideal_epoch_time_s", "efficiency_frac"],
          "plot_strong_weak")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("epoch time", "efficiency"), horizontal_spacing=0.12)
    cols = ["scaling", *([by] if isinstance(by, str) else list(by))]
    unit, k = time_axis(table["epoch_time_s_median"])
    for i, (key, g) in enumerate(groups(table, cols)):
        g = g.sort_values("n_ranks")
        colour = PALETTE[i % len(PALETTE)]
        name = str(key)
        fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=(g["epoch_time_s_median"] * k).tolist(),
                                 mode="lines+markers", name=name, legendgroup=name, line={"color": colour},
                                 hovertemplate=hover("epoch time (median)", ".3g", unit)), row=1, col=1)
        fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=(g["ideal_epoch_time_s"] * k).tolist(), mode="lines",
                                 name=f"ideal {name}", legendgroup=name, line={"color": colour, "dash": "dot"},
                                 hovertemplate=hover("ideal epoch time", ".3g", unit)), row=1, col=1)
        fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=(g["efficiency_frac"] * 100).tolist(),
                                 mode="lines+markers", name=name, legendgroup=name, showlegend=False,
                                 line={"color": colour}, hovertemplate=hover("efficiency", ".1f", "%")), row=1, col=2)
    fig.add_hline(y=100.0, line_dash="dot", line_color="#000000", row=1, col=2)
    fig.update_layout(title=title)
    rank_axis(fig, table["n_ranks"])
    fig.update_yaxes(title_text=f"epoch time ({unit}, median)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="efficiency (%, against its ideal)", row=1, col=2, rangemode="tozero")
    return apply_theme(fig)
