"""Issue 33: two sweeps at once, what a sweep does to the user's command, and hostile
training scripts.

* **two sweeps into one --out**: the second is refused in one line naming the experiment and
  the holder, before it writes or moves anything; a sweep that crashed (SIGKILL) leaves no
  lock behind;
* **a process a training script leaves running** is stopped when the run's launcher exits,
  whether it stayed in the run's session or left it (``setsid``), and the run says so
  (``run.json`` ``left_behind``, the experiment entry's ``left_behind_note``);
* **argument lists**: only what is certainly a path is made absolute (the script, an
  argument written with a ``/``); a bare word (``--split test``) stays as typed whatever
  files exist;
* **the experiment path in other tools' syntax**: ``%`` with ``--nsys``, a backslash or a
  name that is not UTF-8 with ``--slurm`` are refused naming ``--out`` before anything is
  written.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from instrumentation import experiment, local, sweep
from instrumentation.experiment import ExperimentInUse, RunSpec, sweep_lock

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"deadline": None, "derandomize": os.environ.get("SCALESCOPE_FUZZ_RANDOM") != "1", "database": None,
            "suppress_health_check": [HealthCheck.function_scoped_fixture]}


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sweep.add_arguments(parser)
    return parser.parse_args(list(argv))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


# ------------------------------------------------------------------ two sweeps, one experiment

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from instrumentation.experiment import sweep_lock
    with sweep_lock(Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(120)
""")


def test_a_second_sweep_into_the_same_out_is_refused_and_a_crashed_one_leaves_no_lock(tmp_path, capsys):
    out = tmp_path / "EXP"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        (out / "a-run").mkdir()
        (out / "a-run" / "stdout.log").write_text("running\n")
        before = sorted(p.name for p in out.iterdir())
        rc = sweep.run(_args("--np", "1", "--backend", "", "--baseline", "--out", str(out), "--",
                             "python", "-c", "pass"))
        err = capsys.readouterr().err
        assert rc == 2
        assert len(err.strip().splitlines()) == 1, err
        assert "in use by another sweep" in err and f"pid {holder.pid}" in err and str(out) in err
        assert sorted(p.name for p in out.iterdir()) == before, "the refused sweep wrote or moved something"
        assert not (out / ".attempts").exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # a sweep that crashes
        holder.wait()
    # the kernel released the crashed sweep's lock; a held one still refuses
    with sweep_lock(out), pytest.raises(ExperimentInUse, match="in use"), sweep_lock(out):
        pass


# ------------------------------------------------------------------ processes left behind

LEAVE = textwrap.dedent("""
    import os, subprocess, sys
    # one child in the run's session, one that leaves it (a daemon), neither waited for
    a = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    b = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    print(a.pid, b.pid, flush=True)
""")


def test_what_a_script_leaves_running_is_stopped_when_its_launcher_exits(tmp_path, monkeypatch):
    script = tmp_path / "leave.py"
    script.write_text(LEAVE)
    out = tmp_path / "EXP"
    monkeypatch.chdir(tmp_path)
    plan = [RunSpec("baseline", 1, None, 1)]
    rc = local.run_local(plan, script=["python", str(script)], out=out, command=["test"],
                         opts=local.LocalOptions())
    assert rc == 0
    run_dir = out / plan[0].run_id
    pids = [int(p) for p in (run_dir / "stdout.log").read_text().split()]
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), "a process of the run outlived it"
    manifest = json.loads((run_dir / "run.json").read_text())
    assert sorted(manifest["left_behind"]["pids"]) == sorted(pids) and manifest["left_behind"]["stopped"]
    entry = json.loads((out / "experiment.json").read_text())["runs"][0]
    assert "were stopped" in entry["left_behind_note"]
    assert "were stopped" in (run_dir / "stderr.log").read_text()
    from analysis.runset import RunSet
    from instrumentation import slurm_jobs

    assert "were stopped" in RunSet.from_dirs(out).runs["left_behind"].iloc[0]  # the runs table, so the report
    rows, _ = slurm_jobs.status_rows(out)
    assert "were stopped" in rows[0]["note"]


def test_a_run_that_leaves_nothing_says_nothing(tmp_path):
    run_dir = tmp_path / "r"
    left: list[int] = []
    code, _ = local.execute([sys.executable, "-c", "pass"], env=dict(os.environ), run_dir=run_dir,
                            left_behind=left)
    assert code == 0 and left == []
    assert "left running" not in (run_dir / "stderr.log").read_text()


