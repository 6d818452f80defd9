"""SLURM batch scripts for a sweep: ``scalescope sweep --slurm ...``.

One sbatch script per run, ``<out>/slurm/<run_id>.sbatch``, plus ``<out>/slurm/submit_all.sh``.
Layout for ``np`` ranks on nodes with ``G`` GPUs (one rank per GPU, nodes filled in order):

* ``--nodes = ceil(np / G)``, ``--ntasks = np``, ``--ntasks-per-node = min(np, G)``,
  ``--gres=gpu:min(np, G)``, ``--cpus-per-task = cpus_per_node // G``;
* ``--exclusive`` nodes (no neighbour disturbs the timing) and ``--distribution=block:block``
  (sequential: rank r on node r // G).

Launchers (``--slurm-launcher``):

* ``srun`` (default): Horovod with MPI via ``srun --mpi=$SCALESCOPE_SRUN_MPI`` (default
  ``pmix``); DDP via ``srun``, each task translating ``SLURM_PROCID``/``SLURM_LOCALID`` to
  ``RANK``/``LOCAL_RANK`` with ``MASTER_ADDR`` = the first node.
* ``mpirun``: Open MPI's ``mpirun -np N -npernode G`` inside the allocation, with ``-x`` for
  every exported variable; DDP translates ``OMPI_COMM_WORLD_*``.
* Horovod with Gloo always goes through ``horovodrun --gloo -H node1:G,node2:G`` (Gloo's
  rendezvous server lives in horovodrun, which starts remote ranks over ssh).

Each script exports the ``SCALESCOPE_*`` contract of :func:`instrumentation.experiment.run_env`,
writes its logs into the run directory, and ends with ``python -m instrumentation.slurm
finalize`` which records status and exit code in ``run.json`` and ``experiment.json``
(under an ``flock``, since jobs finish concurrently).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from instrumentation import scheduler, slurm_jobs
from instrumentation.experiment import (
    Experiment,
    RunSpec,
    experiment_lock,
    finalize_run,
    find_tool,
    now,
    rank_command,
    resolve_script,
    run_env,
    update_entries,
    with_user_path,
)
from instrumentation.experiment import workdir as run_workdir
from instrumentation.manifest import write_text_atomic
from instrumentation.slurm_jobs import ACTIVE_STATUSES, script_path

__all__ = ["SlurmError", "SlurmLayout", "add_arguments", "check_options", "finalize_main", "layout",
           "render_script", "run", "write_scripts"]


class SlurmError(RuntimeError):
    """A SLURM command failed or the cluster cannot run what was asked (one clear line)."""

#: Variables forwarded with ``mpirun -x`` besides the SCALESCOPE_*/HOROVOD_* ones.
_MPI_FORWARD = ("PATH", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class SlurmLayout:
    """Resources of one run: node and task counts, CPUs per task, GPUs per node."""

    nodes: int
    ntasks: int
    ntasks_per_node: int
    cpus_per_task: int
    gpus_per_node: int


def layout(np: int, *, gpus_per_node: int, cpus_per_node: int) -> SlurmLayout:
    """Sequential layout of ``np`` ranks, one per GPU (one per CPU core on nodes without
    GPUs, ``gpus_per_node=0``), filling each node before the next.

    Examples
    --------
    >>> layout(6, gpus_per_node=4, cpus_per_node=32)
    SlurmLayout(nodes=2, ntasks=6, ntasks_per_node=4, cpus_per_task=8, gpus_per_node=4)
    >>> layout(2, gpus_per_node=0, cpus_per_node=4)
    SlurmLayout(nodes=1, ntasks=2, ntasks_per_node=2, cpus_per_task=1, gpus_per_node=0)
    """
    if np < 1 or gpus_per_node < 0 or cpus_per_node < 1:
        raise ValueError(f"np and cpus_per_node must be >= 1 and gpus_per_node >= 0 "
                         f"(got {np}, {cpus_per_node}, {gpus_per_node})")
    slots = gpus_per_node or cpus_per_node
    per_node = min(np, slots)
    return SlurmLayout(nodes=math.ceil(np / slots), ntasks=np, ntasks_per_node=per_node,
                       cpus_per_task=max(1, cpus_per_node // slots),
                       gpus_per_node=per_node if gpus_per_node else 0)


#: Defaults where no cluster answers ``sinfo`` (scripts written on a laptop for a GPU cluster).
DEFAULT_GPUS_PER_NODE = 4
DEFAULT_CPUS_PER_NODE = 32
#: How a script asks for GPUs: ``--gres=gpu:N``, ``--gpus-per-node=N``, or not at all.
GPU_REQUESTS = ("gres", "gpus-per-node", "none")
#: Seconds between two looks at the queue with ``--wait`` (``--poll``).
DEFAULT_POLL_S = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--slurm`` options of ``scalescope sweep``."""
    g = parser.add_argument_group("SLURM (write sbatch scripts instead of running; --submit submits them)")
    g.add_argument("--slurm", action="store_true", help="write one sbatch script per run into OUT/slurm/")
    g.add_argument("--submit", action="store_true",
                   help="submit the scripts with sbatch and record the job ids in experiment.json "
                        "(runs already ok, and jobs still queued or running, are not submitted again)")
    g.add_argument("--wait", action="store_true",
                   help="with --submit: wait for the jobs (polling squeue, and sacct where accounting "
                        "exists), show progress, record jobs the scheduler killed, end with the summary")
    g.add_argument("--max-jobs", type=int, default=None, metavar="N",
                   help="keep at most N of this sweep's jobs queued or running (the rest are submitted "
                        "as jobs end with --wait, or by running the same command again)")
    g.add_argument("--poll", type=float, default=DEFAULT_POLL_S, metavar="S",
                   help=f"seconds between looks at the queue with --wait (default {DEFAULT_POLL_S:g})")
    g.add_argument("--slurm-launcher", choices=("srun", "mpirun"), default="srun",
                   help="how the script starts the ranks (default srun)")
    g.add_argument("--partition", default=None, help="SLURM partition")
    g.add_argument("--account", default=None, help="SLURM account")
    g.add_argument("--gpus-per-node", type=int, default=None,
                   help="GPUs per node; 0 requests no GPU and places one rank per core (default: the "
                        f"partition's GPU GRES from sinfo, else {DEFAULT_GPUS_PER_NODE})")
    g.add_argument("--gpu-request", choices=GPU_REQUESTS, default=None,
                   help="how scripts ask for GPUs: --gres=gpu:N, --gpus-per-node=N or not at all "
                        "(default: gres when the partition has GPU GRES or no cluster answers, else none)")
    g.add_argument("--cpus-per-node", type=int, default=None,
                   help="CPU cores per node; --cpus-per-task = this / GPUs per node (default: from sinfo, "
                        f"else {DEFAULT_CPUS_PER_NODE})")
    g.add_argument("--cpu-bind", action=argparse.BooleanOptionalAction, default=None,
                   help="srun --cpu-bind=cores (default: when the cluster's TaskPlugin can bind tasks, "
                        "task/affinity or task/cgroup, or when no cluster answers)")
    g.add_argument("--exclusive", action=argparse.BooleanOptionalAction, default=True,
                   help="whole nodes per job, so no neighbour disturbs the timing (default on)")
    g.add_argument("--time", default="01:00:00", help="time limit per job (default 01:00:00)")
    g.add_argument("--module", action="append", default=[], metavar="NAME",
                   help="`module load NAME` in every script (repeatable)")


