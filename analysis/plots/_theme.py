"""Shared style of every figure: palette, fixed colours and words, the print-friendly theme
and the helpers the builders share."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.errors import ScalescopeError
from analysis.metrics.gap import CAUSE_LABELS as _CAUSE_WORDS
from analysis.metrics.gap import CAUSES

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


def apply_theme(fig: go.Figure, *, height: int = 480, width: int | None = None) -> go.Figure:
    """Print-friendly style: white background, black axes with outside ticks, light grid,
    a sans-serif 13 px font (about 10 pt at the print size of :mod:`analysis.export`), the
    Okabe-Ito palette, the legend under the plot. No fixed width: the figure fills the report
    page or a notebook's output area (``width`` fixes one when a caller needs it). Returns
    ``fig`` (changed in place, so it can be chained)."""
    fig.update_layout(
        template="simple_white",
        autosize=True,
        width=width,
        height=height + _legend_height(fig),
        font={"family": "Helvetica, Arial, sans-serif", "size": 13, "color": "#000000"},
        title={"font": {"size": 15}, "x": 0.01, "xref": "container", "xanchor": "left"},
        colorway=list(PALETTE),
        legend={"orientation": "h", "yref": "container", "y": 0.0, "yanchor": "bottom", "xanchor": "left",
                "x": 0.0, "bgcolor": "rgba(255,255,255,0)"},
        margin={"l": 60, "r": 20, "t": 60, "b": 10},
        bargap=0.25,
        hoverlabel={"namelength": -1},
    )
    # bar labels keep their size (plotly shrinks them to a bar's width by default: 5 px labels)
    fig.update_traces(constraintext="none", selector={"type": "bar"})
    fig.update_xaxes(showline=True, linecolor="#000000", ticks="outside", mirror=False, showgrid=False,
                     zeroline=False, automargin=True)
    fig.update_yaxes(showline=True, linecolor="#000000", ticks="outside", showgrid=True, gridcolor="#E5E5E5",
                     zeroline=False, automargin=True)
    return fig


def _legend_height(fig: go.Figure, width_px: float = 560.0) -> int:
    """Room for the legend under the plot at the print width: its entries laid out in rows
    (about 7 px per character plus the symbol)."""
    if fig.layout.showlegend is False:
        return 0
    names = list(dict.fromkeys(str(t.name) for t in fig.data if t.name and t.showlegend is not False))
    if len(names) <= 1 and fig.layout.showlegend is not True:
        return 0
    rows, used = 1, 0.0
    for n in names:
        w = 7.0 * len(n) + 50
        if used and used + w > width_px:
            rows, used = rows + 1, 0.0
        used += w
    return 24 * rows + 40


def rank_axis(fig: go.Figure, ranks: Sequence[float] | pd.Series, *, title: str | None = RANKS_TITLE,
              **where) -> go.Figure:
    """Integer ticks at the rank counts measured (every other one when there are many) on the
    x axes ``where`` selects (``row=``, ``col=``), titled ``title``."""
    vals = sorted({int(v) for v in pd.Series(list(ranks), dtype=float).dropna()})
    step = max(1, int(np.ceil(len(vals) / 10)))
    shown = vals[::step]
    fig.update_xaxes(tickmode="array", tickvals=shown, ticktext=[str(v) for v in shown], **where)
    if title:
        fig.update_xaxes(title_text=title, **where)
    return fig


def hover(what: str, fmt: str = ".3g", unit: str = "", *, x: str = "%{x} ranks") -> str:
    """A hover template: the trace's name, the x value and ``what`` with its unit."""
    u = f" {unit}" if unit else ""
    return f"<b>%{{fullData.name}}</b><br>{x}<br>{what}: %{{y:{fmt}}}{u}<extra></extra>"


def time_axis(values: Sequence[float] | pd.Series) -> tuple[str, float]:
    """(unit, factor) for times in seconds, as the tables show them
    (:mod:`analysis.tables`): ms, or s when the typical value is 10 s or more."""
    v = np.abs(pd.to_numeric(pd.Series(list(values)), errors="coerce").to_numpy(float))
    v = v[np.isfinite(v)]
    return ("s", 1.0) if len(v) and float(np.median(v)) >= 10.0 else ("ms", 1e3)


