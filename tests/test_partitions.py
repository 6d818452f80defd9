"""Clusters and partitions as run axes (issue 13): the runs table reads them from SLURM's
variables or the sweep's --label, run_summary keeps them, and speedups can be taken per
partition or against one partition's baseline (tests/data/experiment_small, copied twice)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from analysis import metrics as M
from analysis import plots as P
from analysis.runset import RunSet


def _relabel(exp, *, labels=None, slurm=None, tensor_op=None):
    e = json.loads((exp / "experiment.json").read_text())
    (exp / "experiment.json").write_text(json.dumps({**e, "name": exp.name}))
    for run_json in exp.glob("*/run.json"):
        m = json.loads(run_json.read_text())
        if labels:
            m["config"]["labels"] = dict(labels)
        if slurm and m["run_id"].startswith("horovod"):
            m["slurm"] = dict(slurm)
        if tensor_op and m.get("horovod"):
            m["horovod"]["tensor_operation"] = tensor_op
        run_json.write_text(json.dumps(m))


@pytest.fixture()
def two(data_dir, tmp_path):
    a, b = tmp_path / "alpha", tmp_path / "beta"
    shutil.copytree(data_dir / "experiment_small", a)
    shutil.copytree(data_dir / "experiment_small", b)
    _relabel(a, labels={"partition": "alpha", "cluster": "vm", "threads": "1"})
    # beta's framework runs ran under SLURM, whose partition wins over the label
    _relabel(b, labels={"partition": "beta", "threads": "2"},
             slurm={"SLURM_JOB_PARTITION": "gpu-beta", "SLURM_CLUSTER_NAME": "hpc"}, tensor_op="nccl")
    return RunSet.from_dirs([a, b])


def test_placement_columns(two):
    r = two.runs.set_index("run_id")
    assert r.loc["alpha/horovod-gloo_np4_bs10_r1", ["cluster", "partition", "label_threads"]].tolist() == \
        ["vm", "alpha", "1"]
    assert r.loc["alpha/horovod-gloo_np4_bs10_r1", "nodes"] == "node1,node2"
    assert r.loc["beta/none_np1_bs10_r1", ["cluster", "partition"]].tolist() == [None, "beta"]
    assert r.loc["beta/horovod-gloo_np4_bs10_r1", ["cluster", "partition"]].tolist() == ["hpc", "gpu-beta"]
    assert r.loc["alpha/none_np1_bs10_r1", "labels"] == "partition=alpha; cluster=vm; threads=1"


def test_backend_label_comes_from_what_ran(two):
    r = two.runs.set_index("run_id")
    # launched as horovod-gloo, but its allreduces ran on NCCL
    assert r.loc["beta/horovod-gloo_np2_bs10_r1", "config_backend"] == "horovod-nccl"
    assert r.loc["beta/horovod-gloo_np2_bs10_r1", "requested_backend"] == "horovod-gloo"
    assert r.loc["beta/horovod-gloo_np2_bs10_r1", "horovod_controller"] == "gloo"
    assert r.loc["alpha/horovod-gloo_np2_bs10_r1", "config_backend"] == "horovod-gloo"


def test_run_summary_keeps_the_axes(two):
    pr = M.run_summary(two)
    for col in ("experiment", "cluster", "partition", "gpu_model", "n_nodes", "gpus_per_node", "label_threads"):
        assert col in pr.columns, col
    assert set(pr["experiment"]) == {"alpha", "beta"}


def test_one_baseline_for_every_partition(two):
    pr = M.run_summary(two).assign(partition=lambda d: d["experiment"])  # one partition per experiment
    pr["epoch_time_s"] = pr["epoch_time_s"] * (pr["partition"].map({"alpha": 1.0, "beta": 2.0}))
    pr["throughput_samples_per_s"] = pr["samples_per_epoch"] / pr["epoch_time_s"]
    # every study compares the time per sample of the steps (docs/metrics.md): slow it too
    pr["time_per_sample_s"] = pr["time_per_sample_s"] * (pr["partition"].map({"alpha": 1.0, "beta": 2.0}))
    base = {"partition": "alpha", "framework": "none", "n_ranks": 1, "batch_size": 10}
    t = M.scaling_table(pr, baseline=base, by=("partition", "framework"), match=())
    t0 = pr[(pr["partition"] == "alpha") & (pr["framework"] == "none") & (pr["batch_size"] == 10)]
    assert t["baseline_epoch_time_s"].unique().tolist() == [pytest.approx(float(t0["epoch_time_s"].iloc[0]))]
    hv = t[t["framework"] == "horovod"].set_index(["partition", "n_ranks"])
    # beta is twice as slow at every rank count, so half the speedup against alpha's baseline
    assert hv.loc[("beta", 2), "speedup"] == pytest.approx(hv.loc[("alpha", 2), "speedup"] / 2)
    own = M.scaling_table(pr, baseline="none", by=("partition", "framework"))
    own = own[own["framework"] == "horovod"].set_index(["partition", "n_ranks"])
    # each partition against its own baseline: the same speedups
    assert own.loc[("beta", 2), "speedup"] == pytest.approx(own.loc[("alpha", 2), "speedup"])
    fig = P.plot_scaling(t[t["framework"] != "none"], by="partition",
                         boundaries=M.node_boundaries(pr, by=("partition",)))
    lines = [d for d in fig.data if d.name in ("alpha", "beta") and d.showlegend is not False]
    assert [d.name for d in lines] == ["alpha", "beta"]
    assert sum(a.text.strip().startswith(("alpha:", "beta:")) for a in fig.layout.annotations) == 2


def test_node_boundaries_per_group():
    runs = pd.DataFrame({"partition": ["a", "a", "a", "b", "b"], "n_ranks": [2, 4, 8, 4, 8],
                         "n_nodes": [1, 1, 2, 1, 1]})
    b = M.node_boundaries(runs, by=("partition",))
    assert b[["partition", "n_ranks_before", "n_ranks_after", "x"]].values.tolist() == [["a", 4, 8, 6.0]]


def test_weak_and_strong_each_against_their_own_ideal():
    pr = pd.DataFrame({"framework": ["none", "ddp", "none", "ddp"], "config_backend": ["none", "ddp"] * 2,
                       "scaling": ["strong", "strong", "weak", "weak"], "n_ranks": [1, 2, 1, 2],
                       "batch_size": 75, "epoch_time_s": [10.0, 6.0, 10.0, 12.5],
                       "throughput_samples_per_s": [100.0, 166.7, 100.0, 160.0]})
    t = M.scaling_table(pr, mode="auto", by=("config_backend",)).set_index(["scaling", "config_backend"])
    assert t.loc[("strong", "ddp"), "speedup"] == pytest.approx(10 / 6)
    assert t.loc[("weak", "ddp"), "speedup"] == pytest.approx(1.6)  # X(2)/X(1)
    assert t.loc[("weak", "ddp"), "efficiency_frac"] == pytest.approx(0.8)  # = T(1)/T(2)
