"""SLURM script generation: layout for 1-16 GPUs on 4- and 8-GPU nodes, scripts, finalize."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from instrumentation import experiment as sweep_experiment
from instrumentation import slurm, sweep
from instrumentation.sweep import RunSpec

ROOT = Path(__file__).resolve().parents[2]


def _args(**kw) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sweep.add_arguments(parser)
    args = parser.parse_args(["--out", "x", "--gpu-request", "gres", "--cpu-bind", "--", "python", "t.py"])
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
    assert sb["output"] == f'"{tmp_path}/{spec.run_id}/stdout.log"'
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
    # no GPUs: one rank per core
    assert slurm.layout(2, gpus_per_node=0, cpus_per_node=4) == slurm.SlurmLayout(1, 2, 2, 1, 0)
    assert slurm.layout(6, gpus_per_node=0, cpus_per_node=4) == slurm.SlurmLayout(2, 6, 4, 1, 0)
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


@pytest.mark.parametrize(
    ("gpus", "gpu_request", "line"),
    [(4, "gres", "#SBATCH --gres=gpu:2"), (4, "gpus-per-node", "#SBATCH --gpus-per-node=2"),
     (4, "none", None), (0, "gres", None), (0, "gpus-per-node", None)],
)
def test_gpu_request_syntax(gpus, gpu_request, line, tmp_path):
    text = slurm.render_script(RunSpec("ddp-gloo", 2, None, 1), script=["python", "t.py"], out=tmp_path,
                               experiment="E", args=_args(gpus_per_node=gpus, gpu_request=gpu_request))
    gpu_lines = [x for x in text.splitlines() if x.startswith(("#SBATCH --gres", "#SBATCH --gpus"))]
    assert gpu_lines == ([line] if line else [])


def test_cpu_bind_and_exclusive_follow_the_options(tmp_path):
    spec = RunSpec("ddp-gloo", 2, None, 1)
    on = slurm.render_script(spec, script=["python", "t.py"], out=tmp_path, experiment="E", args=_args())
    off = slurm.render_script(spec, script=["python", "t.py"], out=tmp_path, experiment="E",
                              args=_args(cpu_bind=False, exclusive=False))
    assert "--cpu-bind=cores" in on and "#SBATCH --exclusive" in on
    assert "--cpu-bind" not in off and "--exclusive" not in off


def test_paths_are_quoted_and_percent_escaped_in_sbatch_lines(tmp_path):
    out = tmp_path / "my exp 100%"
    text = slurm.render_script(RunSpec("baseline", 1, None, 1), script=["python", "t.py"], out=out,
                               experiment="E", args=_args())
    assert f'#SBATCH --output="{tmp_path}/my exp 100%%/baseline_np1_r1/stdout.log"' in text
    assert f"export SCALESCOPE_RUN_DIR='{out.resolve()}/baseline_np1_r1'" in text


@pytest.mark.parametrize(
    ("option", "value"),
    [("--time", "01:00:00\n#SBATCH --exclusive"), ("--time", "an hour"), ("--partition", "gpu\nrm -rf /"),
     ("--account", "a b"), ("--module", "cuda\x07")],
)
def test_values_that_cannot_go_into_a_script_are_refused(option, value, tmp_path):
    out = tmp_path / "BAD"
    proc = subprocess.run(
        [sys.executable, "-m", "instrumentation.sweep", "--slurm", "--gpus-per-node", "4", "--cpus-per-node", "8",
         option, value, "--out", str(out), "--", "python", "t.py"],
        capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert f"{option} {value!r} cannot go into a SLURM script" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_a_path_with_a_newline_is_refused(tmp_path):
    out = tmp_path / "two\nlines"
    proc = subprocess.run(
        [sys.executable, "-m", "instrumentation.sweep", "--slurm", "--gpus-per-node", "4", "--cpus-per-node", "8",
         "--out", str(out), "--", "python", "t.py"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and "cannot go into an #SBATCH line" in proc.stderr, proc.stderr


@pytest.mark.parametrize("argv", [["--submit"], ["--wait"], ["--max-jobs", "2"]])
def test_submission_options_need_slurm(argv, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "instrumentation.sweep", *argv, "--out", str(tmp_path / "X"),
                           "--", "python", "t.py"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and "needs --slurm" in proc.stderr, proc.stderr


def test_wait_needs_submit(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "instrumentation.sweep", "--slurm", "--wait", "--gpus-per-node", "4",
                           "--out", str(tmp_path / "X"), "--", "python", "t.py"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and "--wait needs --submit" in proc.stderr, proc.stderr


def test_submit_without_a_cluster_is_one_clear_error(tmp_path):
    out = tmp_path / "X"
    env = {**os.environ, "SLURM_CONF": str(tmp_path / "no-such" / "slurm.conf")}
    proc = subprocess.run([sys.executable, "-m", "instrumentation.sweep", "--slurm", "--submit", "--out", str(out),
                           "--", "python", "t.py"], capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert proc.returncode == 2
    assert "--submit: no SLURM cluster answers here" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_status_of_a_local_experiment_and_of_no_experiment(tmp_path):
    out = tmp_path / "EXP"
    spec, failed = RunSpec("baseline", 1, None, 1), RunSpec("ddp-gloo", 2, None, 1)
    (out / failed.run_id).mkdir(parents=True)
    (out / failed.run_id / "stderr.log").write_text("boom: deliberate failure\n")
    exp = sweep_experiment.Experiment.open(out, command=["x"], script=["t.py"], plan=[spec, failed], experiment="EXP")
    exp.set(sweep_experiment.finalize_run(out / failed.run_id, failed, exit_code=3, experiment="EXP", command=[]))
    cli = [sys.executable, "-m", "analysis.cli", "status"]
    proc = subprocess.run([*cli, str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[1:-1]}
    assert rows["baseline_np1_r1"][1:4] == ["pending", "-", "-"]
    assert rows["ddp-gloo_np2_r1"][1:4] == ["failed", "-", "-"]
    assert "boom: deliberate failure" in proc.stdout
    # below the table, the cause in full and the log
    assert f"  ddp-gloo_np2_r1: failed: boom: deliberate failure\n    log: {out / failed.run_id / 'stderr.log'}" \
        in proc.stdout
    assert proc.stdout.splitlines()[-1] == "2 runs: 1 failed, 1 pending"
    missing = subprocess.run([*cli, str(tmp_path / "nothing")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert missing.returncode == 1 and "no experiment.json" in missing.stderr and "Traceback" not in missing.stderr


def test_scripts_run_in_the_runs_own_directory_with_threads_per_task(tmp_path):
    (tmp_path / "t.py").write_text("")
    args = _args(gpus_per_node=4, cpus_per_node=32)
    run_dir = tmp_path / "out" / "ddp-gloo_np8_r1"
    text = slurm.render_script(RunSpec("ddp-gloo", 8, None, 1, cwd="run"), script=["python", "t.py"],
                               out=tmp_path / "out", experiment="E", args=args, workdir=tmp_path)
    # the CPUs each task gets: 32 per node over 4 GPUs
    assert "export OMP_NUM_THREADS=8" in text and "export SCALESCOPE_THREADS=8" in text
    assert f"cd {run_dir / 'work'}\n" in text and f"export SCALESCOPE_USER_CWD={tmp_path}" in text
    assert f"{sys.executable} {tmp_path / 't.py'}" in text  # the script made absolute
    # the default: the directory the sweep was started in, as sbatch itself does
    shared = slurm.render_script(RunSpec("ddp-gloo", 8, None, 1, threads=2), script=["python", "t.py"],
                                 out=tmp_path / "out", experiment="E", args=args, workdir=tmp_path)
    assert "export OMP_NUM_THREADS=2" in shared and f"cd {tmp_path}\n" in shared
    base = slurm.render_script(RunSpec("baseline", 1, None, 1), script=["python", "t.py"], out=tmp_path / "out",
                               experiment="E", args=args, workdir=tmp_path)
    for line in ("export RANK=0", "export WORLD_SIZE=1", "export LOCAL_RANK=0", "export LOCAL_WORLD_SIZE=1",
                 "export MASTER_ADDR=127.0.0.1", "export MASTER_PORT=$((29500 + SLURM_JOB_ID % 1000))"):
        assert line in base, line
    # finalize runs from the sweep's directory again
    assert base.rindex(f"cd {tmp_path}\n") > base.index("rc=$?")