def test_a_ctrl_c_while_the_run_starts_stops_the_launcher_it_started(tmp_path, monkeypatch):
    """Popen forks before it can hand the process back: a Ctrl-C in between used to leave the
    run's launcher running, unknown to the sweep. The launcher is real; only the moment of the
    Ctrl-C is chosen, right after the fork."""
    real = subprocess.Popen
    started: list[int] = []

    def popen_then_ctrl_c(*args, **kwargs):
        started.append(real(*args, **kwargs).pid)
        raise KeyboardInterrupt

    monkeypatch.setattr(local.subprocess, "Popen", popen_then_ctrl_c)
    run_dir = tmp_path / "r"
    env = {**os.environ, "SCALESCOPE_RUN_DIR": str(run_dir.resolve())}
    left: list[int] = []
    with pytest.raises(local._Interrupted):
        local.execute([sys.executable, "-c", "import time; time.sleep(120)"], env=env, run_dir=run_dir,
                      left_behind=left)
    assert left == started
    deadline = time.monotonic() + 10
    while _alive(started[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(started[0]), "the launcher started before the Ctrl-C runs on"
    assert "while the run started" in (run_dir / "stderr.log").read_text()


def test_a_ctrl_c_that_python_swallowed_still_stops_the_run(tmp_path):
    """Python 3.11 turns a KeyboardInterrupt raised while a class is created into a
    RuntimeError, which an import guard's ``except Exception`` swallows: the Ctrl-C is lost
    and the sweep ran its run to the end (the flaky sweep Ctrl-C test, under load). The
    remembered interrupt stops the run anyway, with the run's launcher."""

    class Raises:
        def __set_name__(self, owner, name):
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, inside class creation
            time.sleep(0.05)

    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, whatever ran before
    local._INTERRUPTS.install()
    try:
        try:
            type("Guarded", (), {"attr": Raises()})
        except Exception as exc:  # what an optional import's guard does
            assert isinstance(exc.__cause__, KeyboardInterrupt)
        run_dir = tmp_path / "r"
        t0 = time.monotonic()
        with pytest.raises(local._Interrupted):
            local.execute([sys.executable, "-c", "import time; time.sleep(120)"], env=dict(os.environ),
                          run_dir=run_dir)
        assert time.monotonic() - t0 < 60
        assert "interrupted (Ctrl-C)" in (run_dir / "stderr.log").read_text()
    finally:
        local._INTERRUPTS.restore()
        local._INTERRUPTS.requested = False
        signal.signal(signal.SIGINT, before)


# ------------------------------------------------------------------ argument lists

NAMES = ["test", "data", "conf.yaml", "train.py", "val", "x"]
WORDS = st.one_of(st.sampled_from(NAMES), st.sampled_from(NAMES).map(lambda n: f"./{n}"),
                  st.sampled_from(NAMES).map(lambda n: f"sub/{n}"), st.sampled_from(["--split", "-n", "--x=y"]),
                  st.sampled_from(NAMES).map(lambda n: f"--cfg={n}"),
                  st.sampled_from(NAMES).map(lambda n: f"--cfg=./{n}"))


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("user")
    for n in NAMES:
        (d / n).mkdir() if "." not in n else (d / n).write_text("")
        (d / "sub").mkdir(exist_ok=True)
        ((d / "sub" / n).mkdir() if "." not in n else (d / "sub" / n).write_text(""))
    return d


@settings(max_examples=60, **SETTINGS)
@given(args=st.lists(WORDS, max_size=8))
def test_only_what_is_certainly_a_path_is_rewritten(user_dir, args):
    kept: list[str] = []
    cmd = experiment.resolve_script(["python", "train.py", *args], user_cwd=user_dir, kept=kept)
    assert cmd[:2] == [sys.executable, str(user_dir / "train.py")]  # the script Python runs
    for typed, got in zip(args, cmd[2:], strict=True):
        value = typed.partition("=")[2] if typed.startswith("--") and "=" in typed else typed
        if "/" in value and (user_dir / value).exists():
            assert got == typed.replace(value, str((user_dir / value).absolute())), (typed, got)
        else:
            assert got == typed, f"{typed!r} is not certainly a path but became {got!r}"
    bare = [v for v in (a.partition("=")[2] if a.startswith("--") and "=" in a else a for a in args)
            if v and not v.startswith("-") and "/" not in v and (user_dir / v).exists()]
    assert kept == bare  # each named in the warning


# ------------------------------------------------------------------ the experiment path in other tools' syntax

def _refused(tmp_path, capsys, name: str | bytes, *extra: str) -> str:
    parent = tmp_path / "parent"
    parent.mkdir(exist_ok=True)
    out = os.path.join(os.fsencode(parent), name) if isinstance(name, bytes) else str(parent / name)
    out = os.fsdecode(out)
    rc = sweep.run(_args("--np", "1", "--backend", "", "--baseline", *extra, "--out", out, "--",
                         "python", "-c", "pass"))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert list(parent.iterdir()) == [], "something was written before the refusal"
    return err


@settings(max_examples=20, **SETTINGS)
@given(name=st.text(st.sampled_from("ab%q{}hp_-"), min_size=1, max_size=8).filter(lambda n: "%" in n))
def test_a_percent_in_the_experiment_path_is_refused_with_nsys(tmp_path_factory, capsys, name):
    tmp = tmp_path_factory.mktemp("pct")
    err = _refused(tmp, capsys, name, "--nsys")
    assert "--out" in err and "'%'" in err and "nsys" in err


@settings(max_examples=20, **SETTINGS)
@given(name=st.text(st.sampled_from("ab\\_-%"), min_size=1, max_size=8).filter(lambda n: "\\" in n))
def test_a_backslash_in_the_experiment_path_is_refused_with_slurm(tmp_path_factory, capsys, name):
    tmp = tmp_path_factory.mktemp("bs")
    err = _refused(tmp, capsys, name, "--slurm")
    assert "--out" in err and "backslash" in err


def test_an_experiment_path_that_is_not_utf8_is_named_with_slurm(tmp_path, capsys):
    err = _refused(tmp_path, capsys, b"exp\xff\xfe", "--slurm")
    assert "--out" in err and "not UTF-8" in err and "\\udcff" in err


def test_a_local_sweep_and_status_into_a_folder_whose_name_is_not_utf8(tmp_path, monkeypatch, capsys):
    from instrumentation import slurm_jobs

    out = Path(os.fsdecode(os.fsencode(tmp_path) + b"/exp\xff"))
    monkeypatch.chdir(tmp_path)
    rc = local.run_local([RunSpec("baseline", 1, None, 1)], script=["python", "-c", "pass"], out=out,
                         command=["test"], opts=local.LocalOptions())
    assert rc == 0
    assert slurm_jobs.status_main(out) == 0
    printed = capsys.readouterr().out
    assert "1 ok" in printed and "\\udcff" in printed


def test_a_run_directory_that_is_a_link_is_moved_aside_never_written_through(tmp_path, monkeypatch):
    out, victim = tmp_path / "EXP", tmp_path / "victim"
    out.mkdir()
    victim.mkdir()
    spec = RunSpec("baseline", 1, None, 1)
    (out / spec.run_id).symlink_to(victim)  # a shared experiment's link, to an empty folder
    monkeypatch.chdir(tmp_path)
    assert local.run_local([spec], script=["python", "-c", "pass"], out=out, command=["t"],
                           opts=local.LocalOptions()) == 0
    assert list(victim.iterdir()) == []
    assert not (out / spec.run_id).is_symlink() and (out / spec.run_id / "run.json").is_file()
    assert (out / ".attempts" / f"{spec.run_id}-1").is_symlink()


@pytest.mark.parametrize("name", ["a%hb", "%p", "x%h%p"])
def test_a_percent_nccl_expands_is_refused_where_nccl_logs_are_captured(tmp_path, capsys, name):
    parent = tmp_path / "parent"
    parent.mkdir()
    argv = ("--np", "2", "--backend", "horovod-gloo", "--out", str(parent / name), "--", "python", "-c", "pass")
    assert sweep.run(_args(*argv)) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "NCCL" in err and len(err.strip().splitlines()) == 1
    assert list(parent.iterdir()) == []
    assert sweep.run(_args("--no-nccl-debug", *argv[:-4], "--dry-run", *argv[-4:])) == 0  # the way out it names
