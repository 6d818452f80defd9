"""A sweep's SLURM jobs: submit them, follow them, record what became of them.

``scalescope sweep --slurm --submit`` submits every run's script (``OUT/slurm/<run_id>.sbatch``,
written by :mod:`instrumentation.slurm`) and records the job in the run's ``experiment.json``
entry: ``status: "queued"`` and ``slurm: {"job_id", "cluster", "partition", "submitted"}``.
Each job's last step (``python -m instrumentation.slurm finalize``) records how it ended.
:func:`reconcile` brings ``experiment.json`` up to date with the scheduler: queued jobs that
started become ``running``, and a job the scheduler ended itself (time limit, ``scancel``,
node failure, out of memory) or that ended without its finalize step is recorded with its
SLURM state (``slurm.state``, ``slurm.reason``) and the tail of its log. ``--wait`` reconciles
every ``--poll`` seconds until every run has ended; ``scalescope status EXP`` reconciles once
and prints a table.

All writes go through :func:`instrumentation.experiment.update_entries` (a locked
read-modify-write), since jobs finalize while the sweep is reconciling.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from instrumentation import paths, scheduler
from instrumentation.experiment import (
    FINAL_STATUSES,
    RunSpec,
    finalize_run,
    load_experiment,
    now,
    set_aside,
    summary,
    update_entries,
)
from instrumentation.failure import exception_line, last_meaningful
from instrumentation.progress import Progress, fmt_seconds, printable

__all__ = ["ACTIVE_STATUSES", "reconcile", "script_path", "status_main", "status_rows", "submit", "wait"]

#: Run statuses of a job that is still in the scheduler's hands.
ACTIVE_STATUSES = frozenset({"queued", "running"})


def script_path(out: Path, run_id: str) -> Path:
    """Where :mod:`instrumentation.slurm` writes the sbatch script of a run."""
    return Path(out) / "slurm" / f"{run_id}.sbatch"


def _job_id(entry: dict) -> str | None:
    job = _slurm(entry).get("job_id")
    return None if job is None or isinstance(job, (dict, list)) else str(job)


def _slurm(entry: dict) -> dict:
    """The entry's ``slurm`` record ({} when missing or not an object: a damaged or hostile
    experiment.json)."""
    slurm = entry.get("slurm")
    return slurm if isinstance(slurm, dict) else {}


def _runs(data: dict) -> list[dict]:
    """The entries of ``experiment.json`` that are objects (``runs`` not a list: none)."""
    runs = data.get("runs")
    return [e for e in runs if isinstance(e, dict)] if isinstance(runs, list) else []


# ---------------------------------------------------------------------------------------
# Reconcile experiment.json with the scheduler
# ---------------------------------------------------------------------------------------


def reconcile(out: Path) -> dict[str, dict]:
    """Record in ``experiment.json`` what the scheduler knows of this experiment's jobs.

    Returns the entries by run id afterwards. Raises :class:`scheduler.SchedulerError` when
    the scheduler cannot be asked.
    """
    out = Path(out)
    data = load_experiment(out) or {"runs": []}
    watched = [_job_id(e) for e in _runs(data) if _text(e.get("status")) in ACTIVE_STATUSES or _killed_unrecorded(e)]
    if not any(watched):
        return {e["run_id"]: e for e in _runs(data) if paths.is_run_id(e.get("run_id"))}
    states = scheduler.job_states(j for j in watched if j)

    def apply(entries: dict) -> None:
        for run_id, entry in entries.items():
            job = _job_id(entry)
            if job is None or not paths.is_run_id(run_id):  # never followed out of the experiment
                continue
            if job not in states and _text(entry.get("status")) in ACTIVE_STATUSES:
                states[job] = scheduler.JobState(job, "UNKNOWN", "not known to squeue or sacct any more", None, "none")
            if job in states and (_text(entry.get("status")) in ACTIVE_STATUSES or _killed_unrecorded(entry)):
                entries[run_id] = _reconciled(out, entry, states[job])

    result = update_entries(out, apply)
    return {e["run_id"]: e for e in _runs(result) if paths.is_run_id(e.get("run_id"))}


def _killed_unrecorded(entry: dict) -> bool:
    """A run that finalized itself (e.g. after SIGTERM) whose job's SLURM state is not
    recorded yet: the scheduler may have killed it, and says why."""
    slurm = _slurm(entry)
    return bool(slurm.get("job_id")) and _text(entry.get("status")) in ("killed", "failed") and "state" not in slurm


def _reconciled(out: Path, entry: dict, job: scheduler.JobState) -> dict:
    slurm = {**(entry.get("slurm") or {}), "partition": (entry.get("slurm") or {}).get("partition")
             or job.partition}
    status = scheduler.run_status(job.state)
    if job.active:
        if status == "running" and entry.get("status") != "running":
            return {**entry, "status": "running", "start_time": entry.get("start_time") or now(), "slurm": slurm}
        return {**entry, "slurm": slurm}
    slurm.update({"state": job.state, "reason": job.reason})
    if status is None and _text(entry.get("status")) not in ACTIVE_STATUSES:
        return {**entry, "slurm": slurm}  # ended on its own and finalized: nothing to add
    try:
        spec = RunSpec.from_config(entry.get("config") or {})
    except (KeyError, ValueError, TypeError):
        return {**entry, "status": status or "failed", "slurm": slurm}
    try:
        run_dir = paths.run_dir(out, entry["run_id"])
    except ValueError:  # a link out of the experiment: recorded here, nothing written there
        return {**entry, "status": status or "failed", "slurm": slurm}
    exit_code = scheduler.job_exit_code(slurm["job_id"])
    recorded = finalize_run(run_dir, spec, exit_code=exit_code, status=status,
                            experiment=(entry.get("config") or {}).get("experiment") or out.name,
                            command=[], wall_s=entry.get("wall_s"))
    recorded.pop("command", None)
    merged = {**entry, **recorded, "slurm": slurm, "end_time": entry.get("end_time") or now()}
    if status is not None:
        merged["log_tail"] = recorded.get("log_tail", "")
    return merged


# ---------------------------------------------------------------------------------------
# Submit
# ---------------------------------------------------------------------------------------


def submit(plan: Sequence[RunSpec], *, out: Path, partition: str | None = None,
           max_jobs: int | None = None, resubmit: bool = True, stream=None) -> int:
    """Submit the runs of ``plan`` that are neither ``ok`` nor still queued or running
    (``resubmit=False``: only the ``pending`` ones, never submitted or held back).

    At most ``max_jobs`` of the plan's jobs are queued or running afterwards. Files of an
    earlier attempt of a resubmitted run move to ``OUT/.attempts/``. Returns how many jobs
    were submitted.
    """
    out = Path(out)
    entries = reconcile(out)
    active = sum(entries.get(s.run_id, {}).get("status") in ACTIVE_STATUSES for s in plan)
    todo = [s for s in plan if entries.get(s.run_id, {}).get("status") not in ACTIVE_STATUSES | {"ok"}
            and (resubmit or entries.get(s.run_id, {}).get("status", "pending") == "pending")]
    room = len(todo) if max_jobs is None else max(0, max_jobs - active)
    submitted = 0
    for spec in todo[:room]:
        run_dir = out / spec.run_id
        set_aside(run_dir, out)
        run_dir.mkdir(parents=True, exist_ok=True)  # sbatch opens --output there before the script runs
        job, cluster = scheduler.submit(script_path(out, spec.run_id), cwd=out)
        record = {"job_id": job, "cluster": cluster, "partition": partition, "submitted": now()}

        def mark(entries: dict, spec=spec, record=record) -> None:
            old = entries.get(spec.run_id, {})
            entries[spec.run_id] = {
                **{k: v for k, v in old.items() if k not in ("log_tail", "exit_note", "end_time", "start_time")},
                "run_id": spec.run_id, "status": "queued", "exit_code": None, "wall_s": None,
                "config": old.get("config") or spec.config(experiment=out.name), "slurm": record,
            }

        update_entries(out, mark)
        submitted += 1
        print(printable(f"scalescope sweep: submitted {spec.run_id} as job {job}"), file=stream or sys.stdout,
              flush=True)
    return submitted


# ---------------------------------------------------------------------------------------
# Wait
# ---------------------------------------------------------------------------------------


def wait(plan: Sequence[RunSpec], *, out: Path, poll_s: float, partition: str | None = None,
         max_jobs: int | None = None) -> int:
    """Follow the plan's jobs until every run has ended; submit more as jobs end when
    ``max_jobs`` held some back. Prints progress with an ETA and the sweep's summary.

    Returns 0 when every run is ``ok``, 1 otherwise, 130 when interrupted (the jobs go on).
    """
    out = Path(out)
    entries = reconcile(out)
    ids = {s.run_id for s in plan}
    todo = [s.run_id for s in plan if entries.get(s.run_id, {}).get("status") != "ok"]
    progress = Progress(len(todo))
    seen: dict[str, str] = {r: entries.get(r, {}).get("status", "pending") for r in todo}
    progress.print(f"scalescope sweep: waiting for {len(todo)} SLURM job(s) of {out} "
                   f"(polling every {fmt_seconds(poll_s)}; Ctrl-C stops waiting, not the jobs)")
    try:
        while True:
            for run_id in todo:
                entry = entries.get(run_id, {})
                status, before = entry.get("status", "pending"), seen[run_id]
                if status == before:
                    continue
                seen[run_id] = status
                if status == "running":
                    progress.start(f"{run_id} (job {_job_id(entry)})")
                elif status in FINAL_STATUSES:
                    state = (entry.get("slurm") or {}).get("state")
                    extra = f", SLURM {state}" if state and state != "COMPLETED" else ""
                    progress.finish(run_id, f"{status}{extra}", entry.get("wall_s"), counted=status == "ok")
            if all(seen[r] in FINAL_STATUSES for r in todo):
                break
            # runs held back by --max-jobs go in as jobs end; a run that failed here is not retried
            submitted = 0 if max_jobs is None else submit(plan, out=out, partition=partition,
                                                          max_jobs=max_jobs, resubmit=False)
            if not submitted and not any(entries.get(r, {}).get("status") in ACTIVE_STATUSES for r in ids):
                progress.print("scalescope sweep: no job queued or running, and none left to submit")
                break
            time.sleep(poll_s)
            entries = reconcile(out)
    except KeyboardInterrupt:
        progress.close()
        print("scalescope sweep: stopped waiting; the jobs go on. `scalescope status "
              f"{out}` shows them; the same sweep command resumes.", file=sys.stderr)
        return 130
    progress.close()
    line, all_ok = summary(entries, plan, out)
    print(printable(line), flush=True)
    return 0 if all_ok else 1


# ---------------------------------------------------------------------------------------
# Status
# ---------------------------------------------------------------------------------------


def status_rows(out: Path) -> tuple[list[dict], str | None]:
    """One row per run of the experiment (``run_id``, ``status``, ``job_id``, ``slurm_state``,
    ``wall_s``, ``note``), after asking the scheduler where the experiment has SLURM jobs; and
    why the scheduler could not be asked, if it could not."""
    out = Path(out)
    data = load_experiment(out)
    if data is None:
        raise FileNotFoundError(f"{out}: no experiment.json (not an experiment directory)")
    listed = [e for e in _runs(data) if "run_id" in e]
    invalid = [e for e in listed if not paths.is_run_id(e["run_id"])]
    entries = {e["run_id"]: e for e in listed if paths.is_run_id(e["run_id"])}
    problem = None
    if any(_job_id(e) and _text(e.get("status")) in ACTIVE_STATUSES for e in entries.values()):
        try:
            entries = reconcile(out)
        except scheduler.SchedulerError as exc:
            problem = str(exc)
    rows = []
    for run_id, e in entries.items():
        # every field as the file has it may be anything (a shared, damaged or hostile file):
        # text where text is expected, a number for wall_s, else left out
        slurm = _slurm(e)
        status = _text(e.get("status")) or "unknown"
        if status == "running" and not slurm:  # a local run: its own manifest may know better
            status = _text(_run_manifest_status(out, run_id)) or status
        cause = _text(e.get("cause")) or _cause_from_tail(e.get("log_tail"))
        note = _text(e.get("exit_note")) or _text(e.get("left_behind_note")) or cause or ""
        wall = e.get("wall_s")
        rank = e.get("cause_rank")
        rows.append({"run_id": run_id, "status": status, "job_id": _text(slurm.get("job_id")),
                     "slurm_state": _text(slurm.get("state")) or _live_state(status, slurm),
                     "wall_s": wall if type(wall) in (int, float) and wall == wall and abs(wall) < 1e15 else None,
                     "note": note, "cause": cause if status in FINAL_STATUSES and status != "ok" else None,
                     "cause_rank": rank if type(rank) is int else None,
                     "log": _text(e.get("log")) or str(Path(out) / run_id / "stderr.log"),
                     "hint": _text(e.get("hint"))})
    for e in invalid:  # "../other/run", "/abs": shown, never opened or written
        rows.append({"run_id": str(e["run_id"])[:80], "status": "invalid", "job_id": None, "slurm_state": None,
                     "wall_s": None, "note": "run id is not a directory name inside the experiment; not followed",
                     "cause": None, "cause_rank": None, "log": None, "hint": None})
    return rows, problem


def _cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters, a cut one ending in "…" (the whole cause follows the table)."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _cause_from_tail(tail: object) -> str | None:
    """The exception line in a recorded log tail (entries written before ``cause`` existed),
    else its last line that is not a launcher's banner."""
    if not isinstance(tail, str) or not tail.strip():
        return None
    found = exception_line(tail)
    return found[0] if found else last_meaningful(tail)


