"""The sweep's profiler options: parsing, the rank-command wrappers, the run.json record."""

from __future__ import annotations

import json
import stat

import pytest

from instrumentation import profilers, sweep
from instrumentation import torch_profiler as tp


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    """An executable named nsys that prints a version like the real one (only for the
    option tests: the real CLI runs in test_crosscheck_horovod_nsys.py)."""
    exe = tmp_path / "bin" / "nsys"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\necho 'NVIDIA Nsight Systems version 2099.1.2.3-abc'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("SCALESCOPE_NSYS", str(exe))
    return str(exe)


def _args(sweep_parser, *extra):
    return sweep_parser().parse_args(["--out", "x", *extra, "--", "python", "t.py"])


def test_defaults(sweep_parser):
    a = _args(sweep_parser)
    assert (a.nsys, a.torch_profiler, a.profile_steps, a.nsys_trace) == (False, False, "1,1,3", None)
    assert profilers.wrappers_from_args(a) == []
    assert profilers.profiler_env(a) == {}
    assert profilers.profiler_manifest(a) == {}


@pytest.mark.parametrize("bad", ["1,1", "a,b,c", "1,1,0", "-1,0,2"])
def test_bad_profile_steps_are_rejected(sweep_parser, bad, capsys):
    with pytest.raises(SystemExit):
        _args(sweep_parser, "--torch-profiler", "--profile-steps", bad)
    assert "profile" in capsys.readouterr().err


def test_parse_schedule():
    assert tp.parse_schedule(" 2, 0 ,5") == (2, 0, 5)
    with pytest.raises(ValueError, match="active >= 1"):
        tp.parse_schedule("1,1,0")


def test_rank_variables_per_launcher():
    v = profilers.nsys_rank_variable
    assert v("horovod", "gloo") == "HOROVOD_RANK"
    assert v("horovod", "mpi") == "OMPI_COMM_WORLD_RANK"
    assert v("ddp", "gloo") == v("ddp", "nccl") == "RANK"
    assert v("none", "") is None
    assert v("ddp", "gloo", slurm_launcher="srun") == "SLURM_PROCID"
    assert v("horovod", "gloo", slurm_launcher="mpirun") == "OMPI_COMM_WORLD_RANK"


def test_nsys_trace_values(sweep_parser, fake_nsys):
    assert profilers.parse_nsys_trace("NVTX, osrt,nvtx") == ["nvtx", "osrt"]
    a = _args(sweep_parser, "--nsys", "--nsys-trace", "nvtx,gpu")
    with pytest.raises(profilers.ProfilerError, match="choose from nvtx, cuda, osrt, mpi"):
        profilers.wrappers_from_args(a)


def test_missing_nsys_says_how_to_get_it(sweep_parser, monkeypatch, tmp_path):
    monkeypatch.delenv("SCALESCOPE_NSYS", raising=False)
    monkeypatch.setattr(profilers, "LOCAL_NSYS", tmp_path / "absent" / "nsys")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(profilers.ProfilerError, match=r"install_nsys\.sh.*SCALESCOPE_NSYS") as err:
        profilers.wrappers_from_args(_args(sweep_parser, "--nsys"))
    assert isinstance(err.value, ValueError)  # the sweep reports ValueErrors as bad options


def test_wrappers_build_the_rank_commands(sweep_parser, fake_nsys, tmp_path):
    a = _args(sweep_parser, "--nsys", "--nsys-trace", "nvtx,mpi", "--nsys-args", "--stats false",
              "--torch-profiler", "--profile-steps", "2,1,4", "--profile-shapes")
    wrappers = profilers.wrappers_from_args(a)
    run_dir = tmp_path / "EXP" / "horovod-gloo_np2_r1"
    spec = sweep.RunSpec("horovod-gloo", 2, None, 1)
    cmd = sweep.rank_command(spec, ["python", "train.py"], run_dir, wrappers=wrappers)
    assert cmd[:3] == ["env", "SCALESCOPE_TORCH_PROFILER=2,1,4", "SCALESCOPE_TORCH_PROFILER_SHAPES=1"]
    nsys = cmd[3:]
    assert nsys[:4] == [fake_nsys, "profile", "-t", "nvtx,mpi"]
    assert nsys[nsys.index("-o") + 1] == f"{run_dir.resolve()}/nsys/rank-%q{{HOROVOD_RANK}}-%h"
    assert nsys[-4:] == ["--stats", "false", "python", "train.py"]
    for opt, val in (("--force-overwrite", "true"), ("--export", "sqlite")):
        assert nsys[nsys.index(opt) + 1] == val
    assert (run_dir / "nsys").is_dir()  # nsys itself does not create it
    base = sweep.rank_command(sweep.RunSpec("baseline", 1, None, 1), ["python", "t.py"], run_dir,
                              wrappers=wrappers)
    assert f"{run_dir.resolve()}/nsys/rank-0-%h" in base


def test_dry_run_creates_no_directories(sweep_parser, fake_nsys, tmp_path, capsys):
    out = tmp_path / "EXP"
    a = sweep_parser().parse_args(["--out", str(out), "--dry-run", "--np", "2", "--backend", "ddp-gloo",
                                   "--nsys", "--torch-profiler", "--", "python", "t.py"])
    assert sweep.run(a) == 0
    printed = capsys.readouterr().out
    assert "rank-%q{RANK}-%h" in printed and "SCALESCOPE_TORCH_PROFILER=1,1,3" in printed
    assert not out.exists()


def test_manifest_and_record(sweep_parser, fake_nsys, tmp_path):
    a = _args(sweep_parser, "--nsys", "--nsys-trace", "nvtx", "--torch-profiler")
    run_dir = tmp_path / "run"
    (run_dir / "nsys").mkdir(parents=True)
    (run_dir / "nsys" / "rank-0-h.sqlite").write_bytes(b"")
    (run_dir / "run.json").write_text(json.dumps({
        "format": "scalescope.run", "status": "ok",
        "profilers": {"torch_profiler": {"activities": ["cpu"], "schedule": {"wait": 9}}}}))
    info = profilers.profiler_manifest(a, run_dir=run_dir, spec=sweep.RunSpec("ddp-gloo", 2, None, 1))
    assert info["nsys"]["version"] == "2099.1.2.3-abc"
    assert info["nsys"]["output"] == "nsys/rank-%q{RANK}-%h"
    assert info["nsys"]["files"] == ["nsys/rank-0-h.sqlite"]
    assert info["nsys"]["options"][:2] == ["-t", "nvtx"]
    assert info["torch_profiler"]["profiled_steps"] == [2, 3, 4]
    merged = profilers.record_profilers(run_dir, info)
    on_disk = json.loads((run_dir / "run.json").read_text())
    assert on_disk == merged and on_disk["status"] == "ok"
    # the training process' own observations stay, the launcher's schedule wins
    assert on_disk["profilers"]["torch_profiler"]["activities"] == ["cpu"]
    assert on_disk["profilers"]["torch_profiler"]["schedule"]["wait"] == 1
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]
    assert profilers.record_profilers(run_dir, {}) is None
    with pytest.raises(FileNotFoundError, match="no run manifest"):
        profilers.record_profilers(tmp_path / "nowhere", info)
