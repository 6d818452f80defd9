"""The trace writer: exact timestamps, flushing, crash safety, unwritable files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

import analysis
from analysis.errors import RecoveryWarning
from instrumentation._env import InstrumentationWarning, _reset_warnings
from instrumentation.clock import Anchor, fmt_us
from instrumentation.recorder import TraceRecorder

from .conftest import child_env

WALL = 1_700_000_000_000_000_123  # an epoch ns value with a non-zero sub-µs part
MONO = 50_000


def _recorder(path: Path) -> TraceRecorder:
    return TraceRecorder(path, rank=3, local_rank=1, host="nodeA", anchor=Anchor(WALL, MONO),
                         start_thread=False)


def test_fmt_us_is_exact():
    assert fmt_us(WALL) == "1700000000000000.123"
    assert fmt_us(999) == "0.999"
    assert fmt_us(1000) == "1.000"
    assert fmt_us(-1500) == "-1.500"


def test_records_round_trip_with_exact_ns(tmp_path):
    path = tmp_path / "rank-00003.trace.json"
    rec = _recorder(path)
    rec.add(("phase", "forward", MONO + 7, MONO + 7 + 1_234_567, 11, 0, 0, None))
    rec.add(("phase", "step", MONO + 1, MONO + 2_000_001, 11, 0, 0, None))
    rec.add(("meta", "allreduce bucket 2", MONO, None, 1_000_002, None, None, None))
    rec.add(("comm", "allreduce", MONO + 100, MONO + 350, 1_000_002, 0, 0,
             {"bucket": 2, "bytes": 4096, "last": True}))
    rec.add(("marker", "ckpt", MONO + 999, None, 11, None, 0, {"k": "v"}))
    rec.flush()
    rec.close(status="ok")
    doc = json.loads(path.read_text())  # a cleanly closed trace is strict JSON
    assert doc[-1]["name"] == "scalescope_end" and doc[-1]["args"]["n_events"] == 5

    df = analysis.read(path)  # sniffed as scalescope_trace
    assert set(df["source"]) == {"scalescope_trace"}
    assert list(df["name"]) == ["step", "forward", "allreduce", "ckpt"]  # sorted by start
    assert list(df["start_ns"]) == [WALL + 1, WALL + 7, WALL + 100, WALL + 999]
    assert list(df["dur_ns"]) == [2_000_000, 1_234_567, 250, 0]
    assert list(df["kind"]) == ["phase", "phase", "comm", "marker"]
    comm = df[df["kind"] == "comm"].iloc[0]
    assert comm["cat"] == "ddp_hook" and comm["tensor"] == "bucket2" and comm["bytes"] == 4096
    assert comm["tid"] == 1_000_002
    assert set(df["rank"]) == {3} and set(df["local_rank"]) == {1} and set(df["host"]) == {"nodeA"}
    assert df["pid"].iloc[0] == os.getpid()


def test_flusher_thread_writes_before_close(tmp_path):
    path = tmp_path / "t.trace.json"
    rec = TraceRecorder(path, rank=0, local_rank=0, host="h", anchor=Anchor(WALL, MONO),
                        flush_interval_s=0.1)
    try:
        rec.add(("phase", "data", MONO, MONO + 10, 1, 0, 0, None))
        # every 0.1 s on a quiet machine; the deadline only ends a test that would hang
        # (a thread starved on a loaded machine is late, not wrong)
        deadline = time.monotonic() + 120
        # the flusher writes the records, then drops them from the buffer: wait for both
        while ('"data"' not in path.read_text() or rec.buffer) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert '"data"' in path.read_text()
        assert rec.buffer == []
    finally:
        rec.close()


def test_disk_full_warns_once_and_keeps_going():
    _reset_warnings()
    with pytest.warns(InstrumentationWarning, match="cannot write the trace /dev/full"):
        rec = TraceRecorder("/dev/full", rank=0, local_rank=0, host="h",
                            anchor=Anchor(WALL, MONO), start_thread=False)
        rec.add(("phase", "data", MONO, MONO + 10, 1, 0, 0, None))
        rec.flush()
    assert not rec.enabled
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        rec.add(("phase", "data", MONO, MONO + 10, 1, 0, 0, None))
        rec.flush()
        rec.close()
    assert rec.buffer == []  # memory stays bounded once writing failed


_LOOP = textwrap.dedent("""
    import sys, time, instrumentation as ssi
    ssi.init(run_dir=sys.argv[1], framework="none", sample_interval_s=0)
    i = 0
    while True:
        with ssi.phase("forward"):
            time.sleep(0.005)
        ssi.step_end()
        print(i, time.time_ns(), flush=True)
        i += 1
