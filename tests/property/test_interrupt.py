"""Interrupting a command at any moment loses nothing (issue 25, class 5).

``scalescope report`` and ``scalescope convert`` run as real subprocesses in their own
process group (as a terminal's Ctrl-C reaches them) and get SIGINT or SIGKILL after a delay
hypothesis chooses between 0 and the length of an uninterrupted run. Afterwards the output
is the previous version, byte for byte, or a complete new one -- never a truncated file; a
SIGINT prints one line and exits 130 (or the command had finished: 0).

The moments before scalescope's own code runs (the interpreter's start-up, before
``analysis.cli`` installs its handler) are Python's: a SIGINT there ends the process as it
ends any Python program. Those outcomes are accepted only when the traceback, if any, holds
no frame of scalescope below the module level of ``analysis``/``analysis.cli`` and none of
pandas, numpy, plotly or pyarrow (the old bug: the parser imported them before the handler).

Cost: each example is one run of the command (2-10 s on 2 cores);
``SCALESCOPE_FUZZ_INTERRUPT`` (default 4) examples per command and signal.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SCALESCOPE = Path(sys.executable).parent / "scalescope"
ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "tests" / "data" / "experiment_small"
EXAMPLES = int(os.environ.get("SCALESCOPE_FUZZ_INTERRUPT", "4"))
RANDOM = os.environ.get("SCALESCOPE_FUZZ_RANDOM") == "1"
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not RANDOM, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

#: a moment of the run: a fraction of an uninterrupted run's length; half the draws fall in
#: its last quarter, where the outputs are written
MOMENT = st.one_of(st.floats(0.0, 1.0), st.floats(0.75, 1.05))
SIGNALS = st.sampled_from([signal.SIGINT, signal.SIGKILL])

_HEAVY = re.compile(r"site-packages/(pandas|numpy|plotly|pyarrow|scipy|jinja2)/")
_OURS = re.compile(r'File "[^"]*/(analysis|instrumentation)/([\w/]+)\.py", line \d+, in (\S+)')


def _env(cache: Path) -> dict[str, str]:
    return {**os.environ, "SCALESCOPE_CACHE": str(cache),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _interrupted(args: list[str], *, env: dict[str, str], delay: float, sig: int) -> subprocess.CompletedProcess:
    """Run ``scalescope ARGS`` in a process group of its own and send ``sig`` to the group
    after ``delay`` seconds (unless it ended first)."""
    p = subprocess.Popen([str(SCALESCOPE), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, env=env, cwd=ROOT)
    try:
        p.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
    out, err = p.communicate(timeout=300)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def check_interrupt_outcome(p: subprocess.CompletedProcess, sig: int) -> None:
    """What a command interrupted by ``sig`` may show (see the module docstring)."""
    if sig == signal.SIGKILL:
        assert p.returncode in (0, -signal.SIGKILL), (p.returncode, p.stderr[-2000:])
        return
    if p.returncode in (0, 130) and "Traceback" not in p.stderr:
        if p.returncode == 130:
            # on stderr; a sweep says it through its progress lines, on stdout
            said = [line for line in (p.stderr + p.stdout).splitlines() if "interrupted" in line]
            assert len(said) == 1, (p.stdout, p.stderr)
            assert re.fullmatch(r"scalescope( [\w-]+)?: interrupted(;.*)?", said[0]), (p.stdout, p.stderr)
        return
    # the signal came before scalescope's handler existed: the interpreter's start-up only
    assert not _HEAVY.search(p.stderr), f"interrupted while a heavy import ran unprotected:\n{p.stderr}"
    for module, function in ((m.group(2), m.group(3)) for m in _OURS.finditer(p.stderr)):
        assert module in ("__init__", "errors", "cli") and function == "<module>", (
            f"scalescope code ran before its Ctrl-C handler ({module}.{function}):\n{p.stderr}")


def _digest(data: bytes) -> str:
    return f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}"


def _leftovers(d: Path) -> list[str]:
    """The temporary files under ``d`` (the report's are in its ``export/`` folder too), as
    paths relative to ``d``."""
    return sorted(str(f.relative_to(d)) for f in d.rglob("*.tmp"))


def _clear_leftovers(d: Path) -> None:
    """Remove what a killed command may leave: hidden temporary files, never one under an
    output's own name."""
    for rel in _leftovers(d):
        name = Path(rel).name
        assert name.startswith(".") and name.endswith(".tmp"), rel
        (d / rel).unlink()


def _run_twice(args: list[str], env: dict[str, str]) -> float:
    """Run the command to its end twice; the second run's length (the parse cache warm, as
    in the runs that are interrupted)."""
    for _ in range(2):
        t0 = time.monotonic()
        p = subprocess.run([str(SCALESCOPE), *args], capture_output=True, text=True, env=env, cwd=ROOT,
                           timeout=600)
        assert p.returncode == 0, p.stderr
    return time.monotonic() - t0


# ---------------------------------------------------------------- report

_STAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d")


@pytest.fixture(scope="module")
def report_setup(tmp_path_factory):
    """A copy of the small experiment with a complete report, and how long a run takes."""
    exp = tmp_path_factory.mktemp("interrupt") / "exp"
    env = _env(exp.parent / "cache")
    shutil.copytree(EXPERIMENT, exp, ignore=shutil.ignore_patterns("build.py", "README.md"))
    args = ["report", str(exp), "--no-static"]
    took = _run_twice(args, env)
    page = exp / "report" / "index.html"
    return args, env, page, _digest(_STAMP.sub(b"T", page.read_bytes())), took


@SETTINGS
@given(moment=MOMENT, sig=SIGNALS)
def test_interrupted_report_keeps_a_whole_page(report_setup, moment, sig):
    args, env, page, whole, took = report_setup
    p = _interrupted(args, env=env, delay=moment * took, sig=sig)
    check_interrupt_outcome(p, sig)
    # the previous page or the new one, whole (they differ only in the time they were made)
    assert page.is_file(), "the previous page was lost"
    assert _digest(_STAMP.sub(b"T", page.read_bytes())) == whole, "the page is not whole"
    left = _leftovers(page.parent)
    if sig == signal.SIGINT:
        assert not left, f"temporary files left behind: {left}"
    _clear_leftovers(page.parent)  # after SIGKILL nothing can clean up


# ---------------------------------------------------------------- convert


def _big_trace(path: Path, steps: int) -> int:
    """A closed scalescope trace of ``steps`` steps (5 events each); returns the event count."""
    t0 = 1763820000000000
    lines = ['{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "rank 0 @ node1"}}',
             '{"name": "thread_name", "ph": "M", "pid": 0, "tid": 7, "args": {"name": "MainThread"}}',
             '{"name": "scalescope_clock", "ph": "M", "pid": 0, "args": {"rank": 0, "local_rank": 0, '
             '"host": "node1", "wall_ns": 1763820000000000000, "mono_ns": 5000000000, "format_version": 1}}']
    n = 0
    for s in range(steps):
        ts = t0 + s * 10000
        for name, off, dur in (("step", 0, 10000), ("data", 0, 1000), ("forward", 1000, 2000),
                               ("backward", 3000, 4000), ("optimizer", 7000, 1000)):
            lines.append(f'{{"name": "{name}", "cat": "phase", "ph": "X", "ts": {ts + off}, "dur": {dur}, '
                         f'"pid": 0, "tid": 7, "args": {{"step": {s}, "epoch": 0}}}}')
            n += 1
    lines.append(f'{{"name":"scalescope_end","ph":"M","pid":0,"tid":0,"args":{{"wall_ns":0,"status":"ok",'
                 f'"n_events":{n}}}}}')
    path.write_text("[\n" + ",\n".join(lines) + "\n]\n", encoding="utf-8")
    return n


@pytest.fixture(scope="module")
def convert_setup(tmp_path_factory):
    """A trace large enough that writing its CSV takes a good part of a second, converted
    once; the complete CSV and how long a run takes."""
    d = tmp_path_factory.mktemp("interrupt-convert")
    env = _env(d / "cache")
    trace = d / "big.trace.json"
    _big_trace(trace, 30_000)
    out = d / "out"
    args = ["convert", str(trace), "--to", "csv", "-o", str(out)]
    took = _run_twice(args, env)
    csv = out / "big.events.csv"
    return args, env, csv, _digest(csv.read_bytes()), took


@SETTINGS
@given(moment=MOMENT, sig=SIGNALS)
def test_interrupted_convert_keeps_a_whole_csv(convert_setup, moment, sig):
    args, env, csv, whole, took = convert_setup
    p = _interrupted(args, env=env, delay=moment * took, sig=sig)
    check_interrupt_outcome(p, sig)
    assert csv.is_file(), "the previous CSV was lost"
    assert _digest(csv.read_bytes()) == whole, "the CSV is not whole (truncated or half-written)"
    left = _leftovers(csv.parent)
    if sig == signal.SIGINT:
        assert not left, f"temporary files left behind: {left}"
    _clear_leftovers(csv.parent)


# ---------------------------------------------------------------- Ctrl-C at fixed moments


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.06, 0.1, 0.3, 1.0, 2.5])
def test_ctrl_c_at_any_moment_of_report_is_one_line(report_setup, delay):
    """Within the first 100 ms too: the handler is in before the parser imports pandas."""
    args, env, page, whole, _ = report_setup
    p = _interrupted(args, env=env, delay=delay, sig=signal.SIGINT)
    check_interrupt_outcome(p, signal.SIGINT)
    assert _digest(_STAMP.sub(b"T", page.read_bytes())) == whole
    assert not _leftovers(page.parent)


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3, 1.5, 4.0])
def test_ctrl_c_at_any_moment_of_a_sweep_is_one_line(tmp_path, delay):
    """Before the parser, while the run starts, while it runs: one line, 130, and a manifest
    that is whole JSON (written atomically) recording the run as killed or not yet run."""
    import json

    script = tmp_path / "train.py"
    script.write_text("import time\nprint('training', flush=True)\ntime.sleep(60)\n")
    out = tmp_path / "EXP"
    p = _interrupted(["sweep", "--backend", "", "--baseline", "--out", str(out), "--", "python", str(script)],
                     env=_env(tmp_path / "cache"), delay=delay, sig=signal.SIGINT)
    check_interrupt_outcome(p, signal.SIGINT)
    assert p.returncode != 0  # the run sleeps a minute: never finished
    manifest = out / "experiment.json"
    if manifest.exists():
        runs = json.loads(manifest.read_text(encoding="utf-8"))["runs"]
        assert {r["status"] for r in runs} <= {"pending", "running", "killed"}, runs
    assert not _leftovers(tmp_path)


