"""Run a training script at several rank counts, batch sizes and backends into one experiment directory.

``scalescope sweep --np 1,2,4 --batch-size 75,300 --backend horovod-gloo,ddp-gloo --baseline
--repeats 2 --out runs/EXP -- python examples/strain_stress.py --epochs 1``

Every configuration (backend x ranks x batch size x ``--vary`` values x repeat) becomes one
run directory ``runs/EXP/<run_id>`` (format in ``docs/run-directory.md``). This module is the
command: it reads the options, plans the runs (:mod:`instrumentation.experiment`) and hands
them to local execution (:mod:`instrumentation.local`) or, with ``--slurm``, to the SLURM
script writer and job submission (:mod:`instrumentation.slurm`). ``--dry-run`` prints what
either would do and writes nothing.

This module runs on cluster login nodes: it imports neither torch nor pandas.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from instrumentation import backend_check, findmax, local, profilers, slurm
from instrumentation.experiment import (
    BACKENDS,
    RankWrapper,
    RunSpec,
    classify_exit,
    finalize_run,
    find_tool,
    load_experiment,
    plan_runs,
    rank_command,
    resolve_script,
    run_env,
    sweep_lock,
)
from instrumentation.manifest import write_json_atomic
from instrumentation.progress import printable

__all__ = [
    "BACKENDS",
    "RankWrapper",
    "RunSpec",
    "add_arguments",
    "classify_exit",
    "finalize_run",
    "find_tool",
    "main",
    "plan_runs",
    "rank_command",
    "resolve_script",
    "run",
    "run_env",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the sweep's options to ``parser`` (used by ``scalescope sweep`` and ``python -m``)."""
    parser.add_argument("--np", default="1", metavar="N1,N2",
                        help="comma-separated rank counts (default 1)")
    parser.add_argument("--batch-size", default=None, metavar="B1,B2",
                        help="comma-separated per-rank batch sizes, passed as SCALESCOPE_BATCH_SIZE "
                             "(default: the script's own)")
    parser.add_argument("--global-batch-size", default=None, metavar="G1,G2",
                        help="comma-separated global batch sizes held fixed across rank counts (instead of "
                             "--batch-size): each run's per-rank batch is G / ranks; a G that a rank count does "
                             "not divide is refused")
    parser.add_argument("--backend", default="horovod-gloo", metavar="B1,B2",
                        help="comma-separated backends: " + ", ".join(list(BACKENDS)[:-1])
                             + " (default horovod-gloo); empty with --baseline for baseline runs only")
    parser.add_argument("--baseline", action="store_true",
                        help="add a one-process, no-framework run per batch size / vary combination "
                             "(the reference for speedup and framework overhead)")
    parser.add_argument("--repeats", type=int, default=1, help="repeats of every configuration (default 1)")
    parser.add_argument("--vary", action="append", default=[], metavar="NAME=V1,V2",
                        help="also sweep a script option: appends `--NAME V` (repeatable)")
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                        help="a label recorded with every run (repeatable); cluster=... and partition=... set "
                             "those axes where SLURM does not, e.g. --label partition=alpha on a workstation")
    parser.add_argument("--scaling", choices=("strong", "weak"), default="strong",
                        help="strong (default): the same dataset at every rank count; weak: the dataset grows "
                             "with the ranks (SCALESCOPE_DATA_SCALE=<ranks>, recorded in run.json)")
    parser.add_argument("--find-max", default=None, metavar="NAME=START",
                        help="find the largest value of the script option --NAME that fits in memory: double "
                             "from START until a run ends oom, then bisect (local runs only)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="CPU threads per rank (OMP_NUM_THREADS and torch's intra-op threads, set through "
                             "the instrumentation) for every launcher and the baseline; default: the cores per "
                             "rank, floor(CPUs available / ranks per host), at least 1")
    parser.add_argument("--cwd", choices=("shared", "run"), default="shared",
                        help="where each run executes: shared (default): the directory the sweep was started "
                             "in, as torchrun, mpirun and sbatch do (a file one run writes there and the next "
                             "reads is named on that run); run: a working directory of its own, <run>/work, so "
                             "nothing a script writes leaks into the next run (the user's directory is always "
                             "$SCALESCOPE_USER_CWD)")
    parser.add_argument("--out", required=True, type=Path, help="experiment directory, e.g. runs/EXP")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop a run after S seconds and record it as timeout")
    parser.add_argument("--timeline-cycles", action="store_true",
                        help="mark Horovod's background cycles (CYCLE_START) in its timeline: one per ~1 ms "
                             "cycle, so files grow about 20x")
    parser.add_argument("--no-nccl-debug", action="store_true",
                        help="do not set NCCL_DEBUG=INFO for NCCL and Horovod runs (by default each rank's NCCL "
                             "lines go to <run>/nccl.<host>.<pid>.log and run.json's comm_capture)")
    parser.add_argument("--sample-interval", type=float, default=None, metavar="S",
                        help="sampler period passed as SCALESCOPE_SAMPLE_INTERVAL")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would run (the commands, or the sbatch scripts with --slurm); "
                             "run, submit and write nothing")
    slurm.add_arguments(parser)
    profilers.add_profiler_arguments(parser)
    parser.add_argument("script", nargs=argparse.REMAINDER,
                        help="the training command, after `--`: e.g. -- python examples/strain_stress.py")


