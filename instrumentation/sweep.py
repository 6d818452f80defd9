"""Run a training script at several rank counts, batch sizes and backends into one experiment directory.

``scalescope sweep --np 1,2,4 --batch-size 75,300 --backend horovod-gloo,ddp-gloo --baseline
--repeats 2 --out runs/EXP -- python examples/strain_stress.py --epochs 1``

Every configuration (backend x ranks x batch size x ``--vary`` values x repeat) becomes one
run directory ``runs/EXP/<run_id>`` (format in ``docs/run-directory.md``), launched with
``horovodrun`` (Horovod), ``torchrun --standalone`` (DDP) or plain ``python`` (the
``--baseline``: one process, no framework). The run directory and the configuration reach
the training processes through ``SCALESCOPE_*`` environment variables. Each run's
stdout/stderr go to ``stdout.log``/``stderr.log`` in its directory; a failed run is recorded
(``failed``, ``oom``, ``timeout`` or ``killed``, with its exit code and log tail) and the sweep
goes on; ``experiment.json`` is rewritten atomically after every run; running the same
command again skips the runs that finished ``ok``. ``--slurm`` writes sbatch scripts
instead (see :mod:`instrumentation.slurm`).

This module runs on cluster login nodes: it imports neither torch nor pandas.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from instrumentation.manifest import write_json_atomic
from instrumentation.recorder import closed_status, trace_path

__all__ = [
    "BACKENDS",
    "RunSpec",
    "add_arguments",
    "classify_exit",
    "finalize_run",
    "launch_command",
    "main",
    "plan_runs",
    "rank_command",
    "run",
    "run_env",
]

#: Backend label -> (framework, Horovod controller / DDP process-group backend).
BACKENDS: dict[str, tuple[str, str]] = {
    "horovod-gloo": ("horovod", "gloo"),
    "horovod-mpi": ("horovod", "mpi"),
    "ddp-gloo": ("ddp", "gloo"),
    "ddp-nccl": ("ddp", "nccl"),
    "ddp-mpi": ("ddp", "mpi"),
    "baseline": ("none", ""),
}

EXPERIMENT_FORMAT = "scalescope.experiment"
RUN_FORMAT = "scalescope.run"
FORMAT_VERSION = 1
#: Lines of a failed run's log kept in experiment.json.
LOG_TAIL_LINES = 20
#: Seconds between SIGTERM and SIGKILL when a run is stopped.
KILL_GRACE_S = 10.0

# Out-of-memory signatures in a run's log. A bare "Killed" only counts together with a
# SIGKILL exit (the kernel's OOM killer), see classify_exit.
_OOM_PATTERNS = re.compile(
    r"CUDA out of memory|OutOfMemoryError|std::bad_alloc|\bMemoryError\b|"
    r"CUBLAS_STATUS_ALLOC_FAILED|NCCL.*[Oo]ut of memory|oom-kill"
)
_SIGKILL_IN_LOG = re.compile(r"\bKilled\b|SIGKILL|signal 9\b|exitcode\s*:\s*-9\b")


# ---------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    """One configuration and repeat of a sweep: one run directory.

    ``backend`` is a label of :data:`BACKENDS`; ``batch_size`` is ``None`` when the sweep
    does not set it; ``vary`` maps a script option (without ``--``) to its value.
    """

    backend: str
    np: int
    batch_size: int | None
    repeat: int
    vary: tuple[tuple[str, str], ...] = ()

    @property
    def framework(self) -> str:
        return BACKENDS[self.backend][0]

    @property
    def controller(self) -> str:
        return BACKENDS[self.backend][1]

    @property
    def run_id(self) -> str:
        parts = [self.backend, f"np{self.np}"]
        if self.batch_size is not None:
            parts.append(f"bs{self.batch_size}")
        parts += [f"{_slug(k)}{_slug(v)}" for k, v in self.vary]
        parts.append(f"r{self.repeat}")
        return "_".join(parts)

    def config(self, *, experiment: str) -> dict:
        """The configuration recorded in the manifests and passed as ``SCALESCOPE_CONFIG``."""
        return {
            "backend": self.backend,
            "framework": self.framework,
            "np": self.np,
            "batch_size": self.batch_size,
            "repeat": self.repeat,
            "vary": {k: _typed(v) for k, v in self.vary},
            "experiment": experiment,
        }


def _slug(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", str(value)).strip("-") or "x"


def _typed(value: str) -> int | float | str:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def _int_list(text: str, *, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{what} must be positive integers, got {text!r}")
    return values


def _parse_vary(items: Sequence[str]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip().lstrip("-")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name or not vals:
            raise ValueError(f"--vary {item!r}: expected NAME=V1,V2,...")
        if name in ("batch-size", "batch_size", "backend", "np"):
            raise ValueError(f"--vary {name}: use the sweep's own --{name.replace('_', '-')} option")
        if name in (n for n, _ in out):
            raise ValueError(f"--vary {name} given twice")
        out.append((name, vals))
    return out


def plan_runs(
    *,
    nps: Sequence[int],
    backends: Sequence[str],
    batch_sizes: Sequence[int | None] = (None,),
    repeats: int = 1,
    baseline: bool = False,
    vary: Sequence[tuple[str, Sequence[str]]] = (),
) -> list[RunSpec]:
    """Every run of a sweep, in launch order.

    Repeats are the outer loop (so slow drifts of the machine spread over all
    configurations); within a repeat, for each batch size and ``vary`` combination, the
    baseline (one process, no framework) comes first, then each backend at each rank count.
    """
    unknown = [b for b in backends if b not in BACKENDS or b == "baseline"]
    if unknown:
        raise ValueError(f"unknown backend {unknown[0]!r}; choose from {', '.join(list(BACKENDS)[:-1])}")
    names = [n for n, _ in vary]
    combos = list(itertools.product(*[vals for _, vals in vary])) or [()]
    plan: list[RunSpec] = []
    for r in range(1, repeats + 1):
        for bs in batch_sizes:
            for combo in combos:
                v = tuple(zip(names, combo, strict=True))
                if baseline:
                    plan.append(RunSpec("baseline", 1, bs, r, v))
                for backend in backends:
                    for n in nps:
                        plan.append(RunSpec(backend, n, bs, r, v))
    return plan


# ---------------------------------------------------------------------------------------
# Commands and environment
# ---------------------------------------------------------------------------------------

_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")


def resolve_script(script: Sequence[str], *, python: str | None = None) -> list[str]:
    """The script command with ``python`` replaced by this interpreter (so the venv is used).

    A command starting with a ``.py`` file gets the interpreter prepended.
    """
    if not script:
        raise ValueError("no training command given (put it after `--`)")
    python = python or sys.executable
    cmd = list(script)
    if _PYTHON_NAME.match(cmd[0]):
        cmd[0] = python
    elif cmd[0].endswith(".py"):
        cmd.insert(0, python)
    return cmd


def find_tool(name: str, *, python: str | None = None) -> str:
    """``name`` next to the interpreter (the venv's bin/), else on PATH; a clear error otherwise."""
    here = Path(python or sys.executable).parent / name
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(
        f"{name} not found next to {python or sys.executable} nor on PATH "
        f"(install {'horovod' if name == 'horovodrun' else 'torch'} in this environment)"
    )


#: Rank-command wrappers: each takes (argv, spec, run_dir) and returns the new argv of a rank.
#: Profilers (nsys, torch profiler) add themselves here; the launchers never change.
RankWrapper = Callable[[list[str], RunSpec, Path], list[str]]


def rank_command(
    spec: RunSpec, script: Sequence[str], run_dir: Path, *, wrappers: Sequence[RankWrapper] = ()
) -> list[str]:
    """The argv every rank of ``spec`` executes: the script command, then each wrapper applied.

    ``--vary`` values are appended as ``--NAME VALUE``.
    """
    cmd = list(script)
    for name, value in spec.vary:
        cmd += [f"--{name}", value]
    for wrap in wrappers:
        cmd = list(wrap(cmd, spec, run_dir))
    return cmd


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


def run_env(
    spec: RunSpec,
    run_dir: Path,
    *,
    experiment: str,
    sample_interval: float | None = None,
    base: dict[str, str] | None = None,
    mark_cycles: bool = False,
) -> dict[str, str]:
    """The environment of a run: ``base`` (default ``os.environ``) plus the SCALESCOPE_* contract.

    Sets ``OMPI_ALLOW_RUN_AS_ROOT*`` only for MPI launches and only when running as root.
    """
    env = dict(os.environ if base is None else base)
    run_dir = Path(run_dir).resolve()
    env.update({
        "SCALESCOPE_RUN_DIR": str(run_dir),
        "SCALESCOPE_RUN_ID": spec.run_id,
        "SCALESCOPE_FRAMEWORK": spec.framework,
        "SCALESCOPE_BACKEND": spec.controller,
        "SCALESCOPE_CONFIG": json.dumps(spec.config(experiment=experiment), sort_keys=True),
    })
    if spec.batch_size is not None:
        env["SCALESCOPE_BATCH_SIZE"] = str(spec.batch_size)
    else:
        env.pop("SCALESCOPE_BATCH_SIZE", None)
    if sample_interval is not None:
        env["SCALESCOPE_SAMPLE_INTERVAL"] = str(sample_interval)
    for key in ("HOROVOD_TIMELINE", "HOROVOD_TIMELINE_MARK_CYCLES"):
        env.pop(key, None)
    if spec.framework == "horovod":
        env["HOROVOD_TIMELINE"] = str(run_dir / "horovod_timeline.json")
        if mark_cycles:  # one CYCLE_START per background cycle (~1 ms, even idle): large files
            env["HOROVOD_TIMELINE_MARK_CYCLES"] = "1"
    if spec.controller == "mpi" and hasattr(os, "geteuid") and os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


# ---------------------------------------------------------------------------------------
# Outcome of a run
# ---------------------------------------------------------------------------------------


def _read_tail(path: Path, *, max_bytes: int = 65536) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def log_tail(run_dir: Path, *, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of the run's stderr.log (stdout.log when stderr is empty)."""
    for name in ("stderr.log", "stdout.log"):
        text = _read_tail(Path(run_dir) / name).rstrip()
        if text:
            return "\n".join(text.splitlines()[-lines:])
    return ""


def classify_exit(exit_code: int | None, log_text: str) -> str:
    """``ok``, ``oom`` or ``failed`` from a finished run's exit code and log text.

    ``oom``: the log shows an out-of-memory error (``CUDA out of memory``,
    ``OutOfMemoryError``, ``std::bad_alloc``, ``MemoryError``), or a ``Killed``/SIGKILL
    together with exit status -9 or 137 (the kernel's OOM killer), or a launcher that
    reports a rank killed by SIGKILL.
    """
    if exit_code == 0:
        return "ok"
    if _OOM_PATTERNS.search(log_text):
        return "oom"
    if exit_code in (-9, 137) and _SIGKILL_IN_LOG.search(log_text):
        return "oom"
    if re.search(r"exitcode\s*:\s*-9\b|exited on signal 9|Signal 9 \(SIGKILL\)", log_text):
        return "oom"
    return "failed"


def _now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def _minimal_manifest(spec: RunSpec, *, experiment: str, command: list[str]) -> dict:
    keys = ["start_time", "end_time", "world_size", "n_nodes", "ranks_per_host", "ranks", "horovod",
            "versions", "gpu", "batch_size", "global_batch_size", "learning_rate", "lr_scaling",
            "epochs", "dataset_size", "n_params", "slurm", "sampler", "tags", "clock", "profilers"]
    m = {"format": RUN_FORMAT, "format_version": FORMAT_VERSION, "run_id": spec.run_id,
         "status": "failed", "exit_code": None, **dict.fromkeys(keys)}
    m.update({
        "world_size": spec.np, "framework": spec.framework, "backend": spec.controller or None,
        "batch_size": spec.batch_size, "command": command, "config": spec.config(experiment=experiment),
        "note": "written by the sweep launcher: the training process wrote no run.json",
    })
    return m


def finalize_run(
    run_dir: Path,
    spec: RunSpec,
    *,
    exit_code: int | None,
    status: str | None = None,
    experiment: str,
    command: list[str],
    wall_s: float | None = None,
) -> dict:
    """Record a finished run: set ``status``/``exit_code`` in its ``run.json`` (writing a
    minimal one if the training never did) and return its ``experiment.json`` entry.

    ``status`` overrides the classification (``timeout``, ``killed``); otherwise it comes
    from :func:`classify_exit` on the exit code and the logs.
    """
    run_dir = Path(run_dir)
    log_text = _read_tail(run_dir / "stderr.log") + "\n" + _read_tail(run_dir / "stdout.log")
    path = run_dir / "run.json"
    manifest = None
    with contextlib.suppress(OSError, ValueError):
        manifest = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(manifest, dict):
        manifest = _minimal_manifest(spec, experiment=experiment, command=command)
    exit_note = None
    if status is None:
        status = classify_exit(exit_code, log_text)
        if status == "failed" and _finished_before_exit(run_dir, manifest):
            status = "ok"
            exit_note = (f"exit code {exit_code} after training finished: every rank closed its "
                         "trace and rank 0 recorded status ok, so the data is complete (a crash "
                         "in interpreter teardown, e.g. a DDP model alive after "
                         "destroy_process_group; see docs/instrumentation.md)")
    manifest["status"] = status
    manifest["exit_code"] = exit_code
    if exit_note:
        manifest["exit_note"] = exit_note
    if manifest.get("config") is None:
        manifest["config"] = spec.config(experiment=experiment)
    if not manifest.get("end_time"):
        manifest["end_time"] = _now()
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, manifest)
    entry = {"run_id": spec.run_id, "status": status, "exit_code": exit_code,
             "config": spec.config(experiment=experiment), "wall_s": None if wall_s is None else round(wall_s, 3),
             "command": command}
    if status != "ok" or exit_note:
        entry["log_tail"] = log_tail(run_dir)
    if exit_note:
        entry["exit_note"] = exit_note
    return entry


def _finished_before_exit(run_dir: Path, manifest: dict) -> bool:
    """Did the training finish (rank 0's ``finish()`` wrote status ok and every rank closed
    its trace with status ok) before the process tree exited non-zero?"""
    if manifest.get("status") != "ok" or not manifest.get("end_time"):
        return False
    world = manifest.get("world_size")
    if not isinstance(world, int) or world < 1:
        return False
    # a rank stopped by SIGTERM closes "killed"; one that died leaves its trace open
    return all(closed_status(trace_path(run_dir, rank)) == "ok" for rank in range(world))


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


def execute(
    cmd: Sequence[str], *, env: dict[str, str], run_dir: Path, timeout_s: float | None = None
) -> tuple[int | None, str | None]:
    """Run ``cmd`` with stdout/stderr streamed to ``run_dir``'s logs.

    Returns ``(exit_code, status_override)``: ``timeout`` after ``timeout_s``; on Ctrl-C the
    run is stopped, recorded as ``killed``, and KeyboardInterrupt propagates afterwards
    (the caller records it first). ``exit_code`` is negative when a signal ended the process.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "stdout.log", "ab") as out, open(run_dir / "stderr.log", "ab") as err:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
            return proc.returncode, None
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


class _Interrupted(Exception):
    def __init__(self, exit_code: int | None):
        super().__init__("interrupted")
        self.exit_code = exit_code


# ---------------------------------------------------------------------------------------
# Experiment manifest
# ---------------------------------------------------------------------------------------


def load_experiment(out: Path) -> dict | None:
    """The existing ``experiment.json`` of ``out``, or ``None``; unreadable -> ValueError."""
    path = Path(out) / "experiment.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the existing experiment manifest ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != EXPERIMENT_FORMAT:
        raise ValueError(f"{path}: not a scalescope experiment manifest")
    if int(data.get("format_version", 0)) > FORMAT_VERSION:
        raise ValueError(f"{path}: format_version {data.get('format_version')} is newer than this scalescope")
    return data


@dataclass
class Experiment:
    """``experiment.json`` in memory: runs in plan order, older unplanned runs kept at the end."""

    out: Path
    name: str
    command: list[str]
    script: list[str]
    created: str = field(default_factory=_now)
    entries: dict[str, dict] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @classmethod
    def open(cls, out: Path, *, command: list[str], script: list[str], plan: Sequence[RunSpec],
             experiment: str) -> Experiment:
        old = load_experiment(out) or {}
        exp = cls(out=Path(out), name=experiment, command=command, script=script,
                  created=old.get("created") or _now())
        previous = {e.get("run_id"): e for e in old.get("runs", []) if isinstance(e, dict)}
        for spec in plan:
            entry = previous.pop(spec.run_id, None)
            if entry is None or entry.get("status") != "ok":
                entry = {**(entry or {}), "run_id": spec.run_id, "status": "pending", "exit_code": None,
                         "config": spec.config(experiment=experiment), "wall_s": None}
            exp.entries[spec.run_id] = entry
        exp.entries.update(previous)  # runs of an earlier, different sweep stay listed
        return exp

    def is_done(self, spec: RunSpec) -> bool:
        entry = self.entries.get(spec.run_id, {})
        manifest = self.out / spec.run_id / "run.json"
        return entry.get("status") == "ok" and manifest.exists()

    def set(self, entry: dict) -> None:
        self.entries[entry["run_id"]] = entry
        self.save()

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.out / "experiment.json", {
            "format": EXPERIMENT_FORMAT, "format_version": FORMAT_VERSION, "name": self.name,
            "created": self.created, "updated": _now(), "command": self.command, "script": self.script,
            **self.extra, "runs": list(self.entries.values()),
        })


# ---------------------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------------------


class _Progress:
    """A rich progress bar on a terminal, plain lines otherwise; ETA from the mean run time."""

    def __init__(self, total: int, *, stream=None):
        self.total, self.done, self.walls = total, 0, []
        self.stream = stream or sys.stdout
        self._bar = None
        if total and getattr(self.stream, "isatty", lambda: False)():
            try:
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

                self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                     TextColumn("ETA {task.fields[eta]}"), transient=False)
                self._task = self._bar.add_task("sweep", total=total, eta="?")
                self._bar.start()
            except Exception:
                self._bar = None

    def eta(self) -> str:
        if not self.walls:
            return "?"
        left = sum(self.walls) / len(self.walls) * (self.total - self.done)
        return _fmt_s(left)

    def print(self, msg: str) -> None:
        if self._bar is not None:
            self._bar.console.print(msg, markup=False, highlight=False)
        else:
            print(msg, file=self.stream, flush=True)

    def start(self, run_id: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=run_id)
        else:
            self.print(f"[{self.done + 1}/{self.total}] {run_id} ... (ETA {self.eta()})")

    def finish(self, run_id: str, status: str, wall_s: float | None, *, counted: bool = True) -> None:
        if counted and wall_s is not None:
            self.walls.append(wall_s)
        self.done += 1
        took = "" if wall_s is None else f" in {_fmt_s(wall_s)}"
        self.print(f"[{self.done}/{self.total}] {run_id}: {status}{took}")
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, eta=self.eta())

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _fmt_s(s: float) -> str:
    if s < 90:
        return f"{s:.1f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


# ---------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the sweep's options to ``parser`` (used by ``scalescope sweep`` and ``python -m``)."""
    parser.add_argument("--np", default="1", metavar="N1,N2",
                        help="comma-separated rank counts (default 1)")
    parser.add_argument("--batch-size", default=None, metavar="B1,B2",
                        help="comma-separated per-rank batch sizes, passed as SCALESCOPE_BATCH_SIZE "
                             "(default: the script's own)")
    parser.add_argument("--backend", default="horovod-gloo", metavar="B1,B2",
                        help="comma-separated backends: " + ", ".join(list(BACKENDS)[:-1])
                             + " (default horovod-gloo); empty with --baseline for baseline runs only")
    parser.add_argument("--baseline", action="store_true",
                        help="add a one-process, no-framework run per batch size / vary combination "
                             "(the reference for speedup and framework overhead)")
    parser.add_argument("--repeats", type=int, default=1, help="repeats of every configuration (default 1)")
    parser.add_argument("--vary", action="append", default=[], metavar="NAME=V1,V2",
                        help="also sweep a script option: appends `--NAME V` (repeatable)")
    parser.add_argument("--out", required=True, type=Path, help="experiment directory, e.g. runs/EXP")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop a run after S seconds and record it as timeout")
    parser.add_argument("--timeline-cycles", action="store_true",
                        help="mark Horovod's background cycles (CYCLE_START) in its timeline: one per ~1 ms "
                             "cycle, so files grow about 20x")
    parser.add_argument("--sample-interval", type=float, default=None, metavar="S",
                        help="sampler period passed as SCALESCOPE_SAMPLE_INTERVAL")
    from instrumentation import slurm

    slurm.add_arguments(parser)
    from instrumentation import profilers

    profilers.add_profiler_arguments(parser)
    parser.add_argument("script", nargs=argparse.REMAINDER,
                        help="the training command, after `--`: e.g. -- python examples/strain_stress.py")


def _error(msg: str) -> int:
    print(f"scalescope sweep: error: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace, *, wrappers: Sequence[RankWrapper] = ()) -> int:
    """Run (or, with ``--slurm``, write scripts for) the sweep described by ``args``.

    Returns the exit code: 0 when every run is ``ok``, 1 when any failed, 2 on bad options,
    130 when interrupted.
    """
    script = list(args.script or [])
    if script and script[0] == "--":
        script = script[1:]
    try:
        if not script:
            raise ValueError("no training command given: put it after `--`, e.g. -- python train.py")
        nps = _int_list(args.np, what="--np")
        batch_sizes: list[int | None] = (
            _int_list(args.batch_size, what="--batch-size") if args.batch_size else [None])
        backends = [b.strip() for b in (args.backend or "").split(",") if b.strip()]
        if not backends and not args.baseline:
            raise ValueError("no backend given (and no --baseline)")
        if args.repeats < 1:
            raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
        if args.timeout is not None and args.timeout <= 0:
            raise ValueError(f"--timeout must be positive, got {args.timeout}")
        vary = _parse_vary(args.vary)
        plan = plan_runs(nps=nps, backends=backends, batch_sizes=batch_sizes, repeats=args.repeats,
                         baseline=args.baseline, vary=vary)
        from instrumentation import profilers

        # SLURM scripts carry the profiler variables on each rank's command line; local runs
        # get them in the run's environment.
        profiler_env = {} if args.slurm else profilers.profiler_env(args)
        wrappers = [*wrappers, *profilers.wrappers_from_args(args, with_env=bool(args.slurm))]
    except (ValueError, argparse.ArgumentTypeError) as exc:
        return _error(str(exc))

    out = Path(args.out).resolve()
    experiment = out.name
    prog = Path(sys.argv[0]).name
    sweep_cmd = ["python", "-m", "instrumentation.sweep", *sys.argv[1:]] if prog == "sweep.py" \
        else [prog, *sys.argv[1:]]
    if args.slurm:
        from instrumentation import slurm

        try:
            return slurm.write_scripts(plan, script=script, out=out, args=args, experiment=experiment,
                                       command=sweep_cmd, wrappers=wrappers)
        except (ValueError, FileNotFoundError) as exc:
            return _error(str(exc))

    resolved = resolve_script(script)
    if args.dry_run:
        try:
            for spec in plan:
                run_dir = out / spec.run_id
                cmd = launch_command(spec, rank_command(spec, resolved, run_dir, wrappers=wrappers))
                extra = "".join(f"{k}={v} " for k, v in profiler_env.items())
                print(f"{spec.run_id}: SCALESCOPE_FRAMEWORK={spec.framework} "
                      f"SCALESCOPE_BACKEND={spec.controller} {extra}{quote(cmd)}")
        except FileNotFoundError as exc:
            return _error(str(exc))
        return 0
    try:
        if any(s.framework == "horovod" for s in plan):
            find_tool("horovodrun")
        if any(s.framework == "ddp" for s in plan):
            find_tool("torchrun")
        exp = Experiment.open(out, command=sweep_cmd, script=script, plan=plan, experiment=experiment)
    except (ValueError, FileNotFoundError) as exc:
        return _error(str(exc))
    exp.save()

    todo = [s for s in plan if not exp.is_done(s)]
    skipped = len(plan) - len(todo)
    progress = _Progress(len(todo))
    progress.print(f"scalescope sweep: {len(plan)} runs into {out}"
                   + (f" ({skipped} already ok, skipped)" if skipped else ""))
    previous_term = _sigterm_as_interrupt()
    try:
        for spec in todo:
            run_dir = out / spec.run_id
            _set_aside(run_dir, out)
            rank_cmd = rank_command(spec, resolved, run_dir, wrappers=wrappers)
            cmd = launch_command(spec, rank_cmd)
            env = {**run_env(spec, run_dir, experiment=experiment, sample_interval=args.sample_interval,
                             mark_cycles=args.timeline_cycles),
                   **profiler_env}
            exp.set({**exp.entries[spec.run_id], "status": "running", "start_time": _now(), "command": cmd})
            progress.start(spec.run_id)
            t0 = time.monotonic()
            try:
                code, override = execute(cmd, env=env, run_dir=run_dir, timeout_s=args.timeout)
            except _Interrupted as intr:
                entry = finalize_run(run_dir, spec, exit_code=intr.exit_code, status="killed",
                                     experiment=experiment, command=cmd, wall_s=time.monotonic() - t0)
                exp.set({**entry, "start_time": exp.entries[spec.run_id].get("start_time"), "end_time": _now()})
                progress.finish(spec.run_id, "killed", time.monotonic() - t0, counted=False)
                progress.print("scalescope sweep: interrupted; run the same command again to resume")
                return 130
            except OSError as exc:  # the launcher itself could not start
                with open(run_dir / "stderr.log", "a", encoding="utf-8") as f:
                    f.write(f"[scalescope sweep] cannot start {cmd[0]}: {exc}\n")
                code, override = None, "failed"
            wall = time.monotonic() - t0
            entry = finalize_run(run_dir, spec, exit_code=code, status=override, experiment=experiment,
                                 command=cmd, wall_s=wall)
            if profiler_env or getattr(args, "nsys", False):
                profilers.record_profilers(run_dir, profilers.profiler_manifest(args, run_dir=run_dir, spec=spec))
            exp.set({**entry, "start_time": exp.entries[spec.run_id].get("start_time"), "end_time": _now()})
            progress.finish(spec.run_id, entry["status"] + ("" if code in (0, None) else f" (exit {code})"), wall)
            if entry.get("exit_note"):
                progress.print(f"scalescope sweep: warning: {spec.run_id}: {entry['exit_note']}")
    except KeyboardInterrupt:  # between runs: nothing is running, the manifest is current
        progress.print("scalescope sweep: interrupted; run the same command again to resume")
        return 130
    finally:
        progress.close()
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
    bad = [e["run_id"] for e in exp.entries.values()
           if e["run_id"] in {s.run_id for s in plan} and e.get("status") != "ok"]
    progress.print(f"scalescope sweep: {len(plan) - len(bad)}/{len(plan)} runs ok"
                   + (f"; not ok: {', '.join(bad)}" if bad else "") + f"; manifest {out / 'experiment.json'}")
    return 1 if bad else 0


def _sigterm_as_interrupt():
    """Treat SIGTERM to the sweep (``kill``, a batch system) like Ctrl-C; returns the old handler."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        return None


def _set_aside(run_dir: Path, out: Path) -> None:
    """Move an earlier, unfinished attempt's files to ``out/.attempts/`` so runs never mix."""
    if not run_dir.exists() or not any(run_dir.iterdir()):
        return
    dest_root = out / ".attempts"
    dest_root.mkdir(exist_ok=True)
    for k in itertools.count(1):
        dest = dest_root / f"{run_dir.name}-{k}"
        if not dest.exists():
            run_dir.rename(dest)
            return


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m instrumentation.sweep ...``."""
    parser = argparse.ArgumentParser(prog="python -m instrumentation.sweep",
                                     description=(__doc__ or "").strip().splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


# Shell-quoting helper shared with the SLURM writer.
def quote(cmd: Sequence[str]) -> str:
    return shlex.join(list(cmd))


if __name__ == "__main__":
    sys.exit(main())

