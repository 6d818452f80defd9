"""Runs that share a working directory (``--cwd shared``, the default): what one run writes
there and the next reads.

The sweep launcher takes a :func:`snapshot` of the directory before and after each run;
the files the run created or changed (:func:`changed`) go into its ``experiment.json``
entry as ``wrote_shared``. Before the next run it writes the files earlier runs wrote,
and which run wrote each, to ``<run>/.shared_written.json`` and names that file in
``$SCALESCOPE_SHARED_WRITTEN``; ``instrumentation.init`` then watches, with a Python audit
hook (:func:`watch_reads`), for the process opening one of them for reading before it
wrote it itself, and records each such read in ``rank-NNNNN.shared_reads.json``. The
launcher merges those into ``run.json`` and the entry (``shared_reads``) and warns.

Standard library only: this runs on login nodes and inside every training process.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from pathlib import Path

from instrumentation.manifest import replacing

__all__ = ["MAX_ENTRIES", "changed", "collect_reads", "reads_path", "snapshot", "watch_reads", "written_by_earlier"]

#: At most this many directory entries are looked at per snapshot (a huge data tree is
#: not walked twice per run).
MAX_ENTRIES = 20000
_SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".ipynb_checkpoints", ".mypy_cache",
              ".pytest_cache", ".ruff_cache", ".tox"}
ENV = "SCALESCOPE_SHARED_WRITTEN"


def snapshot(root: str | os.PathLike[str], *, skip: tuple[str | os.PathLike[str], ...] = ()) -> dict[str, tuple]:
    """``{path relative to root: (mtime_ns, size)}`` of the regular files below ``root``,
    leaving out ``skip`` (the experiment directory), version-control and cache folders and
    virtual environments; at most :data:`MAX_ENTRIES` entries."""
    root = Path(root).absolute()
    skipped = {str(Path(s).absolute()) for s in skip}
    out: dict[str, tuple] = {}
    stack = [root]
    seen = 0
    while stack and seen < MAX_ENTRIES:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for e in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                break
            with contextlib.suppress(OSError):
                if e.is_dir(follow_symlinks=False):
                    if e.name not in _SKIP_DIRS and e.path not in skipped and not os.path.exists(
                            os.path.join(e.path, "pyvenv.cfg")):
                        stack.append(Path(e.path))
                elif e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    out[os.path.relpath(e.path, root)] = (st.st_mtime_ns, st.st_size)
    return out


def changed(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """The files of ``after`` that are new or whose time or size changed since ``before``."""
    return sorted(k for k, v in after.items() if before.get(k) != v)


def written_by_earlier(root: str | os.PathLike[str], entries: list[dict]) -> dict[str, str]:
    """``{absolute path: run id}`` of the files earlier runs (``entries``, in order; each
    ``wrote_shared`` relative to ``root``) wrote into ``root`` that still exist; the last
    writer wins."""
    out: dict[str, str] = {}
    for e in entries:
        for rel in e.get("wrote_shared") or []:
            path = os.path.join(os.path.abspath(root), str(rel))
            if os.path.isfile(path):
                out[path] = str(e.get("run_id"))
    return out


def reads_path(run_dir: str | os.PathLike[str], rank: int) -> Path:
    return Path(run_dir) / f"rank-{int(rank):05d}.shared_reads.json"


_state: dict = {}
_state_lock = threading.Lock()


def watch_reads(run_dir: str | os.PathLike[str], rank: int) -> bool:
    """Watch this process for reads of the files earlier runs wrote (``$SCALESCOPE_SHARED_WRITTEN``);
    ``True`` when a watch was installed. Each first read is written at once to
    :func:`reads_path` (a rank may die later). A file this process opens for writing first
    is its own from then on. Never raises."""
    listing = os.environ.get(ENV)
    if not listing or _state:
        return False
    try:
        tracked = json.loads(Path(listing).read_text(encoding="utf-8"))
        if not isinstance(tracked, dict) or not tracked:
            return False
        _state.update(tracked={str(k): str(v) for k, v in tracked.items()}, reads=[],
                      out=reads_path(run_dir, rank), rank=int(rank), pid=os.getpid())
        sys.addaudithook(_audit)
        return True
    except Exception:
        return False


def _audit(event: str, args: tuple) -> None:
    if event != "open" or not _state or os.getpid() != _state["pid"]:
        return
    try:
        path, mode, flags = args
        if isinstance(path, int):
            return
        full = os.path.abspath(os.fsdecode(path))
        tracked = _state["tracked"]
        if full not in tracked:
            return
        writes = (mode is not None and any(c in str(mode) for c in "wax+")) or (
            mode is None and flags & (os.O_WRONLY | os.O_RDWR))
        with _state_lock:
            writer = tracked.pop(full)
            if writes:
                return  # the run re-creates the file: what it reads later is its own
            _state["reads"].append({"path": full, "written_by": writer, "rank": _state["rank"]})
            with replacing(_state["out"]) as tmp:
                tmp.write_text(json.dumps(_state["reads"]), encoding="utf-8")
    except Exception:
        pass


def collect_reads(run_dir: str | os.PathLike[str]) -> list[dict]:
    """Every rank's recorded reads of files earlier runs wrote (unreadable files left out),
    one per path."""
    seen: dict[str, dict] = {}
    for f in sorted(Path(run_dir).glob("rank-*.shared_reads.json")):
        with contextlib.suppress(OSError, ValueError):
            for r in json.loads(f.read_text(encoding="utf-8")):
                if isinstance(r, dict) and isinstance(r.get("path"), str):
                    seen.setdefault(r["path"], r)
    return list(seen.values())
