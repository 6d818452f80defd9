"""Figures of where a step's time goes: phase shares, GPU time, Horovod activity, compute
against update, and a timeline of a few steps."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from analysis.errors import ScalescopeError
from analysis.plots._theme import (
    COMPONENT_COLOURS,
    COMPONENT_LABELS,
    PALETTE,
    RANKS_TITLE,
    TIMELINE_COLOURS,
    apply_theme,
    bar_labels,
    hover,
    require_columns,
)


def _stacked_shares(t: pd.DataFrame, labels: list, comps: list[str], *, of: str, title: str) -> go.Figure:
    """One stacked bar per row of ``t``: each component's ``*_frac`` in % of ``of``."""
    fig = go.Figure()
    for c in comps:
        fig.add_trace(go.Bar(name=COMPONENT_LABELS[c], x=labels, y=(t[f"{c}_frac"] * 100).tolist(),
                             marker_color=COMPONENT_COLOURS[c],
                             hovertemplate="<b>%{x}</b><br>" + COMPONENT_LABELS[c]
                                           + f": %{{y:.1f}} % of {of}<extra></extra>"))
    fig.update_layout(barmode="stack", title=title)
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
    require_columns(table, [x, *[f"{c}_frac" for c in comps]], "plot_breakdown")
    t = table.sort_values([c for c in (by, "batch_size", x) if c and c in table.columns])
    labels = bar_labels(t, x, by)
    fig = _stacked_shares(t, labels, comps, of="the step", title=title)
    many = by is not None and by in t.columns and t[by].nunique(dropna=False) > 1  # as bar_labels
    fig.update_xaxes(title_text=f"configuration · {RANKS_TITLE}" if many else RANKS_TITLE, type="category",
                     tickangle=-35 if many else 0)
    fig.update_yaxes(title_text="share of step time (%)", range=[0, 100])
    return apply_theme(fig, height=540 if many else 480)


def plot_gpu_breakdown(table: pd.DataFrame, *, title: str = "GPU time per rank (HTA temporal breakdown)") -> go.Figure:
    """Stacked bars of computation, communication, memory and idle shares (%) per rank
    (:func:`analysis.metrics.breakdown.gpu_time_breakdown`)."""
    comps = ["compute", "comm", "memory", "idle"]
    require_columns(table, ["run_id", "rank", *[f"{c}_frac" for c in comps]], "plot_gpu_breakdown")
    t = table.sort_values(["run_id", "rank"])
    many = t["run_id"].nunique() > 1
    labels = [f"{r.run_id} · rank {r.rank}" if many else f"rank {r.rank}" for r in t.itertuples()]
    fig = _stacked_shares(t, labels, comps, of="the GPU time span", title=title)
    fig.update_xaxes(title_text="rank", type="category", tickangle=-30 if many else 0)
    fig.update_yaxes(title_text="share of GPU time span (%)", range=[0, 100])
    return apply_theme(fig)


def plot_allreduce_activity(table: pd.DataFrame, *, title: str = "Horovod allreduce activity") -> go.Figure:
    """Bars per run of negotiation, fusion-buffer copies, collective and wait time (ms),
    plus the part of the total hidden under backward
    (:func:`analysis.metrics.breakdown.horovod_allreduce`)."""
    parts = [("negotiate_s", "negotiation"), ("memcpy_s", "fusion-buffer copies"), ("collective_s", "collective"),
             ("wait_s", "waiting"), ("overlap_backward_s", "overlapped with backward"), ("exposed_s", "exposed")]
    require_columns(table, ["run_id", *[p for p, _ in parts]], "plot_allreduce_activity")
    fig = go.Figure()
    for col, name in parts:
        fig.add_trace(go.Bar(name=name, x=table["run_id"].astype(str).tolist(), y=(table[col] * 1e3).tolist(),
                             hovertemplate=hover(name, ".3g", "ms over the run", x="%{x}")))
    fig.update_layout(barmode="group", title=title)
    fig.update_xaxes(title_text="run", type="category", tickangle=-30)
    fig.update_yaxes(title_text="time over the run (ms)")
    return apply_theme(fig)


def plot_compute_update(table: pd.DataFrame, *, by: str = "config_backend", per: str = "step",
                        title: str | None = None) -> go.Figure:
    """Stacked bars per rank count: forward+backward, optimizer and exposed sync time per
    step (ms), or per epoch on one rank (``per="epoch"``, s: the totals of
    :func:`analysis.metrics.memory.compute_update_per_epoch`)
    (:func:`analysis.metrics.memory.compute_update_breakdown`)."""
    if per not in ("step", "epoch"):
        raise ScalescopeError(f"per must be 'step' or 'epoch', not {per!r}")
    cols = [f"compute_per_{per}_s", f"update_per_{per}_s", f"sync_per_{per}_s"]
    require_columns(table, ["n_ranks", *cols], "plot_compute_update")
    unit, k = ("ms", 1e3) if per == "step" else ("s", 1.0)
    title = title or f"Compute against weight update per {per}" + (" (totals on one rank)" if per == "epoch" else "")
    t = table.sort_values([c for c in (by, "batch_size", "n_ranks") if c in table.columns])
    labels = bar_labels(t, "n_ranks", by)
    fig = go.Figure()
    for col, name, colour in ((cols[0], "forward + backward", COMPONENT_COLOURS["backward"]),
                              (cols[1], "optimizer (weight update)", COMPONENT_COLOURS["optimizer"]),
                              (cols[2], "gradient sync (exposed)", COMPONENT_COLOURS["sync_exposed"])):
        fig.add_trace(go.Bar(name=name, x=labels, y=(t[col] * k).tolist(), marker_color=colour,
                             hovertemplate="<b>%{x}</b><br>" + name + f": %{{y:.3g}} {unit} per {per}<extra></extra>"))
    many = len(set(labels)) > 4 or any(" · " in lab for lab in labels)
    fig.update_layout(barmode="stack", title=title)
    fig.update_xaxes(title_text=f"configuration · {RANKS_TITLE}" if " · " in "".join(labels) else RANKS_TITLE,
                     type="category", tickangle=-35 if many else 0)
    fig.update_yaxes(title_text=f"time per {per} ({unit})")
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
    require_columns(events, ["run_id", "rank", "name", "kind", "cat", "start_ns", "dur_ns", "step"], "plot_timeline")
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
