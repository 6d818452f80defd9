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
    "PHASES",
    "Phase",
    "close_implicit_epoch",
    "current_epoch",
    "current_step",
    "device_mark",
    "device_span",
    "epoch_end",
    "epoch_start",
    "mark",
    "may_open_step",
    "model",
    "name_track",
    "note_batch",
    "note_model",
    "now",
    "nvtx_pop",
    "nvtx_push",
    "phase",
    "record",
    "recording",
    "step_end",
]

#: The phase vocabulary (``docs/instrumentation.md``).
PHASES: tuple[str, ...] = ("data", "forward", "backward", "sync", "optimizer", "step", "epoch", "eval")
_NOT_IN_STEP = frozenset({"epoch", "eval", "step"})
#: Phases of the host alone: no device span (the device view takes ``data`` from the host).
_HOST_ONLY = frozenset({"data", "epoch", "eval"})

_now = time.perf_counter_ns
_tid = threading.get_native_id
F = TypeVar("F", bound=Callable[..., Any])


class _State:
    """Module-wide recording state (one per process)."""

    __slots__ = (
        "batch_size",
        "dev",
        "dev_factory",
        "epoch",
        "epoch_phase_ns",
        "epoch_samples",
        "epoch_steps",
        "epoch_steps_sized",
        "epoch_t0",
        "epochs_path",
        "eval_depth",
        "first_epoch",
        "last_step_end",
        "n_epoch_ends",
        "nvtx",
        "on_epoch_end",
        "on_step",
        "rank",
        "rec",
        "step",
        "step_fwd_samples",
        "step_loader_samples",
        "step_m0",
        "step_open",
        "step_t0",
        "user_epoch_seen",
    )

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.rec = None  # TraceRecorder | None; None means "not recording"
        self.nvtx = None  # NvtxRanges | None
        self.dev = None  # instrumentation.device.DeviceTimer | None: device time of the spans
        self.dev_factory = None  # makes ``dev`` when the first step opens (CUDA in use then)
        self.step_m0 = None  # the device mark of the open step's start
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
        # called after each epoch_end with its line (the run: manifest updates, resume flag)
        self.on_epoch_end = None
        # samples seen in the open step (by the wrapped loader / the instrumented model's forward)
        self.step_loader_samples = 0
        self.step_fwd_samples = 0
        # steps of the current epoch, those whose samples were seen, and their samples
        self.epoch_steps = 0
        self.epoch_steps_sized = 0
        self.epoch_samples = 0
        self.batch_size = None  # per rank, from init(config=) or $SCALESCOPE_BATCH_SIZE
        self.first_epoch = None  # the first epoch label the script gave (epoch_start/epoch_end)
        self.n_epoch_ends = 0
        self.last_step_end = None


S = _State()


def _nvtx_failed(exc: BaseException) -> None:
    S.nvtx = None
    warn_once("nvtx-call", f"NVTX call failed ({exc!r}); NVTX ranges are off from now on")


#: The instrumented model (a weak reference; ``instrument(model=)``): its device for the CUDA
#: events and DDP's own timing at ``finish()``. Not part of :class:`_State`: a model may be
#: instrumented before ``init``.
_model_ref: Any = None


def note_model(model: Any) -> None:
    """Remember the instrumented model (weakly)."""
    global _model_ref
    try:
        import weakref

        _model_ref = weakref.ref(model)
    except TypeError:
        _model_ref = None


def model() -> Any:
    """The instrumented model, or None."""
    return _model_ref() if _model_ref is not None else None


def _device_failed(exc: BaseException) -> None:
    S.dev = None
    warn_once("device-events", f"CUDA event timing failed ({exc!r}); phases are host-timed from now on")


def _start_device() -> None:
    """Make the device timer when the first step opens (the model is on its device by then)."""
    factory, S.dev_factory = S.dev_factory, None
    try:
        S.dev = factory()
    except Exception as exc:
        _device_failed(exc)


