"""CPU threads of a rank: set from the sweep's request, and read back as they really are.

``scalescope sweep`` exports ``OMP_NUM_THREADS`` and ``SCALESCOPE_THREADS`` (the cores per
rank, or ``--threads N``) for every launcher and the baseline. torch takes
``OMP_NUM_THREADS`` at start-up; :func:`apply_from_env`, called by
:func:`instrumentation.init`, sets torch's intra-op threads to ``SCALESCOPE_THREADS`` where it
did not, and leaves a script's own choice alone. :func:`thread_info` is what each rank records
in ``run.json`` (``ranks[i].threads``, ``docs/run-directory.md``), for any script.

Never imports torch itself and never raises.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from instrumentation._env import warn_once

__all__ = ["THREAD_KEYS", "apply_from_env", "merge_into", "merge_rank_files", "per_rank", "requested_threads",
           "thread_info", "threads_path"]

#: The keys of ``ranks[i].threads`` in ``run.json``.
THREAD_KEYS = ("torch_intra_op", "torch_inter_op", "omp_num_threads", "mkl_num_threads", "cpus_available",
               "host_cpus")


def requested_threads() -> int | None:
    """``$SCALESCOPE_THREADS`` as a positive int, ``None`` when unset or not one (warned)."""
    raw = os.environ.get("SCALESCOPE_THREADS")
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        warn_once("threads-env", f"SCALESCOPE_THREADS={raw!r} is not a positive integer; threads left as they are")
        return None
    return n


def apply_from_env() -> int | None:
    """Make torch's intra-op threads ``$SCALESCOPE_THREADS`` where torch did not take the
    sweep's ``OMP_NUM_THREADS`` at start-up; a script that chose its own threads keeps them.

    torch starts with ``OMP_NUM_THREADS`` threads. So when that variable already says
    ``$SCALESCOPE_THREADS`` and torch runs another number, the script set it
    (``torch.set_num_threads`` before ``init``): its choice stands, and is recorded. When
    the variable says something else (changed after the sweep set it, or unset), torch is
    set here. Returns the number torch runs with afterwards (``None`` without torch or
    without a request). Never raises."""
    n = requested_threads()
    torch = sys.modules.get("torch")
    if n is None or torch is None:
        return None
    try:
        current = int(torch.get_num_threads())
        if current == n or os.environ.get("OMP_NUM_THREADS") == str(n):
            return current
        torch.set_num_threads(n)
        return n
    except Exception as exc:
        warn_once("threads-set", f"cannot set torch's threads to {n} ({exc!r}); they stay as they are")
        return None


def _int(fn) -> int | None:
    try:
        return int(fn())
    except Exception:
        return None


def thread_info() -> dict:
    """What this process runs with: torch's intra-op and inter-op threads (``None`` when the
    script did not import torch), ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` as set (strings
    or ``None``), the CPUs this process may run on (``len(os.sched_getaffinity(0))``) and the
    host's CPUs (``os.cpu_count()``)."""
    torch = sys.modules.get("torch")
    info: dict[str, object] = {
        "torch_intra_op": None if torch is None else _int(torch.get_num_threads),
        "torch_inter_op": None if torch is None else _int(torch.get_num_interop_threads),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "mkl_num_threads": os.environ.get("MKL_NUM_THREADS"),
        "cpus_available": _int(lambda: len(os.sched_getaffinity(0))),
        "host_cpus": _int(os.cpu_count),
    }
    return info


def per_rank(ranks: list[dict]) -> tuple[int | None, str | None]:
    """``run.json`` ``threads_per_rank`` for a script that gave none, and where it comes from:
    the largest ``torch_intra_op`` of the ranks (``"ranks"``), else ``$SCALESCOPE_THREADS`` or
    ``OMP_NUM_THREADS`` (``"env"``), else ``(None, None)``."""
    intra = [(r.get("threads") or {}).get("torch_intra_op") for r in ranks if isinstance(r, dict)]
    intra = [n for n in intra if isinstance(n, int)]
    if intra:
        return max(intra), "ranks"
    for name in ("SCALESCOPE_THREADS", "OMP_NUM_THREADS"):
        try:
            n = int(os.environ.get(name, ""))
        except ValueError:
            continue
        if n > 0:
            return n, "env"
    return None, None


def threads_path(run_dir: str | os.PathLike[str], rank: int) -> Path:
    """``rank-NNNNN.threads.json``: a rank's threads when they changed after ``init``."""
    return Path(run_dir) / f"rank-{rank:05d}.threads.json"


def merge_into(manifest: dict, threads: dict[int, dict]) -> bool:
    """Put ``{rank: threads}`` into ``manifest["ranks"][i]["threads"]`` (each marked
    ``"changed_after_init": true``) and recompute a derived ``threads_per_rank``; returns
    whether anything changed."""
    changed = False
    for r in manifest.get("ranks") or []:
        if isinstance(r, dict) and r.get("rank") in threads and r.get("threads") != threads[r["rank"]]:
            r["threads"] = dict(threads[r["rank"]])
            r["threads_changed_after_init"] = True
            changed = True
    if changed and manifest.get("threads_per_rank_source") in ("ranks", "env", None):
        n, source = per_rank(manifest.get("ranks") or [])
        if n is not None:
            manifest["threads_per_rank"], manifest["threads_per_rank_source"] = n, source
    return changed


def merge_rank_files(run_dir: str | os.PathLike[str], manifest: dict) -> bool:
    """Merge every ``rank-NNNNN.threads.json`` of ``run_dir`` into ``manifest`` (the sweep
    launcher, after the run); unreadable files are skipped. Returns whether it changed."""
    found: dict[int, dict] = {}
    for f in sorted(Path(run_dir).glob("rank-*.threads.json")):
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("threads"), dict):
                found[int(data["rank"])] = data["threads"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return merge_into(manifest, found) if found else False
