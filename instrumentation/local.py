"""Local execution of a sweep: each run's process tree on this machine, one after the other.

``horovodrun`` (Horovod), ``torchrun --standalone`` (DDP) or plain ``python`` (the baseline)
around every rank's command; each run's stdout/stderr go to ``stdout.log``/``stderr.log`` in
its directory; a failed run is recorded (``failed``, ``oom``, ``timeout`` or ``killed``, with
its exit code and log tail) and the sweep goes on; ``experiment.json`` is rewritten
atomically after every run; runs already ``ok`` are skipped. The plan, the environment and
the record come from :mod:`instrumentation.experiment`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from instrumentation import shared_dir
from instrumentation.experiment import (
    Experiment,
    RankWrapper,
    RunSpec,
    finalize_run,
    find_tool,
    free_port,
    now,
    rank_command,
    resolve_script,
    run_env,
    set_aside,
    summary,
    with_user_path,
    workdir,
)
from instrumentation.manifest import write_json_atomic
from instrumentation.progress import Progress, printable

__all__ = ["KILL_GRACE_S", "LocalOptions", "check_tools", "dry_run", "execute", "failure_line", "launch_command",
           "run_local"]

#: Seconds between SIGTERM and SIGKILL when a run is stopped.
KILL_GRACE_S = 10.0


@dataclass(frozen=True)
class LocalOptions:
    """How the runs of a local sweep are executed.

    ``extra_env`` is added to every run's environment (profiler variables); ``after_run(run_dir,
    spec)`` is called after each run is recorded (profiler manifests).
    """

    timeout_s: float | None = None
    sample_interval: float | None = None
    mark_cycles: bool = False
    nccl_debug: bool = True
    wrappers: Sequence[RankWrapper] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    after_run: Callable[[Path, RunSpec], None] | None = None


def launch_command(spec: RunSpec, rank_cmd: Sequence[str], *, python: str | None = None) -> list[str]:
    """The local launcher around a rank command: horovodrun, torchrun, or nothing (baseline)."""
    n = str(spec.np)
    if spec.framework == "horovod":
        controller = "--gloo" if spec.controller == "gloo" else "--mpi"
        return [find_tool("horovodrun", python=python), "-np", n, "-H", f"localhost:{n}", controller, *rank_cmd]
    if spec.framework == "ddp":
        return [find_tool("torchrun", python=python), "--standalone", "--nnodes", "1", "--nproc-per-node", n,
                "--no-python", *rank_cmd]
    return list(rank_cmd)


def check_tools(plan: Sequence[RunSpec]) -> None:
    """FileNotFoundError naming the launcher a planned run needs and this environment lacks."""
    if any(s.framework == "horovod" for s in plan):
        find_tool("horovodrun")
    if any(s.framework == "ddp" for s in plan):
        find_tool("torchrun")


def dry_run(plan: Sequence[RunSpec], *, script: Sequence[str], out: Path, opts: LocalOptions) -> None:
    """Print each run's environment contract and launch command; run and write nothing."""
    resolved = resolve_script(script, user_cwd=Path.cwd())
    extra = "".join(f"{k}={v} " for k, v in opts.extra_env.items())
    for spec in plan:
        run_dir = Path(out) / spec.run_id
        cmd = launch_command(spec, rank_command(spec, resolved, run_dir, wrappers=opts.wrappers))
        env = run_env(spec, run_dir, experiment=Path(out).name, base={})
        print(f"{spec.run_id}: (cd {shlex.quote(str(workdir(spec, run_dir)))}) SCALESCOPE_FRAMEWORK={spec.framework} "
              f"SCALESCOPE_BACKEND={spec.controller} OMP_NUM_THREADS={env['OMP_NUM_THREADS']} "
              f"{extra}{shlex.join(cmd)}")


# ---------------------------------------------------------------------------------------
# The run loop
# ---------------------------------------------------------------------------------------


