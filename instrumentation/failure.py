"""Why a run failed, in one line: the exception of the failing rank, read from the run's logs.

A launcher's own lines (torchrun's ``=====`` banner and ``ChildFailedError`` summary,
horovodrun's ``Process N exit with status code`` lines, hydra's "Set the environment
variable HYDRA_FULL_ERROR=1" advice) say *that* a rank failed, never *why*; the first Python
traceback of a training process does. :func:`failure_cause` finds it, strips the launchers'
per-line prefixes (``[rank1]:``, ``[1]<stderr>:``, ``[1,0]<stderr>:``) and names the rank
where a prefix says it. :func:`relative_path_hint` adds, for a missing file named by a
relative path, where the run executed and how to change that; :func:`run_failure` is the
record of both that the sweep keeps.

What the ranks did decides the rest: :func:`finished_before_exit` keeps a non-zero exit
``ok`` only when every rank trained and closed its trace and rank 0's script reached its own
end (``run.json`` ``end``), and :func:`counted_global_batch` is the samples one step
processed over all ranks, as counted.

This module runs on cluster login nodes and at the end of batch jobs: no torch, no pandas.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

from instrumentation.recorder import closed_status, trace_path

__all__ = ["counted_global_batch", "exception_line", "failure_cause", "finished_before_exit", "last_meaningful",
           "relative_path_hint", "run_failure"]

#: Per-line prefixes launchers add: torch's ``[rank1]:``, horovodrun/gloo's ``[1]<stderr>:``,
#: mpirun's ``[1,0]<stderr>:``.
_PREFIX = re.compile(r"^(?:\[rank(?P<r1>\d+)\]:\s?|\[(?:\d+,)?(?P<r2>\d+)\]<std(?:err|out)>:\s?)")
_TRACEBACK = "Traceback (most recent call last):"
#: ``Name: message`` or a bare ``Name`` of an exception class (dotted names allowed).
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Fault|Abort)\b(?::.*)?$"
                       r"|^[A-Za-z_][\w.]*\.[A-Z]\w*:\s.*$")
#: Exceptions that a launcher raises about its children: never the cause.
_LAUNCHER_EXC = re.compile(r"ChildFailedError|horovod\.runner|HorovodInternalError: Horovod has been shut down"
                           r"|RuntimeError: Horovod detected that one or more processes exited")
#: Lines that are launcher noise when no traceback is found.
_NOISE = re.compile(r"^\s*$|^=+$|^-+$|^\s*(?:time|host|rank|exitcode|error_file|traceback|root cause|"
                    r"Failures)\b|<NO_OTHER_FAILURES>|^Traceback \(most recent|HYDRA_FULL_ERROR|^Process \d+ exit with status code"
                    r"|^\[scalescope sweep\]|^Primary job\s+terminated|^mpirun (?:detected|noticed)"
                    r"|^Child job \d+ terminated|^[WEI]\d{4} |^\*{5,}|^\[\d+\]:\s*$|\bFAILED\s*$|^Root Cause"
                    r"|^torch\.distributed\.elastic|^\s*sys\.exit\(", re.IGNORECASE)


def _strip(line: str) -> tuple[str, int | None]:
    m = _PREFIX.match(line)
    if not m:
        return line.rstrip(), None
    rank = m.group("r1") or m.group("r2")
    return line[m.end():].rstrip(), int(rank)


def exception_line(text: str) -> tuple[str, int | None] | None:
    """The exception line of the first traceback in ``text`` that is not a launcher's, with
    the rank a launcher prefix names (else ``None``); ``None`` when there is no traceback."""
    lines = [_strip(raw) for raw in text.splitlines()]
    for i, (line, rank) in enumerate(lines):
        if _TRACEBACK not in line:
            continue
        found = _after_traceback(lines, i + 1, rank)
        if found is not None and not _LAUNCHER_EXC.search(found[0]):
            return found
    return None


def _after_traceback(lines: list[tuple[str, int | None]], start: int, rank: int | None) -> tuple[str, int | None] | None:
    """The first unindented line after the frames of a traceback that starts at ``start``
    (lines of the same rank when the prefixes say which)."""
    frames = 0
    for line, r in lines[start:start + 400]:
        if rank is not None and r is not None and r != rank:
            continue  # another rank's interleaved output
        if line.startswith((" ", "\t")):
            frames += 1
            continue
        if not line.strip():
            continue
        if frames and _EXC_LINE.match(line.strip()):
            return line.strip(), rank if rank is not None else r
        if frames:
            return None
    return None


def last_meaningful(text: str) -> str | None:
    """The last line of ``text`` that is not a launcher's banner, summary or advice."""
    for raw in reversed(text.splitlines()):
        line, _ = _strip(raw)
        if not _NOISE.search(line):
            return line.strip()
    return None


def _read(path: Path, max_bytes: int = 1 << 20) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def failure_cause(run_dir: str | os.PathLike[str]) -> dict:
    """Why the run in ``run_dir`` failed: ``{"cause", "rank", "log"}``.

    ``cause`` is the exception line of the first training traceback in ``stderr.log`` (then
    ``stdout.log``; hydra and some scripts print theirs there), else the last line that is
    not a launcher's banner or summary, else ``None``; ``rank`` the rank a launcher prefix
    names (``None`` when unknown); ``log`` the path of the log it came from (``stderr.log``
    when none had one).
    """
    run_dir = Path(run_dir)
    texts = {name: _read(run_dir / name) for name in ("stderr.log", "stdout.log")}
    for name, text in texts.items():
        found = exception_line(text)
        if found is not None:
            return {"cause": found[0], "rank": found[1], "log": str(run_dir / name)}
    for name, text in texts.items():
        line = last_meaningful(text)
        if line:
            return {"cause": line, "rank": None, "log": str(run_dir / name)}
    return {"cause": None, "rank": None, "log": str(run_dir / "stderr.log")}


