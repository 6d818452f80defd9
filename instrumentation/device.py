"""Device time for the phases: CUDA events at every phase boundary, resolved lazily.

On a GPU the host blocks only at a few points (a blocking copy, ``.item()``, Horovod's
``synchronize()``, a full launch queue), so a phase timed on the host holds whatever device
backlog its blocking point absorbed. This module records, for every span the phase API
times (``forward``, ``backward``, ``sync``, ``optimizer``, the ``step``, DDP's wait for its
buckets, Horovod's allreduce in flight), a CUDA event on the current stream at its start
and at its end. The stream reaches an event when all work queued before it is done, so the
interval between the two events is the span *on the device's timeline*.

Never a synchronize in the loop
-------------------------------
Events come from a pool created once; each step's events are a *group*. At every
:meth:`DeviceTimer.close_step` the groups older than ``lag`` steps are looked at with
``query()`` (non-blocking): a group whose events have all completed is converted with
``elapsed_time`` against the anchor event, written to the trace as ``cat: "device"``
records on the rank's clock, and its events go back to the pool. When the GPU is so far
behind that the pool is empty, a step is left untimed (counted in the summary), never
waited for. There is one ``synchronize()`` when the timer starts (before the first timed
step: it anchors the device clock to the host clock) and one in :meth:`finish`.

Anchor and clock
----------------
After the synchronize the stream is idle, so the anchor event executes when it is
recorded: device time ``d`` (ms after the anchor) is host time ``anchor_ns + d * 1e6``.
Every step also bounds the anchor: its start cannot execute on the device before the host
started the step. The largest violation seen (``anchor_correction_ns``, normally 0 to a few
µs) is written in the summary and added by the reader. An ``epoch_end`` instant is recorded on the device at
each epoch end as a per-epoch anchor check.

Sampling
--------
The first ``first`` steps are all timed; then every ``every``-th step, where ``every`` is
the smallest number that keeps the measured cost of recording the events (timed when the
timer starts) within ``budget`` (default 1 %) of the median host step time of the timed
steps. ``SCALESCOPE_DEVICE_EVERY=k`` fixes it (``0`` turns device events off).

Nothing here raises into the training loop: any failure switches device timing off with
one warning, and the run goes on host-only.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from typing import Any

from instrumentation._env import warn_once

__all__ = ["DEVICE_TID_BASE", "DeviceTimer", "cuda_api"]

#: Trace track of device ``d``'s events (``tid = DEVICE_TID_BASE + d``).
DEVICE_TID_BASE = 2_000_000
_now = time.perf_counter_ns


class _TorchCuda:
    """The few CUDA calls the timer makes, from torch (tests pass a fake with the same shape)."""

    def __init__(self, torch: Any, device: int):
        self.torch = torch
        self.device = int(device)
        self.stream = torch.cuda.current_stream(self.device)

    def event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True)

    def record(self, ev: Any) -> None:
        ev.record(self.stream)

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)


def cuda_api(device: int | None = None) -> Any | None:
    """The torch CUDA API for ``device`` (default: the current one), or None without CUDA."""
    import sys

    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        return _TorchCuda(torch, torch.cuda.current_device() if device is None else device)
    except Exception:
        return None


class DeviceTimer:
    """CUDA events at the phase API's span boundaries, resolved lazily (module docstring).

    Parameters
    ----------
    api
        ``event()``, ``record(ev)``, ``synchronize()`` and ``device`` (see :func:`cuda_api`);
        events have ``query()`` and ``elapsed_time(other)`` (ms) as ``torch.cuda.Event``.
    add
        Where resolved records go (the trace recorder's ``add``).
    pool
        Events created at start; at most ``pool // 2`` spans can be in flight on the device.
    lag
        Groups younger than this many steps are not even queried.
    first, budget, every
        The sampling rule (module docstring); ``every`` fixes the period.
    """

    def __init__(self, api: Any, add: Any, *, pool: int = 512, lag: int = 2, first: int = 20,
                 budget: float = 0.01, every: int | None = None):
        self.api, self.add = api, add
        self.record = api.record
        self.tid = DEVICE_TID_BASE + int(api.device)
        self.lag, self.first, self.budget, self.every = lag, first, budget, every
        self.free: list = [api.event() for _ in range(pool)]
        self.pool = pool
        self.group: list[tuple] = []  # (cat, name, ev0, ev1, step, epoch, args)
        self.events: list = []
        self.pending: deque = deque()  # (spans, events, step start host ns)
        self.on = True
        self.n_closed = self.n_timed = self.n_untimed = self.n_resolved = self.n_marks = 0
        self.host_steps: list[int] = []
        self.resolve_ns = 0  # host time spent resolving (for the sampling rule)
        self.min_lead_ns: int | None = None  # min over steps of (device start - host start)
        # the args of the written records (the recorder copies them before adding to them)
        self.args = {cat: {"device": int(api.device), "of": cat} for cat in ("phase", "comm", "anchor")}
        self.anchor = api.event()
        self.record_cost_ns = self._record_cost()
        api.synchronize()
        self.anchor_ns = _now()
        api.record(self.anchor)

    def _record_cost(self) -> float:
        """Host ns of one event record, measured on 16 spare events."""
        evs = [self.api.event() for _ in range(16)]
        t0 = _now()
        for ev in evs:
            self.api.record(ev)
        return (_now() - t0) / len(evs)

    # -- hot path ----------------------------------------------------------------------------
    def mark(self) -> Any:
        """Record an event on the stream now; None when this step is not timed or the pool is
        empty."""
        if not self.on:
            return None
        free = self.free
        if not free:
            self.on = False
            self.n_untimed += 1
            return None
        ev = free.pop()
        self.record(ev)
        self.events.append(ev)
        return ev

    def span(self, cat: str, name: str, m0: Any, m1: Any, step: int | None, epoch: int | None,
             args: dict | None = None) -> None:
        """Queue a span between two marks (dropped when either is None)."""
        if m0 is not None and m1 is not None:
            self.group.append((cat, name, m0, m1, step, epoch, args))

    def close_step(self, host_step_ns: int, host_start_ns: int = 0) -> None:
        """The step is over (after its ``step`` span was queued; it started on the host at
        ``host_start_ns``): start a new group, decide whether the next step is timed, and
        resolve what the device has finished."""
        if self.on and self.group:
            self.pending.append((self.group, self.events, host_start_ns))
            self.n_timed += 1
            self.n_marks += len(self.events)
            if len(self.host_steps) < self.first:
                self.host_steps.append(host_step_ns)
        elif self.events:  # the pool ran dry inside the step: the partial group is useless
            self.pending.append(([], self.events, 0))
        self.group, self.events = [], []
        self.n_closed += 1
        if self.every is None and self.n_closed == self.first:
            self.every = self._period()
        every = self.every or 1
        self.on = self.n_closed < self.first or self.n_closed % every == 0
        if len(self.pending) > self.lag:
            t0 = _now()
            self.resolve(self.lag)
            self.resolve_ns += _now() - t0

    def _period(self) -> int:
        """The smallest step period keeping the timer's cost within the budget: the event
        records (their measured cost) and the resolution (its measured time) of a timed step
        against the median host step."""
        if not self.host_steps or not self.n_timed:
            return 1
        steps = sorted(self.host_steps)
        median = steps[len(steps) // 2]
        cost = self.n_marks / self.n_timed * self.record_cost_ns + self.resolve_ns / self.n_timed
        return max(1, math.ceil(cost / max(self.budget * median, 1.0)))

    def resolve(self, lag: int = 0) -> None:
        """Convert every group older than ``lag`` steps whose events have completed (one
        stream: its last event completes last)."""
        pending, add, tid, base = self.pending, self.add, self.tid, self.anchor_ns
        elapsed = self.anchor.elapsed_time
        while len(pending) > lag:
            spans, events, host_start = pending[0]
            if events and not events[-1].query():
                return
            try:
                out = [("device", name, base + round(elapsed(e0) * 1e6),
                        None if e1 is e0 else base + round(elapsed(e1) * 1e6), tid, step, epoch,
                        {**self.args[cat], **args} if args else self.args[cat])
                       for cat, name, e0, e1, step, epoch, args in spans]
            except RuntimeError:  # an event on another stream not done yet: try again later
                return
            pending.popleft()
            for rec in out:
                add(rec)
                if rec[1] == "step" and host_start:
                    lead = rec[2] - host_start
                    if self.min_lead_ns is None or lead < self.min_lead_ns:
                        self.min_lead_ns = lead
            self.n_resolved += len(out)
            self.free.extend(events)

    def finish(self) -> dict:
        """Wait for the device once, resolve everything, and return the summary."""
        if self.group:
            self.pending.append((self.group, self.events))
            self.group, self.events = [], []
        self.api.synchronize()
        self.resolve(0)
        return self.summary()

    def summary(self) -> dict:
        lead = self.min_lead_ns
        return {"device": self.api.device, "steps_timed": self.n_timed, "steps_untimed": self.n_untimed,
                "steps": self.n_closed, "every": self.every, "first": self.first,
                "record_cost_ns": round(self.record_cost_ns), "spans": self.n_resolved,
                "pending_groups": len(self.pending), "anchor_mono_ns": self.anchor_ns,
                "anchor_correction_ns": max(0, -lead) if lead is not None else 0}


#: DDP's logging data kept at ``finish()`` (a cross-check of the device events: the reducer
#: times forward, backward compute and communication with CUDA events itself, in ns).
DDP_LOGGING_KEYS = ("avg_forward_compute_time", "avg_backward_compute_time", "avg_backward_comm_time",
                    "avg_backward_compute_comm_overlap_time", "backend_name", "bucket_sizes",
                    "comm_hook", "is_multi_device_module", "world_size")


def model_device(model: Any) -> int | None:
    """The CUDA device index of ``model``'s first parameter (None: unknown or not CUDA)."""
    try:
        dev = next(model.parameters()).device if model is not None else None
        return int(dev.index) if dev is not None and dev.type == "cuda" and dev.index is not None else None
    except Exception:
        return None


def ddp_logging_data(model: Any) -> dict:
    """DDP's ``_get_ddp_logging_data()`` (the keys of :data:`DDP_LOGGING_KEYS`), or ``{}``
    for a model that is not DDP."""
    get = getattr(model, "_get_ddp_logging_data", None)
    if get is None:
        return {}
    try:
        data = get()
        return {k: data[k] for k in DDP_LOGGING_KEYS if k in data and isinstance(data[k], (int, float, str))}
    except Exception as exc:
        warn_once("ddp-logging", f"cannot read DDP's logging data: {exc!r}")
        return {}


def every_from_env() -> int | None:
    """``SCALESCOPE_DEVICE_EVERY``: a fixed period, 0 = off, unset = automatic (None)."""
    v = os.environ.get("SCALESCOPE_DEVICE_EVERY", "").strip()
    if not v:
        return None
    try:
        return max(0, int(v))
    except ValueError:
        warn_once("device-every", f"SCALESCOPE_DEVICE_EVERY={v!r} is not a whole number; automatic sampling")
        return None
