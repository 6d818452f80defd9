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


def one_source(values: object) -> str:
    """The one source of several rows or runs, ``mixed`` when they differ (``host`` for none)."""
    found = {str(v) for v in pd.Series(values, dtype=object).dropna()}
    return found.pop() if len(found) == 1 else ("mixed" if found else "host")


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


#: A host step end and a device step end closer than this are one instant (timer resolution
#: and the anchor's error).
_TOL_NS = 20_000


def between_steps(events: pd.DataFrame) -> pd.DataFrame:
    """Where the host waited for the device *between* steps: a synchronising call after
    ``step_end()`` (``loss.item()`` after ``optimizer.step()``, a logging ``.cpu()``).

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, rank) with device-timed steps: ``n_steps`` (steps followed by
        another), ``n_blocked`` (steps after which the host waited), ``blocked_frac``,
        ``blocked_wait_s`` (mean over those steps of the time the host waited: from its
        ``step_end()`` to the device's end of the step), ``host_step_s`` and
        ``device_step_s`` (means over all those steps).

    Notes
    -----
    Step k of a rank ends on the host at h_k (``step_end()``) and on the device at d_k (the
    stream reached the event recorded there); the host starts step k+1 at s_{k+1}. When the
    host left the step ahead of the device (h_k < d_k) and did not start the next one before
    the device had finished it (s_{k+1} >= d_k), the host blocked in between: the device's
    work of step k left the host's step window, so host step times understate the step
    (device steps hold it, ``docs/metrics.md``, "Device time"). 20 µs of tolerance.
    """
    kind, name = plain(events["kind"]), plain(events["name"])
    cols = ["run_id", "rank", "step", "start_ns", "dur_ns"]
    host = events.loc[(kind == "phase") & (name == "step"), cols]
    dev = events.loc[(kind == "device_phase") & (name == "step"), cols]
    out_cols = ["run_id", "rank", "n_steps", "n_blocked", "blocked_frac", "blocked_wait_s", "host_step_s",
                "device_step_s"]
    if host.empty or dev.empty:
        return pd.DataFrame(columns=out_cols)
    key = ["run_id", "rank", "step"]
    host = host.assign(run_id=plain(host["run_id"]), h_end=end_ns(host)).astype({"rank": object, "step": object})
    dev = dev.assign(run_id=plain(dev["run_id"]), d_end=end_ns(dev)).astype({"rank": object, "step": object})
    m = host.merge(dev[[*key, "d_end", "dur_ns"]], on=key, suffixes=("", "_dev")).sort_values(["run_id", "rank",
                                                                                              "start_ns"])
    m["next_start"] = m.groupby(["run_id", "rank"], sort=False)["start_ns"].shift(-1)
    m = m.dropna(subset=["next_start"])
    if m.empty:
        return pd.DataFrame(columns=out_cols)
    ahead = m["h_end"] < m["d_end"] - _TOL_NS
    m["blocked"] = ahead & (m["next_start"].astype(np.int64) >= m["d_end"] - _TOL_NS)
    m["wait_ns"] = np.where(m["blocked"], m["d_end"] - m["h_end"], np.nan)
    g = m.groupby(["run_id", "rank"], sort=True)
    out = g.agg(n_steps=("step", "size"), n_blocked=("blocked", "sum"), blocked_wait_s=("wait_ns", "mean"),
                host_step_s=("dur_ns", "mean"), device_step_s=("dur_ns_dev", "mean")).reset_index()
    out["blocked_frac"] = out["n_blocked"] / out["n_steps"]
    for c in ("blocked_wait_s", "host_step_s", "device_step_s"):
        out[c] = out[c] / 1e9
    return out[out_cols]