_MISSING = re.compile(r"(?:FileNotFoundError|No such file or directory|does not exist|not found)"
                      r".*?['\"](?P<path>[^'\"]+)['\"]|['\"](?P<path2>[^'\"]+)['\"].*?(?:does not exist|not found)")


def relative_path_hint(cause: str | None, *, ran_in: str | None, user_cwd: str | None, mode: str | None) -> str | None:
    """For a cause naming a missing file by a relative path: where the run executed, whether
    the file exists relative to the sweep's directory, and how to change the working
    directory (``--cwd``); ``None`` otherwise."""
    if not cause or not ran_in:
        return None
    m = _MISSING.search(cause)
    path = m and (m.group("path") or m.group("path2"))
    if not path or os.path.isabs(path):
        return None
    where = f"the run executed in {ran_in}, where the relative path {path!r} does not exist"
    if mode == "run" and user_cwd and (Path(user_cwd) / path).exists():
        return (f"{where}; it exists in the sweep's directory {user_cwd}: run with --cwd shared (the default), "
                "or give the path as an argument (it is then made absolute)")
    if mode == "run":
        return f"{where} (--cwd run gives every run a directory of its own; --cwd shared runs in {user_cwd})"
    return (f"{where} (the directory the sweep was started in; start it where the path resolves, or give an "
            "absolute path)")


def run_failure(run_dir: Path, manifest: dict) -> dict:
    """A not-ok run's ``cause`` (the failing rank's exception line), ``cause_rank``, ``log``
    (its path) and, for a missing relative path, ``hint`` (where the run executed and how to
    change it)."""
    found = failure_cause(run_dir)
    wd = manifest.get("working_dir") if isinstance(manifest.get("working_dir"), dict) else {}
    cfg = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    # a run that died before init wrote no working_dir: the launcher finalizes it from the
    # sweep's directory (local runs; a SLURM job's finalize step goes back there too)
    user_cwd = wd.get("user_cwd") or os.getcwd()
    mode = wd.get("mode") or cfg.get("cwd")
    ran_in = wd.get("path") or (str(Path(run_dir).absolute() / "work") if mode == "run" else user_cwd)
    hint = relative_path_hint(found["cause"], ran_in=ran_in, user_cwd=user_cwd, mode=mode)
    out = {"cause": found["cause"], "cause_rank": found["rank"], "log": found["log"]}
    if hint:
        out["hint"] = hint
    return out


def finished_before_exit(run_dir: Path, manifest: dict) -> bool:
    """Did the training finish (rank 0's ``finish()`` wrote status ok and every rank closed
    its trace with status ok) before the process tree exited non-zero?"""
    if manifest.get("status") != "ok" or not manifest.get("end_time"):
        return False
    world = manifest.get("world_size")
    if not isinstance(world, int) or world < 1:
        return False
    # the interpreter's exit handlers close an untrained run "ok" too (a script whose framework
    # caught the exception and exited 1): it must have trained and reached its own end
    end = manifest.get("end")
    if not isinstance(end, dict) or not (end.get("by") == "script" or end.get("last_epoch_reached") is True):
        return False
    if not all(_rank_steps(run_dir, rank) > 0 for rank in range(world)):
        return False
    # a rank stopped by SIGTERM closes "killed"; one that died leaves its trace open
    return all(closed_status(trace_path(run_dir, rank)) == "ok" for rank in range(world))


def _rank_steps(run_dir: Path, rank: int) -> int:
    """The steps a rank's ``epochs.jsonl`` records (0 when it has none or cannot be read)."""
    return sum(k for line in _epoch_lines(Path(run_dir), rank)
               if isinstance(k := line.get("steps"), int) and not isinstance(k, bool) and k > 0)


def counted_global_batch(run_dir: Path, world: object) -> int | None:
    """The samples one step processed over all ranks, from every rank's ``epochs.jsonl``
    where each counted its samples (``samples_source: counted``): per rank the largest
    samples / steps over its epochs that divides evenly (every step full), summed over the
    ranks; ``None`` when a rank counted nothing."""
    if not isinstance(world, int) or world < 1:
        return None
    total = 0
    for rank in range(world):
        best = None
        for line in _epoch_lines(Path(run_dir), rank):
            s, k = line.get("samples"), line.get("steps")
            if line.get("samples_source") == "counted" and isinstance(s, int) and isinstance(k, int) and k > 0 \
                    and s % k == 0:
                best = max(best or 0, s // k)
        if best is None:
            return None
        total += best
    return total


def _epoch_lines(run_dir: Path, rank: int) -> list[dict]:
    out = []
    with contextlib.suppress(OSError):
        for line in (run_dir / f"rank-{rank:05d}.epochs.jsonl").read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                obj = json.loads(line)
                if isinstance(obj, dict):
                    out.append(obj)
    return out