def _error(msg: str) -> int:
    print(printable(f"scalescope sweep: error: {msg}"), file=sys.stderr)
    return 2


def _int_list(text: str, *, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{what} must be positive integers, got {text!r}")
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


_LABEL_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _parse_labels(items: Sequence[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not _LABEL_KEY.match(key) or not value or not value.isprintable():
            raise ValueError(f"--label {item!r}: expected KEY=VALUE with KEY a name (letters, digits, _) "
                             "and a printable VALUE")
        if key in (k for k, _ in out):
            raise ValueError(f"--label {key} given twice")
        out.append((key, value))
    return out


def _script(args: argparse.Namespace) -> list[str]:
    script = list(args.script or [])
    if script and script[0] == "--":
        script = script[1:]
    if not script:
        raise ValueError("no training command given: put it after `--`, e.g. -- python train.py")
    return script


def _plan(args: argparse.Namespace) -> list[RunSpec]:
    """The runs the options ask for; ValueError naming the first bad option."""
    nps = _int_list(args.np, what="--np")
    batch_sizes: list[int | None] = (
        list(_int_list(args.batch_size, what="--batch-size")) if args.batch_size else [None])
    global_batches = (_int_list(args.global_batch_size, what="--global-batch-size")
                      if getattr(args, "global_batch_size", None) else [])
    if global_batches and args.batch_size:
        raise ValueError("--batch-size and --global-batch-size exclude each other: the first fixes the "
                         "per-rank batch, the second the global batch")
    backends = [b.strip() for b in (args.backend or "").split(",") if b.strip()]
    if not backends and not args.baseline:
        raise ValueError("no backend given (and no --baseline)")
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    if args.timeout is not None and args.timeout <= 0:
        raise ValueError(f"--timeout must be positive, got {args.timeout}")
    vary = _parse_vary(args.vary)
    if getattr(args, "find_max", None):
        name, _ = findmax.parse_find_max(args.find_max)
        if name in (n for n, _ in vary):
            raise ValueError(f"--find-max {name} is also given as --vary {name}")
    threads = getattr(args, "threads", None)
    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    return plan_runs(nps=nps, backends=backends, batch_sizes=batch_sizes, repeats=args.repeats,
                     baseline=args.baseline, vary=vary, labels=_parse_labels(getattr(args, "label", [])),
                     scaling=getattr(args, "scaling", "strong"), threads=threads,
                     cwd=getattr(args, "cwd", "shared") or "shared", global_batches=global_batches)


def _check_out(out: Path, args: argparse.Namespace, plan: Sequence[RunSpec] = ()) -> None:
    """ValueError naming ``--out`` when the experiment path cannot reach a tool intact, checked
    before anything is written: nsys expands ``%`` in its output name (``%h``, ``%p``,
    ``%q{VAR}``), so a profile would land elsewhere; SLURM reads a backslash in an ``#SBATCH``
    file name as "no pattern expansion" and drops it; a SLURM script is UTF-8 text, so the
    path must be too; NCCL expands ``%h`` and ``%p`` in ``NCCL_DEBUG_FILE``."""
    text = str(out)
    if getattr(args, "nsys", False) and "%" in text:
        raise ValueError(f"--out {printable(text)}: holds '%', which nsys expands in its output file name "
                         "(%h, %p, %q{VAR}), so the profiles would land elsewhere; choose a path without '%'")
    nccl = any(s.framework == "horovod" or s.backend == "ddp-nccl" for s in plan)
    if nccl and not getattr(args, "no_nccl_debug", False) and re.search("%[hp]", text):
        raise ValueError(f"--out {printable(text)}: holds '%h' or '%p', which NCCL expands in NCCL_DEBUG_FILE "
                         "(<run>/nccl.%h.%p.log), so its logs would land elsewhere; choose another path, or "
                         "give --no-nccl-debug")
    if args.slurm:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"--out {printable(text)}: the path is not UTF-8 text, so it cannot go into a SLURM "
                             "script; choose a path whose name is UTF-8") from None
        if "\\" in text:
            raise ValueError(f"--out {printable(text)}: holds a backslash, which SLURM drops from #SBATCH file "
                             "names (the job could not open its log); choose a path without '\\'")


def _sweep_command() -> list[str]:
    """How this sweep was started, as recorded in ``experiment.json``."""
    prog = Path(sys.argv[0]).name
    if prog == "sweep.py":
        return ["python", "-m", "instrumentation.sweep", *sys.argv[1:]]
    return [prog, *sys.argv[1:]]


def run(args: argparse.Namespace, *, wrappers: Sequence[RankWrapper] = ()) -> int:
    """Run (or, with ``--slurm``, write scripts for and submit) the sweep described by ``args``.

    Returns the exit code: 0 when every run is ``ok`` (or the scripts were written), 1 when
    any run is not, 2 on bad options, 130 when interrupted.
    """
    try:
        script = _script(args)
        plan = _plan(args)
        _check_out(Path(args.out).resolve(), args, plan)  # before anything is written or looked up
        if args.slurm:
            # SLURM scripts carry the profiler variables on each rank's command line
            wrappers = [*wrappers, *profilers.wrappers_from_args(args, with_env=True)]
            slurm.check_options(args)
            if getattr(args, "find_max", None):
                raise ValueError("--find-max runs the search here, one run after the other: it does not "
                                 "work with --slurm")
        else:
            for option in ("submit", "wait", "max_jobs"):
                if getattr(args, option, None):
                    raise ValueError(f"--{option.replace('_', '-')} needs --slurm")
            wrappers = [*wrappers, *profilers.wrappers_from_args(args, with_env=False)]
    except ValueError as exc:
        return _error(str(exc))
    out = Path(args.out).resolve()
    try:
        if args.slurm:
            # one sweep at a time per experiment (--dry-run writes nothing, so takes no lock)
            with contextlib.nullcontext() if args.dry_run else sweep_lock(out):
                return slurm.run(plan, script=script, out=out, args=args, command=_sweep_command(),
                                 wrappers=wrappers)
        return _run_local(plan, script=script, out=out, args=args, wrappers=wrappers)
    except (ValueError, FileNotFoundError, slurm.SlurmError) as exc:
        return _error(str(exc))


def _run_local(plan: list[RunSpec], *, script: list[str], out: Path, args: argparse.Namespace,
               wrappers: Sequence[RankWrapper]) -> int:
    profiler_env = profilers.profiler_env(args)

    def after_run(run_dir: Path, spec: RunSpec) -> None:
        if profiler_env or getattr(args, "nsys", False):
            profilers.record_profilers(run_dir, profilers.profiler_manifest(args, run_dir=run_dir, spec=spec))

    opts = local.LocalOptions(timeout_s=args.timeout, sample_interval=args.sample_interval,
                              mark_cycles=args.timeline_cycles, nccl_debug=not args.no_nccl_debug,
                              wrappers=wrappers, extra_env=profiler_env,
                              after_run=after_run)
    find = findmax.parse_find_max(args.find_max) if getattr(args, "find_max", None) else None
    if args.dry_run:
        if find:
            print(f"scalescope sweep: --find-max: would search --{find[0]} from {find[1]} (doubling, then "
                  "bisecting) for each configuration below; first runs:")
            plan = [_with_value(s, find[0], find[1]) for s in plan]
        local.dry_run(plan, script=script, out=out, opts=opts)
        return 0
    local.check_tools(plan)
    backend_check.check_nccl({s.backend for s in plan}, [s.np for s in plan])
    with sweep_lock(out):  # one sweep at a time per experiment: a second one is refused here
        if find:
            return _find_max(plan, name=find[0], start=find[1], script=script, out=out, opts=opts)
        return local.run_local(plan, script=script, out=out, command=_sweep_command(), opts=opts)


def _with_value(spec: RunSpec, name: str, value: int) -> RunSpec:
    return dataclasses.replace(spec, vary=(*spec.vary, (name, str(value))))


def _find_max(plan: list[RunSpec], *, name: str, start: int, script: list[str], out: Path,
              opts: local.LocalOptions) -> int:
    """One :func:`instrumentation.findmax.search` per configuration of ``plan``; the results go
    into ``experiment.json`` (``find_max``). Returns 0 when every search found its bracket."""
    results = []
    for spec in plan:
        def status_at(value: int, spec: RunSpec = spec) -> tuple[str, str]:
            run = _with_value(spec, name, value)
            rc = local.run_local([run], script=script, out=out, command=_sweep_command(), opts=opts)
            if rc == 130:
                raise KeyboardInterrupt
            entry = next((e for e in (load_experiment(out) or {}).get("runs", []) if e.get("run_id") == run.run_id),
                         {})
            return str(entry.get("status", "failed")), run.run_id

        try:
            res = findmax.search(name, start, status_at)
        except KeyboardInterrupt:
            print("scalescope sweep: --find-max interrupted; run the same command again to resume", file=sys.stderr)
            return 130
        results.append({**res.as_dict(), "config": spec.config(experiment=out.name)})
        _record_find_max(out, results)
        print(f"scalescope sweep: --find-max {spec.run_id}: largest {name} that fits: {res.largest_ok}"
              f" (smallest that ran out of memory: {res.smallest_oom})"
              + (f"; stopped: {res.stopped}" if res.stopped else ""))
    return 0 if all(r["stopped"] is None for r in results) else 1


def _record_find_max(out: Path, results: list[dict]) -> None:
    data = load_experiment(out) or {}
    data["find_max"] = results
    write_json_atomic(Path(out) / "experiment.json", data)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m instrumentation.sweep ...``."""
    parser = argparse.ArgumentParser(prog="python -m instrumentation.sweep",
                                     description=(__doc__ or "").strip().splitlines()[0])
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except KeyboardInterrupt:  # one line, as `scalescope sweep` (analysis.cli) says it
        print("scalescope sweep: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
