"""A run's status from what it did, and a failed run's cause wherever a user looks (issue 34):
the sweep line, ``scalescope status``, ``run.json``/``experiment.json`` and the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from instrumentation import shared_dir, slurm_jobs
from instrumentation.experiment import RunSpec, finalize_run, resolve_script
from instrumentation.failure import (
    exception_line,
    failure_cause,
    last_meaningful,
    relative_path_hint,
)

ROOT = Path(__file__).resolve().parents[2]

HYDRA_LOG = """Error executing job with overrides: ['data_config.path=data/input.txt']
Traceback (most recent call last):
  File "/u/app.py", line 30, in wrapper
    fn(cfg)
  File "/u/app.py", line 60, in __init__
    with open(path, "rb") as f:
FileNotFoundError: [Errno 2] No such file or directory: 'data/input.txt'

Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.
"""

TORCHRUN_LOG = """[rank1]: Traceback (most recent call last):
[rank1]:   File "/u/train.py", line 3, in <module>
[rank0]: Traceback (most recent call last):
[rank1]: ValueError: bad shard
[rank0]:   File "/u/train.py", line 9, in <module>
[rank0]: RuntimeError: Connection closed by peer
Traceback (most recent call last):
  File "/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 99)
============================================================
"""


def test_the_cause_is_the_failing_ranks_exception_not_a_launchers_banner():
    assert exception_line(HYDRA_LOG) == ("FileNotFoundError: [Errno 2] No such file or directory: 'data/input.txt'",
                                         None)
    # the first training traceback, with its rank from torch's prefix; torchrun's own is skipped
    assert exception_line(TORCHRUN_LOG) == ("ValueError: bad shard", 1)
    hvd = "[1]<stderr>:Traceback (most recent call last):\n[1]<stderr>:  File \"t.py\", line 2\n" \
          "[0]<stdout>:epoch 0\n[1]<stderr>:KeyError: 'x'\nProcess 1 exit with status code 1.\n"
    assert exception_line(hvd) == ("KeyError: 'x'", 1)
    # no traceback: the last line that is not a banner, summary or advice
    banner = TORCHRUN_LOG[TORCHRUN_LOG.index("====="):]
    assert last_meaningful(banner) is None and last_meaningful("loss 0.3\n" + banner) == "loss 0.3"
    assert last_meaningful("step 3\nKilled\n=====\n") == "Killed"


def test_a_relative_path_that_does_not_resolve_says_where_the_run_ran(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "input.txt").write_text("x")
    cause = "FileNotFoundError: [Errno 2] No such file or directory: 'data/input.txt'"
    isolated = relative_path_hint(cause, ran_in="/r/work", user_cwd=str(tmp_path), mode="run")
    assert "executed in /r/work" in isolated and f"exists in the sweep's directory {tmp_path}" in isolated
    assert "--cwd shared (the default)" in isolated
    shared = relative_path_hint(cause, ran_in="/u", user_cwd="/u", mode="shared")
    assert "executed in /u, where the relative path 'data/input.txt' does not exist" in shared
    assert relative_path_hint("FileNotFoundError: '/abs/x'", ran_in="/u", user_cwd="/u", mode="shared") is None
    assert relative_path_hint("ValueError: bad", ran_in="/u", user_cwd="/u", mode="shared") is None


def test_an_untrained_run_that_exits_1_is_failed_with_its_cause(tmp_path):
    """The shape of a hydra app: the exception is caught, exit 1, and the interpreter's exit
    handlers close the recording "ok" with no step taken."""
    run_dir = tmp_path / "baseline_np1_r1"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps(
        {"format": "scalescope.run", "format_version": 1, "status": "ok", "end_time": "2026-11-28T05:00:00+00:00",
         "world_size": 1, "end": {"by": "exit", "steps": 0, "epoch_ends": 0},
         "working_dir": {"mode": "shared", "path": str(tmp_path), "user_cwd": str(tmp_path)}}))
    (run_dir / "rank-00000.trace.json").write_text(
        '[\n{"name": "scalescope_end", "ph": "M", "pid": 0, "tid": 0, "args": {"status": "ok"}}\n]\n')
    (run_dir / "stderr.log").write_text(HYDRA_LOG)
    entry = finalize_run(run_dir, RunSpec("baseline", 1, None, 1), exit_code=1, experiment="E", command=["x"])
    assert entry["status"] == "failed" and "exit_note" not in entry
    assert entry["cause"] == "FileNotFoundError: [Errno 2] No such file or directory: 'data/input.txt'"
    assert entry["log"] == str(run_dir / "stderr.log") and "does not exist" in entry["hint"]
    m = json.loads((run_dir / "run.json").read_text())
    assert m["status"] == "failed" and m["failure"]["cause"] == entry["cause"]


# A stand-in for a hydra app, without torch: trains (or not) and exits 1 from a caught exception
APP = '''
import os, sys, traceback
import instrumentation as ssi
ssi.init(config={"batch_size": 2, "epochs": 1})
try:
    with open(os.environ.get("DATA", "data/input.txt")) as f:
        f.read()
    with ssi.phase("forward"):
        pass
    ssi.step_end()
    ssi.epoch_end(1, samples=2)
except Exception:
    print("Error executing job with overrides: []", file=sys.stderr)
    traceback.print_exc()
    print("\\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", file=sys.stderr)
    sys.exit(1)
'''


def _sweep(user_dir: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "instrumentation.sweep", "--np", "1", "--backend", "", "--baseline",
                           "--sample-interval", "0", "--out", "exp", *argv, "--", "python", "app.py"],
                          cwd=user_dir, env=env, capture_output=True, text=True, timeout=240)


def test_a_crash_is_never_ok_and_its_cause_is_shown_everywhere(tmp_path, capsys):
    (tmp_path / "app.py").write_text(APP)
    proc = _sweep(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    cause = "FileNotFoundError: [Errno 2] No such file or directory: 'data/input.txt'"
    assert "0/1 runs ok" in out and cause in out
    assert f"log: {tmp_path / 'exp' / 'baseline_np1_r1' / 'stderr.log'}" in out
    assert f"executed in {tmp_path}, where the relative path 'data/input.txt' does not exist" in out
    (entry,) = json.loads((tmp_path / "exp" / "experiment.json").read_text())["runs"]
    assert entry["status"] == "failed" and entry["cause"] == cause
    # scalescope status: the exception, not the advice line hydra prints last
    assert slurm_jobs.status_main(tmp_path / "exp") == 0
    shown = capsys.readouterr().out
    assert f"  baseline_np1_r1: failed: {cause}" in shown and "HYDRA_FULL_ERROR" not in shown
    assert f"    log: {tmp_path / 'exp' / 'baseline_np1_r1' / 'stderr.log'}" in shown
    # with its data the same app trains, reaches its last epoch_end and is ok (exit 0)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "input.txt").write_text("x")
    again = _sweep(tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    m = json.loads((tmp_path / "exp" / "baseline_np1_r1" / "run.json").read_text())
    assert m["status"] == "ok" and m["end"]["by"] == "exit" and m["end"]["last_epoch_reached"] is True
    assert m["working_dir"] == {"mode": "shared", "path": str(tmp_path), "user_cwd": str(tmp_path)}


def test_isolated_runs_that_miss_a_relative_file_say_how_to_change_it(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "input.txt").write_text("x")
    proc = _sweep(tmp_path, "--cwd", "run")
    assert proc.returncode == 1
    assert "it exists in the sweep's directory" in proc.stdout and "--cwd shared (the default)" in proc.stdout


def test_key_value_overrides_are_path_arguments(tmp_path):
    """A hydra-style override's value follows the rule of every argument (docs/sweep.md):
    made absolute where it is certainly a path (written with a '/', naming something that
    exists), a bare word kept as typed (and named for the warning)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "input.txt").write_text("x")
    kept: list[str] = []
    cmd = resolve_script(["python", "app.py", "data_config.path=data/input.txt", "+extra=data", "trainer.epochs=2",
                          "--lr=0.1", "new=out/x"], user_cwd=tmp_path, kept=kept)
    assert cmd[2:] == [f"data_config.path={tmp_path / 'data' / 'input.txt'}", "+extra=data",
                       "trainer.epochs=2", "--lr=0.1", "new=out/x"]
    assert kept == ["data"]


