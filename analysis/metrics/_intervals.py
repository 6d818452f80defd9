"""Interval arithmetic on half-open ``[start, end)`` integer intervals (ns).

Every time share in :mod:`analysis.metrics` is measured on unions of intervals, never by
adding durations that may overlap. An interval set is a pair of sorted, disjoint int64
arrays ``(starts, ends)``.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

EMPTY: Intervals = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def union(starts: object, ends: object) -> Intervals:
    """Merge possibly overlapping intervals into sorted, disjoint ones (touching ones join)."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return EMPTY
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # a new block starts where an interval begins after everything before it has ended
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = np.append(run_end[idx[1:] - 1], run_end[-1])
    return out_s, out_e


def length(iv: Intervals) -> int:
    """Total covered length of a disjoint interval set."""
    return int((iv[1] - iv[0]).sum())


def union_length(starts: object, ends: object) -> int:
    """Length of the union of possibly overlapping intervals."""
    return length(union(starts, ends))


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two disjoint interval sets."""
    if a[0].size == 0 or b[0].size == 0:
        return EMPTY
    # sweep over all boundaries; covered by both where the depth reaches 2
    pts = np.concatenate([a[0], a[1], b[0], b[1]])
    delta = np.concatenate(
        [np.ones(a[0].size), -np.ones(a[1].size), np.ones(b[0].size), -np.ones(b[1].size)]
    ).astype(np.int64)
    order = np.lexsort((delta, pts))  # ends (-1) before starts (+1) at equal points
    pts, delta = pts[order], delta[order]
    depth = np.cumsum(delta)
    starts = pts[:-1][depth[:-1] == 2]
    ends = pts[1:][depth[:-1] == 2]
    return union(starts, ends)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Parts of ``a`` not covered by ``b``."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    lo = min(int(a[0][0]), int(b[0][0]))
    hi = max(int(a[1][-1]), int(b[1][-1]))
    # complement of b within [lo, hi], intersected with a
    cs = np.concatenate([[lo], b[1]])
    ce = np.concatenate([b[0], [hi]])
    return intersect(a, union(cs, ce))


def clip(a: Intervals, lo: int, hi: int) -> Intervals:
    """Restrict an interval set to ``[lo, hi)``."""
    s = np.clip(a[0], lo, hi)
    e = np.clip(a[1], lo, hi)
    keep = e > s
    return s[keep], e[keep]


def union_of(*sets: Intervals) -> Intervals:
    """Union of several disjoint interval sets."""
    return union(np.concatenate([s[0] for s in sets]), np.concatenate([s[1] for s in sets]))