def _text(value: object) -> str | None:
    """A field's value as text: a string or number as it is, anything else None."""
    if isinstance(value, str):
        return value
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def _live_state(status: str, slurm: dict) -> str | None:
    if not slurm.get("job_id"):
        return None
    return {"queued": "PENDING", "running": "RUNNING"}.get(status)


def _run_manifest_status(out: Path, run_id: str) -> str | None:
    try:
        return json.loads((paths.run_dir(out, run_id) / "run.json").read_text(encoding="utf-8")).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def status_main(out: Path) -> int:
    """``scalescope status EXP``: print each run's state; exit 0, 1 when the experiment
    cannot be read."""
    try:
        rows, problem = status_rows(out)
    except (FileNotFoundError, ValueError) as exc:
        print(printable(f"scalescope status: error: {exc}"), file=sys.stderr)
        return 1
    header = ("run", "status", "job", "SLURM state", "wall", "note")
    # every cell may come from a file (a log tail's last line, a manifest's run id): escaped
    table = [tuple(printable(x) for x in (
                 r["run_id"], r["status"], r["job_id"] or "-", r["slurm_state"] or "-",
                 "-" if r["wall_s"] is None else fmt_seconds(float(r["wall_s"])), _cut(r["note"] or "", 60)))
             for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table, strict=False)]
    for line in (header, *table):
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip())
    for r in rows:  # the cause of each run that did not end ok, in full, with its log
        if r["cause"]:
            rank = f"rank {r['cause_rank']}: " if r["cause_rank"] is not None else ""
            print(printable(f"  {r['run_id']}: {r['status']}: {rank}{r['cause']}\n    log: {r['log']}"
                            + (f"\n    {r['hint']}" if r["hint"] else "")))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(printable(f"{len(rows)} runs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))))
    if problem:
        print(printable(f"scalescope status: warning: the scheduler could not be asked ({problem}); "
                        "states are the recorded ones"), file=sys.stderr)
    return 0
