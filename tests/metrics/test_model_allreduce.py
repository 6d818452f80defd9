"""Allreduce micro-benchmark and its models: alpha-beta per link class, ring vs two-level
allreduce, error against measured sync; and the real `scalescope bench-allreduce` with Gloo
and MPI at 1-2 ranks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.errors import ScalescopeError
from analysis.metrics import model as M
from instrumentation import bench_allreduce

ROOT = Path(__file__).resolve().parents[2]


def _synthetic(alpha: float, beta: float, *, ranks=(2, 4), noise: float = 0.05, link="intra-node") -> pd.DataFrame:
    """Timings of the ring model with a known alpha and beta, times seeded log-normal noise."""
    rng = np.random.default_rng(7)
    rows = []
    for n in ranks:
        for b, _ in bench_allreduce.message_sizes(max_bytes=64 << 20):
            t = 2 * (n - 1) * alpha + 2 * (n - 1) / n * b / beta
            for r in range(3):
                rows.append({"backend": "gloo", "link_class": link, "n_ranks": n, "bytes": b, "repeat": r,
                             "time_s": t * float(np.exp(noise * rng.standard_normal()))})
    return pd.DataFrame(rows)


def test_fit_recovers_a_known_alpha_and_beta_inside_its_intervals():
    alpha, beta = 50e-6, 2e9
    fit = M.fit_link_alpha_beta(_synthetic(alpha, beta)).iloc[0]
    assert fit["alpha_ci_low_s"] <= alpha <= fit["alpha_ci_high_s"]
    assert fit["beta_ci_low_bytes_per_s"] <= beta <= fit["beta_ci_high_bytes_per_s"]
    assert fit["alpha_s"] == pytest.approx(alpha, rel=0.1) and fit["beta_bytes_per_s"] == pytest.approx(beta, rel=0.1)
    assert fit["rank_counts"] == "2,4" and fit["link_class"] == "intra-node"


def test_fit_without_two_ranks_is_a_clear_error():
    df = _synthetic(1e-5, 1e9, ranks=(1,))
    with pytest.raises(ScalescopeError, match="N >= 2"):
        M.fit_link_alpha_beta(df)


def test_two_level_is_the_ring_inside_a_node_and_across_single_rank_nodes():
    links = pd.concat([M.fit_link_alpha_beta(_synthetic(2e-6, 2e10, noise=0)),
                       M.fit_link_alpha_beta(_synthetic(2e-5, 1e9, noise=0, link="inter-node"))])
    m = 1e8
    one_node = M.allreduce_time(links, n_ranks=[8], nbytes=m, ranks_per_node=8, model="two-level").iloc[0]
    ring = M.allreduce_time(links, n_ranks=[8], nbytes=m, ranks_per_node=8, model="ring").iloc[0]
    assert one_node["pred_s"] == pytest.approx(ring["pred_s"]) and one_node["n_nodes"] == 1
    per_node_1 = M.allreduce_time(links, n_ranks=[4], nbytes=m, ranks_per_node=1, model="two-level").iloc[0]
    ring_inter = 2 * 3 * 2e-5 + 2 * 3 / 4 * m / 1e9
    assert per_node_1["pred_s"] == pytest.approx(ring_inter, rel=1e-6)
    # across nodes the two-level model sends only 1/L of the data over the slow link
    auto = M.allreduce_time(links, n_ranks=[16], nbytes=m, ranks_per_node=8).iloc[0]
    flat = M.allreduce_time(links, n_ranks=[16], nbytes=m, ranks_per_node=8, model="ring").iloc[0]
    assert auto["model"] == "two-level" and auto["pred_s"] < flat["pred_s"]


def test_missing_inter_node_fit_is_said_not_guessed():
    links = M.fit_link_alpha_beta(_synthetic(2e-6, 2e10))
    p = M.allreduce_time(links, n_ranks=[2, 16], nbytes=1e6, ranks_per_node=8)
    assert np.isfinite(p["pred_s"].iloc[0]) and np.isnan(p["pred_s"].iloc[1])
    assert p["note"].iloc[1] == "no inter-node fit"


def test_prediction_error_marks_rank_counts_left_out_of_the_fit():
    links = M.fit_link_alpha_beta(_synthetic(1e-4, 1e9, ranks=(2,), noise=0))
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "n_params": [1e6] * 3, "n_nodes": [1, 1, 1]})
    truth = {n: 2 * (n - 1) * 1e-4 + 2 * (n - 1) / n * 4e6 / 1e9 for n in (2, 4)}
    cost = pd.DataFrame({"run_id": ["a", "b", "c"], "config_backend": ["ddp-gloo", "horovod-gloo", "ddp-gloo"],
                         "n_ranks": [2, 4, 1], "sync_median_s": [truth[2], truth[4] * 1.25, 0.0]})
    err = M.sync_prediction_error(links, cost, runs, fit_rank_counts=[1, 2])
    assert err["run_id"].tolist() == ["a", "b"]
    assert err["held_out"].tolist() == [False, True]
    assert err["error_frac"].iloc[0] == pytest.approx(0, abs=1e-6)
    assert err["error_frac"].iloc[1] == pytest.approx(1 / 1.25 - 1, rel=1e-6)
    assert set(err["model"]) == {"ring"}


def test_message_sizes_hold_the_model_sizes():
    sizes = dict(bench_allreduce.message_sizes(max_bytes=4096, model_params=153_532))
    assert sizes[4] == "sweep" and sizes[4096] == "sweep" and 16384 not in sizes
    assert sizes[614_128] == "gradient"
    assert sizes[1 << 20] == "ddp_first_bucket"
    assert dict(bench_allreduce.message_sizes())[1 << 20] == "ddp_first_bucket"  # 4**10: the model label wins
    assert sizes[25 << 20] == "ddp_bucket" and sizes[64 << 20] == "horovod_fusion"
    full = [b for b, _ in bench_allreduce.message_sizes()]
    assert full[0] == 4 and max(full) == 256 << 20


@pytest.mark.slow
def test_bench_allreduce_with_gloo_and_mpi_at_one_and_two_ranks(tmp_path, real_experiment):
    import shutil

    from analysis.report import build_report

    exp = tmp_path / "EXP"  # a copy: the bench goes into the experiment, where the report finds it
    shutil.copytree(real_experiment[0], exp)
    out = exp / "bench"
    p = subprocess.run([sys.executable, "-m", "analysis.cli", "bench-allreduce", "--np", "1,2", "--backend",
                        "gloo,mpi", "--out", str(out), "--max-bytes", "4K", "--repeats", "3", "--experiment",
                        str(exp)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    info = json.loads((out / "bench.json").read_text())
    assert [(x["backend"], x["np"], x["status"]) for x in info["launches"]] == [
        ("gloo", 1, "ok"), ("gloo", 2, "ok"), ("mpi", 1, "ok"), ("mpi", 2, "ok")]
    data = pd.read_csv(out / "allreduce.csv")
    assert set(data["n_ranks"]) == {1, 2} and (data["time_s"] > 0).all()
    assert set(data["size_label"]) >= {"sweep", "gradient", "ddp_bucket", "horovod_fusion"}
    fit = pd.read_csv(out / "fit.csv")
    assert set(fit["backend"]) == {"gloo", "mpi"} and set(fit["link_class"]) == {"intra-node"}
    assert (fit["alpha_s"] >= 0).all() and (fit["beta_bytes_per_s"] > 0).all()
    assert "alpha-beta fit per link class" in p.stdout
    err = pd.read_csv(out / "model_error.csv")
    two = err[err["n_ranks"] == 2]
    assert len(two) and two["sync_pred_s"].notna().all() and not two["held_out"].any()
    assert set(two["model"]) == {"ring"}  # one node: the two-level model is the ring
    # the report shows the fit, both models' predictions and their error, and each backend's path
    export = build_report(exp, tmp_path / "report", static=False).parent / "export"
    shown = pd.read_csv(export / "allreduce_model_error.csv")
    assert shown[["run_id", "sync_pred_s"]].equals(err[["run_id", "sync_pred_s"]])
    models = pd.read_csv(export / "allreduce_models.csv")
    assert set(models["model"]) == {"one-shot", "ring", "tree", "two-level"}
    backends = pd.read_csv(export / "backends.csv")
    two_rank = backends[backends["n_ranks"] == 2]
    assert (two_rank.loc[two_rank["config_backend"].str.endswith("gloo"), "comm_path"] == "intra-node Gloo TCP").all()