def test_a_file_one_run_writes_into_the_shared_directory_and_the_next_reads_is_named(tmp_path):
    before = shared_dir.snapshot(tmp_path)
    (tmp_path / "snapshot.pt").write_text("state")
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "run.log").write_text("mine")
    wrote = shared_dir.changed(before, shared_dir.snapshot(tmp_path, skip=(tmp_path / "exp",)))
    assert wrote == ["snapshot.pt"]
    earlier = shared_dir.written_by_earlier(tmp_path, [{"run_id": "r1", "wrote_shared": wrote}])
    assert earlier == {str(tmp_path / "snapshot.pt"): "r1"}
    listing = tmp_path / "listing.json"
    listing.write_text(json.dumps(earlier))
    run_dir = tmp_path / "r2"
    run_dir.mkdir()
    code = (f"from instrumentation import shared_dir; assert shared_dir.watch_reads({str(run_dir)!r}, 0); "
            "open('snapshot.pt').read(); open('other.txt', 'w').write('x'); open('snapshot.pt').read()")
    env = {**os.environ, "PYTHONPATH": str(ROOT), shared_dir.ENV: str(listing)}
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True, timeout=60)
    assert shared_dir.collect_reads(run_dir) == [{"path": str(tmp_path / "snapshot.pt"), "written_by": "r1",
                                                  "rank": 0}]
    # a run that writes the file first reads its own
    run3 = tmp_path / "r3"
    run3.mkdir()
    code3 = code.replace(str(run_dir), str(run3)).replace("open('snapshot.pt').read(); open('other",
                                                           "open('snapshot.pt', 'w').write('new'); open('other")
    subprocess.run([sys.executable, "-c", code3], cwd=tmp_path, env=env, check=True, timeout=60)
    assert shared_dir.collect_reads(run3) == []


@pytest.mark.parametrize("text", ["", "\n\n"])
def test_no_log_gives_no_cause(tmp_path, text):
    (tmp_path / "stderr.log").write_text(text)
    assert failure_cause(tmp_path) == {"cause": None, "rank": None, "log": str(tmp_path / "stderr.log")}
