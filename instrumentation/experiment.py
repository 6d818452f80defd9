"""The run plan and the experiment record of a sweep, shared by local runs and SLURM jobs.

* the plan: :data:`BACKENDS`, :class:`RunSpec` (one configuration and repeat = one run
  directory) and :func:`plan_runs`;
* what a run executes: :func:`resolve_script`, :func:`find_tool`, :func:`rank_command` (the
  argv of every rank) and :func:`run_env` (the ``SCALESCOPE_*`` contract);
* the record: :func:`classify_exit` and :func:`finalize_run` (a finished run's ``run.json``
  and ``experiment.json`` entry), :func:`load_experiment`, :class:`Experiment` and
  :func:`update_entries` (``experiment.json``, format in ``docs/run-directory.md``).

Local execution (:mod:`instrumentation.local`) and SLURM scripts and jobs
(:mod:`instrumentation.slurm`) both build on this module and never on each other. It runs on
cluster login nodes and at the end of batch jobs: it imports neither torch nor pandas.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from instrumentation import commpath, paths, shared_dir
from instrumentation import threads as _threads
from instrumentation.command import resolve_script, with_user_path
from instrumentation.failure import counted_global_batch, finished_before_exit, run_failure
from instrumentation.manifest import slurm_env, write_json_atomic

__all__ = [
    "BACKENDS",
    "EXPERIMENT_FORMAT",
    "FINAL_STATUSES",
    "FORMAT_VERSION",
    "RUN_FORMAT",
    "Experiment",
    "ExperimentInUse",
    "RankWrapper",
    "RunSpec",
    "classify_exit",
    "cores_per_rank",
    "experiment_lock",
    "finalize_run",
    "find_tool",
    "free_port",
    "load_experiment",
    "log_tail",
    "now",
    "plan_runs",
    "rank_command",
    "resolve_script",
    "run_env",
    "set_aside",
    "summary",
    "sweep_lock",
    "update_entries",
    "with_user_path",
    "workdir",
]

#: Backend label -> (framework, Horovod controller / DDP process-group backend).
BACKENDS: dict[str, tuple[str, str]] = {
    "horovod-gloo": ("horovod", "gloo"),
    "horovod-mpi": ("horovod", "mpi"),
    # MPI controller, NCCL tensor operations (HOROVOD_GPU_OPERATIONS=NCCL): Horovod on GPU clusters
    "horovod-nccl": ("horovod", "mpi"),
    "ddp-gloo": ("ddp", "gloo"),
    "ddp-nccl": ("ddp", "nccl"),
    "ddp-mpi": ("ddp", "mpi"),
    "baseline": ("none", ""),
}

EXPERIMENT_FORMAT = "scalescope.experiment"
RUN_FORMAT = "scalescope.run"
FORMAT_VERSION = 1
#: ``--cwd``: ``shared`` (the sweep's directory, as torchrun, mpirun and sbatch do; the default) or
#: ``run`` (each run in ``<run_dir>/work``, isolated).
CWD_MODES = ("run", "shared")
#: The working directory of a run inside its run directory (``--cwd run``).
WORKDIR = "work"
#: Lines of a failed run's log kept in experiment.json.
LOG_TAIL_LINES = 20
#: Statuses of a run that has ended (the others: ``pending``, ``queued``, ``running``).
FINAL_STATUSES = frozenset({"ok", "failed", "oom", "timeout", "killed"})


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
    does not set it; ``vary`` maps a script option (without ``--``) to its value;
    ``labels`` are the sweep's ``--label KEY=VALUE`` pairs; ``scaling`` is ``strong`` (fixed
    dataset) or ``weak`` (the dataset grows with the rank count, ``SCALESCOPE_DATA_SCALE``).
    """

    backend: str
    np: int
    batch_size: int | None
    repeat: int
    vary: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    scaling: str = "strong"
    #: ``--threads N`` (threads per rank); ``None``: cores per rank (:func:`cores_per_rank`)
    threads: int | None = None
    #: ``shared``: the process runs in the sweep's directory (the default); ``run``: in ``<run_dir>/work``
    cwd: str = "shared"
    #: ``--global-batch-size G``: the global batch held fixed (``batch_size`` = G / ``np``); None:
    #: the per-rank batch is fixed (``--batch-size``, the default mode)
    global_batch: int | None = None

    @property
    def framework(self) -> str:
        return BACKENDS[self.backend][0]

    @property
    def controller(self) -> str:
        return BACKENDS[self.backend][1]

    @property
    def run_id(self) -> str:
        parts = [self.backend, f"np{self.np}"]
        if self.global_batch is not None:
            parts.append(f"gbs{self.global_batch}")
        elif self.batch_size is not None:
            parts.append(f"bs{self.batch_size}")
        parts += [f"{_slug(k)}{_slug(v)}" for k, v in self.vary]
        if self.scaling == "weak":
            parts.append("weak")
        parts.append(f"r{self.repeat}")
        return "_".join(parts)

    def config(self, *, experiment: str) -> dict:
        """The configuration recorded in the manifests and passed as ``SCALESCOPE_CONFIG``
        (``labels`` and ``scaling``/``data_scale`` only when the sweep set them; ``threads`` is
        the request, ``"auto"`` for cores per rank, ``cwd`` the working-directory mode)."""
        cfg = {
            "backend": self.backend,
            "framework": self.framework,
            "np": self.np,
            "batch_size": self.batch_size,
            "repeat": self.repeat,
            "vary": {k: _typed(v) for k, v in self.vary},
            "experiment": experiment,
            "threads": "auto" if self.threads is None else self.threads,
            "cwd": self.cwd,
        }
        if self.labels:
            cfg["labels"] = dict(self.labels)
        if self.scaling != "strong":
            cfg["scaling"] = self.scaling
            cfg["data_scale"] = self.data_scale
        if self.global_batch is not None:
            cfg["batch_mode"] = "global"
            cfg["global_batch_size"] = self.global_batch
        return cfg

    @property
    def data_scale(self) -> int:
        """Factor the script multiplies its dataset by: the rank count for weak scaling, else 1."""
        return self.np if self.scaling == "weak" else 1

    @classmethod
    def from_config(cls, cfg: dict) -> RunSpec:
        """The spec back from :meth:`config` (``SCALESCOPE_CONFIG`` or an experiment entry).

        Raises ``KeyError``/``ValueError``/``TypeError`` when ``cfg`` is not such a configuration.
        """
        backend = cfg["backend"]
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}")
        bs = cfg.get("batch_size")
        threads = cfg.get("threads")
        return cls(backend, int(cfg["np"]), None if bs is None else int(bs), int(cfg["repeat"]),
                   tuple((str(k), str(v)) for k, v in (cfg.get("vary") or {}).items()),
                   tuple((str(k), str(v)) for k, v in (cfg.get("labels") or {}).items()),
                   str(cfg.get("scaling") or "strong"),
                   None if threads in (None, "auto") else int(threads), str(cfg.get("cwd") or "shared"),
                   int(cfg["global_batch_size"]) if cfg.get("batch_mode") == "global" else None)


