"""The sweep launcher: plan, environment, outcome classification, and real sweeps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from instrumentation import experiment, local, sweep
from instrumentation.sweep import RunSpec, classify_exit, plan_runs, run_env

ROOT = Path(__file__).resolve().parents[2]

# A stand-in training command for the launcher's bookkeeping tests: real processes, real
# instrumentation, no torch, so each run takes a fraction of a second.
TINY = '''
import sys, time
mode = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else "ok"
if mode == "fail":
    print("boom: deliberate failure", file=sys.stderr)
    sys.exit(3)
if mode == "oom":
    print("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr)
    sys.exit(1)
import instrumentation as ssi
ssi.init(config={"batch_size": 1, "epochs": 1})
if mode == "sleep":
    print("sleeping", flush=True)
    time.sleep(120)
with ssi.phase("forward"):
    pass
ssi.step_end()
ssi.epoch_end(0, samples=1)
ssi.finish()
print("done")
'''


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(TINY)
    return path


def _sweep(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "instrumentation.sweep", *argv], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def _experiment(out: Path) -> dict:
    return json.loads((out / "experiment.json").read_text())


# ---- plan, ids, environment -------------------------------------------------------------


def test_plan_order_and_human_readable_run_ids():
    plan = plan_runs(nps=[1, 2], backends=["horovod-gloo", "ddp-gloo"], batch_sizes=[75, 300], repeats=2,
                     baseline=True, vary=[("samples", ["1000", "2000"])])
    ids = [s.run_id for s in plan]
    assert len(ids) == len(set(ids)) == 2 * 2 * 2 * (1 + 4)
    assert ids[:6] == [
        "baseline_np1_bs75_samples1000_r1",
        "horovod-gloo_np1_bs75_samples1000_r1", "horovod-gloo_np2_bs75_samples1000_r1",
        "ddp-gloo_np1_bs75_samples1000_r1", "ddp-gloo_np2_bs75_samples1000_r1",
        "baseline_np1_bs75_samples2000_r1",
    ]
    assert ids[-1] == "ddp-gloo_np2_bs300_samples2000_r2"
    assert plan_runs(nps=[4], backends=["horovod-mpi"])[0].run_id == "horovod-mpi_np4_r1"


def test_plan_rejects_unknown_backends():
    with pytest.raises(ValueError, match="unknown backend 'horovod-ucx'"):
        plan_runs(nps=[1], backends=["horovod-ucx"])


@pytest.mark.parametrize("values", [["a b", "a_b"], ["a-b", "a/b"], ["Adam", "adam"]])
def test_vary_values_whose_run_ids_collide_are_refused(values):
    with pytest.raises(ValueError, match="map to the same run id"):
        plan_runs(nps=[1], backends=["ddp-gloo"], vary=[("opt", values)])
    assert len(plan_runs(nps=[1], backends=["ddp-gloo"], vary=[("opt", values[:1])])) == 1


def test_control_characters_in_vary_and_label_are_refused(tmp_path):
    with pytest.raises(ValueError, match="control character"):
        plan_runs(nps=[1], backends=["ddp-gloo"], vary=[("opt", ["a\nb"])])
    with pytest.raises(ValueError, match="control character"):
        plan_runs(nps=[1], backends=["ddp-gloo"], labels=[("site", "x\r#SBATCH --x")])
    proc = _sweep("--np", "1", "--backend", "ddp-gloo", "--vary", "opt=a b,a_b", "--out", str(tmp_path / "E"),
                  "--", "python", "x.py")
    assert proc.returncode == 2 and "map to the same run id" in proc.stderr + proc.stdout
    assert not (tmp_path / "E").exists()


def test_vary_is_appended_and_recorded(tmp_path):
    spec = RunSpec("ddp-gloo", 2, 75, 1, (("samples", "1000"), ("lr-scaling", "linear")))
    cmd = sweep.rank_command(spec, ["python", "train.py"], tmp_path)
    assert cmd == ["python", "train.py", "--samples", "1000", "--lr-scaling", "linear"]
    assert spec.config(experiment="E")["vary"] == {"samples": 1000, "lr-scaling": "linear"}
    assert spec.run_id == "ddp-gloo_np2_bs75_samples1000_lr-scalinglinear_r1"


def test_rank_wrappers_compose(tmp_path):
    spec = RunSpec("horovod-gloo", 2, None, 1)

    def wrap(cmd, spec, run_dir):
        return ["nsys", "profile", "-o", str(run_dir / "nsys" / "r%q{OMPI_COMM_WORLD_RANK}"), *cmd]

    cmd = sweep.rank_command(spec, ["python", "t.py"], tmp_path, wrappers=[wrap])
    assert cmd[:2] == ["nsys", "profile"] and cmd[-2:] == ["python", "t.py"]


def test_environment_contract(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    base = {"PATH": "/bin", "SCALESCOPE_BATCH_SIZE": "999", "HOROVOD_TIMELINE": "/elsewhere"}
    hvd = run_env(RunSpec("horovod-mpi", 2, 75, 1), tmp_path / "r", experiment="E", base=base,
                  sample_interval=0.5)
    assert hvd["SCALESCOPE_RUN_DIR"] == str((tmp_path / "r").resolve())
    assert hvd["SCALESCOPE_RUN_ID"] == "horovod-mpi_np2_bs75_r1"
    assert (hvd["SCALESCOPE_FRAMEWORK"], hvd["SCALESCOPE_BACKEND"]) == ("horovod", "mpi")
    assert hvd["SCALESCOPE_BATCH_SIZE"] == "75" and hvd["SCALESCOPE_SAMPLE_INTERVAL"] == "0.5"
    assert json.loads(hvd["SCALESCOPE_CONFIG"]) == {
        "backend": "horovod-mpi", "framework": "horovod", "np": 2, "batch_size": 75, "repeat": 1,
        "vary": {}, "experiment": "E", "threads": "auto", "cwd": "shared"}
    assert hvd["HOROVOD_TIMELINE"] == str((tmp_path / "r").resolve() / "horovod_timeline.json")
    assert "HOROVOD_TIMELINE_MARK_CYCLES" not in hvd  # opt-in: --timeline-cycles
    cycles = run_env(RunSpec("horovod-gloo", 2, 75, 1), tmp_path / "c", experiment="E", base=base,
                     mark_cycles=True)
    assert cycles["HOROVOD_TIMELINE_MARK_CYCLES"] == "1"
    assert hvd["OMPI_ALLOW_RUN_AS_ROOT"] == "1" == hvd["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"]
    # no MPI, no root permission; no batch size: the inherited one is removed; no timeline
    ddp = run_env(RunSpec("ddp-gloo", 2, None, 1), tmp_path / "d", experiment="E", base=base)
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in ddp and "SCALESCOPE_BATCH_SIZE" not in ddp
    assert "HOROVOD_TIMELINE" not in ddp and ddp["SCALESCOPE_BACKEND"] == "gloo"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    user = run_env(RunSpec("horovod-mpi", 2, 75, 1), tmp_path / "r", experiment="E", base=base)
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in user
    base_run = run_env(RunSpec("baseline", 1, 75, 1), tmp_path / "b", experiment="E", base=base)
    assert (base_run["SCALESCOPE_FRAMEWORK"], base_run["SCALESCOPE_BACKEND"]) == ("none", "")


def test_threads_cwd_and_the_baseline_launch_environment(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4}, raising=False)
    assert experiment.cores_per_rank(2) == 2 and experiment.cores_per_rank(8) == 1
    assert experiment.cores_per_rank(3, cpus=12) == 4
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "7", "RANK": "5"}
    ddp = run_env(RunSpec("ddp-gloo", 2, None, 1), tmp_path / "d", experiment="E", base=base, user_cwd=tmp_path)
    # cores per rank of this (patched) host, for torch through the instrumentation and for OpenMP
    assert ddp["OMP_NUM_THREADS"] == ddp["SCALESCOPE_THREADS"] == "2"
    # the directory the sweep was started in, as launchers do (issue 34); --cwd run isolates
    assert ddp["SCALESCOPE_USER_CWD"] == str(tmp_path) and ddp["SCALESCOPE_CWD"] == "shared"
    assert ddp["RANK"] == "5"  # the launcher sets a framework run's ranks
    asked = run_env(RunSpec("ddp-gloo", 2, None, 1, threads=3), tmp_path / "d", experiment="E", base=base)
    assert asked["OMP_NUM_THREADS"] == "3" and json.loads(asked["SCALESCOPE_CONFIG"])["threads"] == 3
    one = run_env(RunSpec("baseline", 1, None, 1), tmp_path / "b", experiment="E", base=base, master_port=29999)
    assert one["OMP_NUM_THREADS"] == "5"
    assert {k: one[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                "MASTER_PORT")} == {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                                                    "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                                                    "MASTER_PORT": "29999"}
    spec = RunSpec("baseline", 1, None, 1, threads=2, cwd="shared")
    assert RunSpec.from_config(spec.config(experiment="E")) == spec
    assert experiment.workdir(spec, tmp_path / "r", user_cwd=tmp_path) == tmp_path
    assert experiment.workdir(RunSpec("baseline", 1, None, 1, cwd="run"), tmp_path / "r") == tmp_path / "r" / "work"
    assert experiment.workdir(RunSpec("baseline", 1, None, 1), tmp_path / "r", user_cwd=tmp_path) == tmp_path
    with pytest.raises(ValueError, match="--threads must be a positive integer"):
        plan_runs(nps=[1], backends=["ddp-gloo"], threads=0)
    with pytest.raises(ValueError, match="--cwd must be one of run, shared"):
        plan_runs(nps=[1], backends=["ddp-gloo"], cwd="tmp")


def test_script_and_existing_inputs_are_made_absolute(tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "data").mkdir()
    (tmp_path / "pkg").mkdir()
    kept: list[str] = []
    cmd = sweep.resolve_script(["python", "train.py", "--data", "data/", "--out=./data", "--split", "data",
                                "--log", "new.log", "--n=3"], user_cwd=tmp_path, kept=kept)
    assert cmd == [sys.executable, str(tmp_path / "train.py"), "--data", str(tmp_path / "data"),
                   f"--out={tmp_path / 'data'}", "--split", "data", "--log", "new.log", "--n=3"]
    assert kept == ["data"]  # a bare word stays as typed (issue 33), and is named in a warning
    # a module name is not a path, even where a directory of that name exists
    assert sweep.resolve_script(["python", "-m", "pkg", "./data"], user_cwd=tmp_path)[1:] == [
        "-m", "pkg", str(tmp_path / "data")]
    env = experiment.with_user_path({"PYTHONPATH": "/x"}, [sys.executable, "-m", "pkg"], tmp_path)
    assert env["PYTHONPATH"] == f"{tmp_path}{os.pathsep}/x"
    assert "PYTHONPATH" not in experiment.with_user_path({}, [sys.executable, "t.py"], tmp_path)


def test_python_is_replaced_by_this_interpreter():
    assert sweep.resolve_script(["python", "t.py", "-x"]) == [sys.executable, "t.py", "-x"]
    assert sweep.resolve_script(["python3.11", "-m", "m"])[0] == sys.executable
    assert sweep.resolve_script(["t.py"]) == [sys.executable, "t.py"]
    assert sweep.resolve_script(["./run.sh"]) == ["./run.sh"]


def test_launch_commands():
    spec = RunSpec("ddp-gloo", 2, 75, 1)
    cmd = local.launch_command(spec, ["py", "t.py"])
    assert Path(cmd[0]).name == "torchrun"
    assert cmd[1:] == ["--standalone", "--nnodes", "1", "--nproc-per-node", "2", "--no-python", "py", "t.py"]
    assert local.launch_command(RunSpec("baseline", 1, 75, 1), ["py", "t.py"]) == ["py", "t.py"]
    if (Path(sys.executable).parent / "horovodrun").exists():
        hcmd = local.launch_command(RunSpec("horovod-mpi", 4, 75, 1), ["py", "t.py"])
        assert hcmd[1:] == ["-np", "4", "-H", "localhost:4", "--mpi", "py", "t.py"]


# ---- outcome of a run ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "log", "status"),
    [
        (0, "", "ok"),
        (0, "CUDA out of memory", "ok"),
        (1, "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB", "oom"),
        (1, "torch.OutOfMemoryError: CUDA out of memory.", "oom"),
        (134, "terminate called after throwing an instance of 'std::bad_alloc'", "oom"),
        (1, "Traceback ...\nMemoryError: Unable to allocate 7.45 GiB", "oom"),
        (-9, "Killed", "oom"),
        (137, "bash: line 1: 4242 Killed  python train.py", "oom"),
        (1, "Killed", "failed"),  # "Killed" alone, without a SIGKILL exit, is not evidence
        (1, "exitcode  : -9 (pid: 123)\nerror_file: <N/A>", "oom"),  # torchrun's report
        (1, "ValueError: bad shape", "failed"),
        (None, "", "failed"),
    ],
)
def test_classify_exit(code, log, status):
    assert classify_exit(code, log) == status


def test_oom_is_detected_from_a_run_log(tmp_path):
    run_dir = tmp_path / "bs4096"
    run_dir.mkdir()
    (run_dir / "stderr.log").write_text("step 3\n" * 5000 + "torch.OutOfMemoryError: CUDA out of memory.\n")
    spec = RunSpec("ddp-nccl", 2, 4096, 1)
    entry = sweep.finalize_run(run_dir, spec, exit_code=1, experiment="E", command=["x"])
    assert entry["status"] == "oom" and entry["exit_code"] == 1
    assert entry["log_tail"].endswith("CUDA out of memory.")
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "oom" and manifest["format"] == "scalescope.run"
    assert manifest["config"]["batch_size"] == 4096 and manifest["world_size"] == 2


def _finished_run(run_dir: Path, *, world: int, closed: tuple[str, ...], end_by: str = "script",
                  steps: int = 3) -> None:
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps(
        {"format": "scalescope.run", "status": "ok", "end_time": "2026-11-22T16:00:00+00:00",
         "world_size": world, "end": {"by": end_by, "steps": steps, "epoch_ends": 0, "epochs_planned": None,
                                      "last_epoch_reached": None}}))
    for rank in range(len(closed)):  # each rank's epoch line: the steps it trained
        (run_dir / f"rank-{rank:05d}.epochs.jsonl").write_text(json.dumps(
            {"rank": rank, "epoch": 0, "steps": steps, "samples": 4 * steps, "samples_source": "counted"}) + "\n")
    for rank, how in enumerate(closed):  # "ok"/"killed": closed with that status; "": open
        body = '[\n{"name": "step", "ph": "X", "ts": 1.0, "dur": 2.0, "pid": 0, "tid": 1},\n'
        if how:
            end = {"name": "scalescope_end", "ph": "M", "pid": 0, "tid": 0, "args": {"status": how}}
            body += json.dumps(end) + "\n]\n"
        (run_dir / f"rank-{rank:05d}.trace.json").write_text(body)
    (run_dir / "stderr.log").write_text("terminate called without an active exception\n"
                                        "exitcode  : -6 (pid: 99)\n")


def test_teardown_abort_after_a_finished_run_is_ok_with_a_note(tmp_path):
    spec = RunSpec("ddp-gloo", 2, 75, 1)
    _finished_run(tmp_path / "done", world=2, closed=("ok", "ok"))
    entry = sweep.finalize_run(tmp_path / "done", spec, exit_code=1, experiment="E", command=["x"])
    assert entry["status"] == "ok" and entry["exit_code"] == 1
    assert "teardown" in entry["exit_note"] and "terminate called" in entry["log_tail"]
    manifest = json.loads((tmp_path / "done" / "run.json").read_text())
    assert manifest["status"] == "ok" and manifest["exit_note"] == entry["exit_note"]


@pytest.mark.parametrize(("end_by", "steps"), [("exit", 3), ("script", 0)], ids=["exit-handlers", "no-steps"])
def test_a_non_zero_exit_without_training_to_the_end_is_failed(tmp_path, end_by, steps):
    """The interpreter's exit handlers close a run "ok" too (hydra caught the exception and
    exited 1): without the script reaching its end, or without steps, it is failed (issue 34)."""
    spec = RunSpec("ddp-gloo", 2, 75, 1)
    _finished_run(tmp_path / "run", world=2, closed=("ok", "ok"), end_by=end_by, steps=steps)
    entry = sweep.finalize_run(tmp_path / "run", spec, exit_code=1, experiment="E", command=["x"])
    assert entry["status"] == "failed" and "exit_note" not in entry
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "failed"


@pytest.mark.parametrize("closed", [("ok", ""), ("ok",), ("ok", "killed")],
                         ids=["rank-1-unclosed", "rank-1-missing", "rank-1-killed"])
def test_abort_with_an_unfinished_rank_stays_failed(tmp_path, closed):
    spec = RunSpec("ddp-gloo", 2, 75, 1)
    _finished_run(tmp_path / "run", world=2, closed=closed)
    entry = sweep.finalize_run(tmp_path / "run", spec, exit_code=1, experiment="E", command=["x"])
    assert entry["status"] == "failed" and "exit_note" not in entry


# ---- real sweeps with the stand-in command --------------------------------------------------


def test_sweep_records_failures_goes_on_and_resumes(tmp_path, tiny):
    out = tmp_path / "EXP"
    argv = ["--backend", "", "--baseline", "--vary", "mode=ok,fail,oom", "--batch-size", "8,16", "--out",
            str(out), "--", "python", str(tiny)]
    proc = _sweep(*argv)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    exp = _experiment(out)
    runs = {r["run_id"]: r for r in exp["runs"]}
    assert list(runs) == [f"baseline_np1_bs{b}_mode{m}_r1" for b in (8, 16) for m in ("ok", "fail", "oom")]
    assert exp["format"] == "scalescope.experiment" and exp["name"] == "EXP"
    assert exp["script"] == ["python", str(tiny)]
    for b in (8, 16):
        ok, fail, oom = (runs[f"baseline_np1_bs{b}_mode{m}_r1"] for m in ("ok", "fail", "oom"))
        assert (ok["status"], ok["exit_code"]) == ("ok", 0) and ok["wall_s"] > 0
        assert (fail["status"], fail["exit_code"]) == ("failed", 3)
        assert "boom: deliberate failure" in fail["log_tail"]
        assert (oom["status"], oom["exit_code"]) == ("oom", 1)
        assert ok["config"] == {"backend": "baseline", "framework": "none", "np": 1, "batch_size": b,
                                "repeat": 1, "vary": {"mode": "ok"}, "experiment": "EXP", "threads": "auto",
                                "cwd": "shared"}
        # the training wrote run.json; the launcher set status and exit code
        ok_manifest = json.loads((out / ok["run_id"] / "run.json").read_text())
        assert ok_manifest["status"] == "ok" and ok_manifest["exit_code"] == 0
        assert ok_manifest["batch_size"] == 1  # the script's own config, not overwritten
        assert (out / ok["run_id"] / "rank-00000.trace.json").exists()
        assert (out / ok["run_id"] / "stdout.log").read_text().strip() == "done"
        # the failed run never wrote run.json: the launcher wrote a minimal one
        failed_manifest = json.loads((out / fail["run_id"] / "run.json").read_text())
        assert failed_manifest["status"] == "failed" and failed_manifest["exit_code"] == 3
        assert failed_manifest["config"]["vary"] == {"mode": "fail"}
    ok_mtime = (out / "baseline_np1_bs8_modeok_r1" / "run.json").stat().st_mtime_ns

    again = _sweep(*argv)
    assert again.returncode == 1
    assert "6 runs" in again.stdout and "2 already ok, skipped" in again.stdout
    assert "baseline_np1_bs8_modeok_r1" not in again.stdout.split("skipped)")[1]
    assert (out / "baseline_np1_bs8_modeok_r1" / "run.json").stat().st_mtime_ns == ok_mtime
    # the earlier failed attempt was set aside, not mixed with the new one
    assert (out / ".attempts" / "baseline_np1_bs8_modefail_r1-1" / "stderr.log").exists()
    assert (out / "baseline_np1_bs8_modefail_r1" / "stderr.log").read_text().count("boom") == 1
    assert len(_experiment(out)["runs"]) == 6


def test_timeout_is_recorded(tmp_path, tiny):
    out = tmp_path / "T"
    proc = _sweep("--backend", "", "--baseline", "--vary", "mode=sleep", "--timeout", "3", "--out", str(out),
                  "--", "python", str(tiny))
    assert proc.returncode == 1
    (entry,) = _experiment(out)["runs"]
    assert entry["status"] == "timeout"
    assert "timeout after 3.0 s" in (out / entry["run_id"] / "stderr.log").read_text()
    # SIGTERM reached the training process: its instrumentation flushed the trace
    assert (out / entry["run_id"] / "rank-00000.trace.json").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_stops_the_run_and_records_it_killed(tmp_path, tiny, sig):
    out = tmp_path / "K"
    proc = subprocess.Popen([sys.executable, "-m", "instrumentation.sweep", "--backend", "", "--baseline",
                             "--vary", "mode=sleep,ok", "--out", str(out), "--", "python", str(tiny)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        log = out / "baseline_np1_modesleep_r1" / "stdout.log"
        deadline = time.monotonic() + 60
        while not (log.exists() and "sleeping" in log.read_text()):
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.1)
        proc.send_signal(sig)
        stdout, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert "interrupted" in stdout
    runs = {r["run_id"]: r for r in _experiment(out)["runs"]}
    assert runs["baseline_np1_modesleep_r1"]["status"] == "killed"
    assert runs["baseline_np1_modeok_r1"]["status"] == "pending"
    assert json.loads((out / "baseline_np1_modesleep_r1" / "run.json").read_text())["status"] == "killed"


def test_bad_options_exit_2(tmp_path, tiny):
    for argv, msg in [
        (["--np", "0"], "--np must be positive"),
        (["--np", "two"], "comma-separated integers"),
        (["--backend", "horovod-xyz"], "unknown backend"),
        (["--vary", "samples"], "expected NAME=V1,V2"),
        (["--vary", "batch-size=1,2"], "use the sweep's own --batch-size"),
    ]:
        proc = _sweep(*argv, "--out", str(tmp_path / "x"), "--", "python", str(tiny))
        assert proc.returncode == 2 and msg in proc.stderr, (argv, proc.stderr)
    proc = _sweep("--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "no training command" in proc.stderr


def test_eta_ignores_runs_that_did_not_finish_ok():
    import io

    from instrumentation.progress import Progress

    out = io.StringIO()
    p = Progress(4, stream=out)
    p.finish("a", "failed (exit 1)", 2.0, counted=False)  # a failed run's 2 s say nothing about the others
    assert p.eta() == "?"
    p.finish("b", "ok", 30.0)
    assert p.eta() == "60.0 s"  # 2 runs left at the mean of the ok runs