def device_mark() -> object | None:
    """A CUDA event on the current stream now (for the hooks); None when device timing is off."""
    dev = S.dev
    if dev is None:
        return None
    try:
        return dev.mark()
    except Exception as exc:
        _device_failed(exc)
        return None


def device_span(cat: str, name: str, m0: object | None, m1: object | None, *, step: int | None,
                epoch: int | None, args: dict | None = None) -> None:
    """Queue the device span between two :func:`device_mark` marks (a no-op when off)."""
    dev = S.dev
    if dev is not None:
        try:
            dev.span(cat, name, m0, m1, step, epoch, args)
        except Exception as exc:
            _device_failed(exc)


class Phase:
    """Context manager (and decorator) timing one phase: the span API of this module.

    ``Phase(name)`` is what :func:`phase` returns; :mod:`instrumentation.auto` uses it
    directly with ``enter()``/``exit()`` from hooks, ``nvtx=False`` where the span may end
    on another thread (NVTX push/pop ranges are per thread), and :meth:`abort` for a
    ``data`` phase that ended the loader.
    """

    __slots__ = ("m0", "name", "nvtx", "t0")

    def __init__(self, name: str, *, nvtx: bool = True):
        self.name = name
        self.nvtx = nvtx
        self.t0 = 0
        self.m0 = None

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
        if opens_step and S.dev_factory is not None:
            _start_device()
        dev = S.dev
        if dev is not None and (opens_step or name not in _HOST_ONLY):
            try:
                m = dev.mark()
                if opens_step:
                    S.step_m0 = m
                if name not in _HOST_ONLY:
                    self.m0 = m
            except Exception as exc:
                _device_failed(exc)
        return self

    def __exit__(self, *exc_info: object) -> None:
        rec = S.rec
        if rec is None or not self.t0:
            return
        dev, m0 = S.dev, self.m0
        m1 = None
        if dev is not None and m0 is not None:
            try:
                m1 = dev.mark()
            except Exception as exc:
                _device_failed(exc)
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
        if m1 is not None and S.dev is not None:
            S.dev.span("phase", name, m0, m1, step, S.epoch)

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
    dev = S.dev
    if dev is not None:
        try:
            dev.span("phase", "step", S.step_m0, dev.mark(), S.step, S.epoch)
        except Exception as exc:
            _device_failed(exc)
            dev = None
    t1 = _now()
    if S.nvtx is not None:
        try:
            S.nvtx.pop()
        except Exception as exc:
            _nvtx_failed(exc)
    rec.add(("phase", "step", S.step_t0, t1, _tid(), S.step, S.epoch, None))
    if dev is not None:
        try:
            dev.close_step(t1 - S.step_t0, S.step_t0)
        except Exception as exc:
            _device_failed(exc)
    S.step_open = False
    S.step += 1
    S.last_step_end = t1
    S.epoch_steps += 1
    seen = S.step_loader_samples or S.step_fwd_samples
    if seen:
        S.epoch_steps_sized += 1
        S.epoch_samples += seen
    S.step_loader_samples = S.step_fwd_samples = 0
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


def _batch_len(obj: Any, depth: int = 0) -> int | None:
    """The leading dimension of the first tensor-like (``.shape``) in a batch, searching
    tuples, lists and dict values; ``None`` when there is none."""
    if depth == 0 and (type(obj) is tuple or type(obj) is list) and obj:
        # the common ``(inputs, targets)`` batch, without the general search (every step)
        shape = getattr(obj[0], "shape", None)
        if shape is not None and len(shape):
            try:
                return int(shape[0])
            except (TypeError, ValueError):
                pass
    if isinstance(obj, (tuple, list)) or (isinstance(obj, dict) and (obj := list(obj.values())) is not None):
        if depth > 3:
            return None
        for item in obj[:8]:
            n = _batch_len(item, depth + 1)
            if n is not None:
                return n
        return None
    try:
        shape = obj.shape
        return int(shape[0]) if len(shape) else None
    except Exception:
        return None