def spread_bars(g: pd.DataFrame, mid: str, low: str, high: str, *, k: float = 1.0) -> dict:
    """Asymmetric error bars from ``low`` to ``high`` around ``mid`` (each scaled by ``k``),
    as ``go.Scatter`` keywords; none where ``g`` has not both ends (e.g. the min-max spread
    over repeats)."""
    if not {low, high} <= set(g.columns):
        return {}
    return {"error_y": {"type": "data", "symmetric": False, "array": ((g[high] - g[mid]) * k).tolist(),
                        "arrayminus": ((g[mid] - g[low]) * k).tolist()}}


def require_columns(df: pd.DataFrame, cols: Sequence[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ScalescopeError(f"{what} needs column(s) {missing}; the table has {list(df.columns)}")


#: Columns that make a configuration of their own wherever a table has several values of them:
#: a figure never stacks or pools them (one trace, bar or label each).
CONFIG_COLUMNS: tuple[str, ...] = ("batch_size",)


def _config_cols(df: pd.DataFrame, cols: Sequence[str]) -> list[str]:
    extra = [c for c in CONFIG_COLUMNS if c in df.columns and c not in cols and df[c].nunique(dropna=True) > 1]
    return [*cols, *extra]


def _part(col: str, v: object, *, added: bool) -> str:
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return "–"
    return f"bs {v}" if added and col == "batch_size" else str(v)


def groups(df: pd.DataFrame, by: str | Sequence[str] | None, *, x: str | None = None):
    """(label, rows) per group; ``by`` may name several columns (label ``"a · b"``). A batch
    size column with several values always splits the groups (label ``"... · bs 75"``),
    unless it is the x axis ``x``."""
    asked = [by] if isinstance(by, str) else list(by or ())
    asked = [c for c in asked if c in df.columns]
    cols = [c for c in _config_cols(df, asked) if c != x]
    if not cols:
        yield None, df
        return
    if len(cols) == 1:
        for key, g in df.groupby(cols[0], sort=True, dropna=False):
            yield _part(cols[0], key, added=cols[0] not in asked), g
        return
    for key, g in df.groupby(cols, sort=True, dropna=False):
        yield " · ".join(_part(c, k, added=c not in asked) for c, k in zip(cols, key, strict=True)), g


def group_label(row: pd.Series, by: str | Sequence[str] | None) -> str | None:
    cols = [by] if isinstance(by, str) else list(by or ())
    cols = [c for c in cols if c in row.index]
    return " · ".join("–" if pd.isna(row[c]) else str(row[c]) for c in cols) if cols else None


def bar_labels(df: pd.DataFrame, x: str, by: str | None) -> list[str]:
    """One category label per row: ``x`` (with the node count), preceded by ``by`` when it
    varies and by the batch size when it varies (never two rows on one bar)."""
    many = by is not None and by in df.columns and df[by].nunique(dropna=False) > 1
    bs = "batch_size" in df.columns and df["batch_size"].nunique(dropna=True) > 1 and x != "batch_size"
    labels = []
    for _, r in df.iterrows():
        lab = f"{r[x]}"
        if "n_nodes" in df.columns and pd.notna(r["n_nodes"]) and r["n_nodes"] > 1:
            lab += f" ({int(r['n_nodes'])} nodes)"
        if bs:
            lab = f"bs {r['batch_size']} · {lab}"
        labels.append(f"{r[by]} · {lab}" if many else lab)
    return labels


def node_lines(fig: go.Figure, boundaries: pd.DataFrame | None, *, cols: Sequence[int] = (1,), row: int = 1) -> None:
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


#: The words of the scaling-gap causes, keyed as :data:`CAUSE_COLOURS`: the metrics' own
#: (:data:`analysis.metrics.gap.CAUSE_LABELS`, one vocabulary for tables, figures and sentences).
CAUSE_LABELS: dict[str, str] = {c.removesuffix("_s"): _CAUSE_WORDS[c] for c in CAUSES}


def config_label(row: object, by: Sequence[str]) -> str:
    parts = []
    for c in by:
        v = getattr(row, c, None)
        if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
            continue
        parts.append(f"bs {v}" if c == "batch_size" else (f"inject {v}" if c == "inject" else str(v)))
    return ", ".join(parts)
