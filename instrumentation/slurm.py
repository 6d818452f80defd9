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
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from instrumentation.experiment import (
    Experiment,
    RunSpec,
    finalize_run,
    find_tool,
    rank_command,
    resolve_script,
    run_env,
    update_entries,
)

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
    """Sequential layout of ``np`` ranks, one per GPU, filling each node before the next.

    Examples
    --------
    >>> layout(6, gpus_per_node=4, cpus_per_node=32)
    SlurmLayout(nodes=2, ntasks=6, ntasks_per_node=4, cpus_per_task=8, gpus_per_node=4)
    """
    if np < 1 or gpus_per_node < 1 or cpus_per_node < 1:
        raise ValueError(f"np, gpus_per_node and cpus_per_node must be >= 1 (got {np}, {gpus_per_node}, {cpus_per_node})")
    per_node = min(np, gpus_per_node)
    return SlurmLayout(nodes=math.ceil(np / gpus_per_node), ntasks=np, ntasks_per_node=per_node,
                       cpus_per_task=max(1, cpus_per_node // gpus_per_node), gpus_per_node=per_node)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--slurm`` options of ``scalescope sweep``."""
    g = parser.add_argument_group("SLURM (write sbatch scripts instead of running)")
    g.add_argument("--slurm", action="store_true", help="write one sbatch script per run into OUT/slurm/")
    g.add_argument("--slurm-launcher", choices=("srun", "mpirun"), default="srun",
                   help="how the script starts the ranks (default srun)")
    g.add_argument("--partition", default=None, help="SLURM partition")
    g.add_argument("--account", default=None, help="SLURM account")
    g.add_argument("--gpus-per-node", type=int, default=4, help="GPUs per node (default 4)")
    g.add_argument("--cpus-per-node", type=int, default=32,
                   help="CPU cores per node (default 32); --cpus-per-task = this / GPUs per node")
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
                 python: str) -> list[str]:
    """Shell lines that start the ranks of ``spec`` inside the allocation."""
    n = lay.ntasks
    srun = ["srun", f"--ntasks={n}", f"--ntasks-per-node={lay.ntasks_per_node}",
            f"--cpus-per-task={lay.cpus_per_task}", "--distribution=block:block", "--cpu-bind=cores"]
    forward = [*env_names, *_MPI_FORWARD]
    mpirun = ["mpirun", "-np", str(n), "-npernode", str(lay.ntasks_per_node), "--bind-to", "none"]
    for name in forward:
        mpirun += ["-x", name]
    if spec.framework == "none":
        return [_q(rank_cmd)]
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
    lay = layout(spec.np, gpus_per_node=args.gpus_per_node, cpus_per_node=args.cpus_per_node)
    run_dir = Path(out) / spec.run_id
    env = run_env(spec, run_dir, experiment=experiment, base={},
                  mark_cycles=getattr(args, "timeline_cycles", False))
    for key in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        env.pop(key, None)  # compute nodes do not run jobs as root
    rank_cmd = rank_command(spec, resolve_script(script, python=python), run_dir, wrappers=wrappers)
    sb = [
        "#!/bin/bash",
        f"#SBATCH --job-name=ss-{spec.run_id}",
        f"#SBATCH --output={run_dir}/stdout.log",
        f"#SBATCH --error={run_dir}/stderr.log",
        f"#SBATCH --nodes={lay.nodes}",
        f"#SBATCH --ntasks={lay.ntasks}",
        f"#SBATCH --ntasks-per-node={lay.ntasks_per_node}",
        f"#SBATCH --cpus-per-task={lay.cpus_per_task}",
        f"#SBATCH --gres=gpu:{lay.gpus_per_node}",
        "#SBATCH --exclusive",
        "#SBATCH --distribution=block:block",
        f"#SBATCH --time={args.time}",
    ]
    if args.partition:
        sb.append(f"#SBATCH --partition={args.partition}")
    if args.account:
        sb.append(f"#SBATCH --account={args.account}")
    body = [
        "",
        f"# scalescope sweep run {spec.run_id}: {spec.backend}, {spec.np} rank(s) on {lay.nodes} node(s)",
        "set -uo pipefail",
        *[f"module load {shlex.quote(m)}" for m in args.module],
        *[f"export {k}={shlex.quote(v)}" for k, v in env.items()],
        f"mkdir -p {shlex.quote(str(run_dir))}",
        f"cd {shlex.quote(str(workdir or Path.cwd()))}",
        *launch_lines(spec, rank_cmd, lay, launcher=args.slurm_launcher, env_names=list(env), python=python),
        "rc=$?",
        _q([python, "-m", "instrumentation.slurm", "finalize", "--out", str(out), "--run-id", spec.run_id])
        + ' --exit-code "$rc"',
        'exit "$rc"',
        "",
    ]
    return "\n".join(sb + body)


def write_scripts(plan, *, script: Sequence[str], out: Path, args: argparse.Namespace, experiment: str,
                  command: list[str], wrappers=()) -> int:
    """Write (or with ``--dry-run`` print) one sbatch script per run and ``submit_all.sh``.

    Also lists every run as ``pending`` in ``experiment.json``. Returns 0.
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
        (sdir / f"{run_id}.sbatch").write_text(text, encoding="utf-8")
        (Path(out) / run_id).mkdir(exist_ok=True)
    submit = ["#!/bin/bash", "# Submit every run of this sweep (runs already ok are skipped).", "set -e",
              f"cd {shlex.quote(str(sdir))}"]
    exp = Experiment.open(out, command=command, script=list(script), plan=plan, experiment=experiment)
    for spec in plan:
        if exp.is_done(spec):
            submit.append(f"# {spec.run_id}: already ok")
        else:
            submit.append(f"sbatch {shlex.quote(spec.run_id + '.sbatch')}")
    (sdir / "submit_all.sh").write_text("\n".join(submit) + "\n", encoding="utf-8")
    (sdir / "submit_all.sh").chmod(0o755)
    exp.extra["slurm"] = {"launcher": args.slurm_launcher, "gpus_per_node": args.gpus_per_node,
                          "cpus_per_node": args.cpus_per_node, "partition": args.partition}
    exp.save()
    print(f"scalescope sweep: wrote {len(scripts)} sbatch scripts into {sdir}; submit with {sdir / 'submit_all.sh'}")
    return 0


def check_options(args: argparse.Namespace) -> None:
    """ValueError naming the first ``--slurm`` option that cannot go into a script."""
    if args.gpus_per_node < 1 or args.cpus_per_node < 1:
        raise ValueError("--gpus-per-node and --cpus-per-node must be >= 1")


def run(plan: Sequence[RunSpec], *, script: Sequence[str], out: Path, args: argparse.Namespace,
        command: list[str], wrappers=()) -> int:
    """``scalescope sweep --slurm``: write (``--dry-run``: print) the scripts of ``plan``."""
    return write_scripts(plan, script=script, out=out, args=args, experiment=Path(out).name,
                         command=command, wrappers=wrappers)


def finalize_main(argv: Sequence[str] | None = None) -> int:
    """``python -m instrumentation.slurm finalize --out OUT --run-id ID --exit-code RC``.

    Run at the end of each sbatch script: sets ``status``/``exit_code`` in the run's
    ``run.json`` and its entry in ``experiment.json``. The run's configuration comes from
    ``SCALESCOPE_CONFIG`` (exported by the script).
    """
    p = argparse.ArgumentParser(prog="python -m instrumentation.slurm finalize")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--exit-code", type=int, required=True)
    a = p.parse_args(argv)
    try:
        cfg = json.loads(os.environ.get("SCALESCOPE_CONFIG", "") or "{}")
        spec = RunSpec.from_config(cfg)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"scalescope finalize: error: SCALESCOPE_CONFIG is missing or invalid ({exc})", file=sys.stderr)
        return 2
    experiment = cfg.get("experiment") or a.out.name
    entry = finalize_run(a.out / a.run_id, spec, exit_code=a.exit_code, experiment=experiment, command=[])
    entry.pop("command", None)

    def merge(entries: dict) -> None:
        entries[a.run_id] = {**entries.get(a.run_id, {}), **entry}

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
