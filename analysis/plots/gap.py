"""Figures of the scaling-gap study ("Why not ideal?", :mod:`analysis.metrics.gap`)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from analysis.errors import ScalescopeError
from analysis.plots._theme import (
    CAUSE_COLOURS,
    CAUSE_LABELS,
    _config_label,
    _need,
    apply_theme,
)


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
