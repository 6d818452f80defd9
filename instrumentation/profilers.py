"""Outside profilers in the sweep: Nsight Systems around each rank, the PyTorch profiler inside.

``scalescope sweep ... --nsys`` wraps every rank's command in ``nsys profile`` (one report per
rank, named by rank and host, exported to SQLite when the rank ends); ``--torch-profiler
[--profile-steps wait,warmup,active]`` has every rank capture a PyTorch profiler (Kineto)
trace of a window of steps (:mod:`instrumentation.torch_profiler`). Both land in the run
directory (``nsys/``, ``torch_profiler/``) and are recorded in ``run.json`` under
``profilers``. See ``docs/profilers.md``.

The launchers are not changed: everything goes through rank-command wrappers
(:data:`instrumentation.sweep.RankWrapper`) and ``SCALESCOPE_*`` environment variables.
This module runs on login nodes: it imports neither torch nor pandas.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from instrumentation import torch_profiler as _tp
from instrumentation.manifest import write_json_atomic

__all__ = [
    "NSYS_TRACES",
    "ProfilerError",
    "add_profiler_arguments",
    "find_nsys",
    "nsys_command",
    "nsys_rank_variable",
    "nsys_version",
    "profiler_env",
    "profiler_manifest",
    "record_profilers",
    "wrappers_from_args",
]

#: What ``--nsys-trace`` accepts (``nsys profile -t``).
NSYS_TRACES: tuple[str, ...] = ("nvtx", "cuda", "osrt", "mpi")
#: Default ``nsys profile`` options besides ``-t`` and ``-o``: no CPU IP sampling and no
#: context-switch trace (they need perf_event access and cost the most; add them back with
#: ``--nsys-args``), overwrite a report of an earlier attempt, export SQLite at the end.
NSYS_FIXED_OPTIONS: tuple[str, ...] = ("--sample", "none", "--cpuctxsw", "none",
                                       "--force-overwrite", "true", "--export", "sqlite")
#: Sub-directory of the run directory holding the nsys reports.
NSYS_DIR = "nsys"

_HOW_TO_GET_NSYS = (
    "Nsight Systems CLI `nsys` not found. Get it with `scripts/install_nsys.sh` (fetches "
    "Nsight Systems 2023.4.4 into .tools/), or install it from NVIDIA "
    "(https://developer.nvidia.com/nsight-systems) and put `nsys` on PATH, or point "
    "SCALESCOPE_NSYS at the binary."
)

RankWrapper = Callable[[list[str], object, Path], list[str]]


class ProfilerError(ValueError):
    """A profiler option cannot be honoured (bad value, missing ``nsys``)."""


# ---------------------------------------------------------------------------------------
# nsys
# ---------------------------------------------------------------------------------------


#: Where ``scripts/install_nsys.sh`` puts the CLI.
LOCAL_NSYS = Path(__file__).resolve().parents[1] / ".tools" / "bin" / "nsys"


def find_nsys() -> str | None:
    """The Nsight Systems CLI: ``$SCALESCOPE_NSYS``, the project's ``.tools/bin/nsys``, or PATH."""
    env = os.environ.get("SCALESCOPE_NSYS")
    if env and Path(env).exists():
        return env
    if LOCAL_NSYS.exists():
        return str(LOCAL_NSYS)
    return shutil.which("nsys")


def nsys_version(nsys: str) -> str | None:
    """``nsys --version`` as ``"2023.4.4.54-234433681190v0"`` (``None`` when it cannot run)."""
    try:
        out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version\s+(\S+)", out.stdout + out.stderr)
    return m.group(1) if m else None


def _cuda_present() -> bool:
    """An NVIDIA driver on this machine (no torch import: this runs on login nodes too)."""
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def default_nsys_trace() -> str:
    """``cuda,nvtx,osrt`` when an NVIDIA driver is present, else ``nvtx,osrt``."""
    return "cuda,nvtx,osrt" if _cuda_present() else "nvtx,osrt"


def parse_nsys_trace(text: str) -> list[str]:
    """``"nvtx,osrt"`` -> ``["nvtx", "osrt"]``; anything outside :data:`NSYS_TRACES` is an error."""
    items = [t.strip().lower() for t in str(text).split(",") if t.strip()]
    bad = [t for t in items if t not in NSYS_TRACES]
    if not items or bad:
        raise ProfilerError(f"--nsys-trace {text!r}: choose from {', '.join(NSYS_TRACES)} (comma-separated)")
    return list(dict.fromkeys(items))


