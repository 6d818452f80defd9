"""SLURM script generation: layout for 1-16 GPUs on 4- and 8-GPU nodes, scripts, finalize."""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from instrumentation import slurm, sweep
from instrumentation.sweep import RunSpec

ROOT = Path(__file__).resolve().parents[2]


def _args(**kw) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sweep.add_arguments(parser)
    args = parser.parse_args(["--out", "x", "--", "python", "t.py"])
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def _sbatch(text: str) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([a-z-]+)(?:=(\S+))?$", text, flags=re.M))


@pytest.mark.parametrize("gpus_per_node", [4, 8])
@pytest.mark.parametrize("np_", range(1, 17))
def test_layout_and_sbatch_lines(np_, gpus_per_node, tmp_path):
    args = _args(gpus_per_node=gpus_per_node, cpus_per_node=64, partition="gpu", account="proj42",
                 module=["cuda/12.4", "openmpi/4.1"], time="00:20:00")
    spec = RunSpec("ddp-nccl", np_, 75, 1)
    text = slurm.render_script(spec, script=["python", "train.py", "--epochs", "2"], out=tmp_path,
                               experiment="EXP", args=args)
    sb = _sbatch(text)
    nodes = math.ceil(np_ / gpus_per_node)
    per_node = min(np_, gpus_per_node)
    assert int(sb["nodes"]) == nodes
    assert int(sb["ntasks"]) == np_
    assert int(sb["ntasks-per-node"]) == per_node
    assert nodes * per_node >= np_ > (nodes - 1) * gpus_per_node  # sequential: full nodes first
    assert sb["gres"] == f"gpu:{per_node}"
    assert int(sb["cpus-per-task"]) == 64 // gpus_per_node
    assert "exclusive" in sb and sb["distribution"] == "block:block"
    assert (sb["partition"], sb["account"], sb["time"]) == ("gpu", "proj42", "00:20:00")
    assert sb["output"] == f"{tmp_path}/{spec.run_id}/stdout.log"
    assert "module load cuda/12.4\nmodule load openmpi/4.1\n" in text
    assert f"export SCALESCOPE_RUN_DIR={tmp_path.resolve()}/{spec.run_id}" in text
    assert "export SCALESCOPE_FRAMEWORK=ddp\nexport SCALESCOPE_BACKEND=nccl" in text
    assert f"srun --ntasks={np_} --ntasks-per-node={per_node}" in text
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in text


def test_layout_known_answers():
    assert slurm.layout(1, gpus_per_node=4, cpus_per_node=48) == slurm.SlurmLayout(1, 1, 1, 12, 1)
    assert slurm.layout(4, gpus_per_node=4, cpus_per_node=48) == slurm.SlurmLayout(1, 4, 4, 12, 4)
    assert slurm.layout(5, gpus_per_node=4, cpus_per_node=48) == slurm.SlurmLayout(2, 5, 4, 12, 4)
    assert slurm.layout(16, gpus_per_node=8, cpus_per_node=128) == slurm.SlurmLayout(2, 16, 8, 16, 8)
    with pytest.raises(ValueError, match=">= 1"):
        slurm.layout(0, gpus_per_node=4, cpus_per_node=4)


@pytest.mark.parametrize(
    ("backend", "launcher", "expect"),
    [
        ("horovod-mpi", "srun", ['srun --ntasks=8 ', '--mpi="${SCALESCOPE_SRUN_MPI:-pmix}"']),
        ("horovod-mpi", "mpirun", ["mpirun -np 8 -npernode 4 --bind-to none -x SCALESCOPE_RUN_DIR",
                                   "-x HOROVOD_TIMELINE"]),
        ("horovod-gloo", "srun", ['sed "s/$/:4/"', ' -np 8 -H "$HOSTS" --gloo ']),
        ("ddp-nccl", "mpirun", ["RANK=$OMPI_COMM_WORLD_RANK", "export MASTER_ADDR="]),
        ("ddp-gloo", "srun", ["RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID", "export MASTER_PORT="]),
    ],
)
def test_launchers(backend, launcher, expect, tmp_path):
    if backend.startswith("horovod") and not (Path(sys.executable).parent / "horovodrun").exists() \
            and not shutil.which("horovodrun"):
        pytest.skip("horovodrun is not installed")
    args = _args(slurm_launcher=launcher, gpus_per_node=4, cpus_per_node=32)
    text = slurm.render_script(RunSpec(backend, 8, None, 2, (("samples", "100"),)), script=["python", "t.py"],
                               out=tmp_path, experiment="E", args=args)
    for piece in expect:
        assert piece in text, piece
    assert f"{sys.executable} t.py --samples 100" in text
    assert "instrumentation.slurm finalize" in text and 'exit "$rc"' in text
    if shutil.which("bash"):
        path = tmp_path / "s.sbatch"
        path.write_text(text)
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


def test_write_scripts_and_finalize(tmp_path):
    out = tmp_path / "EXP"
    proc = subprocess.run(
        [sys.executable, "-m", "instrumentation.sweep", "--slurm", "--np", "1,8", "--backend", "ddp-nccl",
         "--baseline", "--gpus-per-node", "4", "--cpus-per-node", "32", "--out", str(out), "--",
         "python", "t.py"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in (out / "slurm").iterdir())
    assert names == ["baseline_np1_r1.sbatch", "ddp-nccl_np1_r1.sbatch", "ddp-nccl_np8_r1.sbatch",
                     "submit_all.sh"]
    submit = (out / "slurm" / "submit_all.sh").read_text()
    assert submit.count("sbatch ") == 3
    exp = json.loads((out / "experiment.json").read_text())
    assert [r["status"] for r in exp["runs"]] == ["pending"] * 3
    assert exp["slurm"]["gpus_per_node"] == 4

    # what the end of a job does: the training ran out of memory
    run_dir = out / "ddp-nccl_np8_r1"
    (run_dir / "stderr.log").write_text("torch.OutOfMemoryError: CUDA out of memory.\n")
    cfg = RunSpec("ddp-nccl", 8, None, 1).config(experiment="EXP")
    fin = subprocess.run([sys.executable, "-m", "instrumentation.slurm", "finalize", "--out", str(out),
                          "--run-id", "ddp-nccl_np8_r1", "--exit-code", "1"],
                         env={"PATH": "/usr/bin:/bin", "SCALESCOPE_CONFIG": json.dumps(cfg)},
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert fin.returncode == 0, fin.stderr
    runs = {r["run_id"]: r for r in json.loads((out / "experiment.json").read_text())["runs"]}
    assert list(runs) == ["baseline_np1_r1", "ddp-nccl_np1_r1", "ddp-nccl_np8_r1"]
    assert (runs["ddp-nccl_np8_r1"]["status"], runs["ddp-nccl_np8_r1"]["exit_code"]) == ("oom", 1)
    assert runs["baseline_np1_r1"]["status"] == "pending"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "oom"


def test_dry_run_prints_and_writes_nothing(tmp_path):
    out = tmp_path / "DRY"
    proc = subprocess.run(
        [sys.executable, "-m", "instrumentation.sweep", "--slurm", "--dry-run", "--np", "12", "--backend",
         "ddp-nccl", "--gpus-per-node", "8", "--out", str(out), "--", "python", "t.py"],
        capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks=12\n#SBATCH --ntasks-per-node=8" in proc.stdout
    assert not out.exists()