def note_batch(batch: Any, *, source: str) -> None:
    """Count the samples of ``batch`` in the open step: ``source`` is ``"loader"`` (an item
    of the wrapped loader) or ``"forward"`` (the arguments of the instrumented model's
    forward; used for the steps where the loader saw none). Never raises."""
    if S.rec is None or not S.step_open or S.eval_depth:
        return
    try:
        n = _batch_len(batch)
        if n:
            if source == "loader":
                S.step_loader_samples += n
            else:
                S.step_fwd_samples += n
    except Exception:
        pass


def _first_epoch(epoch: int) -> None:
    if S.first_epoch is None:
        S.first_epoch = epoch


def _epoch_samples(given: object) -> tuple[object, str | None]:
    """This epoch's samples and where they come from: ``given`` (``epoch_end(samples=)``),
    ``counted`` (every step's batch was seen by the wrapped loader or the model's forward),
    ``batch_size_x_steps`` (the configured per-rank batch size times the steps), or none."""
    if given is not None:
        return _num(given), "given"
    if S.epoch_steps and S.epoch_steps_sized == S.epoch_steps:
        return S.epoch_samples, "counted"
    if S.epoch_steps and S.batch_size:
        return int(S.batch_size) * S.epoch_steps, "batch_size_x_steps"
    return None, None


def epoch_start(epoch: int) -> None:
    """Declare the epoch number of the events that follow (optional; see module notes)."""
    if S.rec is None:
        return
    try:
        _first_epoch(int(epoch))
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
        m = device_mark()
        device_span("anchor", "epoch_end", m, m, step=None, epoch=int(epoch))
        return _close_epoch(int(epoch), samples=samples, train_loss=train_loss, val_loss=val_loss,
                            val_metric=val_metric)
    except Exception as exc:
        warn_once("epoch_end", f"epoch_end failed: {exc!r}")
        return None


def _close_epoch(epoch: int, *, samples: object = None, train_loss: object = None, val_loss: object = None,
                 val_metric: object = None, implicit: bool = False) -> dict:
    rec = S.rec
    t1 = S.last_step_end if implicit and S.last_step_end is not None else _now()
    _first_epoch(epoch)
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
    n_samples, source = _epoch_samples(samples)
    line = {
        "rank": S.rank, "epoch": epoch, "epoch_time_s": dur_ns / 1e9,
        "samples": n_samples, "train_loss": _num(train_loss),
        "val_loss": _num(val_loss), "val_metric": _num(val_metric),
        "peak_mem_mib": peak, "peak_mem_kind": peak_kind, "wall_ns": time.time_ns(),
        "steps": S.epoch_steps, "samples_source": source,
    }
    if implicit:
        line["implicit"] = True
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
    S.epoch_steps = S.epoch_steps_sized = S.epoch_samples = 0
    S.n_epoch_ends += 1
    hook = S.on_epoch_end
    if hook is not None:
        try:
            hook(line)
        except Exception as exc:
            warn_once("on-epoch-end", f"epoch hook failed ({exc!r})")
    return line


def close_implicit_epoch() -> dict | None:
    """At the end of a run: the steps after the last :func:`epoch_end` (all of them for a
    script that never calls it, e.g. a benchmark timing iterations) become one more epoch,
    from the first phase after that call to the end of the last step, with ``"implicit":
    true`` in its line. ``None`` when there are no such steps. Never raises."""
    if S.rec is None:
        return None
    try:
        step_end()
        if not S.epoch_steps:
            return None
        return _close_epoch(S.epoch, implicit=True)
    except Exception as exc:
        warn_once("implicit-epoch", f"closing the implicit epoch failed: {exc!r}")
        return None


def mark(name: str, **args: object) -> None:
    """Record an instant (``ph: "i"``, kind ``marker``) with optional JSON-able args."""
    rec = S.rec
    if rec is None:
        return
    rec.add(("marker", name, _now(), None, _tid(), current_step(), S.epoch, args or None))