def nsys_rank_variable(framework: str, controller: str | None, *, slurm_launcher: str | None = None) -> str | None:
    """The environment variable holding the global rank in a rank process of this launcher.

    ``horovodrun --gloo``: ``HOROVOD_RANK``; ``horovodrun --mpi`` / ``mpirun``:
    ``OMPI_COMM_WORLD_RANK``; ``torchrun``: ``RANK``; the one-process baseline: ``None``.
    Under Slurm (``--slurm``) ``srun`` sets ``SLURM_PROCID`` and ``mpirun`` sets
    ``OMPI_COMM_WORLD_RANK`` for every framework.
    """
    if framework == "none":
        return None
    if slurm_launcher == "srun":
        return "SLURM_PROCID"
    if slurm_launcher == "mpirun":
        return "OMPI_COMM_WORLD_RANK"
    if framework == "horovod":
        return "OMPI_COMM_WORLD_RANK" if controller == "mpi" else "HOROVOD_RANK"
    return "RANK"


def nsys_output(run_dir: Path, rank_variable: str | None) -> str:
    """The ``-o`` of one rank: ``<run_dir>/nsys/rank-%q{VAR}-%h`` (nsys expands ``%q{}``/``%h``)."""
    rank = f"%q{{{rank_variable}}}" if rank_variable else "0"
    return str(Path(run_dir).resolve() / NSYS_DIR / f"rank-{rank}-%h")


def nsys_command(nsys: str, *, trace: Sequence[str], output: str, extra: Sequence[str] = ()) -> list[str]:
    """``nsys profile -t ... -o OUTPUT <fixed options> <extra>`` (the program follows)."""
    return [nsys, "profile", "-t", ",".join(trace), "-o", output, *NSYS_FIXED_OPTIONS, *extra]


# ---------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------


