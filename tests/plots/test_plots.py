"""Figure builders: traces, values and axis titles (never images)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import pytest

from analysis import plots as P
from analysis.errors import ScalescopeError


def test_apply_theme_print_style():
    fig = P.apply_theme(go.Figure(go.Scatter(x=[1], y=[1])))
    assert fig.layout.template.layout.plot_bgcolor in ("white", "#ffffff", "rgb(255,255,255)")
    assert fig.layout.font.size == 13
    assert list(fig.layout.colorway) == list(P.PALETTE)


def test_plot_breakdown_stacks_shares_in_percent():
    t = pd.DataFrame({"config_backend": ["hg", "hg"], "n_ranks": [1, 4], "n_nodes": [1, 2],
                      "data_frac": [0.1, 0.05], "forward_frac": [0.2, 0.1], "backward_frac": [0.4, 0.3],
                      "sync_exposed_frac": [0.1, 0.4], "optimizer_frac": [0.1, 0.05], "other_frac": [0.1, 0.1]})
    fig = P.plot_breakdown(t)
    assert len(fig.data) == 6
    assert fig.layout.barmode == "stack"
    names = [tr.name for tr in fig.data]
    assert names == ["data loading", "forward", "backward", "gradient sync (exposed)", "optimizer", "other / idle"]
    sync = fig.data[3]
    assert list(sync.x) == ["1", "4 (2 nodes)"]
    assert list(sync.y) == pytest.approx([10.0, 40.0])
    assert fig.layout.yaxis.title.text == "share of step time (%)"
    assert fig.layout.xaxis.title.text == "ranks (processes)"


def test_plot_scaling_ideal_fit_and_node_boundary():
    table = pd.DataFrame({"config_backend": "hg", "n_ranks": [1, 2, 4], "speedup": [0.87, 1.48, 2.67],
                          "speedup_min": [0.87, 1.43, 2.67], "speedup_max": [0.87, 1.54, 2.67],
                          "efficiency_frac": [0.87, 0.74, 0.667], "baseline_n_ranks": 1.0})
    fit = pd.DataFrame({"config_backend": ["hg"], "slope_per_rank": [0.6], "intercept": [0.28],
                        "slope_ci_low": [0.49], "slope_ci_high": [0.71]})
    bounds = pd.DataFrame({"n_ranks_before": [2], "n_ranks_after": [4], "n_nodes_before": [1],
                           "n_nodes_after": [2], "x": [3.0]})
    fig = P.plot_scaling(table, fit=fit, boundaries=bounds)
    by_name = {tr.name: tr for tr in fig.data if tr.showlegend is not False}
    assert list(by_name["hg"].y) == pytest.approx([0.87, 1.48, 2.67])
    assert list(by_name["hg"].error_y.array) == pytest.approx([0, 0.06, 0])
    ideal = by_name["ideal"]
    assert list(ideal.x) == [1, 2, 4] and list(ideal.y) == [1, 2, 4]
    fit_trace = next(tr for tr in fig.data if tr.name and tr.name.startswith("fit hg"))
    assert "0.60 per rank [0.49, 0.71]" in fit_trace.name
    assert list(fit_trace.y) == pytest.approx([0.88, 2.68])
    eff = next(tr for tr in fig.data if tr.xaxis == "x2" and tr.name == "hg")
    assert list(eff.y) == pytest.approx([87.0, 74.0, 66.7])
    assert fig.layout.yaxis.title.text.startswith("speedup")
    assert fig.layout.yaxis2.title.text == "efficiency (%)"
    assert any(s.x0 == 3.0 for s in fig.layout.shapes)


def test_plot_sync_three_panels_in_ms():
    t = pd.DataFrame({"config_backend": "hg", "n_ranks": [1, 2, 4], "sync_median_s": [0.0015, 0.0035, 0.005],
                      "sync_min_s": [0.0015, 0.003, 0.005], "sync_max_s": [0.0015, 0.004, 0.005],
                      "syncs_per_epoch": [4, 2, 1], "sync_per_epoch_s": [0.006, 0.007, 0.005]})
    fig = P.plot_sync(t)
    assert len(fig.data) == 3
    assert list(fig.data[0].y) == pytest.approx([1.5, 3.5, 5.0])
    assert list(fig.data[1].y) == [4, 2, 1]
    assert list(fig.data[2].y) == pytest.approx([6, 7, 5])
    assert fig.layout.yaxis.title.text == "sync_total per sync (ms)"
    assert fig.layout.yaxis3.title.text == "sync_total per epoch (ms)"
    exposed = P.plot_sync(t.assign(exposed_mean_s=[0.001, 0.002, 0.004]))
    assert [tr.name for tr in exposed.data[:2]] == ["hg", "hg (exposed)"]
    assert list(exposed.data[1].y) == pytest.approx([1.0, 2.0, 4.0])


def test_plot_device_usage_panels_for_sampled_metrics_only():
    t = pd.DataFrame({"config_backend": "x", "n_ranks": [1, 2], "unit": "rank", "cpu_util_pct_mean": [95.0, 90.0],
                      "rss_mib_mean": [300.0, 275.0]})
    fig = P.plot_device_usage(t)
    assert len(fig.data) == 2
    assert fig.layout.yaxis.title.text == "CPU utilisation (%)"
    assert fig.layout.yaxis2.title.text == "resident memory (MiB)"
    with pytest.raises(ScalescopeError, match="no sampled metric"):
        P.plot_device_usage(t[["config_backend", "n_ranks", "unit"]])


def test_plot_backends_overhead_batch_model():
    b = pd.DataFrame({"config_backend": ["hvd-gloo", "hvd-mpi"], "n_ranks": 2, "n_nodes": 1, "batch_size": 10,
                      "epoch_time_s": [10.0, 8.0], "sync_per_step_s": [0.2, 0.1]})
    fig = P.plot_backends(b)
    assert [tr.name for tr in fig.data[:1]] == ["hvd-gloo"]
    assert list(fig.data[1].y) == pytest.approx([200.0])
    assert fig.layout.yaxis2.title.text == "sync_total per step (ms)"
    o = pd.DataFrame({"config_backend": ["horovod-gloo"], "epoch_time_s": [0.046], "baseline_epoch_time_s": [0.04],
                      "overhead_pct": [15.0]})
    fo = P.plot_overhead(o)
    assert list(fo.data[1].text) == ["+15.0 %"]
    assert fo.layout.yaxis.title.text == "epoch time (ms)"  # ms below 10 s, as the tables
    assert list(fo.data[1].y) == pytest.approx([46.0])
    bs = pd.DataFrame({"config_backend": "none", "batch_size": [10, 20], "epoch_time_s": [0.04, 0.036]})
    fb = P.plot_batch_size(bs)
    assert list(fb.data[0].x) == [10, 20] and fb.layout.xaxis.title.text == "batch size per rank (samples)"
    measured = pd.DataFrame({"n_ranks": [2, 4], "sync_s": [0.003, 0.005]})
    pred = pd.DataFrame({"n_ranks": [1, 2, 4, 8], "sync_pred_s": [0, 0.003, 0.005, 0.006],
                         "speedup": [1, 1.5, 2.6, 2.5]})
    fm = P.plot_model(measured, pred, measured_speedup=pd.DataFrame({"n_ranks": [1, 2], "speedup": [0.9, 1.5]}))
    assert [tr.name for tr in fm.data] == ["measured", "model", "measured speedup", "model speedup"]
    assert list(fm.data[1].y) == pytest.approx([0, 3, 5, 6])
    assert fm.layout.yaxis.title.text == "sync time per step (ms)"


def test_plot_validation_and_memory_and_stragglers():
    c = pd.DataFrame({"run_id": ["a", "a", "b", "b"], "global_batch_size": [10, 10, 20, 20], "epoch": [0, 1, 0, 1],
                      "wall_s": [1.0, 2.0, 0.8, 1.6], "val_metric": [0.5, 0.7, 0.4, 0.6]})
    f = P.plot_validation(c, x="wall_s")
    assert [tr.name for tr in f.data] == ["batch 10 · a", "batch 20 · b"]
    assert list(f.data[1].x) == [0.8, 1.6]
    assert f.layout.xaxis.title.text == "training time (s)"
    m = pd.DataFrame({"run_id": ["a", "a"], "rank": [0, 1], "peak_mem_mib": [300.0, 250.0], "peak_mem_kind": "cuda"})
    fm = P.plot_memory(m)
    assert len(fm.data) == 2 and fm.layout.yaxis.title.text == "peak GPU memory (MiB)"
    s = pd.DataFrame({"run_id": ["a", "a"], "rank": [0, 1], "wait_mean_s": [0.001, 0.0], "last_frac": [0.0, 1.0]})
    fs = P.plot_stragglers(s)
    assert list(fs.data[0].y) == pytest.approx([1.0])


def test_builder_names_missing_columns():
    with pytest.raises(ScalescopeError, match="plot_scaling needs column"):
        P.plot_scaling(pd.DataFrame({"n_ranks": [1]}))


def test_plot_timeline_shows_the_chosen_steps_per_rank():
    from analysis.schema import make_events

    # two ranks, three steps of forward (2 ms) + backward (3 ms), steps every 10 ms
    rows = []
    for rank in (0, 1):
        for step in range(3):
            t = step * 10_000_000
            rows += [("step", t, 6_000_000, step, rank), ("forward", t, 2_000_000, step, rank),
                     ("backward", t + 2_000_000, 3_000_000, step, rank)]
    name, start, dur, step, rank = zip(*rows, strict=True)
    ev = make_events(name=list(name), start_ns=list(start), dur_ns=list(dur), step=list(step), rank=list(rank),
                     kind="phase", cat="phase", run_id="r", source="test")
    fig = P.plot_timeline(ev, steps=[1])
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {"step", "forward", "backward"}
    assert sorted(by_name["forward"].y) == ["rank 0", "rank 1"]
    assert list(by_name["forward"].base) == [0.0, 0.0]  # ms since the first shown step
    assert list(by_name["backward"].x) == [3.0, 3.0]
    assert fig.layout.xaxis.title.text == "time since the first shown step (ms)"
    with pytest.raises(ScalescopeError, match="one run"):
        P.plot_timeline(pd.concat([ev, ev.assign(run_id="other")], ignore_index=True))
