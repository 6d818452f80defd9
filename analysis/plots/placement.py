"""Figures of where and how the ranks ran: epoch time against ranks per partition, memory
against batch size with the largest batch that fits, the interconnect topology matrix, and
the allreduce models side by side."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.plots._theme import (
    PALETTE,
    apply_theme,
    groups,
    hover,
    node_lines,
    rank_axis,
    require_columns,
    spread_bars,
    time_axis,
)


def plot_epoch_time(table: pd.DataFrame, *, by: str | Sequence[str] = ("partition", "config_backend"),
                    boundaries: pd.DataFrame | None = None,
                    title: str = "Epoch time against ranks") -> go.Figure:
    """Epoch time (median over repeats, min-max bars) against ranks, one line per ``by``
    group, with each group's ideal epoch time dotted (the reference's first figure)
    (:func:`analysis.metrics.scaling.scaling_table`: ``epoch_time_s_median``,
    ``ideal_epoch_time_s``)."""
    require_columns(table, ["n_ranks", "epoch_time_s_median"], "plot_epoch_time")
    unit, k = time_axis(table["epoch_time_s_median"])
    fig = go.Figure()
    for i, (key, g) in enumerate(groups(table, by)):
        g = g.sort_values("n_ranks")
        colour = PALETTE[i % len(PALETTE)]
        name = str(key) if key is not None else "measured"
        err = spread_bars(g, "epoch_time_s_median", "epoch_time_s_min", "epoch_time_s_max", k=k)
        fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=(g["epoch_time_s_median"] * k).tolist(),
                                 mode="lines+markers", name=name, legendgroup=name, line={"color": colour},
                                 hovertemplate=hover("epoch time", ".3g", unit), **err))
        if "ideal_epoch_time_s" in g.columns and g["ideal_epoch_time_s"].notna().any():
            fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=(g["ideal_epoch_time_s"] * k).tolist(),
                                     mode="lines", name=f"ideal ({name})", legendgroup=name,
                                     line={"color": colour, "dash": "dot"},
                                     hovertemplate=hover("ideal epoch time", ".3g", unit)))
    node_lines(fig, boundaries)
    fig.update_layout(title=title)
    rank_axis(fig, table["n_ranks"])
    fig.update_yaxes(title_text=f"epoch time ({unit})", rangemode="tozero")
    return apply_theme(fig)


def plot_memory_batch(table: pd.DataFrame, *, limit: pd.DataFrame | None = None,
                      by: str | Sequence[str] = ("config_backend", "n_ranks"),
                      title: str = "Peak memory against batch size") -> go.Figure:
    """Peak memory per rank (MiB, the largest rank's, median over repeats) against the
    per-rank batch size; batch sizes that ran out of memory are crosses on the axis and the
    largest batch that fitted a dashed line (:func:`analysis.metrics.memory.memory_by_batch`)."""
    require_columns(table, ["batch_size", "peak_mem_mib", "n_oom"], "plot_memory_batch")
    fig = go.Figure()
    top = float(np.nanmax(table["peak_mem_mib"])) if table["peak_mem_mib"].notna().any() else 1.0
    for i, (key, g) in enumerate(groups(table, by, x="batch_size")):
        g = g.sort_values("batch_size")
        colour = PALETTE[i % len(PALETTE)]
        name = str(key) if key is not None else "measured"
        ok = g[g["peak_mem_mib"].notna()]
        fig.add_trace(go.Scatter(x=ok["batch_size"].tolist(), y=ok["peak_mem_mib"].tolist(), mode="lines+markers",
                                 name=name, line={"color": colour},
                                 hovertemplate=hover("peak memory", ".4g", "MiB", x="batch %{x}")))
        oom = g[g["n_oom"] > 0]
        if len(oom):
            fig.add_trace(go.Scatter(x=oom["batch_size"].tolist(), y=[0.0] * len(oom), mode="markers",
                                     name=f"out of memory ({name})", marker={"symbol": "x", "size": 12,
                                                                             "color": colour}))
    for _, r in (limit if limit is not None else pd.DataFrame()).iterrows():
        # a limit only where a larger batch ran out of memory (else it is just the largest tried)
        if np.isfinite(r.get("largest_ok", np.nan)) and np.isfinite(r.get("smallest_oom", np.nan)):
            fig.add_trace(go.Scatter(x=[float(r["largest_ok"])] * 2, y=[0.0, top], mode="lines",
                                     line={"dash": "dash", "color": "#666666"},
                                     name=f"largest batch that fits: {r['largest_ok']:g}"))
    fig.update_layout(title=title)
    fig.update_xaxes(title_text="batch size per rank (samples)", type="log")
    fig.update_yaxes(title_text="peak memory per rank (MiB)", rangemode="tozero")
    return apply_theme(fig)


#: Link classes from fastest to slowest (``analysis.readers.nvsmi_topo.link_class``), coloured
#: on one scale.
LINK_ORDER: tuple[str, ...] = ("nvlink", "pcie-switch", "pcie-host-bridge", "numa-node", "cross-socket", "unknown")


def plot_topology(topo: pd.DataFrame, *, title: str = "Interconnect topology (nvidia-smi topo -m)") -> go.Figure:
    """The device-by-device link matrix of one host as ``nvidia-smi topo -m`` prints it,
    coloured by link class (NVLink fastest, cross-socket slowest), with the cell text
    (``NV12``, ``PIX``, ``SYS``) in each cell (:mod:`analysis.readers.nvsmi_topo`)."""
    require_columns(topo, ["device", "peer", "link", "link_class"], "plot_topology")
    labels = list(dict.fromkeys([*topo["device"].astype(str), *topo["peer"].astype(str)]))
    pos = {lab: i for i, lab in enumerate(labels)}
    z = np.full((len(labels), len(labels)), np.nan)
    text = [["X" if i == j else "" for j in range(len(labels))] for i in range(len(labels))]
    for r in topo.itertuples():
        i, j = pos[str(r.device)], pos[str(r.peer)]
        z[i, j] = LINK_ORDER.index(r.link_class) if r.link_class in LINK_ORDER else len(LINK_ORDER) - 1
        text[i][j] = str(r.link)
    n = len(LINK_ORDER) - 1
    scale = [[i / n, PALETTE[i % len(PALETTE)]] for i in range(n + 1)]
    fig = go.Figure(go.Heatmap(z=z.tolist(), x=labels, y=labels, text=text, texttemplate="%{text}", zmin=0, zmax=n,
                               colorscale=scale, hovertemplate="%{y} → %{x}: %{text}<extra></extra>",
                               colorbar={"title": "link", "tickvals": list(range(n + 1)), "ticktext": list(LINK_ORDER)}))
    fig.update_layout(title=f"{title}<br><sup>rows: device, columns: peer</sup>")
    fig.update_xaxes(type="category", side="bottom")
    fig.update_yaxes(type="category", autorange="reversed")
    return apply_theme(fig)


def plot_allreduce_models(table: pd.DataFrame, *, measured: pd.DataFrame | None = None,
                          title: str = "Allreduce models: one-shot, ring, tree, two-level") -> go.Figure:
    """Predicted allreduce time per model (ms, log y) against ranks
    (:func:`analysis.metrics.model.allreduce_models`), with the measured sync per step as
    points (``measured``: ``n_ranks``, ``sync_s``)."""
    require_columns(table, ["n_ranks", "model", "pred_s"], "plot_allreduce_models")
    fig = go.Figure()
    for i, (model, g) in enumerate(table.groupby("model", sort=False)):
        g = g[(g["n_ranks"] >= 2) & g["pred_s"].notna()].sort_values("n_ranks")
        fig.add_trace(go.Scatter(x=g["n_ranks"].tolist(), y=(g["pred_s"] * 1e3).tolist(), mode="lines+markers",
                                 name=str(model), line={"color": PALETTE[i % len(PALETTE)],
                                                        "dash": "dash" if model == "two-level" else "solid"},
                                 hovertemplate=hover(f"{model}", ".3g", "ms")))
    if measured is not None and len(measured):
        m = measured[measured["n_ranks"] >= 2]
        fig.add_trace(go.Scatter(x=m["n_ranks"].tolist(), y=(m["sync_s"] * 1e3).tolist(), mode="markers",
                                 name="measured", marker={"color": "#000000", "size": 9},
                                 hovertemplate=hover("measured", ".3g", "ms")))
    fig.update_layout(title=title)
    rank_axis(fig, table["n_ranks"])
    fig.update_yaxes(title_text="allreduce time per sync (ms, log)", type="log")
    return apply_theme(fig)
