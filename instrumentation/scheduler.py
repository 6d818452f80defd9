"""Talking to SLURM: what the cluster offers, submitting jobs, and what became of them.

* :func:`probe_cluster`: CPUs and GPU GRES per node (``sinfo``), whether tasks can be bound
  to CPUs and the cluster's name (``scontrol show config``), used for the script defaults;
* :func:`submit`: ``sbatch --parsable`` -> job id;
* :func:`job_states`: each job's state from ``squeue --states=all`` (jobs stay listed for
  ``MinJobAge`` after they end), then ``sacct`` for the ones squeue forgot, where accounting
  exists; :func:`job_exit_code` from ``scontrol show job``;
* :func:`run_status`: a SLURM state as a scalescope run status.

Every command runs with a time limit and raises :class:`SchedulerError` with one clear line.
This module knows nothing about sweeps; :mod:`instrumentation.slurm` builds on it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ACTIVE_STATES",
    "ClusterInfo",
    "JobState",
    "SchedulerError",
    "available",
    "configured",
    "job_exit_code",
    "job_states",
    "probe_cluster",
    "run_status",
    "submit",
]

#: Seconds any one SLURM command may take (slurmctld answers in milliseconds when up).
COMMAND_TIMEOUT_S = 30.0

#: States of a job that has not ended yet.
ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
                           "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
                           "RESV_DEL_HOLD", "SPECIAL_EXIT"})
#: States in which the scheduler ended the job (not the job's own exit): status, and why.
_KILLED_BY_SCHEDULER = {
    "TIMEOUT": "timeout",
    "DEADLINE": "timeout",
    "CANCELLED": "killed",
    "PREEMPTED": "killed",
    "NODE_FAIL": "failed",
    "BOOT_FAIL": "failed",
    "OUT_OF_MEMORY": "oom",
}


class SchedulerError(RuntimeError):
    """A SLURM command is missing, failed or timed out."""


@dataclass(frozen=True)
class JobState:
    """One job as the scheduler reports it: ``state`` (``PENDING``, ``RUNNING``, ``COMPLETED``,
    ``TIMEOUT``, ...), ``reason``, ``partition``, and which command said so."""

    job_id: str
    state: str
    reason: str | None = None
    partition: str | None = None
    source: str = "squeue"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


@dataclass(frozen=True)
class ClusterInfo:
    """What :func:`probe_cluster` found; ``None`` fields were not found out."""

    cpus_per_node: int | None
    gpus_per_node: int | None
    gpu_gres: bool
    cpu_bind: bool | None
    cluster: str | None
    partition: str | None


#: Where SLURM's clients look for the configuration when ``SLURM_CONF`` is unset (Debian,
#: older Debian, and the cache of a configless slurmd).
_CONFIG_PATHS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/run/slurm/conf/slurm.conf")


def available() -> bool:
    """Are the SLURM client commands on PATH?"""
    return all(shutil.which(c) for c in ("sbatch", "squeue", "scontrol", "sinfo"))


def configured() -> bool:
    """Is there a configuration file for the clients? (Without one, ``sinfo`` retries for a
    minute before it fails; a configless cluster found through DNS has none either.)"""
    conf = os.environ.get("SLURM_CONF")
    if conf:
        return Path(conf).is_file()
    return any(Path(p).is_file() for p in _CONFIG_PATHS)


def _run(cmd: Sequence[str], *, timeout_s: float = COMMAND_TIMEOUT_S, cwd: Path | None = None) -> str:
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, cwd=cwd,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SchedulerError(f"{cmd[0]} not found: SLURM's client commands are not installed here") from None
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"{' '.join(cmd[:2])} did not answer within {timeout_s:.0f} s "
                             "(is slurmctld up? is SLURM_CONF right?)") from None
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise SchedulerError(f"{' '.join(cmd[:2])} failed (exit {proc.returncode}): "
                             f"{msg[-1] if msg else 'no message'}")
    return proc.stdout


def probe_cluster(partition: str | None = None, *, timeout_s: float = 15.0,
                  require_config: bool = True) -> ClusterInfo | None:
    """What the cluster (or ``partition``) offers per node, or ``None`` where no cluster answers
    (or, with ``require_config``, where no configuration file is found: see :func:`configured`).

    From ``sinfo -o '%c|%G|%P'`` (CPUs and GRES of the partition's nodes; the smallest node
    counts) and ``scontrol show config`` (``TaskPlugin``: ``task/affinity`` or ``task/cgroup``
    can bind tasks to CPUs, ``task/none`` cannot; ``ClusterName``).
    """
    conf = os.environ.get("SLURM_CONF")
    if not available() or (conf and not Path(conf).is_file()) or (require_config and not configured()):
        return None
    cmd = ["sinfo", "-h", "-o", "%c|%G|%P"] + (["-p", partition] if partition else [])
    try:
        rows = [line.split("|") for line in _run(cmd, timeout_s=timeout_s).splitlines() if line.count("|") == 2]
        config = _run(["scontrol", "show", "config"], timeout_s=timeout_s)
    except SchedulerError:
        return None
    if not rows:
        return None
    cpus = [int(c) for c, _, _ in rows if c.strip().isdigit()]
    gpus = [_gres_gpus(g) for _, g, _ in rows]
    task = re.search(r"^TaskPlugin\s*=\s*(.*)$", config, flags=re.M)
    name = re.search(r"^ClusterName\s*=\s*(\S+)", config, flags=re.M)
    default_part = next((p.rstrip("*") for _, _, p in rows if p.endswith("*")), rows[0][2].rstrip("*"))
    return ClusterInfo(
        cpus_per_node=min(cpus) if cpus else None,
        gpus_per_node=min(gpus),
        gpu_gres=min(gpus) > 0,
        cpu_bind=None if task is None else bool(re.search(r"task/(affinity|cgroup)", task.group(1))),
        cluster=name.group(1) if name else None,
        partition=partition or default_part,
    )


def _gres_gpus(gres: str) -> int:
    """GPUs in a GRES string: ``gpu:4``, ``gpu:a100:4(S:0-1)``, ``(null)`` -> 0."""
    total = 0
    for item in gres.split(","):
        parts = re.sub(r"\(.*?\)", "", item).split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def submit(script: Path, *, cwd: Path | None = None) -> tuple[str, str | None]:
    """``sbatch --parsable SCRIPT``: the job id and, on a federation, the cluster name."""
    out = _run(["sbatch", "--parsable", str(script)], cwd=cwd).strip().splitlines()
    job, _, cluster = (out[-1] if out else "").partition(";")
    if not job.strip().isdigit():
        raise SchedulerError(f"sbatch {script.name}: unexpected answer {out!r}")
    return job.strip(), cluster.strip() or None


def job_states(job_ids: Iterable[str]) -> dict[str, JobState]:
    """The state of each job the scheduler still knows; jobs it forgot are left out.

    Raises :class:`SchedulerError` when the scheduler cannot be asked (so a job is never
    taken for forgotten because slurmctld did not answer).
    """
    ids = sorted({str(j) for j in job_ids if j}, key=lambda j: (len(j), j))
    if not ids:
        return {}
    out: dict[str, JobState] = {}
    try:
        text = _run(["squeue", "-h", "--states=all", "-j", ",".join(ids), "-o", "%i|%T|%r|%P"])
    except SchedulerError as exc:
        if len(ids) > 1 or "Invalid job id" not in str(exc):
            raise
        text = ""  # squeue fails on a single id it does not know
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0] in ids:
            out[parts[0]] = JobState(parts[0], parts[1], _none(parts[2]), _none(parts[3]), "squeue")
    missing = [j for j in ids if j not in out]
    if missing and shutil.which("sacct"):
        out.update(_sacct_states(missing))
    return out


def _sacct_states(ids: Sequence[str]) -> dict[str, JobState]:
    try:
        text = _run(["sacct", "-n", "-P", "-X", "-j", ",".join(ids), "-o", "JobID,State,Reason,Partition"])
    except SchedulerError:  # no accounting storage: "Slurm accounting storage is disabled"
        return {}
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 4 and parts[0] in ids:
            state = parts[1].split()[0] if parts[1] else "UNKNOWN"  # "CANCELLED by 0"
            out[parts[0]] = JobState(parts[0], state, _none(parts[2]), _none(parts[3]), "sacct")
    return out


def _none(text: str) -> str | None:
    text = text.strip()
    return None if text in ("", "None", "(null)", "n/a") else text


def job_exit_code(job_id: str) -> int | None:
    """The batch script's exit status from ``scontrol show job`` (``ExitCode=rc:signal``)."""
    try:
        text = _run(["scontrol", "-o", "show", "job", str(job_id)])
    except SchedulerError:
        return None
    m = re.search(r"\bExitCode=(\d+):(\d+)", text)
    if not m:
        return None
    rc, sig = int(m.group(1)), int(m.group(2))
    return -sig if sig else rc


def run_status(state: str) -> str | None:
    """The run status a job's SLURM state stands for.

    ``queued`` (pending), ``running``, the status of a job the scheduler ended (``timeout``
    for TIMEOUT/DEADLINE, ``killed`` for CANCELLED/PREEMPTED, ``failed`` for
    NODE_FAIL/BOOT_FAIL, ``oom`` for OUT_OF_MEMORY), or ``None`` for a job that ended on its
    own (COMPLETED, FAILED: its finalize step records the status).
    """
    if state in ("RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING"):
        return "running"
    if state in ACTIVE_STATES:
        return "queued"
    return _KILLED_BY_SCHEDULER.get(state)