def run_local(plan: Sequence[RunSpec], *, script: Sequence[str], out: Path, command: list[str],
              opts: LocalOptions) -> int:
    """Run every planned run not yet ``ok`` here, one after the other.

    Returns 0 when every run is ``ok``, 1 when any is not, 130 when interrupted (Ctrl-C or
    SIGTERM to the sweep; the running run is stopped and recorded as ``killed``).
    """
    out = Path(out)
    exp = Experiment.open(out, command=command, script=list(script), plan=plan, experiment=out.name)
    exp.save()
    todo = [s for s in plan if not exp.is_done(s)]
    skipped = len(plan) - len(todo)
    progress = Progress(len(todo))
    progress.print(f"scalescope sweep: {len(plan)} runs into {out}"
                   + (f" ({skipped} already ok, skipped)" if skipped else ""))
    kept: list[str] = []
    resolved = resolve_script(script, user_cwd=Path.cwd(), kept=kept)
    if kept:
        progress.print(f"scalescope sweep: warning: {', '.join(kept)}: kept as typed, although a file or folder of "
                       "that name is here (a bare word may be a plain value); write ./NAME to pass it as a path")
    _INTERRUPTS.install()
    try:
        for spec in todo:
            _INTERRUPTS.check()
            if not _run_one(spec, exp=exp, resolved=resolved, opts=opts, progress=progress):
                progress.print("scalescope sweep: interrupted; run the same command again to resume")
                return 130
    except KeyboardInterrupt:  # between runs: nothing is running, the manifest is current
        progress.print("scalescope sweep: interrupted; run the same command again to resume")
        return 130
    finally:
        progress.close()
        _INTERRUPTS.restore()
    line, all_ok = summary(exp.entries, plan, out)
    progress.print(line)
    return 0 if all_ok else 1


def _run_one(spec: RunSpec, *, exp: Experiment, resolved: list[str], opts: LocalOptions,
             progress: Progress) -> bool:
    """Run and record one run; ``False`` when the sweep was interrupted during it."""
    run_dir = exp.out / spec.run_id
    set_aside(run_dir, exp.out)
    cmd = launch_command(spec, rank_command(spec, resolved, run_dir, wrappers=opts.wrappers))
    user_cwd = Path.cwd()
    env = {**run_env(spec, run_dir, experiment=exp.name, sample_interval=opts.sample_interval,
                     mark_cycles=opts.mark_cycles, nccl_debug=opts.nccl_debug, user_cwd=user_cwd,
                     master_port=free_port() if spec.framework == "none" else None), **opts.extra_env}
    env = with_user_path(env, cmd, user_cwd)
    cwd = workdir(spec, run_dir, user_cwd=user_cwd)
    before = _watch_shared(spec, exp, run_dir, user_cwd, env)
    started = now()
    exp.set({**exp.entries[spec.run_id], "status": "running", "start_time": started, "command": cmd})
    progress.start(spec.run_id)
    t0 = time.monotonic()
    interrupted = False
    left: list[int] = []
    try:
        code, override = execute(cmd, env=env, run_dir=run_dir, timeout_s=opts.timeout_s, cwd=cwd,
                                 left_behind=left)
    except _Interrupted as intr:
        code, override, interrupted = intr.exit_code, "killed", True
    except OSError as exc:  # the launcher itself could not start
        with open(run_dir / "stderr.log", "a", encoding="utf-8") as f:
            f.write(f"[scalescope sweep] cannot start {cmd[0]}: {exc}\n")
        code, override = None, "failed"
    wall = time.monotonic() - t0
    entry = finalize_run(run_dir, spec, exit_code=code, status=override, experiment=exp.name,
                         command=cmd, wall_s=wall)
    if before is not None:
        entry["wrote_shared"] = shared_dir.changed(before, shared_dir.snapshot(user_cwd, skip=(exp.out,)))
    if left:
        entry = _note_left_behind(run_dir, entry, left)
    if opts.after_run is not None and not interrupted:
        opts.after_run(run_dir, spec)
    exp.set({**entry, "start_time": started, "end_time": now()})
    if interrupted:
        progress.finish(spec.run_id, "killed", wall, counted=False)
        return False
    # the ETA comes from runs that ran to the end: a failed run's seconds say nothing about the others
    progress.finish(spec.run_id, entry["status"] + ("" if code in (0, None) else f" (exit {code})"), wall,
                    counted=entry["status"] == "ok")
    for note in (entry.get("exit_note"), entry.get("left_behind_note")):
        if note:
            progress.print(printable(f"scalescope sweep: warning: {spec.run_id}: {note}"))
    if entry["status"] != "ok":
        progress.print(printable(failure_line(entry)))
    for read in entry.get("shared_reads") or []:
        progress.print(printable(f"scalescope sweep: warning: {spec.run_id} read {read['path']}, which run "
                                 f"{read['written_by']} wrote into the shared working directory: the runs are not "
                                 "independent (--cwd run gives each run a directory of its own)"))
    return True


