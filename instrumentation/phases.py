"""The phase API and the step / epoch bookkeeping.

A phase is timed with ``time.perf_counter_ns()`` on entry and exit and appended to the
per-rank :class:`~instrumentation.recorder.TraceRecorder` as one tuple; when an NVTX tool
is attached the same span is pushed as an NVTX range in the ``scalescope`` domain.

Steps: the first *step phase* (``data``, ``forward``, ``backward``, ``sync``,
``optimizer``, or any user name other than ``epoch``/``eval``) after :func:`step_end`
opens a ``step``; :func:`step_end` records it, from that phase's start to the call, and
increments the step counter (global over the run, not reset per epoch). Phases inside an
``eval`` phase never open a step and carry no step number.

Epochs: events carry the current epoch number (0 at start; ``epoch_end(e)`` makes it
``e + 1``; :func:`epoch_start` sets it explicitly). :func:`epoch_end` records an ``epoch``
phase from the first phase of the epoch to the call (unless the script timed one itself
with ``phase("epoch")``) and appends a line to ``rank-NNNNN.epochs.jsonl``.

Every function here is a cheap no-op before :func:`instrumentation.init` and never raises.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from instrumentation._env import warn_once, warn_write_error

__all__ = [
    "PHASES", "Phase", "current_epoch", "current_step", "epoch_end", "epoch_start", "mark", "may_open_step",
    "name_track", "now", "nvtx_pop", "nvtx_push", "phase", "record", "recording", "step_end",
]

#: The phase vocabulary (``docs/instrumentation.md``).
PHASES: tuple[str, ...] = ("data", "forward", "backward", "sync", "optimizer", "step", "epoch", "eval")
_NOT_IN_STEP = frozenset({"epoch", "eval", "step"})

_now = time.perf_counter_ns
_tid = threading.get_native_id
F = TypeVar("F", bound=Callable[..., Any])


class _State:
    """Module-wide recording state (one per process)."""

    __slots__ = (
        "epoch", "epoch_phase_ns", "epoch_t0", "epochs_path", "eval_depth", "nvtx",
        "on_step", "rank", "rec", "step", "step_open", "step_t0", "user_epoch_seen",
    )

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.rec = None  # TraceRecorder | None; None means "not recording"
        self.nvtx = None  # NvtxRanges | None
        self.rank = 0
        self.step = 0
        self.step_open = False
        self.step_t0 = 0
        self.epoch = 0
        self.epoch_t0 = None
        self.epoch_phase_ns = None  # duration of an explicit phase("epoch"), if timed
        self.eval_depth = 0
        self.epochs_path = None
        self.user_epoch_seen = False
        # called after each step_end (the PyTorch profiler's step); returns False when done
        self.on_step = None


S = _State()


def _nvtx_failed(exc: BaseException) -> None:
    S.nvtx = None
    warn_once("nvtx-call", f"NVTX call failed ({exc!r}); NVTX ranges are off from now on")


class Phase:
    """Context manager (and decorator) timing one phase: the span API of this module.

    ``Phase(name)`` is what :func:`phase` returns; :mod:`instrumentation.auto` uses it
    directly with ``enter()``/``exit()`` from hooks, ``nvtx=False`` where the span may end
    on another thread (NVTX push/pop ranges are per thread), and :meth:`abort` for a
    ``data`` phase that ended the loader.
    """

    __slots__ = ("name", "nvtx", "t0")

    def __init__(self, name: str, *, nvtx: bool = True):
        self.name = name
        self.nvtx = nvtx
        self.t0 = 0

    def __enter__(self) -> Phase:
        rec = S.rec
        if rec is None:
            return self
        name = self.name
        opens_step = name != "eval" and not S.step_open and S.eval_depth == 0 and name not in _NOT_IN_STEP
        # NVTX pushes first, clock read after; on exit clock first, pop after: our interval
        # nests inside the NVTX range with ~1 µs either side, so nsys and our recorder agree
        # even for short phases (reading the clock before two pushes cost `data` 3-11 µs).
        nv = S.nvtx if self.nvtx else None
        if nv is not None:
            try:
                if opens_step:
                    nv.push("step")
                nv.push(name)
            except Exception as exc:
                _nvtx_failed(exc)
        t0 = _now()
        if name == "eval":
            S.eval_depth += 1
        elif opens_step:  # its NVTX "step" range was pushed above
            S.step_open = True
            S.step_t0 = t0
        if S.epoch_t0 is None:
            S.epoch_t0 = t0
        self.t0 = t0
        return self

    def __exit__(self, *exc_info: object) -> None:
        rec = S.rec
        if rec is None or not self.t0:
            return
        t1 = _now()
        name = self.name
        nv = S.nvtx if self.nvtx else None
        if nv is not None:
            try:
                nv.pop()
            except Exception as exc:
                _nvtx_failed(exc)
        if name == "eval":
            S.eval_depth = max(S.eval_depth - 1, 0)
            step = None
        elif name == "epoch":
            S.epoch_phase_ns = t1 - self.t0
            step = None
        else:
            step = S.step if (S.step_open and S.eval_depth == 0) else None
        rec.add(("phase", name, self.t0, t1, _tid(), step, S.epoch, None))

    enter = __enter__

    def exit(self) -> None:
        """Close the phase (``with`` does this itself)."""
        self.__exit__(None, None, None)

    def abort(self, *, opened_step: bool, **args: object) -> None:
        """Close a phase that turned out not to belong to a step (the ``next()`` that ended
        a data loader): recorded without a step and with ``args``; the step it opened, if
        ``opened_step``, is closed without being counted."""
        rec = S.rec
        if rec is None or not self.t0:
            return
        t1 = _now()
        nv = S.nvtx if self.nvtx else None
        if nv is not None:
            try:
                nv.pop()  # this phase
                if opened_step and S.step_open:
                    nv.pop()  # the step it opened
            except Exception as exc:
                _nvtx_failed(exc)
        if opened_step:
            S.step_open = False
        rec.add(("phase", self.name, self.t0, t1, _tid(), None, S.epoch, args or None))

    def __call__(self, func: F) -> F:
        name, nvtx = self.name, self.nvtx

        @wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with Phase(name, nvtx=nvtx):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def phase(name: str) -> Phase:
    """Time a training phase: ``with phase("forward"): ...`` or ``@phase("eval")``.

    Parameters
    ----------
    name
        One of :data:`PHASES` (``data``, ``forward``, ``backward``, ``sync``,
        ``optimizer``, ``step``, ``epoch``, ``eval``); other names are recorded as they
        are (the reader gives them kind ``phase`` too) and, like the step phases, open a
        step.

    Notes
    -----
    Cost with no profiler attached: two ``perf_counter_ns`` calls, one small object and
    one list append (about 1 µs on the 2-core development VM, see
    ``docs/instrumentation.md``). Prefer :func:`step_end` to ``phase("step")``: the step
    is opened automatically.
    """
    return Phase(name)


# -- the span API for hooks (instrumentation.auto) --------------------------------------------
now = _now


def recording() -> bool:
    """Whether a run is recording (``init`` was called and ``finish`` was not)."""
    return S.rec is not None


def may_open_step() -> bool:
    """Whether the next step phase would open a step (recording, no step open, not in eval)."""
    return S.rec is not None and not S.step_open and S.eval_depth == 0


def current_epoch() -> int:
    """The epoch number events are labelled with now."""
    return S.epoch


def record(cat: str, name: str, t0: int, t1: int | None, *, step: int | None, epoch: int | None,
           tid: int | None = None, args: dict | None = None) -> None:
    """Record a span (``t1`` an int) or an instant (``t1`` None) timed by the caller.

    ``cat`` is the trace category (``"phase"``, ``"comm"``, ``"marker"``); ``tid`` defaults
    to the calling thread. A no-op when not recording.
    """
    rec = S.rec
    if rec is not None:
        rec.add((cat, name, t0, t1, _tid() if tid is None else tid, step, epoch, args))


def name_track(tid: int, name: str) -> None:
    """Name a synthetic trace track (``thread_name`` metadata), e.g. a DDP bucket's."""
    rec = S.rec
    if rec is not None:
        rec.add(("meta", name, _now(), None, tid, None, None, None))