""")


def _start_loop(tmp_path: Path, script: str = _LOOP) -> tuple[subprocess.Popen, Path]:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", script, str(run_dir)], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, run_dir


def _read_until(proc: subprocess.Popen, n_steps: int) -> dict[int, int]:
    ends = {}
    for line in proc.stdout:  # type: ignore[union-attr]
        step, t = map(int, line.split())
        ends[step] = t
        if step >= n_steps:
            break
    return ends


def test_sigkill_keeps_everything_older_than_a_second(tmp_path):
    proc, run_dir = _start_loop(tmp_path)
    try:
        ends = _read_until(proc, 250)  # about 1.5 s of training
        kill_ns = time.time_ns()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    trace = run_dir / "rank-00000.trace.json"
    assert not trace.read_bytes().rstrip().endswith(b"]")
    with pytest.warns(RecoveryWarning, match="not terminated"):
        df = analysis.read(trace, format="scalescope_trace")
    steps = set(df.loc[df["name"] == "step", "step"].astype(int))
    old_enough = {s for s, t in ends.items() if t < kill_ns - 1_000_000_000}
    assert old_enough, "the child ran for less than a second"
    assert old_enough <= steps
    # and the run directory as a whole still loads
    with pytest.warns(RecoveryWarning):
        run_df = analysis.read_many(run_dir)
    assert len(run_df) == len(df)
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "running"  # nobody could update it


def test_sigterm_closes_the_trace_and_marks_the_run_killed(tmp_path):
    proc, run_dir = _start_loop(tmp_path)
    try:
        _read_until(proc, 20)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGTERM  # the default action still happens
    doc = json.loads((run_dir / "rank-00000.trace.json").read_text())  # closed, strict JSON
    assert doc[-1]["name"] == "scalescope_end" and doc[-1]["args"]["status"] == "killed"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "killed"
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecoveryWarning)
        df = analysis.read_many(run_dir)
    assert (df["name"] == "step").sum() >= 20


def test_sigterm_chains_to_the_previous_handler(tmp_path):
    script = textwrap.dedent("""
        import os, signal, sys, time
        def mine(signum, frame):
            open(os.path.join(sys.argv[1], "..", "handler-ran"), "w").close()
            sys.exit(3)
        signal.signal(signal.SIGTERM, mine)
    """) + _LOOP
    proc, run_dir = _start_loop(tmp_path, script)
    try:
        _read_until(proc, 5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 3
    assert (tmp_path / "handler-ran").exists()
    assert (run_dir / "rank-00000.trace.json").read_text().rstrip().endswith("]")


def test_uncaught_exception_marks_the_run_failed(tmp_path):
    script = textwrap.dedent("""
        import sys, instrumentation as ssi
        ssi.init(run_dir=sys.argv[1], framework="none", sample_interval_s=0)
        with ssi.phase("forward"):
            pass
        raise RuntimeError("boom")
    """)
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-c", script, str(run_dir)], env=child_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "RuntimeError: boom" in out.stderr
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "failed" and manifest["end_time"] is not None
    doc = json.loads((run_dir / "rank-00000.trace.json").read_text())
    assert doc[-1]["args"]["status"] == "failed"


def test_read_only_run_dir_warns_once_and_training_goes_on(tmp_path):
    run_dir = tmp_path / "ro"
    run_dir.mkdir()
    run_dir.chmod(0o555)
    tmp_path.chmod(0o755)
    script = textwrap.dedent("""
        import sys, warnings, instrumentation as ssi
        warnings.simplefilter("always")
        ssi.init(run_dir=sys.argv[1], framework="none", sample_interval_s=0.05)
        total = 0
        for i in ssi.wrap_loader(range(50)):
            with ssi.phase("forward"):
                total += i
            ssi.step_end()
        ssi.epoch_end(0, samples=50)
        ssi.finish()
        print("TOTAL", total)
    """)
    cmd = [sys.executable, "-c", script, str(run_dir)]
    if os.geteuid() == 0:
        # root ignores file permissions; in a new user namespace it has no capabilities
        # over the host's files, so the 0o555 directory is read-only for the child.
        if shutil.which("unshare") is None:
            pytest.skip("running as root and `unshare` is unavailable")
        probe = subprocess.run(["unshare", "-U", "true"], capture_output=True)
        if probe.returncode != 0:
            pytest.skip(f"running as root and user namespaces are unavailable: {probe.stderr!r}")
        cmd = ["unshare", "-U", *cmd]
    out = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=60,
                         cwd="/")
    assert out.returncode == 0, out.stderr
    assert "TOTAL 1225" in out.stdout
    # exactly one warning, naming the directory and the reason
    assert out.stderr.count("InstrumentationWarning") == 1, out.stderr
    assert f"cannot write to the run directory {run_dir} (Permission denied)" in out.stderr
    assert list(run_dir.iterdir()) == []


def test_disk_full_gives_one_warning_for_every_writer():
    """Trace and sampler both hit the full disk: one warning, not one per writer."""
    pytest.importorskip("psutil")
    from instrumentation.sampler import Sampler

    _reset_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rec = TraceRecorder("/dev/full", rank=0, local_rank=0, host="h",
                            anchor=Anchor(WALL, MONO), start_thread=False)
        rec.add(("phase", "data", MONO, MONO + 10, 1, 0, 0, None))
        rec.flush()
        sampler = Sampler("/dev/full", host="h", kind="cpu")
        assert not sampler.start()
        sampler.stop()
    mine = [str(w.message) for w in caught if issubclass(w.category, InstrumentationWarning)]
    assert len(mine) == 1, mine
    assert "The disk is full" in mine[0] and "/dev/full" in mine[0]
    assert not rec.enabled and "No space left" in sampler.error
    rec.close()