def _slug(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", str(value)).strip("-") or "x"


def _typed(value: str) -> int | float | str:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def plan_runs(
    *,
    nps: Sequence[int],
    backends: Sequence[str],
    batch_sizes: Sequence[int | None] = (None,),
    repeats: int = 1,
    baseline: bool = False,
    vary: Sequence[tuple[str, Sequence[str]]] = (),
    labels: Sequence[tuple[str, str]] = (),
    scaling: str = "strong",
    threads: int | None = None,
    cwd: str = "shared",
    global_batches: Sequence[int] = (),
) -> list[RunSpec]:
    """Every run of a sweep, in launch order.

    Repeats are the outer loop (so slow drifts of the machine spread over all
    configurations); within a repeat, for each batch size and ``vary`` combination, the
    baseline (one process, no framework) comes first, then each backend at each rank count.
    ``labels`` go into every run's configuration; ``scaling="weak"`` grows the dataset with
    the rank count. ``threads`` (``--threads``) and ``cwd`` (``--cwd``) go into every run.
    ``global_batches`` (``--global-batch-size``) replace ``batch_sizes``: the global batch G is
    held fixed and each run's per-rank batch is G / ranks (the baseline's is G); a G that a rank
    count does not divide is refused (ValueError naming both), never rounded.
    """
    if scaling not in ("strong", "weak"):
        raise ValueError(f"--scaling must be strong or weak, not {scaling!r}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ValueError(f"--threads must be a positive integer, not {threads!r}")
    if cwd not in CWD_MODES:
        raise ValueError(f"--cwd must be one of {', '.join(CWD_MODES)}, not {cwd!r}")
    extra = {"labels": tuple(labels), "scaling": scaling, "threads": threads, "cwd": cwd}
    unknown = [b for b in backends if b not in BACKENDS or b == "baseline"]
    if unknown:
        raise ValueError(f"unknown backend {unknown[0]!r}; choose from {', '.join(list(BACKENDS)[:-1])}")
    _check_printable(vary, labels)
    names = [n for n, _ in vary]
    combos = list(itertools.product(*[vals for _, vals in vary])) or [()]
    if global_batches:
        _check_divides(global_batches, [*nps, 1] if baseline else nps)
    plan: list[RunSpec] = []
    for r in range(1, repeats + 1):
        for bs in global_batches or batch_sizes:
            # the global batch fixed: per-rank batch G / ranks, in the same order
            tag = {"global_batch": bs} if global_batches else {}
            for combo in combos:
                v = tuple(zip(names, combo, strict=True))
                if baseline:
                    plan.append(RunSpec("baseline", 1, bs, r, v, **extra, **tag))
                for backend in backends:
                    for n in nps:
                        plan.append(RunSpec(backend, n, bs // n if global_batches else bs, r, v, **extra, **tag))
    _check_unique(plan)
    return plan


def _check_divides(global_batches: Sequence[int], nps: Sequence[int]) -> None:
    """ValueError naming the first global batch a rank count does not divide."""
    bad = [(g, n) for g in global_batches for n in nps if g % n]
    if bad:
        g, n = bad[0]
        raise ValueError(f"--global-batch-size {g} does not divide by {n} rank(s) ({g}/{n} = {g / n:g}): the "
                         "per-rank batch would differ between ranks; choose a global batch that every --np value "
                         "divides (their least common multiple's multiples)")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_printable(vary: Sequence[tuple[str, Sequence[str]]], labels: Sequence[tuple[str, str]]) -> None:
    """ValueError for a newline or other control character in a ``--vary`` or ``--label``
    name or value: they go into scripts, command lines and directory names."""
    for option, pairs in (("--vary", [(n, v) for n, vals in vary for v in vals]), ("--label", list(labels))):
        for name, value in pairs:
            if _CONTROL.search(str(name)) or _CONTROL.search(str(value)):
                raise ValueError(f"{option} {name}={value!r} holds a control character (newline, tab, ...); refused")


def _check_unique(plan: Sequence[RunSpec]) -> None:
    """ValueError when two configurations map to one run id (``--vary`` values that differ
    only in punctuation, e.g. ``a b``, ``a_b``, ``a-b`` and ``a/b``): they would share a
    directory, and one would vanish."""
    seen: dict[str, RunSpec] = {}
    for spec in plan:
        other = seen.setdefault(spec.run_id.lower(), spec)  # case-insensitive file systems too
        if other is not spec:
            a = ", ".join(f"{k}={v!r}" for k, v in other.vary) or "(no --vary)"
            b = ", ".join(f"{k}={v!r}" for k, v in spec.vary) or "(no --vary)"
            raise ValueError(f"--vary values {a} and {b} map to the same run id {spec.run_id!r} (run ids keep "
                             "letters, digits and . + -, and a directory name may ignore case); choose values that differ in those")


# ---------------------------------------------------------------------------------------
# Commands and environment
# ---------------------------------------------------------------------------------------

def cores_per_rank(ranks_per_host: int, *, cpus: int | None = None) -> int:
    """``floor(cpus available / ranks per host)``, at least 1: the default threads per rank.

    ``cpus`` defaults to the CPUs this process may run on (``os.sched_getaffinity``)."""
    if cpus is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
    return max(1, int(cpus) // max(1, int(ranks_per_host)))


def free_port() -> int:
    """A TCP port free on this host now (for the baseline's ``MASTER_PORT``)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def workdir(spec: RunSpec, run_dir: Path, *, user_cwd: str | os.PathLike[str] | None = None) -> Path:
    """Where the run's processes execute: ``<run_dir>/work`` (``--cwd run``) or the sweep's
    directory (``--cwd shared``)."""
    if spec.cwd == "shared":
        return Path(user_cwd or Path.cwd()).absolute()
    return Path(run_dir).absolute() / WORKDIR


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


def run_env(
    spec: RunSpec,
    run_dir: Path,
    *,
    experiment: str,
    sample_interval: float | None = None,
    base: dict[str, str] | None = None,
    mark_cycles: bool = False,
    nccl_debug: bool = True,
    threads: int | None = None,
    user_cwd: str | os.PathLike[str] | None = None,
    master_port: int | None = None,
) -> dict[str, str]:
    """The environment of a run: ``base`` (default ``os.environ``) plus the SCALESCOPE_* contract.

    Threads: ``OMP_NUM_THREADS`` and ``SCALESCOPE_THREADS`` (torch's intra-op threads, set by
    ``instrumentation.init``) are ``threads``, else ``spec.threads`` (``--threads``), else the
    cores per rank of this host (:func:`cores_per_rank`). ``SCALESCOPE_USER_CWD`` is the
    sweep's directory (``user_cwd``, default the current one). The baseline gets what a
    one-process launch would give (``RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1
    MASTER_ADDR=127.0.0.1``, ``MASTER_PORT=master_port`` when given), so a torchrun-style
    script runs unchanged. Sets ``OMPI_ALLOW_RUN_AS_ROOT*`` only for MPI launches and only
    when running as root.
    """
    env = dict(os.environ if base is None else base)
    run_dir = Path(run_dir).resolve()
    n_threads = threads or spec.threads or cores_per_rank(spec.np)
    env.update({
        "SCALESCOPE_RUN_DIR": str(run_dir),
        "SCALESCOPE_RUN_ID": spec.run_id,
        "SCALESCOPE_FRAMEWORK": spec.framework,
        "SCALESCOPE_BACKEND": spec.controller,
        "SCALESCOPE_CONFIG": json.dumps(spec.config(experiment=experiment), sort_keys=True),
        "SCALESCOPE_THREADS": str(n_threads),
        "OMP_NUM_THREADS": str(n_threads),
        "SCALESCOPE_USER_CWD": str(Path(user_cwd or Path.cwd()).absolute()),
        "SCALESCOPE_CWD": spec.cwd,
    })
    if spec.framework == "none":  # a one-process launch, as torchrun --nproc-per-node 1 would set it
        env.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                    "MASTER_ADDR": "127.0.0.1"})
        if master_port is not None:
            env["MASTER_PORT"] = str(master_port)
    if spec.batch_size is not None:
        env["SCALESCOPE_BATCH_SIZE"] = str(spec.batch_size)
    else:
        env.pop("SCALESCOPE_BATCH_SIZE", None)
    if sample_interval is not None:
        env["SCALESCOPE_SAMPLE_INTERVAL"] = str(sample_interval)
    if spec.data_scale != 1:  # weak scaling: the script multiplies its dataset by this
        env["SCALESCOPE_DATA_SCALE"] = str(spec.data_scale)
    else:
        env.pop("SCALESCOPE_DATA_SCALE", None)
    if spec.backend == "horovod-nccl":
        env["HOROVOD_GPU_OPERATIONS"] = "NCCL"
    for key in ("HOROVOD_TIMELINE", "HOROVOD_TIMELINE_MARK_CYCLES"):
        env.pop(key, None)
    if spec.framework == "horovod":
        env["HOROVOD_TIMELINE"] = str(run_dir / "horovod_timeline.json")
        if mark_cycles:  # one CYCLE_START per background cycle (~1 ms, even idle): large files
            env["HOROVOD_TIMELINE_MARK_CYCLES"] = "1"
    if spec.controller == "mpi" and hasattr(os, "geteuid") and os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    # NCCL_DEBUG=INFO into <run>/nccl.<host>.<pid>.log for NCCL and Horovod runs (--no-nccl-debug: off)
    return commpath.nccl_env(env, run_dir, framework=spec.framework, controller=spec.controller,
                             enabled=nccl_debug)


# ---------------------------------------------------------------------------------------
# Outcome of a run
# ---------------------------------------------------------------------------------------


def _read_tail(path: Path, *, max_bytes: int = 65536) -> str:
    if paths.leaves(path):  # a link out of the experiment: its content is never quoted
        return ""
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


def now() -> str:
    """The current time, ISO 8601 with the local time zone (as in the manifests)."""
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
        if status == "failed" and finished_before_exit(run_dir, manifest):
            status = "ok"
            exit_note = (f"exit code {exit_code} after training finished: every rank trained, closed its "
                         "trace and rank 0's script reached its own end (finish() or its last epoch_end), "
                         "so the data is complete (a crash in interpreter teardown, e.g. a DDP model alive "
                         "after destroy_process_group; see docs/instrumentation.md)")
    manifest["status"] = status
    manifest["exit_code"] = exit_code
    counted = counted_global_batch(run_dir, manifest.get("world_size"))
    if counted is not None:  # what every rank's steps processed, not batch_size · world_size
        manifest["global_batch_size"], manifest["global_batch_size_source"] = counted, "counted"
    _threads.merge_rank_files(run_dir, manifest)  # ranks whose script changed their threads after init
    if exit_note:
        manifest["exit_note"] = exit_note
    if status != "ok":
        manifest["failure"] = run_failure(run_dir, manifest)
    reads = shared_dir.collect_reads(run_dir)  # files earlier runs wrote into the shared directory
    if reads:
        manifest["shared_reads"] = reads
    if manifest.get("config") is None:
        manifest["config"] = spec.config(experiment=experiment)
    if manifest.get("slurm") is None:  # the training never wrote one: the job's variables still count
        manifest["slurm"] = slurm_env()
    if not manifest.get("end_time"):
        manifest["end_time"] = now()
    run_dir.mkdir(parents=True, exist_ok=True)
    # what the communication used: NCCL logs and knobs, and this node's interconnect facts
    manifest["comm_capture"] = {**commpath.run_capture(run_dir, os.environ),
                                "node": commpath.node_info_once(run_dir.parent)}
    write_json_atomic(path, manifest)
    entry = {"run_id": spec.run_id, "status": status, "exit_code": exit_code,
             "config": spec.config(experiment=experiment), "wall_s": None if wall_s is None else round(wall_s, 3),
             "command": command}
    if status != "ok" or exit_note:
        entry["log_tail"] = log_tail(run_dir)
    if status != "ok":
        entry.update(run_failure(run_dir, manifest))
    if reads:
        entry["shared_reads"] = reads
    if exit_note:
        entry["exit_note"] = exit_note
    return entry


# ---------------------------------------------------------------------------------------
# Experiment manifest
# ---------------------------------------------------------------------------------------


def load_experiment(out: Path) -> dict | None:
    """The existing ``experiment.json`` of ``out``, or ``None``; unreadable -> ValueError."""
    path = Path(out) / "experiment.json"
    if not path.exists():
        return None
    if paths.leaves(path):
        raise ValueError(f"{path}: {paths.LEAVES}")
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
    created: str = field(default_factory=now)
    entries: dict[str, dict] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @classmethod
    def open(cls, out: Path, *, command: list[str], script: list[str], plan: Sequence[RunSpec],
             experiment: str, keep: Sequence[str] = ("ok",)) -> Experiment:
        """The experiment of ``plan`` in ``out``: each planned run's entry, reset to ``pending``
        unless its status is in ``keep`` (a resumed sweep keeps finished runs; a resumed SLURM
        submission also keeps ``queued``/``running`` jobs)."""
        old = load_experiment(out) or {}
        exp = cls(out=Path(out), name=experiment, command=command, script=script,
                  created=old.get("created") or now())
        previous = {e["run_id"]: e for e in old.get("runs", [])
                    if isinstance(e, dict) and paths.is_run_id(e.get("run_id"))}
        for spec in plan:
            entry = previous.pop(spec.run_id, None)
            if entry is None or entry.get("status") not in keep:
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
            "created": self.created, "updated": now(), "command": self.command, "script": self.script,
            **self.extra, "runs": list(self.entries.values()),
        })


@contextlib.contextmanager
def experiment_lock(out: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``OUT/.experiment.lock`` (best effort where the file system
    has none), held by every writer of ``experiment.json`` that may run while SLURM jobs
    finalize. Not re-entrant: do not nest it."""
    Path(out).mkdir(parents=True, exist_ok=True)
    # O_NOFOLLOW: a lock file that is a link (in a shared experiment) creates nothing elsewhere
    fd = os.open(Path(out) / ".experiment.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "a") as f:
        try:
            import fcntl

            fcntl.flock(f, fcntl.LOCK_EX)
        except (ImportError, OSError):
            pass
        yield


class ExperimentInUse(ValueError):
    """Another sweep is writing into the experiment (:func:`sweep_lock`)."""


@contextlib.contextmanager
def sweep_lock(out: Path) -> Iterator[None]:
    """Hold ``OUT/.sweep.lock`` for the whole of a sweep, so that two sweeps never write one
    experiment (each would rewrite ``experiment.json`` without the other's runs, and set aside
    the other's running run). An ``flock``: the kernel releases it when the sweep's process
    ends, however it ends, so a crashed sweep never leaves the experiment locked. The file
    records who holds it (pid, host, start), for the error.

    Raises :class:`ExperimentInUse` (a ValueError: one line naming the experiment and the
    holder) when another process holds it."""
    import socket

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / ".sweep.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "r+") as f:
        try:
            import fcntl
        except ImportError:  # no flock on this platform: no protection, as before
            yield
            return
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = f.read(200).strip() or "another process"
            raise ExperimentInUse(f"--out {out}: the experiment is in use by another sweep ({holder}); wait for it "
                                  "to end, or give another --out") from None
        except OSError:  # a file system without locks: no protection, as before
            yield
            return
        try:  # unbuffered: a full disk fails here, naming the file, not again at close
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {now()}\n".encode(), 0)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                f.seek(0)
                f.truncate()


def update_entries(out: Path, update: Callable[[dict], dict | None], *, name: str | None = None) -> dict:
    """Read-modify-write ``experiment.json`` under a lock shared by every writer that may run
    concurrently (the sweep waiting for SLURM jobs, each job's finalize step).

    ``update(entries)`` gets the entries by ``run_id`` (in order) and changes them in place;
    a run not listed yet is appended. Returns the manifest written.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with experiment_lock(out):
        data = load_experiment(out) or {"format": EXPERIMENT_FORMAT, "format_version": FORMAT_VERSION,
                                        "name": name or out.name, "created": now(), "runs": []}
        # an entry whose run_id is not a run id ("../x", a list) is kept as it is, never handed on
        runs = [e for e in data.get("runs", []) if isinstance(e, dict)]
        entries = {e["run_id"]: e for e in runs if paths.is_run_id(e.get("run_id"))}
        update(entries)
        entries.update({("invalid", i): e for i, e in enumerate(runs) if not paths.is_run_id(e.get("run_id"))})
        data["runs"] = list(entries.values())
        data["updated"] = now()
        write_json_atomic(out / "experiment.json", data)
    return data


def summary(entries: dict[str, dict], plan: Sequence[RunSpec], out: Path) -> tuple[str, bool]:
    """The closing line of a sweep (``N/M runs ok; not ok: ...``) and whether every run is ok."""
    bad = [s.run_id for s in plan if entries.get(s.run_id, {}).get("status") != "ok"]
    line = (f"scalescope sweep: {len(plan) - len(bad)}/{len(plan)} runs ok"
            + (f"; not ok: {', '.join(bad)}" if bad else "") + f"; manifest {Path(out) / 'experiment.json'}")
    return line, not bad


def set_aside(run_dir: Path, out: Path) -> None:
    """Move an earlier, unfinished attempt's files to ``out/.attempts/`` so runs never mix.
    A run directory that is a symbolic link (in a shared experiment) is moved aside as a link,
    so the run never writes through it."""
    if not run_dir.is_symlink() and (not run_dir.exists() or not any(run_dir.iterdir())):
        return
    dest_root = out / ".attempts"
    if dest_root.is_symlink():  # a shared experiment's link: runs are never moved out through it
        raise ValueError(f"{dest_root}: a symbolic link; earlier attempts are not moved through it (remove it)")
    dest_root.mkdir(exist_ok=True)
    for k in itertools.count(1):
        dest = dest_root / f"{run_dir.name}-{k}"
        if not dest.exists():
            run_dir.rename(dest)
            return
