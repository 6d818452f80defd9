"""Communication-path capture (instrumentation.commpath): NCCL debug variables, node facts,
missing tools recorded as such."""

from __future__ import annotations

import os
import shutil

import pytest

from instrumentation import commpath


@pytest.mark.parametrize(("framework", "controller", "captured"), [
    ("ddp", "nccl", True), ("horovod", "gloo", True), ("horovod", "mpi", True),
    ("ddp", "gloo", False), ("ddp", "mpi", False), ("none", "", False),
])
def test_nccl_env_only_for_runs_that_may_use_nccl(tmp_path, framework, controller, captured):
    env = commpath.nccl_env({}, tmp_path, framework=framework, controller=controller)
    assert ("NCCL_DEBUG" in env) == captured
    if captured:
        assert env["NCCL_DEBUG"] == "INFO"
        assert env["NCCL_DEBUG_FILE"] == str(tmp_path.resolve() / "nccl.%h.%p.log")
    assert list(tmp_path.iterdir()) == []  # nothing written (a dry run must write nothing)


def test_nccl_env_keeps_the_callers_settings_and_can_be_turned_off(tmp_path):
    env = commpath.nccl_env({"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/x/%h"}, tmp_path, framework="ddp",
                            controller="nccl")
    assert env == {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/x/%h"}
    assert commpath.nccl_env({}, tmp_path, framework="ddp", controller="nccl", enabled=False) == {}


def test_run_capture_lists_logs_and_knobs(tmp_path):
    (tmp_path / "nccl.h.1.log").write_text("h:1:1 [0] NCCL INFO x\n")
    (tmp_path / "nccl.h.2.log").write_text("")  # a process that printed nothing
    cap = commpath.run_capture(tmp_path, {"NCCL_IB_DISABLE": "1", "OMPI_MCA_btl": "self,vader",
                                          "HOROVOD_FUSION_THRESHOLD": "1048576"})
    assert cap["nccl_logs"] == ["nccl.h.1.log"] and cap["nccl_debug"] == "INFO"
    assert cap["nccl_env"] == {"NCCL_IB_DISABLE": "1"}
    assert cap["mpi_env"] == {"OMPI_MCA_btl": "self,vader"}
    assert cap["horovod_knobs"]["HOROVOD_FUSION_THRESHOLD"] == "1048576"
    assert cap["horovod_knobs"]["HOROVOD_CYCLE_TIME"] is None


def test_missing_tools_are_recorded(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert commpath.topo_matrix() == {"available": False, "reason": "nvidia-smi not on PATH"}
    mpi = commpath.mpi_info({"UCX_TLS": "tcp"})
    assert mpi["available"] is False and "mpirun" in mpi["reason"] and mpi["env"] == {"UCX_TLS": "tcp"}


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun here")
def test_mpi_implementation_and_version():
    mpi = commpath.mpi_info()
    assert mpi["available"] and mpi["implementation"] in {"Open MPI", "MPICH", "Intel MPI", "MVAPICH"}
    assert mpi["version"] and mpi["version"][0].isdigit()


def test_nics_from_sys():
    info = commpath.nics()
    if not os.path.isdir("/sys/class/net"):
        assert info["available"] is False
        return
    names = [i["name"] for i in info["interfaces"]]
    assert "lo" in names and names == sorted(os.listdir("/sys/class/net"))
    assert isinstance(info["rdma"], list)


def test_nics_of_a_fake_sys_tree_with_an_ib_device(tmp_path):
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    (port / "link_layer").write_text("InfiniBand\n")
    eth = tmp_path / "class" / "net" / "ib0"
    eth.mkdir(parents=True)
    (eth / "speed").write_text("200000\n")
    (eth / "operstate").write_text("up\n")
    info = commpath.nics(tmp_path)
    assert info["interfaces"] == [{"name": "ib0", "operstate": "up", "speed_mbps": 200000, "mtu": None}]
    assert info["rdma"] == [{"name": "mlx5_0", "ports": [{"port": "1", "state": "4: ACTIVE",
                                                         "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand"}]}]


def test_horovod_info_records_build_or_why_not():
    info = commpath.horovod_info({"HOROVOD_FUSION_THRESHOLD": "33554432"})
    assert info["knobs"]["HOROVOD_FUSION_THRESHOLD"] == "33554432"
    assert info["fusion_threshold_bytes"] == 33554432
    if info["available"]:
        assert set(info["controllers"]) == {"gloo", "mpi"} and "nccl" in info["tensor_operations"]
    else:
        assert info["reason"]


def test_sweep_run_env_and_manifest_carry_the_capture(tmp_path):
    import json

    from instrumentation.experiment import RunSpec, finalize_run, run_env

    nccl = RunSpec("ddp-nccl", 2, None, 1)
    env = run_env(nccl, tmp_path, experiment="x", base={})
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_FILE"].endswith("nccl.%h.%p.log")
    assert "NCCL_DEBUG" not in run_env(nccl, tmp_path, experiment="x", base={}, nccl_debug=False)
    assert "NCCL_DEBUG" not in run_env(RunSpec("ddp-gloo", 2, None, 1), tmp_path, experiment="x", base={})
    run_dir = tmp_path / "EXP" / nccl.run_id
    run_dir.mkdir(parents=True)
    (run_dir / "nccl.h.7.log").write_text("h:7:7 [0] NCCL INFO Using network Socket\n")
    finalize_run(run_dir, nccl, exit_code=1, experiment="EXP", command=["x"])
    cap = json.loads((run_dir / "run.json").read_text())["comm_capture"]
    assert cap["nccl_logs"] == ["nccl.h.7.log"] and cap["nccl_debug"] == "INFO"
    assert cap["node"]["host"] and "available" in cap["node"]["topo"] and "mpi" in cap["node"]