def _watch_shared(spec: RunSpec, exp: Experiment, run_dir: Path, user_cwd: Path, env: dict) -> dict | None:
    """In the shared working directory: the directory's snapshot before the run, and the
    files earlier runs wrote there handed to the run's instrumentation
    (``$SCALESCOPE_SHARED_WRITTEN``) so a read of one is named on the run; ``None`` otherwise."""
    env.pop(shared_dir.ENV, None)
    if spec.cwd != "shared":
        return None
    # every run's files, this run's earlier attempt's too (a retried run that resumes from itself)
    earlier = shared_dir.written_by_earlier(user_cwd, list(exp.entries.values()))
    if earlier:
        run_dir.mkdir(parents=True, exist_ok=True)
        listing = run_dir / ".shared_written.json"
        listing.write_text(json.dumps(earlier), encoding="utf-8")
        env[shared_dir.ENV] = str(listing)
    return shared_dir.snapshot(user_cwd, skip=(exp.out,))


def failure_line(entry: dict) -> str:
    """What a user reads under a failed run's line: the failing rank's exception, the log and,
    for a missing relative path, where the run executed and how to change it."""
    rank = entry.get("cause_rank")
    cause = entry.get("cause") or "no error message in its logs"
    line = (f"  {entry['run_id']}: {'rank ' + str(rank) + ': ' if rank is not None else ''}{cause}"
            f"\n  log: {entry.get('log') or '-'}")
    if entry.get("hint"):
        line += f"\n  {entry['hint']}"
    return line


def _note_left_behind(run_dir: Path, entry: dict, pids: list[int]) -> dict:
    """Say on the run (``run.json`` and its experiment entry) that processes it left running
    were stopped when its launcher exited."""
    note = (f"{len(pids)} process(es) the training left running after its launcher exited were stopped "
            f"(pid {', '.join(map(str, pids))}); they ran beside this run until then")
    path = run_dir / "run.json"
    with contextlib.suppress(OSError, ValueError):
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(manifest, dict):
            manifest["left_behind"] = {"pids": pids, "stopped": True, "note": note}
            write_json_atomic(path, manifest)
    return {**entry, "left_behind_note": note}


# ---------------------------------------------------------------------------------------
# Running one process tree
# ---------------------------------------------------------------------------------------