@pytest.mark.parametrize("delay", [0.2, 1.0, 2.0])
def test_two_ctrl_c_in_a_row_are_still_one_line(report_setup, delay):
    """A second Ctrl-C while the first unwinds ends the process at once: still one line and
    130, the page whole (a hidden temporary file may stay, as after SIGKILL)."""
    args, env, page, whole, _ = report_setup
    p = subprocess.Popen([str(SCALESCOPE), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=env, cwd=ROOT)
    time.sleep(delay)
    for _ in range(2):
        try:
            os.killpg(p.pid, signal.SIGINT)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    out, err = p.communicate(timeout=300)
    check_interrupt_outcome(subprocess.CompletedProcess(p.args, p.returncode, out, err), signal.SIGINT)
    assert _digest(_STAMP.sub(b"T", page.read_bytes())) == whole
    _clear_leftovers(page.parent)


POOL_SCRIPT = """
import sys, time
import pandas as pd
from analysis import cli, scale

def slow(x):
    print("task", x, flush=True)
    time.sleep(30)
    return pd.DataFrame({"x": [x]})

if __name__ == "__main__":
    cli._install_sigint()
    try:
        scale.run_tasks(slow, list(range(4)), workers=2)
    except KeyboardInterrupt:
        print("scalescope: interrupted", file=sys.stderr)
        sys.exit(130)
"""


def test_ctrl_c_reaches_pool_workers_without_a_word_from_them(tmp_path):
    """The terminal's Ctrl-C reaches every process of the group, pool workers included:
    they say nothing (no worker traceback), the main process says the one line."""
    script = tmp_path / "pool.py"
    script.write_text(POOL_SCRIPT, encoding="utf-8")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=_env(tmp_path / "cache"), cwd=tmp_path)
    deadline = time.monotonic() + 300  # a bound on a hang: wait until both workers run a task
    seen = ""
    while seen.count("task") < 2 and time.monotonic() < deadline and p.poll() is None:
        seen += p.stdout.readline()
    assert seen.count("task") >= 2, seen
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert err.strip() == "scalescope: interrupted", err
