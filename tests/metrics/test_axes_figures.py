"""Issue 35's new quantities and figures: the allreduce models side by side, per-epoch compute
against update, the batch study at every rank count, memory against batch with the largest
batch that fits, epoch time against ranks, the topology matrix."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import metrics as M
from analysis import plots as P
from analysis.errors import ScalescopeError
from analysis.metrics.model import allreduce_time
from analysis.readers import nvsmi_topo

LINKS = pd.DataFrame({"link_class": ["intra-node", "inter-node"], "alpha_s": [2e-6, 2e-5],
                      "beta_bytes_per_s": [2e10, 1e9]})


@pytest.mark.parametrize("n", [2, 3, 8, 16])
def test_allreduce_models_by_their_formulas(n):
    m = 4e6
    t = M.allreduce_models(LINKS, n_ranks=[n], nbytes=m).set_index("model")["pred_s"]
    a, mb = 2e-6, m / 2e10
    assert t["ring"] == pytest.approx(2 * (n - 1) * a + 2 * (n - 1) / n * mb)
    assert t["one-shot"] == pytest.approx(2 * a + 2 * (n - 1) * mb)
    assert t["tree"] == pytest.approx(2 * math.ceil(math.log2(n)) * (a + mb))
    assert t["two-level"] == pytest.approx(t["ring"])  # one node
    # big messages favour the ring; from 4 ranks, latency-bound small ones the one-shot and the tree
    assert t["ring"] <= t["one-shot"] and t["ring"] <= t["tree"]
    small = M.allreduce_models(LINKS, n_ranks=[n], nbytes=8).set_index("model")["pred_s"]
    if n >= 4:
        assert small["one-shot"] < small["ring"] and small["tree"] < small["ring"]


def test_across_nodes_the_flat_models_use_the_inter_node_link():
    t = M.allreduce_models(LINKS, n_ranks=[8], nbytes=1e6, ranks_per_node=4).set_index("model")["pred_s"]
    assert t["one-shot"] == pytest.approx(2 * 2e-5 + 2 * 7 * 1e6 / 1e9)
    assert t["two-level"] < t["ring"]
    with pytest.raises(ScalescopeError, match="one of one-shot, ring, tree, two-level"):
        allreduce_time(LINKS, n_ranks=[2], nbytes=1.0, model="butterfly")


def test_allreduce_models_figure_has_a_line_per_model_and_the_measured_points():
    t = M.allreduce_models(LINKS.iloc[:1], n_ranks=[1, 2, 4, 8], nbytes=6e5)
    fig = P.plot_allreduce_models(t, measured=pd.DataFrame({"n_ranks": [1, 2], "sync_s": [0.0, 1e-3]}))
    assert [d.name for d in fig.data] == ["one-shot", "ring", "tree", "two-level", "measured"]
    assert list(fig.data[1].x) == [2, 4, 8] and list(fig.data[-1].x) == [2]
    assert "ms" in fig.layout.yaxis.title.text


def test_compute_update_per_epoch_totals_fall_with_the_batches():
    cu = pd.DataFrame({"config_backend": "ddp", "batch_size": 75, "n_ranks": [1, 2, 4],
                       "compute_per_step_s": [0.1, 0.1, 0.1], "update_per_step_s": 0.01, "sync_per_step_s": 0.0})
    pr = pd.DataFrame({"config_backend": "ddp", "batch_size": 75, "n_ranks": [1, 2, 4, 4],
                       "samples_per_epoch": [1000, 1000, 1000, 1000]})
    out = M.compute_update_per_epoch(cu, pr)
    assert out["batches_per_epoch"].tolist() == [14.0, 7.0, 4.0]  # ceil(1000 / (n · 75))
    assert out["update_per_epoch_s"].tolist() == pytest.approx([0.14, 0.07, 0.04])
    fig = P.plot_compute_update(out, per="epoch")
    assert fig.layout.yaxis.title.text == "time per epoch (s)" and list(fig.data[1].y) == pytest.approx([0.14, 0.07, 0.04])


def test_batch_at_every_rank_count_and_its_figure():
    pr = pd.DataFrame({"config_backend": "ddp", "n_ranks": [1, 1, 2, 2, 2], "batch_size": [60, 120, 30, 60, 60],
                       "global_batch_size": [60, 120, 60, 120, 120], "epoch_time_s": [3.0, 2.0, 2.5, 1.5, 1.7],
                       "throughput_samples_per_s": 1.0, "time_per_sample_s": [3, 2, 5, 3, 3.4]})
    t = M.batch_by_ranks(pr)
    two = t[t["n_ranks"] == 2].set_index("batch_size")
    assert two.loc[60, "n_runs"] == 2 and two.loc[60, "epoch_time_s"] == pytest.approx(1.6)
    assert two.loc[60, "time_per_sample_s"] == pytest.approx(3.2) and two.loc[30, "global_batch_size"] == 60
    fig = P.plot_batch_size(t, by=("config_backend", "n_ranks"))
    assert [d.name for d in fig.data] == ["ddp · 1", "ddp · 2"] and list(fig.data[1].x) == [30, 60]


def test_memory_against_batch_marks_the_runs_out_of_memory_and_the_limit():
    ep = pd.DataFrame({"run_id": ["a", "a", "b", "c"], "rank": [0, 1, 0, 0], "peak_mem_mib": [100.0, 120.0, 200.0, 90.0],
                       "peak_mem_kind": "cuda"})
    runs = pd.DataFrame({"run_id": ["a", "b", "c", "d"], "status": ["ok", "ok", "ok", "oom"], "config_backend": "ddp",
                         "n_ranks": [2, 2, 2, 2], "batch_size": [75, 150, 75, 300]})
    t = M.memory_by_batch(ep, runs)
    assert t["peak_mem_mib"].tolist()[:2] == [105.0, 200.0]  # largest rank per run, median over runs
    assert t["n_oom"].tolist() == [0, 0, 1]
    lim = M.memory_limit(t)
    assert lim[["largest_ok", "smallest_oom"]].values.tolist() == [[150.0, 300.0]]
    fig = P.plot_memory_batch(t, limit=lim)
    assert [d.name for d in fig.data] == ["ddp · 2", "out of memory (ddp · 2)", "largest batch that fits: 150"]


def test_epoch_time_figure_a_line_and_an_ideal_per_partition():
    t = pd.DataFrame({"partition": ["a", "a", "b", "b"], "config_backend": "ddp", "n_ranks": [1, 2, 1, 2],
                      "epoch_time_s_median": [4.0, 2.5, 8.0, 5.0], "epoch_time_s_min": [3.9, 2.4, 7.5, 4.5],
                      "epoch_time_s_max": [4.1, 2.6, 8.5, 5.5], "ideal_epoch_time_s": [4.0, 2.0, 8.0, 4.0]})
    fig = P.plot_epoch_time(t, by=("partition", "config_backend"))
    assert [d.name for d in fig.data] == ["a · ddp", "ideal (a · ddp)", "b · ddp", "ideal (b · ddp)"]
    assert list(fig.data[3].y) == [8000.0, 4000.0] and fig.layout.yaxis.title.text == "epoch time (ms)"


TOPO = """\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV2\tNV1\tSYS\t0-19\t0
GPU1\tNV2\t X \tPIX\tSYS\t0-19\t0
GPU2\tNV1\tPIX\t X \tNV2\t20-39\t1
GPU3\tSYS\tSYS\tNV2\t X \t20-39\t1