def _q(cmd: Sequence[str]) -> str:
    return shlex.join([str(c) for c in cmd])


def _rank_translation(launcher: str) -> str:
    if launcher == "srun":
        return ('export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS '
                'LOCAL_WORLD_SIZE=$SCALESCOPE_TASKS_PER_NODE; exec "$@"')
    return ('export RANK=$OMPI_COMM_WORLD_RANK LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK '
            'WORLD_SIZE=$OMPI_COMM_WORLD_SIZE LOCAL_WORLD_SIZE=$OMPI_COMM_WORLD_LOCAL_SIZE; exec "$@"')


def launch_lines(spec, rank_cmd: Sequence[str], lay: SlurmLayout, *, launcher: str, env_names: Sequence[str],
                 python: str, cpu_bind: bool = True) -> list[str]:
    """Shell lines that start the ranks of ``spec`` inside the allocation."""
    n = lay.ntasks
    srun = ["srun", f"--ntasks={n}", f"--ntasks-per-node={lay.ntasks_per_node}",
            f"--cpus-per-task={lay.cpus_per_task}", "--distribution=block:block"]
    if cpu_bind:
        srun.append("--cpu-bind=cores")
    forward = [*env_names, *_MPI_FORWARD]
    mpirun = ["mpirun", "-np", str(n), "-npernode", str(lay.ntasks_per_node), "--bind-to", "none"]
    for name in forward:
        mpirun += ["-x", name]
    if spec.framework == "none":  # the baseline: RANK=0 WORLD_SIZE=1 ... come from run_env
        return ["export MASTER_PORT=$((29500 + SLURM_JOB_ID % 1000))", _q(rank_cmd)]
    if spec.framework == "horovod" and spec.controller == "gloo":
        hvd = find_tool("horovodrun", python=python)
        return [
            f'HOSTS=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/$/:{lay.ntasks_per_node}/" | paste -sd, -)',
            f'{_q([hvd, "-np", str(n)])} -H "$HOSTS" --gloo {_q(rank_cmd)}',
        ]
    if spec.framework == "horovod":
        if launcher == "srun":
            return [f'{_q(srun)} --mpi="${{SCALESCOPE_SRUN_MPI:-pmix}}" {_q(rank_cmd)}']
        return [_q([*mpirun, *rank_cmd])]
    # DDP: one task per GPU, torch.distributed's env:// rendezvous on the first node.
    lines = ['export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
             "export MASTER_PORT=$((29500 + SLURM_JOB_ID % 1000))",
             f"export SCALESCOPE_TASKS_PER_NODE={lay.ntasks_per_node}"]
    body = _q(["bash", "-c", _rank_translation(launcher), "rank", *rank_cmd])
    lines.append(f"{_q(srun)} {body}" if launcher == "srun" else f"{_q(mpirun)} {body}")
    return lines