def explain_source(loss: pd.DataFrame, between: pd.DataFrame) -> list[str]:
    """Sentences for "Why not ideal?": where the times came from (nothing on host-only rows:
    a CPU run's host time is the whole truth), and each rank whose host waited for the
    device between steps in most steps (``between``: :func:`between_steps`)."""
    notes = []
    sources = set(loss["source"].dropna()) if "source" in loss else set()
    if sources - {"host"}:
        notes.append("Times: " + "; ".join(f"{s}: {SOURCE_LABELS[s]}" for s in sorted(sources))
                     + ". On device time, 'other / idle' is the device idle waiting for the host (host-bound).")
    blocked = between[between["blocked_frac"] > 0.5] if len(between) else between
    for r in blocked.itertuples(index=False):
        notes.append(f"Run {r.run_id}, rank {r.rank}: after {r.n_blocked} of {r.n_steps} steps the host waited "
                     f"{1e3 * r.blocked_wait_s:.3g} ms for the device between steps (a synchronising call after "
                     "step_end(), such as loss.item() after optimizer.step()); its host-timed step "
                     f"({1e3 * r.host_step_s:.3g} ms) leaves that GPU work out, the device-timed step "
                     f"({1e3 * r.device_step_s:.3g} ms) holds it and is the one used.")
    return notes


def event_arrivals(events: pd.DataFrame) -> pd.DataFrame:
    """The gradient synchronisation of each step matched across ranks from the device
    events: who arrived last, and each rank's peer wait apart from the transfer.

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, step, rank) with a device ``sync`` span: ``run_id``, ``rank``,
        ``seq`` (the step), ``name``, ``start_ns``, ``end_ns``, ``wait_s``, ``transfer_s``,
        ``last_rank``, ``n_ranks``, ``match`` (``"step"``): the columns of
        :func:`analysis.metrics.collectives.collectives`.

    Notes
    -----
    A rank arrives at the step's synchronisation when its stream reaches the event of
    "gradients ready" (DDP: the last bucket's hook; Horovod: ``synchronize()``), the start of
    its device ``sync`` span. Per step, the last arriver is the rank that arrives last;
    ``wait_s`` = last arrival - own arrival (peer wait, 0 for the last arriver) and
    ``transfer_s`` = max(own end - last arrival, 0). Device times are on each rank's host
    clock (the anchor), so ranks are comparable on one node; across nodes the hosts' clock
    offset (``run.json`` ``ranks[].clock``) adds to the wait. Steps where only some ranks
    have a span are left out.
    """
    kind, name = plain(events["kind"]), plain(events["name"])
    sync = events[(kind == "device_phase") & (name == "sync") & (plain(events["cat"]) == "device")
                  & events["step"].notna()]
    cols = ["run_id", "rank", "seq", "name", "start_ns", "end_ns", "wait_s", "transfer_s", "last_rank", "n_ranks",
            "match"]
    if sync.empty:
        return pd.DataFrame(columns=cols)
    t = pd.DataFrame({"run_id": plain(sync["run_id"]).to_numpy(), "rank": sync["rank"].astype("Int64").to_numpy(),
                      "seq": sync["step"].astype("Int64").to_numpy(), "name": "sync",
                      "start_ns": sync["start_ns"].to_numpy(np.int64), "end_ns": end_ns(sync)})
    t = t.drop_duplicates(["run_id", "seq", "rank"])
    g = t.groupby(["run_id", "seq"], sort=False)
    t["n_ranks"] = g["rank"].transform("size")
    full = t.groupby("run_id")["rank"].transform("nunique")
    t = t[t["n_ranks"] == full].copy()
    last = t.loc[t.groupby(["run_id", "seq"], sort=False)["start_ns"].idxmax(), ["run_id", "seq", "rank",
                                                                                  "start_ns"]]
    t = t.merge(last.rename(columns={"rank": "last_rank", "start_ns": "last_start"}), on=["run_id", "seq"])
    t["wait_s"] = (t["last_start"] - t["start_ns"]) / 1e9
    t["transfer_s"] = np.maximum(t["end_ns"] - t["last_start"], 0) / 1e9
    t["match"] = "step"
    return t.sort_values(["run_id", "seq", "rank"]).reset_index(drop=True)[cols]