def _stop_group(proc: subprocess.Popen, *, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the run's process group (so instrumentation flushes), SIGKILL after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _left_behind(session: int, run_dir: str) -> list[int]:
    """The processes still alive of a run whose launcher (session leader ``session``) has
    exited: in its session or process group, or (a daemon that called ``setsid``) carrying
    the run's ``SCALESCOPE_RUN_DIR`` in its environment. Zombies are not counted."""
    marker = os.fsencode(f"SCALESCOPE_RUN_DIR={run_dir}")  # the bytes of a name that is not UTF-8
    mine = {os.getpid(), os.getppid()}
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:  # no /proc (macOS): the process group is all we can see
        try:
            os.killpg(session, 0)
            return [-session]
        except OSError:
            return []
    for name in names:
        if not name.isdigit() or int(name) in mine:
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z":
                continue
            if int(fields[2]) == session or int(fields[3]) == session:  # pgrp, session
                found.append(pid)
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(pid)
        except (OSError, IndexError, ValueError):
            continue
    return found


def stop_left_behind(session: int, run_dir: Path, *, grace_s: float = 3.0) -> list[int]:
    """Stop what a run left running after its launcher exited (a process a training script
    started and never waited for): SIGTERM, then SIGKILL after ``grace_s``. Returns the pids
    found (empty when nothing was left), so the run can say so."""
    found = _left_behind(session, str(Path(run_dir).resolve()))
    if not found:
        return []
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        for pid in found:
            with contextlib.suppress(OSError):
                if pid < 0:
                    os.killpg(-pid, sig)
                else:
                    os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _left_behind(session, str(Path(run_dir).resolve())):
            time.sleep(0.05)
        if not _left_behind(session, str(Path(run_dir).resolve())):
            break
    return sorted(abs(p) for p in found)


def execute(
    cmd: Sequence[str], *, env: dict[str, str], run_dir: Path, timeout_s: float | None = None,
    cwd: Path | None = None, left_behind: list[int] | None = None,
) -> tuple[int | None, str | None]:
    """Run ``cmd`` with stdout/stderr streamed to ``run_dir``'s logs, in ``cwd`` (created;
    default the current directory).

    Returns ``(exit_code, status_override)``: ``timeout`` after ``timeout_s``; on Ctrl-C the
    run is stopped, recorded as ``killed``, and KeyboardInterrupt propagates afterwards
    (the caller records it first). ``exit_code`` is negative when a signal ended the process.
    However the launcher ends, what it left running is stopped (:func:`stop_left_behind`),
    so no process of this run runs on through the next; their pids go into ``left_behind``.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    if cwd is not None:
        Path(cwd).mkdir(parents=True, exist_ok=True)
    with open(run_dir / "stdout.log", "ab") as out, open(run_dir / "stderr.log", "ab") as err:
        try:
            proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True, cwd=None if cwd is None else str(cwd))
        except KeyboardInterrupt:
            # Ctrl-C while the run started: Popen forks before it can hand the process back, so
            # the launcher may be running already; it carries the run's directory in its
            # environment, which is how it is found and stopped (no session of ours is known)
            err.write(b"\n[scalescope sweep] interrupted (Ctrl-C) while the run started: stopping the run\n")
            err.flush()
            pids = stop_left_behind(-1, run_dir)
            if left_behind is not None:
                left_behind.extend(pids)
            raise _Interrupted(None) from None
        try:
            return _wait(proc, err, timeout_s)
        finally:
            if proc.returncode is not None:  # the launcher is gone: nothing of the run may stay
                pids = stop_left_behind(proc.pid, run_dir)
                if pids:
                    err.write(f"\n[scalescope sweep] {len(pids)} process(es) the run left running after its "
                              f"launcher exited were stopped: pid {', '.join(map(str, pids))}\n".encode())
                    err.flush()
                if left_behind is not None:
                    left_behind.extend(pids)


def _wait(proc: subprocess.Popen, err, timeout_s: float | None) -> tuple[int | None, str | None]:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while True:  # in short waits, to see a Ctrl-C that Python lost on its way (_Interrupts)
            left = None if deadline is None else deadline - time.monotonic()
            try:
                proc.wait(timeout=_POLL_S if left is None else max(0.0, min(_POLL_S, left)))
                return proc.returncode, None
            except subprocess.TimeoutExpired:
                if left is not None and left <= _POLL_S:
                    raise
                _INTERRUPTS.check()
    except subprocess.TimeoutExpired:
        err.write(f"\n[scalescope sweep] timeout after {timeout_s} s: stopping the run\n".encode())
        err.flush()
        _stop_group(proc)
        return proc.returncode, "timeout"
    except KeyboardInterrupt:
        err.write(b"\n[scalescope sweep] interrupted (Ctrl-C): stopping the run\n")
        err.flush()
        _stop_group(proc)
        raise _Interrupted(proc.returncode) from None


_POLL_S = 0.25


class _Interrupted(Exception):
    def __init__(self, exit_code: int | None):
        super().__init__("interrupted")
        self.exit_code = exit_code


class _Interrupts:
    """Ctrl-C and SIGTERM to the sweep, remembered as well as raised.

    The handler raises KeyboardInterrupt where the signal lands, and Python can lose it
    there: 3.11 turns an exception raised while a class is being created into a
    RuntimeError ("Error calling __set_name__"), which an import guard's ``except
    Exception`` then swallows, and the sweep would run on to the end. So the sweep also
    checks the flag before each run and while it waits for one. A sweep started with SIGINT
    ignored (a script's background job) keeps ignoring it."""

    def __init__(self) -> None:
        self.requested = False
        self._installed: dict[int, tuple[object, object]] = {}

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    def install(self) -> None:
        self.requested = False
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous = signal.getsignal(sig)
                if sig == signal.SIGINT and previous in (signal.SIG_IGN, None):
                    continue
                handler = self._handler(previous if callable(previous) and sig == signal.SIGINT else None)
                signal.signal(sig, handler)
                self._installed[sig] = (previous, handler)
            except ValueError:  # not the main thread: nothing can be installed
                return

    def _handler(self, chained):
        def handler(signum, frame):
            self.requested = True
            if chained is not None:  # the command's own Ctrl-C handler (one line, 130)
                chained(signum, frame)
            raise KeyboardInterrupt

        return handler

    def restore(self) -> None:
        for sig, (previous, handler) in self._installed.items():
            with contextlib.suppress(ValueError, TypeError):
                if signal.getsignal(sig) is handler:  # not when the command's handler moved on
                    signal.signal(sig, previous)
        self._installed.clear()


_INTERRUPTS = _Interrupts()