def nvtx_push(name: str) -> bool:
    """Push an NVTX range on this thread when NVTX is on; returns whether it was pushed."""
    nv = S.nvtx
    if nv is None:
        return False
    try:
        nv.push(name)
        return True
    except Exception as exc:
        _nvtx_failed(exc)
        return False


def nvtx_pop() -> None:
    """Pop the range :func:`nvtx_push` pushed on this thread."""
    nv = S.nvtx
    if nv is not None:
        try:
            nv.pop()
        except Exception as exc:
            _nvtx_failed(exc)


def step_end() -> None:
    """Close the current ``step`` (a no-op when none is open) and count it."""
    rec = S.rec
    if rec is None or not S.step_open:
        return
    t1 = _now()
    if S.nvtx is not None:
        try:
            S.nvtx.pop()
        except Exception as exc:
            _nvtx_failed(exc)
    rec.add(("phase", "step", S.step_t0, t1, _tid(), S.step, S.epoch, None))
    S.step_open = False
    S.step += 1
    hook = S.on_step
    if hook is not None:
        try:
            if not hook():
                S.on_step = None
        except Exception as exc:
            S.on_step = None
            warn_once("on-step", f"step hook failed ({exc!r}); it is off from now on")


def current_step() -> int | None:
    """The open step's number, or ``None`` outside a step."""
    return S.step if S.step_open else None


