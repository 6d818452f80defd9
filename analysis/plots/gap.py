"""Figures of the scaling-gap study ("Why not ideal?", :mod:`analysis.metrics.gap`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.errors import ScalescopeError
from analysis.plots._theme import (
    CAUSE_COLOURS,
    CAUSE_LABELS,
    apply_theme,
    config_label,
    require_columns,
)

#: Short names of the waterfall's bars (the axis of each small panel).
_SHORT = {"framework": "framework", "sync": "sync", "straggler": "straggler", "data": "data",
          "contention": "contention", "compute": "compute", "other": "other"}


def plot_scaling_loss(loss: pd.DataFrame, *, by: Sequence[str] = ("config_backend", "batch_size", "inject"),
                      title: str = "Why not ideal? Step time from the ideal to the measured") -> go.Figure:
    """One small waterfall per configuration and rank count above one (two panels a row): the
    ideal step time, each cause of the gap (ms per step, one colour per cause, negative causes
    hang down), the measured step time (:func:`analysis.metrics.gap.scaling_loss`; causes sum
    to the gap). Every bar is labelled with its value; hovering names the cause and the unit."""
    from analysis.metrics.gap import CAUSES

    require_columns(loss, ["n_ranks", "ideal_step_s", "measured_step_s", *CAUSES], "plot_scaling_loss")
    by = [c for c in by if c in loss.columns]
    rows = loss[loss["n_ranks"] > 1].sort_values([*by, "n_ranks"])
    if rows.empty:
        raise ScalescopeError("plot_scaling_loss needs a configuration at more than one rank")
    n = len(rows)
    ncols = 1 if n == 1 else 2
    nrows = math.ceil(n / ncols)
    names = [f"{config_label(r, by)}, {int(r.n_ranks)} ranks" for r in rows.itertuples(index=False)]
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=names, horizontal_spacing=0.12,
                        vertical_spacing=130 / (320 * nrows) if nrows > 1 else 0.1)
    cats = ["ideal", *(_SHORT[c[:-2]] for c in CAUSES), "measured"]
    for k, (r, name) in enumerate(zip(rows.itertuples(index=False), names, strict=True)):
        row, col = k // ncols + 1, k % ncols + 1
        ideal, measured = float(r.ideal_step_s) * 1e3, float(r.measured_step_s) * 1e3
        bases, values, colours, words = [0.0], [ideal], ["#0072B2"], ["ideal (the baseline's step)"]
        running = ideal
        for c in CAUSES:
            v = float(getattr(r, c)) * 1e3
            bases.append(running)
            values.append(v)
            colours.append(CAUSE_COLOURS[c[:-2]])
            words.append(CAUSE_LABELS[c[:-2]])
            running += v
        bases.append(0.0)
        values.append(measured)
        colours.append("#333333")
        words.append("measured step")
        text = [f"{ideal:.1f}", *(_signed(v) for v in values[1:-1]), f"{measured:.1f}"]
        fig.add_trace(go.Bar(x=cats, y=values, base=bases, marker_color=colours, text=text,
                             textposition="outside", cliponaxis=False, name=name, showlegend=False,
                             customdata=words, textfont={"size": 11},
                             hovertemplate=f"<b>{name}</b><br>%{{customdata}}: %{{y:+.2f}} ms per step"
                                           "<extra></extra>"), row=row, col=col)
        top = max(ideal, measured, *(b + max(v, 0.0) for b, v in zip(bases, values, strict=True)))
        low = min(0.0, *(b + min(v, 0.0) for b, v in zip(bases, values, strict=True)))
        fig.update_yaxes(range=[low * 1.15, top * 1.18], row=row, col=col)
        fig.update_xaxes(tickangle=-45, type="category", row=row, col=col)
    fig.update_layout(title=title, barmode="overlay", uniformtext={"minsize": 10, "mode": "show"})
    fig.update_yaxes(title_text="ms per step", col=1)
    fig.update_annotations(font_size=13)
    return apply_theme(fig, height=90 + 320 * nrows)


def _signed(v: float) -> str:
    s = f"{v:+.1f}"
    return "0.0" if s in ("+0.0", "-0.0") else s


def plot_lost_speedup(loss: pd.DataFrame, *, by: Sequence[str] = ("config_backend", "batch_size", "inject"),
                      title: str = "Where the lost speedup goes") -> go.Figure:
    """Horizontal stacked bars, one per configuration and rank count: the efficiency reached
    and the share of the ideal lost to each cause (percent of the measured step; they add up
    to 100 %) (:func:`analysis.metrics.gap.scaling_loss`)."""
    from analysis.metrics.gap import CAUSES

    require_columns(loss, ["n_ranks", "measured_step_s", "efficiency", *CAUSES], "plot_lost_speedup")
    by = [c for c in by if c in loss.columns]
    t = loss.sort_values([*by, "n_ranks"], ascending=False)
    y = [f"{config_label(r, by)}, {int(r.n_ranks)} rank{'s' if r.n_ranks != 1 else ''}"
         for r in t.itertuples(index=False)]
    fig = go.Figure()
    fig.add_trace(go.Bar(name="efficiency reached", y=y, x=(100 * t["efficiency"]).tolist(), orientation="h",
                         marker_color="#0072B2",
                         hovertemplate="<b>%{y}</b><br>efficiency reached: %{x:.1f} %<extra></extra>"))
    for c in CAUSES:
        key = c[:-2]
        fig.add_trace(go.Bar(name=CAUSE_LABELS[key], y=y, x=(100 * t[c] / t["measured_step_s"]).tolist(),
                             orientation="h", marker_color=CAUSE_COLOURS[key],
                             hovertemplate=f"<b>%{{y}}</b><br>{CAUSE_LABELS[key]}: %{{x:.1f}} % of the measured "
                                           "step<extra></extra>"))
    fig.update_layout(barmode="relative", title=title)
    fig.update_yaxes(title_text=None, type="category", showgrid=False)
    fig.update_xaxes(title_text="share of the measured step (%)", showgrid=True, gridcolor="#E5E5E5")
    fig.add_vline(x=100.0, line_dash="dot", line_color="#000000", line_width=1)
    return apply_theme(fig, height=200 + 34 * len(y))