def render_script(spec, *, script: Sequence[str], out: Path, experiment: str, args: argparse.Namespace,
                  wrappers=(), python: str | None = None, workdir: Path | None = None) -> str:
    """The sbatch script of one run (see the module docstring for the layout and launchers)."""
    python = python or sys.executable
    gpus = DEFAULT_GPUS_PER_NODE if args.gpus_per_node is None else args.gpus_per_node
    lay = layout(spec.np, gpus_per_node=gpus,
                 cpus_per_node=args.cpus_per_node or DEFAULT_CPUS_PER_NODE)
    run_dir = Path(out) / spec.run_id
    user_cwd = Path(workdir or Path.cwd()).absolute()
    # threads per rank: --threads, else the CPUs SLURM gives each task
    env = run_env(spec, run_dir, experiment=experiment, base={},
                  mark_cycles=getattr(args, "timeline_cycles", False),
                  nccl_debug=not getattr(args, "no_nccl_debug", False),
                  threads=spec.threads or lay.cpus_per_task, user_cwd=user_cwd)
    for key in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        env.pop(key, None)  # compute nodes do not run jobs as root
    resolved = resolve_script(script, python=python, user_cwd=user_cwd)
    env = with_user_path(env, resolved, user_cwd)
    rank_cmd = rank_command(spec, resolved, run_dir, wrappers=wrappers)
    cwd = run_workdir(spec, run_dir, user_cwd=user_cwd)
    sb = [
        "#!/bin/bash",
        f"#SBATCH --job-name=ss-{spec.run_id}",
        f"#SBATCH --output={_sbatch_path(run_dir / 'stdout.log')}",
        f"#SBATCH --error={_sbatch_path(run_dir / 'stderr.log')}",
        f"#SBATCH --nodes={lay.nodes}",
        f"#SBATCH --ntasks={lay.ntasks}",
        f"#SBATCH --ntasks-per-node={lay.ntasks_per_node}",
        f"#SBATCH --cpus-per-task={lay.cpus_per_task}",
        *_gpu_lines(lay.gpus_per_node, args.gpu_request),
        *(["#SBATCH --exclusive"] if getattr(args, "exclusive", True) else []),
        "#SBATCH --distribution=block:block",
        f"#SBATCH --time={_checked('--time', args.time, _TIME)}",
    ]
    if args.partition:
        sb.append(f"#SBATCH --partition={_checked('--partition', args.partition, _NAME)}")
    if args.account:
        sb.append(f"#SBATCH --account={_checked('--account', args.account, _NAME)}")
    body = [
        "",
        f"# scalescope sweep run {spec.run_id}: {spec.backend}, {spec.np} rank(s) on {lay.nodes} node(s)",
        "set -uo pipefail",
        *[f"module load {shlex.quote(_checked('--module', m, _PRINTABLE))}" for m in args.module],
        *[f"export {k}={shlex.quote(v)}" for k, v in env.items()],
        f"mkdir -p {shlex.quote(str(run_dir))} {shlex.quote(str(cwd))}",
        f"cd {shlex.quote(str(cwd))}",
        *launch_lines(spec, rank_cmd, lay, launcher=args.slurm_launcher, env_names=list(env), python=python,
                      cpu_bind=args.cpu_bind is not False),
        "rc=$?",
        f"cd {shlex.quote(str(user_cwd))}",  # back where the sweep ran (scalescope may be importable only there)
        _q([python, "-m", "instrumentation.slurm", "finalize", "--out", str(out), "--run-id", spec.run_id])
        + ' --exit-code "$rc" --wall-s "$SECONDS"',
        'exit "$rc"',
        "",
    ]
    return "\n".join(sb + body)


