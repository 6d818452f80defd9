"""Horovod timeline capture into the run directory.

Two ways, both writing ``<run_dir>/horovod_timeline.json`` (only Horovod's coordinator,
rank 0, writes the file; ``shared/FORMATS.md`` §1):

* the launcher sets ``HOROVOD_TIMELINE=<run_dir>/horovod_timeline.json`` (what
  ``scalescope sweep`` does): Horovod records from ``hvd.init()`` to shutdown; we only
  note the path;
* ``HOROVOD_TIMELINE=DYNAMIC``: :func:`start` calls ``hvd.start_timeline(path,
  mark_cycles=...)`` on every rank (Horovod ignores the path on non-coordinators but needs
  the mark-cycles setting everywhere) and :func:`stop` calls ``hvd.stop_timeline()``.

With ``HOROVOD_TIMELINE`` unset Horovod cannot start a timeline after ``hvd.init()``
(``start_timeline`` raises ``ValueError``), so nothing is recorded and ``run.json`` says why.
"""

from __future__ import annotations

import os
from pathlib import Path

from instrumentation._env import warn_once

__all__ = ["FILE_NAME", "start", "stop"]

FILE_NAME = "horovod_timeline.json"


def _mark_cycles() -> bool:
    return os.environ.get("HOROVOD_TIMELINE_MARK_CYCLES", "").strip().lower() in ("1", "true", "yes")


def start(hvd: object, run_dir: Path, *, enabled: bool = True) -> dict:
    """Start (or note) the Horovod timeline; return the ``run.json`` ``horovod_timeline`` entry.

    The entry is ``{"path": ..., "mode": "launcher"|"dynamic"|None, "mark_cycles": bool,
    "started_by_scalescope": bool, "reason": str|None}``; ``path`` is relative to the run
    directory when the file lies inside it.
    """
    env = os.environ.get("HOROVOD_TIMELINE", "")
    info: dict[str, object] = {"path": None, "mode": None, "mark_cycles": _mark_cycles(),
                               "started_by_scalescope": False, "reason": None}
    if not env:
        info["reason"] = ("HOROVOD_TIMELINE not set: set it to a file or to DYNAMIC before "
                          "hvd.init() to record a timeline")
        return info
    if env != "DYNAMIC":
        p = Path(env).resolve()
        try:
            info["path"] = str(p.relative_to(run_dir.resolve()))
        except ValueError:
            info["path"] = str(p)
        info["mode"] = "launcher"
        return info
    info["mode"] = "dynamic"
    if not enabled:
        info["reason"] = "init(horovod_timeline=False)"
        return info
    path = run_dir / FILE_NAME
    try:
        hvd.start_timeline(str(path), mark_cycles=bool(info["mark_cycles"]))  # type: ignore[attr-defined]
    except Exception as exc:
        warn_once("hvd-timeline-start", f"hvd.start_timeline failed: {exc!r}")
        info["reason"] = f"hvd.start_timeline failed: {exc}"
        return info
    info["path"] = FILE_NAME
    info["started_by_scalescope"] = True
    return info


def stop(hvd: object, info: dict | None) -> None:
    """Stop a timeline :func:`start` started (a no-op otherwise); never raises."""
    if not info or not info.get("started_by_scalescope"):
        return
    try:
        hvd.stop_timeline()  # type: ignore[attr-defined]
    except Exception as exc:
        warn_once("hvd-timeline-stop", f"hvd.stop_timeline failed: {exc!r}")
