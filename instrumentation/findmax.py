"""``scalescope sweep --find-max NAME=START``: the largest value of a script option that
still fits in memory.

Starting at ``START``, the value is doubled while runs end ``ok``; once one ends ``oom``
the interval between the largest ``ok`` and the smallest ``oom`` value is bisected until
it is narrower than ``max(1, largest_ok * rel_tol)``. Every try is an ordinary run of the
experiment (``--vary NAME=V``), so the analysis sees them all; the search itself is recorded
in ``experiment.json`` under ``find_max`` (format in ``docs/run-directory.md``). A try that
ends neither ``ok`` nor ``oom`` (failed, timeout) stops the search: it says nothing about
memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["MAX_TRIES", "SearchResult", "parse_find_max", "search"]

#: Runs one search may start at most (doublings and bisection together).
MAX_TRIES = 24


@dataclass
class SearchResult:
    """Outcome of one search: the tries in order and the bracket found."""

    name: str
    start: int
    tries: list[dict] = field(default_factory=list)
    largest_ok: int | None = None
    smallest_oom: int | None = None
    stopped: str | None = None  # why the search ended without a bracket, None when it found one

    def as_dict(self) -> dict:
        return {"name": self.name, "start": self.start, "largest_ok": self.largest_ok,
                "smallest_oom": self.smallest_oom, "stopped": self.stopped, "tries": self.tries}


def parse_find_max(text: str) -> tuple[str, int]:
    """``"curve-length=200"`` -> ``("curve-length", 200)``; ValueError otherwise."""
    name, sep, value = text.partition("=")
    name = name.strip().lstrip("-")
    try:
        start = int(value)
    except ValueError:
        start = 0
    if not sep or not name or start < 1:
        raise ValueError(f"--find-max {text!r}: expected NAME=START with START a positive integer")
    return name, start


def search(name: str, start: int, status_at: Callable[[int], tuple[str, str]], *, rel_tol: float = 1 / 16,
           max_tries: int = MAX_TRIES) -> SearchResult:
    """Double from ``start`` until ``oom``, then bisect.

    Parameters
    ----------
    status_at
        Runs the script with the option at a value; returns ``(status, run_id)``.
    rel_tol
        Stop bisecting when ``smallest_oom - largest_ok <= max(1, largest_ok * rel_tol)``.

    Examples
    --------
    >>> r = search("n", 3, lambda v: ("ok" if v <= 40 else "oom", f"r{v}"), rel_tol=0)
    >>> r.largest_ok, r.smallest_oom, [t["value"] for t in r.tries]
    (40, 41, [3, 6, 12, 24, 48, 36, 42, 39, 40, 41])
    """
    res = SearchResult(name, start)

    def tri(v: int) -> str | None:
        if len(res.tries) >= max_tries:
            res.stopped = f"gave up after {max_tries} runs"
            return None
        status, run_id = status_at(v)
        res.tries.append({"value": v, "status": status, "run_id": run_id})
        if status not in ("ok", "oom"):
            res.stopped = f"the run at {name}={v} ended {status!r}, not ok or oom"
            return None
        return status

    v = start
    while True:  # doubling (or halving when the start does not fit)
        st = tri(v)
        if st is None:
            return res
        if st == "ok":
            res.largest_ok = v
            if res.smallest_oom is not None:
                break
            v *= 2
        else:
            res.smallest_oom = v
            if res.largest_ok is not None:
                break
            if v == 1:
                res.stopped = f"{name}=1 already runs out of memory"
                return res
            v //= 2
    while res.smallest_oom - res.largest_ok > max(1, int(res.largest_ok * rel_tol)):
        mid = (res.largest_ok + res.smallest_oom) // 2
        st = tri(mid)
        if st is None:
            return res
        if st == "ok":
            res.largest_ok = mid
        else:
            res.smallest_oom = mid
    return res
