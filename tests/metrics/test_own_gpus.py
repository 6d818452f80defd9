"""GPU usage of the run's own GPUs (issue 13): the rank-to-GPU mapping of run.json, idle GPUs
of a partly filled node left out and listed, memory before against during training."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis import metrics as M
from analysis import schema
from analysis.metrics import utilization as U
from analysis.runset import read_rank_devices


def _run_json(tmp_path, ranks, devices):
    d = tmp_path / "run"
    d.mkdir()
    (d / "run.json").write_text(json.dumps({
        "format": "scalescope.run", "format_version": 1, "run_id": "r2", "ranks": ranks,
        "sampler": {"kind": "nvml", "hosts": {"n1": {"rank": 0, "kind": "nvml", "devices": devices}}}}))
    return d


def test_rank_devices_by_uuid_then_visible_devices_then_index(tmp_path):
    devices = [{"index": i, "name": "H100", "uuid": f"GPU-000{i}"} for i in range(4)]
    ranks = [
        # torch's uuid has no "GPU-" prefix and may differ in case
        {"rank": 0, "local_rank": 0, "host": "n1", "device": 0, "gpu_uuid": "0002", "cuda_visible_devices": None},
        # CUDA_VISIBLE_DEVICES=1,3: torch's 1 is NVML's 3
        {"rank": 1, "local_rank": 1, "host": "n1", "device": 1, "gpu_uuid": None, "cuda_visible_devices": "1,3"},
        {"rank": 2, "local_rank": 2, "host": "n1", "device": 1, "gpu_uuid": None, "cuda_visible_devices": None},
        {"rank": 3, "local_rank": 0, "host": "n1", "device": None},  # a CPU rank
    ]
    rd = read_rank_devices(_run_json(tmp_path, ranks, devices))
    assert rd[["rank", "device", "device_from"]].values.tolist() == [
        [0, 2, "uuid"], [1, 3, "cuda_visible_devices"], [2, 1, "same_index"]]


def _samples():
    # node n1 has 4 GPUs, the 2-rank run used 0 and 1; training starts at t = 2 s
    rows = []
    for dev in range(4):
        for t in range(6):
            used = dev < 2
            before = t < 2
            mem = (500.0 if before else 9000.0 + (1500.0 if dev == 0 else 0.0)) if used else 3.0
            rows.append({"device": dev, "ts_ns": t * 10**9, "util_gpu_pct": 0.0 if before or not used else 90.0,
                         "mem_used_mib": mem, "power_w": 300.0 if used and not before else 60.0})
    df = pd.DataFrame(rows)
    return schema.make_samples(len(df), run_id="r2", host="n1", device=df["device"], ts_ns=df["ts_ns"],
                               util_gpu_pct=df["util_gpu_pct"], mem_used_mib=df["mem_used_mib"],
                               power_w=df["power_w"], source="test")


RANK_DEVICES = pd.DataFrame({"run_id": ["r2", "r2"], "rank": [0, 1], "host": ["n1", "n1"], "device": [0, 1]})


def test_idle_gpus_are_left_out_and_listed():
    s = _samples()
    before = s.copy()
    all_gpus = M.device_usage(s)
    own = M.device_usage(s, rank_devices=RANK_DEVICES)
    pd.testing.assert_frame_equal(s, before)
    assert sorted(all_gpus["device"].dropna().tolist()) == [0, 1, 2, 3]
    assert sorted(own["device"].dropna().tolist()) == [0, 1]
    idle = U.idle_devices(s, RANK_DEVICES)
    assert idle["device"].tolist() == [2, 3] and (idle["util_gpu_pct_mean"] == 0).all()
    # a run with no mapping keeps all its GPUs
    other = s.assign(run_id=pd.Categorical(["r9"] * len(s)))
    assert len(U.own_samples(other, RANK_DEVICES)) == len(s)


def test_memory_before_and_during_training_and_gpu0_extra():
    events = schema.make_events(run_id="r2", kind="phase", name="forward", start_ns=[2 * 10**9], dur_ns=[10],
                                rank=0, source="test")
    start = U.training_start(events)
    m = U.gpu_memory_phases(_samples(), RANK_DEVICES, start).set_index("device")
    assert m.loc[0, "mem_before_mib"] == 500.0 and m.loc[0, "mem_during_mib"] == 10500.0
    assert m.loc[1, "mem_growth_mib"] == 8500.0
    assert m.loc[0, "extra_vs_others_mib"] == 1500.0 and m.loc[1, "extra_vs_others_mib"] == -1500.0
    assert m.loc[0, "util_gpu_pct_mean"] == 90.0 and m.loc[0, "power_w_mean"] == 300.0
    assert list(m.index) == [0, 1]


def test_gpu_timeline_has_one_line_per_own_gpu():
    t = U.gpu_timeline(_samples(), RANK_DEVICES)
    assert sorted(t["gpu"].unique()) == ["n1:0", "n1:1"]
    assert t.groupby("gpu")["t_s"].max().tolist() == [5.0, 5.0]
    assert np.isclose(t["t_s"].min(), 0.0)


def test_jump_at_the_first_extra_node():
    usage = pd.DataFrame({"run_id": ["a", "b", "c"], "unit": "gpu", "util_gpu_pct_mean": [90.0, 88.0, 60.0]})
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "n_ranks": [2, 4, 8], "n_nodes": [1, 1, 2],
                         "config_backend": "ddp-nccl"})
    t = M.usage_by_ranks(usage, runs)
    row = t[t["new_node"]]
    assert row["n_ranks"].tolist() == [8]
    assert row["util_gpu_pct_mean_jump"].tolist() == [pytest.approx(-28.0)]


GPU_RUN = "gpu_run/h200_ddp_nccl_np1"
#: The first training phase of this run's full trace (tests/data/gpu_run/README.md).
TRAIN_START_NS = 1795597509674224124


def test_real_h200_run_maps_its_rank_by_uuid(data_dir):
    from analysis.runset import RunSet

    rs = RunSet.from_dirs(data_dir / GPU_RUN)
    assert rs.runs["partition"].tolist() == ["h200"] and rs.runs["gpu_model"].tolist() == ["NVIDIA H200"]
    assert rs.runs[["gpus_per_node", "gpus_on_node"]].values.tolist() == [[1, 1]]
    rd = rs.rank_devices
    assert rd[["rank", "device", "device_from"]].values.tolist() == [[0, 0, "uuid"]]
    s = rs.samples
    assert len(U.own_samples(s, rd)) == len(s) == 34 and U.idle_devices(s, rd).empty
    start = pd.Series({"ddp-nccl_np1_r1": TRAIN_START_NS})
    m = U.gpu_memory_phases(s, rd, start).iloc[0]
    assert (m["mem_before_mib"], m["mem_during_mib"]) == (1793.875, 2033.875)
    assert m["mem_growth_mib"] == 240.0
