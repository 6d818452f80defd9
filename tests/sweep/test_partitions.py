"""Sweep options of issue 13: --label, --scaling weak, --find-max, and the NCCL backends'
checks (the real runs of the example are in tests/examples/test_sizes.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from instrumentation import backend_check, findmax, sweep
from instrumentation.sweep import RunSpec, plan_runs, run_env

ROOT = Path(__file__).resolve().parents[2]


def _sweep(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "instrumentation.sweep", *argv], capture_output=True,
                          text=True, timeout=240, cwd=ROOT)


def test_labels_and_weak_scaling_are_in_every_config(tmp_path):
    plan = plan_runs(nps=[1, 4], backends=["ddp-gloo"], baseline=True, labels=[("partition", "alpha")],
                     scaling="weak")
    assert [s.run_id for s in plan] == ["baseline_np1_weak_r1", "ddp-gloo_np1_weak_r1", "ddp-gloo_np4_weak_r1"]
    cfg = plan[2].config(experiment="E")
    assert cfg["labels"] == {"partition": "alpha"} and cfg["scaling"] == "weak" and cfg["data_scale"] == 4
    assert RunSpec.from_config(cfg) == plan[2]
    env = run_env(plan[2], tmp_path / "r", experiment="E", base={"SCALESCOPE_DATA_SCALE": "9"})
    assert env["SCALESCOPE_DATA_SCALE"] == "4"
    strong = plan_runs(nps=[4], backends=["ddp-gloo"])[0]
    assert "labels" not in strong.config(experiment="E") and "scaling" not in strong.config(experiment="E")
    assert "SCALESCOPE_DATA_SCALE" not in run_env(strong, tmp_path / "s", experiment="E",
                                                  base={"SCALESCOPE_DATA_SCALE": "9"})
    with pytest.raises(ValueError, match="--scaling must be strong or weak"):
        plan_runs(nps=[1], backends=["ddp-gloo"], scaling="medium")


def test_horovod_nccl_is_mpi_controller_with_nccl_operations(tmp_path):
    spec = RunSpec("horovod-nccl", 2, 75, 1)
    assert (spec.framework, spec.controller) == ("horovod", "mpi")
    env = run_env(spec, tmp_path / "r", experiment="E", base={})
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL" and env["SCALESCOPE_BACKEND"] == "mpi"


@pytest.mark.parametrize(("facts", "backend", "message"), [
    ({"torch": "2", "cuda_gpus": 0, "torch_nccl": True}, "ddp-nccl", "sees no CUDA GPU"),
    ({"torch": "2", "cuda_gpus": 8, "torch_nccl": False}, "ddp-nccl", "this torch has no NCCL"),
    ({"torch": "2", "cuda_gpus": 8, "torch_nccl": True, "horovod": None, "horovod_error": "No module"},
     "horovod-nccl", "horovod.torch cannot be imported here .No module"),
    ({"torch": "2", "cuda_gpus": 8, "torch_nccl": True, "horovod": "importable", "horovod_nccl": False},
     "horovod-nccl", "built without NCCL"),
    ({"torch": "2", "cuda_gpus": 2, "torch_nccl": True, "horovod": "importable", "horovod_nccl": True},
     "horovod-nccl", "--np 4 needs 4 GPUs .one per rank., this machine has 2"),
])
def test_nccl_backends_are_refused_with_the_reason(facts, backend, message):
    with pytest.raises(ValueError, match=message):
        backend_check.check_nccl([backend], [1, 4], facts=facts)


def test_nccl_check_passes_where_everything_is_there():
    facts = {"torch": "2", "cuda_gpus": 4, "torch_nccl": True, "horovod": "importable", "horovod_nccl": True}
    backend_check.check_nccl(["ddp-nccl", "horovod-nccl"], [1, 4], facts=facts)
    backend_check.check_nccl(["ddp-gloo"], [64], facts={})  # no NCCL backend: nothing asked


def test_nccl_backend_refused_on_this_machine_when_it_has_no_gpu(tmp_path):
    facts = backend_check.nccl_facts()
    if facts.get("cuda_gpus"):
        pytest.skip("this machine has a GPU")
    res = _sweep("--np", "1", "--backend", "ddp-nccl", "--out", str(tmp_path / "e"), "--", "python", "t.py")
    assert res.returncode == 2
    assert "scalescope sweep: error: --backend ddp-nccl:" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "e" / "experiment.json").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--label", "partition"], "expected KEY=VALUE"),
    (["--label", "9x=1"], "expected KEY=VALUE"),
    (["--label", "a=1", "--label", "a=2"], "--label a given twice"),
    (["--find-max", "curve-length=0"], "START a positive integer"),
    (["--find-max", "samples=10", "--vary", "samples=1,2"], "also given as --vary samples"),
    (["--find-max", "samples=10", "--slurm"], "does not work with --slurm"),
])
def test_bad_options_are_one_line(tmp_path, argv, message):
    res = _sweep("--np", "1", "--backend", "ddp-gloo", *argv, "--out", str(tmp_path / "e"), "--dry-run",
                 "--", "python", "t.py")
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr


def test_find_max_dry_run_shows_the_first_try(tmp_path, capsys):
    args = sweep_args(["--np", "1", "--backend", "", "--baseline", "--find-max", "curve-length=200",
                       "--label", "partition=alpha", "--out", str(tmp_path / "e"), "--dry-run", "--",
                       "python", "t.py"])
    assert sweep.run(args) == 0
    out = capsys.readouterr().out
    assert "would search --curve-length from 200" in out
    assert "baseline_np1_curve-length200_r1:" in out and "--curve-length 200" in out
    assert not (tmp_path / "e").exists()


def sweep_args(argv):
    import argparse

    p = argparse.ArgumentParser()
    sweep.add_arguments(p)
    return p.parse_args(argv)


def test_search_stops_on_a_run_that_is_not_about_memory():
    r = findmax.search("n", 10, lambda v: ("ok" if v < 40 else "timeout", f"r{v}"))
    assert r.largest_ok == 20 and r.smallest_oom is None
    assert "ended 'timeout'" in r.stopped and [t["value"] for t in r.tries] == [10, 20, 40]


def test_search_halves_when_the_start_does_not_fit():
    r = findmax.search("n", 64, lambda v: ("ok" if v <= 10 else "oom", f"r{v}"), rel_tol=0)
    assert (r.largest_ok, r.smallest_oom) == (10, 11)
    assert [t["value"] for t in r.tries][:4] == [64, 32, 16, 8]
    assert json.loads(json.dumps(r.as_dict()))["largest_ok"] == 10


def test_slurm_scripts_carry_weak_scaling_labels_and_nccl_operations(tmp_path):
    res = _sweep("--slurm", "--dry-run", "--np", "8", "--backend", "horovod-nccl", "--scaling", "weak",
                 "--label", "site=x", "--gpus-per-node", "4", "--cpus-per-node", "32", "--gpu-request", "gres",
                 "--out", str(tmp_path / "e"), "--", "python", "t.py")
    assert res.returncode == 0, res.stderr
    assert "export SCALESCOPE_DATA_SCALE=8" in res.stdout and "export HOROVOD_GPU_OPERATIONS=NCCL" in res.stdout
    cfg = json.loads(res.stdout.split("export SCALESCOPE_CONFIG='")[1].split("'")[0])
    assert (cfg["labels"], cfg["scaling"], cfg["data_scale"]) == ({"site": "x"}, "weak", 8)