def epoch_start(epoch: int) -> None:
    """Declare the epoch number of the events that follow (optional; see module notes)."""
    if S.rec is None:
        return
    try:
        S.epoch = int(epoch)
        S.user_epoch_seen = True
        S.epoch_t0 = _now()
        S.epoch_phase_ns = None
    except Exception as exc:
        warn_once("epoch_start", f"epoch_start({epoch!r}) ignored: {exc!r}")


def _peak_memory() -> tuple[float | None, str | None]:
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch.cuda.max_memory_allocated() / 2**20, "cuda"
    except Exception:
        pass
    try:
        import resource

        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        if sys.platform == "darwin":  # bytes on macOS
            kib /= 1024
        return kib / 1024, "rss"
    except Exception:
        return None, None


def _num(v: object) -> object:
    if v is None:
        return None
    try:
        if hasattr(v, "item"):
            v = v.item()  # 0-d tensors / numpy scalars
        return v if isinstance(v, int) else float(v)  # type: ignore[arg-type]
    except Exception:
        return None


def epoch_end(
    epoch: int,
    *,
    samples: int | None = None,
    train_loss: float | None = None,
    val_loss: float | None = None,
    val_metric: float | None = None,
) -> dict | None:
    """Close an epoch: record its ``epoch`` phase and append its metrics to the jsonl file.

    Parameters
    ----------
    epoch
        The epoch number as the script counts it.
    samples, train_loss, val_loss, val_metric
        This rank's numbers for the epoch (tensors and numpy scalars are converted).

    Returns
    -------
    dict or None
        The line written to ``rank-NNNNN.epochs.jsonl`` (``None`` when not recording).
    """
    rec = S.rec
    if rec is None:
        return None
    try:
        step_end()
        t1 = _now()
        epoch = int(epoch)
        if epoch != S.epoch and not S.user_epoch_seen:
            warn_once(
                "epoch-numbering",
                f"epoch_end({epoch}) but events were labelled epoch {S.epoch}; call "
                "epoch_start(epoch) at the start of each epoch to label them correctly",
            )
        t0 = S.epoch_t0 if S.epoch_t0 is not None else t1
        if S.epoch_phase_ns is None:
            rec.add(("phase", "epoch", t0, t1, _tid(), None, S.epoch, None))
            dur_ns = t1 - t0
        else:
            dur_ns = S.epoch_phase_ns
        peak, peak_kind = _peak_memory()
        line = {
            "rank": S.rank, "epoch": epoch, "epoch_time_s": dur_ns / 1e9,
            "samples": _num(samples), "train_loss": _num(train_loss),
            "val_loss": _num(val_loss), "val_metric": _num(val_metric),
            "peak_mem_mib": peak, "peak_mem_kind": peak_kind, "wall_ns": time.time_ns(),
        }
        if S.epochs_path is not None:
            try:
                with open(S.epochs_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(line) + "\n")
            except OSError as exc:
                warn_write_error(f"epochs-io:{S.epochs_path}",
                                 f"cannot append epoch metrics to {S.epochs_path} "
                                 f"({exc.strerror or exc}); training goes on", exc)
        S.epoch = epoch + 1
        S.epoch_t0 = None
        S.epoch_phase_ns = None
        S.user_epoch_seen = False
        return line
    except Exception as exc:
        warn_once("epoch_end", f"epoch_end failed: {exc!r}")
        return None


def mark(name: str, **args: object) -> None:
    """Record an instant (``ph: "i"``, kind ``marker``) with optional JSON-able args."""
    rec = S.rec
    if rec is None:
        return
    rec.add(("marker", name, _now(), None, _tid(), current_step(), S.epoch, args or None))
