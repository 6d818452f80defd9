"""Known answers for device usage, backends, batch size, memory, the what-if model and
stragglers."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest

from analysis.errors import ScalescopeError
from analysis.metrics.backend import backend_comparison
from analysis.metrics.batch import batch_size_epoch_time, scaled_learning_rate, validation_curves
from analysis.metrics.memory import compute_update_breakdown, peak_memory
from analysis.metrics.model import fit_alpha_beta, pipeline_bubble, predict_scaling, predict_sync
from analysis.metrics.stragglers import negotiation_stragglers, phase_stragglers, straggler_summary
from analysis.metrics.utilization import device_usage, usage_by_ranks
from analysis.schema import concat, make_events, make_samples


def test_device_usage_gpu_and_cpu():
    gpu = make_samples(run_id="a", host="n1", device=[0, 0, 1, 1], ts_ns=[0, 1, 0, 1],
                       util_gpu_pct=[80, 100, 40, 60], mem_used_mib=[1000, 3000, 500, 500], power_w=[200, 300, 100, 100],
                       source="nvml")
    cpu = make_samples(run_id="b", host="n1", rank=[None, 0, None, 0], ts_ns=[0, 0, 1, 1],
                       cpu_util_pct=[50, 90, 70, 100], rss_mib=[None, 300, None, 320], source="cpu")
    core = make_samples(run_id="b", host="n1", cpu_core=[0], ts_ns=[0], cpu_util_pct=[5], source="cpu")
    s = concat([gpu, cpu, core])
    before = copy.deepcopy(s)
    u = device_usage(s)
    pd.testing.assert_frame_equal(s, before)
    g0 = u[(u["unit"] == "gpu") & (u["device"] == 0)].iloc[0]
    assert g0["util_gpu_pct_mean"] == 90 and g0["mem_used_mib_max"] == 3000 and g0["power_w_mean"] == 250
    proc = u[u["unit"] == "rank"].iloc[0]
    assert proc["cpu_util_pct_mean"] == 95 and proc["rss_mib_max"] == 320
    host = u[u["unit"] == "host"].iloc[0]
    assert host["cpu_util_pct_mean"] == 60  # the per-core row is not mixed in
    runs = pd.DataFrame({"run_id": ["a", "b"], "n_ranks": [2, 4], "n_nodes": [1, 2], "config_backend": "x"})
    by = usage_by_ranks(u, runs)
    gpu_row = by[by["unit"] == "gpu"].iloc[0]
    assert gpu_row["util_gpu_pct_mean"] == pytest.approx((90 + 50) / 2)


def test_usage_jump_where_a_node_joins():
    u = pd.DataFrame({"run_id": ["a", "b", "c"], "unit": "gpu", "util_gpu_pct_mean": [90.0, 85.0, 60.0]})
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "n_ranks": [1, 2, 4], "n_nodes": [1, 1, 2],
                         "config_backend": "x"})
    t = usage_by_ranks(u, runs).set_index("n_ranks")
    assert t["new_node"].tolist() == [False, False, True]
    assert t.loc[4, "util_gpu_pct_mean_jump"] == pytest.approx(-25.0)
    assert np.isnan(t.loc[2, "util_gpu_pct_mean_jump"])


def test_backend_comparison():
    pr = pd.DataFrame({"run_id": ["g", "m", "g2", "m2"], "config_backend": ["hvd-gloo", "hvd-mpi"] * 2,
                       "batch_size": 10, "n_ranks": [2, 2, 4, 4], "n_nodes": [1, 1, 2, 2],
                       "epoch_time_s": [10.0, 8.0, 6.0, 7.5]})
    sync = pd.DataFrame({"run_id": ["g", "m", "g2", "m2"], "sync_mean_s": [0.2, 0.1, 0.3, 0.5],
                         "exposed_mean_s": [0.1, 0.05, 0.2, 0.4]})
    t = backend_comparison(pr, sync=sync).set_index(["n_ranks", "config_backend"])
    assert t.loc[(2, "hvd-gloo"), "relative_time"] == pytest.approx(1.25)
    assert t.loc[(2, "hvd-gloo"), "relative_time_verdict"] == "no interval (n<3)"
    assert bool(t.loc[(2, "hvd-mpi"), "is_fastest"])
    assert t.loc[(4, "hvd-mpi"), "placement"] == "inter-node"
    assert t.loc[(4, "hvd-mpi"), "sync_per_step_s"] == pytest.approx(0.5)
    assert t.loc[(4, "hvd-mpi"), "exposed_per_step_s"] == pytest.approx(0.4)


def test_scaled_learning_rate():
    assert scaled_learning_rate(0.1, base_batch_size=64, batch_size=256) == pytest.approx(0.4)
    assert scaled_learning_rate(0.1, base_batch_size=64, batch_size=256, rule="sqrt") == pytest.approx(0.2)
    assert scaled_learning_rate(0.1, base_batch_size=64, batch_size=256, rule="none") == 0.1
    with pytest.raises(ScalescopeError, match="rule"):
        scaled_learning_rate(0.1, base_batch_size=64, batch_size=256, rule="cubic")


def test_batch_size_and_validation_curves():
    pr = pd.DataFrame({"config_backend": "none", "n_ranks": [1, 1, 1, 2], "batch_size": [10, 20, 20, 10],
                       "epoch_time_s": [4.0, 3.0, 3.4, 2.0], "throughput_samples_per_s": [10.0, 13.0, 12.0, 20.0]})
    t = batch_size_epoch_time(pr)
    assert t["batch_size"].tolist() == [10, 20]
    assert t["epoch_time_s"].tolist() == pytest.approx([4.0, 3.2])
    epochs = pd.DataFrame({"run_id": "r", "rank": [0, 1, 0, 1], "epoch": [0, 0, 1, 1],
                           "epoch_time_s": [2.0, 2.5, 2.0, 1.5], "val_metric": [0.5, 0.4, 0.7, 0.6],
                           "val_loss": 1.0, "train_loss": 1.0})
    runs = pd.DataFrame({"run_id": ["r"], "batch_size": [10], "global_batch_size": [20], "n_ranks": [2]})
    c = validation_curves(epochs, runs)
    assert c["wall_s"].tolist() == pytest.approx([2.5, 4.5])
    assert c["val_metric"].tolist() == [0.5, 0.7]  # rank 0's


def test_compute_update_and_peak_memory():
    b = pd.DataFrame({"run_id": ["a"], "n_steps": [4], "forward_s": [2.0], "backward_s": [4.0],
                      "optimizer_s": [1.0], "sync_exposed_s": [2.0]})
    runs = pd.DataFrame({"run_id": ["a"], "n_ranks": [2], "config_backend": "x", "batch_size": 10})
    t = compute_update_breakdown(b, runs).iloc[0]
    assert t["compute_per_step_s"] == 1.5 and t["update_per_step_s"] == 0.25 and t["sync_per_step_s"] == 0.5
    assert t["update_to_compute_ratio"] == pytest.approx(1 / 6)
    e = pd.DataFrame({"run_id": "a", "rank": [0, 1, 2, 0, 1, 2], "epoch": [0, 0, 0, 1, 1, 1],
                      "peak_mem_mib": [900.0, 700.0, 720.0, 950.0, 700.0, 710.0], "peak_mem_kind": "cuda"})
    pm = peak_memory(e)
    assert pm["peak_mem_mib"].tolist() == [950.0, 700.0, 720.0]
    assert pm["rank0_extra_mib"].iloc[0] == pytest.approx(950 - 710)


def test_alpha_beta_recovers_known_parameters():
    alpha, beta, nbytes = 50e-6, 1e9, 4e6
    n = np.array([2, 2, 4, 4, 8, 8])
    t = 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / beta
    noise = np.array([1, -1, 1, -1, 1, -1]) * 1e-6
    fit = fit_alpha_beta(pd.DataFrame({"n_ranks": n, "sync_s": t + noise}), bytes_per_sync=nbytes)
    f = fit.iloc[0]
    assert f["alpha_s"] == pytest.approx(alpha, rel=0.05)
    assert f["beta_bytes_per_s"] == pytest.approx(beta, rel=0.05)
    assert f["alpha_stderr_s"] > 0 and f["beta_stderr_bytes_per_s"] > 0
    exact = fit_alpha_beta(pd.DataFrame({"n_ranks": n, "sync_s": t}), bytes_per_sync=nbytes)
    p = predict_sync(exact, [1, 16])
    assert p["sync_pred_s"].tolist() == pytest.approx([0.0, 30 * alpha + 2 * 15 / 16 * nbytes / beta])
    with pytest.raises(ScalescopeError, match="two or more rank counts"):
        fit_alpha_beta(pd.DataFrame({"n_ranks": [2, 2], "sync_s": [1.0, 1.1]}), bytes_per_sync=1)


def test_predict_scaling_by_hand():
    fit = pd.DataFrame([{"alpha_s": 0.001, "beta_bytes_per_s": 1e6, "bytes_per_sync": 1e3}])
    p = predict_scaling(fit, n_ranks=[1, 2, 4], compute_per_sample_s=0.001, batch_size=10, dataset_size=40)
    # sync(2) = 2*0.001 + 1*1e3/1e6 = 0.003; sync(4) = 6*0.001 + 1.5*0.001 = 0.0075
    assert p["sync_pred_s"].tolist() == pytest.approx([0.0, 0.003, 0.0075])
    assert p["steps_per_epoch"].tolist() == [4, 2, 1]
    assert p["epoch_time_s"].tolist() == pytest.approx([0.04, 2 * 0.013, 0.0175])
    assert p["speedup"].tolist() == pytest.approx([1.0, 0.04 / 0.026, 0.04 / 0.0175])
    assert p["efficiency_frac"].tolist() == pytest.approx([1.0, 0.04 / 0.026 / 2, 0.04 / 0.0175 / 4])


def test_pipeline_bubble():
    assert pipeline_bubble(4, 8) == pytest.approx(3 / 11)
    assert pipeline_bubble(1, 5) == 0
    assert math.isclose(pipeline_bubble(8, 1), 7 / 8)


def test_negotiation_stragglers():
    ticks = make_events(run_id="h", kind="marker", cat="rank_ready", name="NEGOTIATE_ALLREDUCE", source="horovod",
                        tensor=["a", "a", "a", "a", "a", "a"], rank=[0, 2, 1, 1, 0, 2],
                        start_ns=[0, 100, 400, 1000, 1050, 1060], dur_ns=0)
    neg = make_events(run_id="h", kind="negotiate", cat="negotiate", name="NEGOTIATE_ALLREDUCE", source="horovod",
                      tensor="a", start_ns=[0, 1000], dur_ns=[400, 60])
    t = negotiation_stragglers(concat([ticks, neg]))
    assert t["last_rank"].tolist() == [1, 2]
    assert t["lag_s"].tolist() == pytest.approx([400e-9, 60e-9])
    assert t["margin_s"].tolist() == pytest.approx([300e-9, 10e-9])
    # without negotiate rows a repeated rank starts a new negotiation
    t2 = negotiation_stragglers(ticks)
    assert t2["last_rank"].tolist() == [1, 2]


def test_phase_stragglers():
    rows = []
    for rank, back in ((0, 40), (1, 55), (2, 45)):
        rows.append(make_events(run_id="r", rank=rank, kind="phase", name=["forward", "backward"], step=0, epoch=0,
                                source="t", start_ns=[0, 20], dur_ns=[20, back]))
    ev = concat(rows)
    t = phase_stragglers(ev)
    assert t["busy_s"].tolist() == pytest.approx([60e-9, 75e-9, 65e-9])
    assert t["wait_s"].tolist() == pytest.approx([15e-9, 0, 10e-9])
    assert t["is_last"].tolist() == [False, True, False]
    s = straggler_summary(t).set_index("rank")
    assert s.loc[1, "n_last"] == 1 and s.loc[0, "wait_mean_s"] == pytest.approx(15e-9)


def test_alpha_beta_with_fixed_latency_fits_bandwidth_from_one_rank_count():
    import analysis.metrics as M

    # t(2) = 2*alpha + bytes/beta; with alpha fixed at 1 ms and 1e6 bytes at 1e9 B/s: 2 ms + 1 ms
    pts = pd.DataFrame({"n_ranks": [2, 2], "sync_s": [0.003, 0.003]})
    fit = M.fit_alpha_beta(pts, bytes_per_sync=1e6, alpha_s=0.001)
    assert fit["alpha_fixed"].iloc[0]
    assert fit["alpha_s"].iloc[0] == 0.001
    assert fit["beta_bytes_per_s"].iloc[0] == pytest.approx(1e9)
    with pytest.raises(ScalescopeError, match="alpha_s"):
        M.fit_alpha_beta(pts, bytes_per_sync=1e6)
