"""Clocks: the per-rank wall-clock anchor and the cross-rank offset estimate.

Every rank records one anchor, a pair ``(wall_ns, mono_ns)`` of ``time.time_ns()`` and
``time.perf_counter_ns()`` read back to back. Events are timed with the monotonic
``perf_counter_ns`` (cheap, never steps) and converted to the Unix epoch as
``wall_ns + (t - mono_ns)`` when they are written.

Ranks on different hosts have different wall clocks. :func:`estimate_offsets` puts them
on rank 0's clock: after a barrier every rank reads ``time.time_ns()`` and the values are
all-gathered; the offset of rank ``r`` is ``wall[0] - wall[r]``, i.e. what to *add* to a
rank-``r`` time. The estimate is the median over a few rounds; its error is the skew with
which ranks leave the barrier (tens of µs on one host, more across a network), reported
as ``spread_ns`` (max - min over rounds).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from statistics import median

__all__ = ["Anchor", "estimate_offsets", "fmt_us", "take_anchor"]


class Anchor:
    """A wall-clock / monotonic-clock pair taken back to back."""

    __slots__ = ("mono_ns", "wall_ns")

    def __init__(self, wall_ns: int, mono_ns: int):
        self.wall_ns = wall_ns
        self.mono_ns = mono_ns

    def as_dict(self) -> dict:
        return {"wall_ns": self.wall_ns, "mono_ns": self.mono_ns}


def take_anchor() -> Anchor:
    """Read both clocks; the pair with the smallest gap out of a few tries is kept."""
    best = None
    for _ in range(5):
        m0 = time.perf_counter_ns()
        w = time.time_ns()
        m1 = time.perf_counter_ns()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, w, (m0 + m1) // 2)
    assert best is not None
    return Anchor(best[1], best[2])


def fmt_us(ns: int) -> str:
    """Integer ns as a µs decimal string with exactly 3 decimals (exact, no float).

    >>> fmt_us(1_700_000_000_123_456_789)
    '1700000000123456.789'
    >>> fmt_us(5)
    '0.005'
    """
    if ns < 0:
        return "-" + fmt_us(-ns)
    return f"{ns // 1000}.{ns % 1000:03d}"


def estimate_offsets(
    barrier: Callable[[], object],
    allgather: Callable[[object], list],
    *,
    rounds: int = 5,
) -> dict:
    """Estimate each rank's wall-clock offset to rank 0.

    Parameters
    ----------
    barrier
        Blocks until every rank has arrived (``dist.barrier`` / ``hvd.barrier``).
    allgather
        Gathers one picklable object per rank into a list indexed by rank
        (``dist.all_gather_object`` / ``hvd.allgather_object``).
    rounds
        Number of barrier + read rounds; the median offset is kept.

    Returns
    -------
    dict
        ``{"reference_rank": 0, "method": "barrier-allgather", "rounds": n,
        "offsets_ns": {"1": ...}, "spread_ns": {"1": ...}}``; rank keys are strings
        (JSON object keys), rank 0 is omitted (its offset is 0 by definition).
    """
    samples: list[list[int]] = []
    for _ in range(rounds):
        barrier()
        samples.append([int(v) for v in allgather(time.time_ns())])
    n = len(samples[0])
    offsets, spread = {}, {}
    for r in range(1, n):
        diffs = [s[0] - s[r] for s in samples]
        offsets[str(r)] = int(median(diffs))
        spread[str(r)] = int(max(diffs) - min(diffs))
    return {
        "reference_rank": 0,
        "method": "barrier-allgather",
        "rounds": rounds,
        "offsets_ns": offsets,
        "spread_ns": spread,
    }