Legend:
"""


def test_topology_matrix_figure(tmp_path):
    f = tmp_path / "node1.topo.txt"
    f.write_text(TOPO)
    t = nvsmi_topo.read(f, host="node1")
    fig = P.plot_topology(t)
    hm = fig.data[0]
    assert list(hm.x) == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert hm.text[0] == ("X", "NV2", "NV1", "SYS") or list(hm.text[0]) == ["X", "NV2", "NV1", "SYS"]
    z = np.array(hm.z, dtype=float)
    assert z[0, 1] == 0 and z[1, 2] == 1 and z[0, 3] == 4 and np.isnan(z[0, 0])  # nvlink, pcie-switch, cross-socket


def test_the_report_says_its_scope_and_the_cpu_caveats_that_apply():
    from analysis import report
    from analysis.studies.scope import study_scope

    sec = study_scope(report.load([Path(__file__).resolve().parents[2] / "data" / "sample_partitions" / "alpha"]))
    assert "data parallelism" in sec.intro and "pipeline parallelism" in sec.intro and "out of scope" in sec.intro
    text = " ".join(sec.notes)
    assert "CPU run" in text and "resident memory" in text and "CPU utilisation" in text
    assert "Horovod" not in text.split("Memory")[0].split("GPUs:")[1]  # no Horovod run here: no Horovod caveat