_TIME = re.compile(r"\d+(-\d+)?(:\d+){0,2}|UNLIMITED|INFINITE|unlimited|infinite")
_NAME = re.compile(r"[A-Za-z0-9_.+,-]+")
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]+")


def _checked(option: str, value: str, pattern: re.Pattern) -> str:
    """``value`` when it matches ``pattern`` whole, else ValueError: no newline or other control
    character, nothing a ``#SBATCH`` line or the shell would read differently, ever reaches a
    script."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(f"{option} {value!r} cannot go into a SLURM script "
                         f"(expected {'a time limit like 01:30:00 or 1-12:00:00' if pattern is _TIME else 'letters, digits and . _ + , -' if pattern is _NAME else 'no control characters'})")
    return value


def _sbatch_path(path: Path) -> str:
    """A path for an ``#SBATCH`` line: double-quoted (sbatch honours quotes there), ``%``
    doubled (sbatch expands ``%j`` and friends in file names)."""
    text = str(path)
    if '"' in text or not _PRINTABLE.fullmatch(text):
        raise ValueError(f"the path {text!r} cannot go into an #SBATCH line (a double quote or control character)")
    return '"' + text.replace("%", "%%") + '"'


def _gpu_lines(gpus: int, request: str | None) -> list[str]:
    if not gpus or request == "none":
        return []
    if request == "gpus-per-node":
        return [f"#SBATCH --gpus-per-node={gpus}"]
    return [f"#SBATCH --gres=gpu:{gpus}"]


def write_scripts(plan, *, script: Sequence[str], out: Path, args: argparse.Namespace, experiment: str,
                  command: list[str], wrappers=()) -> int:
    """Write (or with ``--dry-run`` print) one sbatch script per run and ``submit_all.sh``.

    Also lists every run in ``experiment.json`` (``pending``; runs already ``ok``, and with
    ``--submit`` jobs still queued or running, keep their entries). Returns 0.
    """
    scripts = {s.run_id: render_script(s, script=script, out=out, experiment=experiment, args=args,
                                       wrappers=wrappers) for s in plan}
    if args.dry_run:
        for run_id, text in scripts.items():
            print(f"# ---- {run_id}.sbatch ----\n{text}")
        return 0
    sdir = Path(out) / "slurm"
    sdir.mkdir(parents=True, exist_ok=True)
    for run_id, text in scripts.items():
        write_text_atomic(script_path(out, run_id), text)
        (Path(out) / run_id).mkdir(exist_ok=True)
    submit = ["#!/bin/bash", "# Submit every run of this sweep (runs already ok are skipped).", "set -e",
              f"cd {shlex.quote(str(sdir))}"]
    keep = ("ok", *ACTIVE_STATUSES) if getattr(args, "submit", False) else ("ok",)
    with experiment_lock(out):  # jobs of an earlier submission may be finalizing
        exp = Experiment.open(out, command=command, script=list(script), plan=plan, experiment=experiment,
                              keep=keep)
        _record_settings(exp, args)
        exp.save()
    for spec in plan:
        if exp.is_done(spec):
            submit.append(f"# {spec.run_id}: already ok")
        else:
            submit.append(f"sbatch {shlex.quote(spec.run_id + '.sbatch')}")
    write_text_atomic(sdir / "submit_all.sh", "\n".join(submit) + "\n")
    (sdir / "submit_all.sh").chmod(0o755)
    if not getattr(args, "submit", False):
        print(f"scalescope sweep: wrote {len(scripts)} sbatch scripts into {sdir}; "
              f"submit with {sdir / 'submit_all.sh'} (or add --submit)")
    return 0


def _record_settings(exp: Experiment, args: argparse.Namespace) -> None:
    exp.extra["slurm"] = {"launcher": args.slurm_launcher, "gpus_per_node": args.gpus_per_node,
                          "cpus_per_node": args.cpus_per_node,
                          "partition": args.partition or getattr(args, "slurm_partition", None),
                          "gpu_request": args.gpu_request, "cpu_bind": args.cpu_bind,
                          "exclusive": getattr(args, "exclusive", True), "time": args.time,
                          "cluster": getattr(args, "slurm_cluster", None)}


def check_options(args: argparse.Namespace) -> None:
    """Check the ``--slurm`` options and fill in the ones left to the cluster.

    ValueError names the first option that cannot go into a script or makes no sense.
    ``--gpus-per-node``, ``--cpus-per-node``, ``--gpu-request`` and ``--cpu-bind`` left unset
    come from :func:`instrumentation.scheduler.probe_cluster` where a cluster answers, else
    from the defaults (4 GPUs, 32 cores, ``--gres``, ``--cpu-bind=cores``); ``args`` is
    updated in place (``args.slurm_cluster`` and ``args.slurm_partition`` are the cluster's
    name and the partition jobs go to, when known).
    """
    if args.wait and not args.submit:
        raise ValueError("--wait needs --submit")
    if args.max_jobs is not None and (args.max_jobs < 1 or not args.submit):
        raise ValueError("--max-jobs needs --submit and a value >= 1")
    if args.poll <= 0:
        raise ValueError(f"--poll must be positive, got {args.poll}")
    if args.gpus_per_node is not None and args.gpus_per_node < 0:
        raise ValueError(f"--gpus-per-node must be >= 0, got {args.gpus_per_node}")
    if args.cpus_per_node is not None and args.cpus_per_node < 1:
        raise ValueError(f"--cpus-per-node must be >= 1, got {args.cpus_per_node}")
    _checked("--time", args.time, _TIME)
    for option in ("partition", "account"):
        if getattr(args, option):
            _checked(f"--{option}", getattr(args, option), _NAME)
    for m in args.module:
        _checked("--module", m, _PRINTABLE)
    info = None
    if None in (args.gpus_per_node, args.cpus_per_node, args.gpu_request, args.cpu_bind) or args.submit:
        info = scheduler.probe_cluster(args.partition, require_config=not args.submit)
    if args.submit and not args.dry_run and info is None:
        raise ValueError("--submit: no SLURM cluster answers here (sinfo failed or is not installed; "
                         "is SLURM_CONF set?)")
    args.slurm_cluster = info.cluster if info else None
    if args.gpus_per_node is None:
        args.gpus_per_node = info.gpus_per_node if info and info.gpus_per_node is not None else DEFAULT_GPUS_PER_NODE
    if args.cpus_per_node is None:
        args.cpus_per_node = info.cpus_per_node if info and info.cpus_per_node else DEFAULT_CPUS_PER_NODE
    if args.gpu_request is None:
        args.gpu_request = "none" if info is not None and not info.gpu_gres else "gres"
    if args.cpu_bind is None:
        args.cpu_bind = True if info is None or info.cpu_bind is None else info.cpu_bind
    args.slurm_partition = args.partition or (info.partition if info else None)


def run(plan: Sequence[RunSpec], *, script: Sequence[str], out: Path, args: argparse.Namespace,
        command: list[str], wrappers=()) -> int:
    """``scalescope sweep --slurm``: write (``--dry-run``: print) the scripts of ``plan``;
    with ``--submit`` submit them, with ``--wait`` follow them to the end.

    Returns 0 (scripts written / jobs submitted / every run ok), 1 when a run is not ok
    after ``--wait``, 130 when waiting was interrupted.
    """
    rc = write_scripts(plan, script=script, out=out, args=args, experiment=Path(out).name,
                       command=command, wrappers=wrappers)
    if rc or args.dry_run or not args.submit:
        return rc
    try:
        n = slurm_jobs.submit(plan, out=out, partition=args.slurm_partition, max_jobs=args.max_jobs)
        if not args.wait:
            print(f"scalescope sweep: submitted {n} job(s); `scalescope status {out}` shows them, "
                  "the same command resubmits what failed")
            return 0
        return slurm_jobs.wait(plan, out=out, poll_s=args.poll, partition=args.slurm_partition,
                               max_jobs=args.max_jobs)
    except scheduler.SchedulerError as exc:
        raise SlurmError(str(exc)) from None
    except KeyboardInterrupt:  # while submitting: what was submitted is recorded
        print(f"scalescope sweep: interrupted; `scalescope status {out}` shows what was submitted, "
              "the same command goes on", file=sys.stderr)
        return 130


def finalize_main(argv: Sequence[str] | None = None) -> int:
    """``python -m instrumentation.slurm finalize --out OUT --run-id ID --exit-code RC``.

    Run at the end of each sbatch script: sets ``status``/``exit_code`` in the run's
    ``run.json`` and its entry in ``experiment.json`` (with ``wall_s`` and the job's id,
    partition, cluster and nodes from the ``SLURM_*`` variables). The run's configuration comes from
    ``SCALESCOPE_CONFIG`` (exported by the script).
    """
    p = argparse.ArgumentParser(prog="python -m instrumentation.slurm finalize")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--exit-code", type=int, required=True)
    p.add_argument("--wall-s", type=float, default=None, help="seconds the job's script ran")
    a = p.parse_args(argv)
    try:
        cfg = json.loads(os.environ.get("SCALESCOPE_CONFIG", "") or "{}")
        spec = RunSpec.from_config(cfg)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"scalescope finalize: error: SCALESCOPE_CONFIG is missing or invalid ({exc})", file=sys.stderr)
        return 2
    experiment = cfg.get("experiment") or a.out.name
    entry = finalize_run(a.out / a.run_id, spec, exit_code=a.exit_code, experiment=experiment, command=[],
                         wall_s=a.wall_s)
    entry.pop("command", None)
    job = {key: os.environ.get(var) for key, var in (
        ("job_id", "SLURM_JOB_ID"), ("partition", "SLURM_JOB_PARTITION"), ("cluster", "SLURM_CLUSTER_NAME"),
        ("nodes", "SLURM_JOB_NODELIST")) if os.environ.get(var)}

    def merge(entries: dict) -> None:
        old = entries.get(a.run_id, {})
        entries[a.run_id] = {**old, **entry, "end_time": now(),
                             **({"slurm": {**(old.get("slurm") or {}), **job}} if job else {})}

    update_entries(a.out, merge, name=experiment)
    print(f"scalescope: {a.run_id}: {entry['status']} (exit {a.exit_code})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "finalize":
        print("usage: python -m instrumentation.slurm finalize --out OUT --run-id ID --exit-code RC",
              file=sys.stderr)
        return 2
    return finalize_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
