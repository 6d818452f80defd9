"""The per-step parts of :func:`analysis.metrics.breakdown.time_breakdown` on arrays (private).

Every rank's phases, in-flight records and step windows are slices of the whole frames'
arrays, found with one grouping of their (``run_id``, ``rank``) keys, so the cost of a
rank is a few NumPy calls, not a DataFrame selection per rank and component.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pandas as pd

from analysis.metrics import _intervals as iv
from analysis.metrics._common import end_ns

#: Step components in priority order: an instant covered by several phases counts for the
#: first one listed. An explicit ``sync`` phase is a wait for gradient synchronisation, so
#: it beats the phase it is nested in: DDP's wait inside ``loss.backward()`` (recorded by
#: the comm hook) and Horovod's ``synchronize()`` inside ``optimizer.step()``.
COMPONENTS: tuple[str, ...] = ("data", "forward", "sync", "backward", "optimizer")
#: Output column names of the components (the sync part is the exposed one).
COMPONENT_COLUMNS: dict[str, str] = {
    "data": "data_s",
    "forward": "forward_s",
    "backward": "backward_s",
    "sync": "sync_exposed_s",
    "optimizer": "optimizer_s",
}


def key_codes(*frames: pd.DataFrame) -> np.ndarray | list[np.ndarray]:
    """Per row of each frame, the number of its (``run_id``, ``rank``) in the sorted order
    of the keys of all frames (missing ranks last), as ``groupby(..., sort=True,
    dropna=False)`` numbers its groups: one grouping instead of a frame per rank."""
    keys = pd.concat([f[["run_id", "rank"]].astype({"rank": "Int64"}) for f in frames], ignore_index=True)
    codes = keys.groupby(["run_id", "rank"], sort=True, dropna=False, observed=True).ngroup().to_numpy(np.int64)
    if len(frames) == 1:
        return codes
    return np.split(codes, np.cumsum([len(f) for f in frames])[:-1])


def ns_column(col: str) -> str:
    return col[:-2] + "_ns"


def covered_in_windows(ivs: iv.Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Length (ns) of a disjoint interval set inside each window ``[starts[i], ends[i])``."""
    s, e = ivs
    if s.size == 0:
        return np.zeros(len(starts), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(e - s)])

    def covered_before(t: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(s, t, side="right") - 1  # last interval starting at or before t
        full = cum[np.maximum(idx, 0)]
        part = np.where(idx >= 0, np.minimum(t, e[np.maximum(idx, 0)]) - s[np.maximum(idx, 0)], 0)
        return np.where(idx >= 0, full + part, 0)

    return covered_before(np.asarray(ends, np.int64)) - covered_before(np.asarray(starts, np.int64))


def component_codes(ph: pd.DataFrame) -> np.ndarray:
    """Per phase row, the position of its name in :data:`COMPONENTS` (-1: none)."""
    return pd.Index(COMPONENTS).get_indexer(ph["name"].to_numpy(object))


def component_sets(comp: np.ndarray, s: np.ndarray, e: np.ndarray) -> list[iv.Intervals]:
    """The union of each component's phases (``comp``: :func:`component_codes`)."""
    if comp.size == 0:
        return [iv.EMPTY] * len(COMPONENTS)
    o = np.argsort(comp, kind="stable")
    bounds = np.searchsorted(comp[o], np.arange(len(COMPONENTS) + 1))
    return [iv.union(s[o[lo:hi]], e[o[lo:hi]]) for lo, hi in pairwise(bounds)]


def owned_sets(comp: np.ndarray, s: np.ndarray, e: np.ndarray, comm_s: np.ndarray, comm_e: np.ndarray,
           sets: list[iv.Intervals] | None = None) -> dict[str, iv.Intervals]:
    """:func:`_exclusive_sets` on arrays: a rank's phases (component codes, starts, ends)
    and its in-flight records (starts, ends); ``sets``: the components' unions, when known."""
    sets = dict(zip(COMPONENTS, sets if sets is not None else component_sets(comp, s, e), strict=True))
    if not len(sets["sync"][0]) and comm_s.size:
        # Traces without a recorded wait (older DDP traces): the in-flight records that no
        # compute phase covers are the exposed part.
        busy = iv.union_of(*(sets[c] for c in COMPONENTS if c != "sync"))
        sets["sync"] = iv.subtract(iv.union(comm_s, comm_e), busy)
    owned: dict[str, iv.Intervals] = {}
    taken = iv.EMPTY
    for comp_name in COMPONENTS:
        owned[comp_name] = iv.subtract(sets[comp_name], taken)
        taken = iv.union_of(taken, sets[comp_name])
    return owned


def in_flight(sync_phases: iv.Intervals, comm: iv.Intervals, timeline: pd.DataFrame | None) -> iv.Intervals:
    """``sync_total``'s intervals of one rank: its in-flight records (starts, ends) together
    with its sync waits; the Horovod timeline only on the rank that wrote it when that rank
    has no in-flight records (one instrument on every rank where the recorder ran)."""
    parts = [sync_phases]
    if comm[0].size:
        parts.append(iv.union(*comm))
    elif timeline is not None and len(timeline):
        parts.append(iv.union(timeline["start_ns"].to_numpy(np.int64), end_ns(timeline)))
    return iv.union_of(*parts)


def grouped(group: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, bounds)``: rows in group order (stable), group g at
    ``order[bounds[g]:bounds[g + 1]]``."""
    order = np.argsort(group, kind="stable")
    return order, np.searchsorted(group[order], np.arange(n_groups + 1))


def per_step_ns(windows: pd.DataFrame, ph: pd.DataFrame, comm: pd.DataFrame,
                 timelines: dict[object, pd.DataFrame], timeline_rank: int | None) -> pd.DataFrame:
    """One row per step window, ranks in (run_id, rank) order: ``step_ns``, each
    component's owned time (``*_ns``) and ``sync_total_ns``, from each rank's phases
    ``ph``, in-flight records ``comm`` and, on ``timeline_rank``, its run's Horovod
    timeline rows ``timelines``; a rank's arrays are slices of the whole frames'."""
    gw, gp, gc = key_codes(windows, ph, comm)
    n = int(max(gw.max(initial=-1), gp.max(initial=-1), gc.max(initial=-1))) + 1
    (wo, wb), (po, pb), (co, cb) = grouped(gw, n), grouped(gp, n), grouped(gc, n)
    ws, we = windows["step_start_ns"].to_numpy(np.int64)[wo], windows["step_end_ns"].to_numpy(np.int64)[wo]
    comp, ps, pe = component_codes(ph), ph["start_ns"].to_numpy(np.int64), end_ns(ph)
    cs, ce = comm["start_ns"].to_numpy(np.int64), end_ns(comm)
    run_ids, ranks = windows["run_id"].to_numpy(object)[wo], windows["rank"].array[wo]
    cols = {col: np.zeros(len(wo), dtype=np.int64)
            for col in (*(ns_column(COMPONENT_COLUMNS[c]) for c in COMPONENTS), "sync_total_ns")}
    for g in np.flatnonzero(np.diff(wb)).tolist():
        lo, hi = int(wb[g]), int(wb[g + 1])
        p, c = po[pb[g]:pb[g + 1]], co[cb[g]:cb[g + 1]]
        rank = ranks[lo]
        tl = timelines.get(run_ids[lo]) if rank is not pd.NA and rank == timeline_rank else None
        sets = component_sets(comp[p], ps[p], pe[p])
        owned = owned_sets(comp[p], ps[p], pe[p], cs[c], ce[c], sets)
        a, b = ws[lo:hi], we[lo:hi]
        for name in COMPONENTS:
            cols[ns_column(COMPONENT_COLUMNS[name])][lo:hi] = covered_in_windows(owned[name], a, b)
        waits = sets[COMPONENTS.index("sync")]
        flight = in_flight(iv.union_of(waits, owned["sync"]), (cs[c], ce[c]), tl)
        cols["sync_total_ns"][lo:hi] = covered_in_windows(flight, a, b)
    return pd.DataFrame({"run_id": run_ids, "rank": ranks, "epoch": windows["epoch"].array[wo],
                         "step": windows["step"].array[wo], "step_ns": we - ws, **cols})
