"""Small helpers shared by test modules (importable because pyproject sets pytest's
``pythonpath = ["tests"]``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any


def _horovod_missing() -> str | None:
    proc = subprocess.run([sys.executable, "-c", "import horovod.torch"], capture_output=True, text=True)
    return None if proc.returncode == 0 else f"import horovod.torch fails: {proc.stderr.strip().splitlines()[-1:]}"


#: Why Horovod cannot be used here, or None when it can.
HVD_MISSING = _horovod_missing()
#: The backends a real sweep in the tests runs on this machine.
REAL_BACKENDS = ["ddp-gloo"] + ([] if HVD_MISSING else ["horovod-gloo", "horovod-mpi"])


def interleave(streams: list[list[dict]], rng: Any, *,
               marker: Callable[[], dict | None] | None = None) -> list[dict]:
    """The records of ``streams`` (one list per Horovod tensor, in its own order) merged as
    a timeline writes them: the next record from a stream picked at random by ``rng`` (a
    NumPy Generator), each stream's order kept. After each record, ``marker()`` may return
    a record to insert (a cycle marker, say), or None."""
    out: list[dict] = []
    pos = [0] * len(streams)
    while any(p < len(s) for p, s in zip(pos, streams, strict=True)):
        live = [i for i, s in enumerate(streams) if pos[i] < len(s)]
        i = live[int(rng.integers(len(live)))]
        out.append(streams[i][pos[i]])
        pos[i] += 1
        if marker is not None and (extra := marker()) is not None:
            out.append(extra)
    return out
