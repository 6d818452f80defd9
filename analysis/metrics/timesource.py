"""Where a breakdown's time comes from: the host's clock, or the device's timeline.

Every row of :func:`~analysis.metrics.breakdown.time_breakdown`, the step table, "Why not
ideal?" and :func:`~analysis.metrics.gap.explain_loss` carries ``source``:

* ``host``: the phases as the host timed them (``perf_counter`` around each phase). On a
  CPU this is the whole truth. On a GPU the host blocks only at a few points, and the phase
  holding such a point absorbs the device's backlog (``docs/metrics.md``, "Device time").
* ``events``: the phases on the device's timeline, from the CUDA events the
  instrumentation records at every phase boundary (``instrumentation.device``; rows of kind
  ``device_phase``). The host's ``data`` phases explain only the time the device sat idle
  waiting for the host: the part of a host ``data`` phase during which no device phase ran.
* ``kernels``: from kernel-level traces of every rank (Kineto, nsys);
  :func:`analysis.metrics.collectives.kernel_step_parts`.

:func:`timed_view` rewrites an event frame so that the breakdown's one algorithm runs on
either: for a run timed by events, its device spans become the ``phase`` (and in-flight
``comm``) rows and its host phases leave, except ``data``, cut to the device's idle time.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from analysis.errors import ScalescopeError
from analysis.metrics import _intervals as iv
from analysis.metrics._common import end_ns, plain

#: The values of ``source``.
SOURCES: tuple[str, ...] = ("host", "events", "kernels")
#: Words for the sources in tables and sentences.
SOURCE_LABELS: dict[str, str] = {
    "host": "host time (phases timed on the CPU)",
    "events": "device time (CUDA events at the phase boundaries)",
    "kernels": "device time (kernel traces of every rank)",
    "mixed": "mixed: some runs host time, some device time",
}
#: Device phases that keep the device busy (the host's ``data`` is cut to the rest).
_BUSY = ("forward", "backward", "sync", "optimizer")
#: ``cat`` the device's in-flight allreduce takes in the view (an in-flight record).
_IN_FLIGHT_CAT = "hvd_hook"

Source = Literal["auto", "host", "events"]


def run_sources(events: pd.DataFrame, source: Source = "auto") -> dict[object, str]:
    """Per ``run_id``: ``"events"`` when the run has device ``step`` spans and ``source`` is
    ``"auto"`` or ``"events"``, else ``"host"``.

    ``source="events"`` on a run without device spans raises: the caller asked for device
    time that was not recorded.
    """
    if source not in ("auto", "host", "events"):
        raise ScalescopeError(f"source must be 'auto', 'host' or 'events', not {source!r}")
    runs = plain(events["run_id"]).unique() if len(events) else []
    if source == "host" or not len(events):
        return dict.fromkeys(runs, "host")
    kind = plain(events["kind"])
    dev = events[(kind == "device_phase") & (plain(events["name"]) == "step")]
    timed = set(plain(dev["run_id"]).unique())
    if source == "events" and timed != set(runs):
        missing = sorted(str(r) for r in set(runs) - timed)
        raise ScalescopeError(f"source='events' but run(s) {', '.join(missing[:5])} have no device-timed steps "
                              "(CUDA events are recorded only on runs that used a GPU)")
    return {r: ("events" if r in timed else "host") for r in runs}


def timed_view(events: pd.DataFrame, sources: dict[object, str]) -> pd.DataFrame:
    """The event frame the breakdown reads: runs whose source is ``events`` on the device's
    timeline (module docstring), the others unchanged (a host-only frame is returned as it
    is, the same object)."""
    device_runs = [r for r, s in sources.items() if s == "events"]
    if not device_runs:
        return events
    run = plain(events["run_id"])
    on_device = run.isin(device_runs).to_numpy()
    kind, cat = plain(events["kind"]), plain(events["cat"])
    # the device runs keep what is not a host phase or a host in-flight record
    host_timed = (kind == "phase") | ((kind == "comm") & cat.isin(["ddp_hook", "hvd_hook"])) \
        | (plain(events["source"]) == "horovod")
    keep = events[~on_device | ~(host_timed | (kind == "device_phase")).to_numpy()]
    parts = [keep]
    dev = events[on_device & (kind == "device_phase").to_numpy()]
    if len(dev):
        dcat = plain(dev["cat"])
        parts.append(_as(dev[dcat != "device_comm"], kind="phase", cat="phase"))
        parts.append(_as(dev[dcat == "device_comm"], kind="comm", cat=_IN_FLIGHT_CAT))
    data = events[on_device & ((kind == "phase") & (plain(events["name"]) == "data")).to_numpy()]
    if len(data):
        parts.append(_idle_data(data, dev))
    out = pd.concat([p for p in parts if len(p)], ignore_index=True)
    for col in events.columns:
        if isinstance(events[col].dtype, pd.CategoricalDtype):
            out[col] = out[col].astype(object).astype("category")
    order = np.lexsort((-out["dur_ns"].to_numpy(np.int64), out["start_ns"].to_numpy(np.int64)))
    return out.iloc[order].reset_index(drop=True)


def _as(rows: pd.DataFrame, *, kind: str, cat: str) -> pd.DataFrame:
    return rows.assign(kind=kind, cat=cat, run_id=plain(rows["run_id"]))


def _idle_data(data: pd.DataFrame, dev: pd.DataFrame) -> pd.DataFrame:
    """The host's ``data`` phases of each rank cut to the time no device phase ran: rows
    named ``data`` (no step number: the device's step windows decide the step)."""
    rows = []
    busy_dev = dev[plain(dev["name"]).isin(list(_BUSY)) & (plain(dev["cat"]) == "device")]
    busy_of = {k: g for k, g in busy_dev.groupby([plain(busy_dev["run_id"]), "rank"], dropna=False,
                                                  sort=False, observed=True)}
    for (run_id, rank), g in data.groupby([plain(data["run_id"]), "rank"], dropna=False, sort=False,
                                          observed=True):
        b = busy_of.get((run_id, rank))
        busy = iv.EMPTY if b is None else iv.union(b["start_ns"].to_numpy(np.int64), end_ns(b))
        s, e = iv.subtract(iv.union(g["start_ns"].to_numpy(np.int64), end_ns(g)), busy)
        if not len(s):
            continue
        first = g.iloc[[0] * len(s)].reset_index(drop=True)
        rows.append(first.assign(run_id=run_id, start_ns=s, dur_ns=e - s, step=pd.NA, epoch=pd.NA,
                                 cat="device_idle"))
    return pd.concat(rows, ignore_index=True) if rows else data.iloc[0:0]