def _schedule_arg(text: str) -> str:
    try:
        return ",".join(str(v) for v in _tp.parse_schedule(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_profiler_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--nsys``, ``--nsys-trace``, ``--nsys-args``, ``--torch-profiler``,
    ``--profile-steps`` and ``--profile-shapes`` to ``parser``."""
    g = parser.add_argument_group("outside profilers (docs/profilers.md)")
    g.add_argument("--nsys", action="store_true",
                   help="run every rank under Nsight Systems: <run>/nsys/rank-R-HOST.{nsys-rep,sqlite}")
    g.add_argument("--nsys-trace", default=None, metavar="T1,T2",
                   help="nsys -t: any of " + ", ".join(NSYS_TRACES)
                        + " (default cuda,nvtx,osrt with an NVIDIA driver, else nvtx,osrt)")
    g.add_argument("--nsys-args", default="", metavar="'ARGS'",
                   help="extra `nsys profile` options, one shell-quoted string (e.g. '--sample process-tree')")
    g.add_argument("--torch-profiler", action="store_true",
                   help="capture a PyTorch profiler (Kineto) trace of a window of steps per rank: "
                        "<run>/torch_profiler/rank-NNNNN.pt.trace.json.gz")
    g.add_argument("--profile-steps", default="1,1,3", type=_schedule_arg, metavar="W,U,A",
                   help="torch profiler window: wait,warmup,active steps (default 1,1,3: steps 2-4)")
    g.add_argument("--profile-shapes", action="store_true",
                   help="torch profiler record_shapes (input sizes of ops; more overhead)")


def profiler_env(args: argparse.Namespace) -> dict[str, str]:
    """The ``SCALESCOPE_*`` variables the training processes need for the chosen profilers."""
    env: dict[str, str] = {}
    if getattr(args, "torch_profiler", False):
        env[_tp.ENV] = str(args.profile_steps)
        if getattr(args, "profile_shapes", False):
            env[_tp.ENV_SHAPES] = "1"
    return env


def _slurm_launcher(args: argparse.Namespace) -> str | None:
    return getattr(args, "slurm_launcher", None) if getattr(args, "slurm", False) else None


def wrappers_from_args(args: argparse.Namespace, *, with_env: bool = True) -> list[RankWrapper]:
    """Rank-command wrappers for ``sweep.run(args, wrappers=...)``.

    Parameters
    ----------
    args
        Parsed by a parser that got :func:`add_profiler_arguments`.
    with_env
        Also prefix each rank with ``env VAR=VALUE ...`` for :func:`profiler_env` (needed
        while the sweep does not put those variables into the run's environment itself).

    Returns
    -------
    list
        Wrappers ``(argv, spec, run_dir) -> argv``: nsys innermost-but-one, ``env`` outermost,
        so a rank runs ``env SCALESCOPE_TORCH_PROFILER=1,1,3 nsys profile ... python train.py``.

    Raises
    ------
    ProfilerError
        ``--nsys`` without an ``nsys`` binary (the message says how to get one), or a bad
        ``--nsys-trace``.
    """
    wrappers: list[RankWrapper] = []
    if getattr(args, "nsys", False):
        nsys = find_nsys()
        if nsys is None:
            raise ProfilerError(_HOW_TO_GET_NSYS)
        trace = parse_nsys_trace(args.nsys_trace or default_nsys_trace())
        extra = shlex.split(getattr(args, "nsys_args", "") or "")
        slurm_launcher = _slurm_launcher(args)
        dry = bool(getattr(args, "dry_run", False))

        def nsys_wrap(cmd: list[str], spec, run_dir: Path) -> list[str]:
            var = nsys_rank_variable(spec.framework, spec.controller, slurm_launcher=slurm_launcher)
            if not dry:  # nsys does not create the folder (it falls back to /tmp)
                (Path(run_dir) / NSYS_DIR).mkdir(parents=True, exist_ok=True)
            return [*nsys_command(nsys, trace=trace, output=nsys_output(run_dir, var), extra=extra), *cmd]

        wrappers.append(nsys_wrap)
    env = profiler_env(args)
    if with_env and env:
        assignments = [f"{k}={v}" for k, v in sorted(env.items())]

        def env_wrap(cmd: list[str], spec, run_dir: Path) -> list[str]:
            return ["env", *assignments, *cmd]

        wrappers.append(env_wrap)
    return wrappers


# ---------------------------------------------------------------------------------------
# run.json
# ---------------------------------------------------------------------------------------


def _files(run_dir: Path, sub: str) -> list[str]:
    d = Path(run_dir) / sub
    if not d.is_dir():
        return []
    return sorted(str(p.relative_to(run_dir)) for p in d.iterdir() if p.is_file() and not p.name.startswith("."))


def profiler_manifest(args: argparse.Namespace, *, run_dir: Path | None = None, spec=None) -> dict:
    """What ``run.json`` ``profilers`` records for the chosen profilers (``{}`` for none).

    ``nsys``: ``version``, ``path``, ``trace``, ``options`` (the ``nsys profile`` options as
    run), ``output`` (the ``-o`` pattern, relative to the run directory), ``rank_variable``
    (with ``spec``); ``torch_profiler``: ``schedule``, ``profiled_steps``, ``record_shapes``,
    ``dir``. With ``run_dir`` each also lists the ``files`` found there.
    """
    out: dict[str, dict] = {}
    if getattr(args, "nsys", False):
        nsys = find_nsys()
        trace = parse_nsys_trace(args.nsys_trace or default_nsys_trace())
        extra = shlex.split(getattr(args, "nsys_args", "") or "")
        var = None
        if spec is not None:
            var = nsys_rank_variable(spec.framework, spec.controller, slurm_launcher=_slurm_launcher(args))
        info: dict[str, object] = {
            "version": nsys_version(nsys) if nsys else None, "path": nsys, "trace": trace,
            "options": ["-t", ",".join(trace), *NSYS_FIXED_OPTIONS, *extra],
            "output": f"{NSYS_DIR}/rank-{'%q{' + var + '}' if var else '0'}-%h"
                      if spec is not None else f"{NSYS_DIR}/rank-%q{{RANK_VARIABLE}}-%h",
            "rank_variable": var, "export": "sqlite",
        }
        if run_dir is not None:
            info["files"] = _files(Path(run_dir), NSYS_DIR)
        out["nsys"] = info
    if getattr(args, "torch_profiler", False):
        wait, warmup, active = _tp.parse_schedule(args.profile_steps)
        info = {
            "schedule": {"wait": wait, "warmup": warmup, "active": active, "repeat": 1},
            "profiled_steps": list(range(wait + warmup, wait + warmup + active)),
            "record_shapes": bool(getattr(args, "profile_shapes", False)),
            "dir": _tp.DIRNAME,
        }
        if run_dir is not None:
            info["files"] = _files(Path(run_dir), _tp.DIRNAME)
        out["torch_profiler"] = info
    return out


def record_profilers(run_dir: Path, info: dict) -> dict | None:
    """Merge ``info`` into ``run.json`` ``profilers`` (atomically: temp file + rename).

    Each profiler's entry is updated key by key (``info`` wins), so what the training
    process recorded (e.g. the torch profiler's ``activities``) stays. Returns the new
    manifest, or ``None`` when ``info`` is empty (nothing is written).

    Raises
    ------
    FileNotFoundError
        The run directory has no ``run.json`` (the sweep writes one for every run).
    ValueError
        ``run.json`` is not a JSON object.
    """
    if not info:
        return None
    path = Path(run_dir) / "run.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no run manifest to record the profilers in")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: not a JSON object")
    profilers = dict(manifest.get("profilers") or {})
    for name, entry in info.items():
        profilers[name] = {**(profilers.get(name) or {}), **entry}
    manifest["profilers"] = profilers
    write_json_atomic(path, manifest)
    return manifest
