"""Shared style of every figure: palette, fixed colours and words, the print-friendly theme
and the helpers the builders share."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

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
    "compute": "#009E73",
    "other": "#BBBBBB",
}


CAUSE_LABELS: dict[str, str] = {
    "framework": "framework overhead (1 rank)",
    "sync": "exposed sync",
    "straggler": "waiting for the slowest rank",
    "data": "data loading",
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
