"""Automatic instrumentation: data loader, model hooks, optimizer, Horovod sync, DDP comm hook.

* :func:`wrap_loader`: the time spent in the loader's ``next()`` is a ``data`` phase.
* :func:`instrument` ``(model, optimizer, loader)``:

  - ``forward``: a forward pre-hook and a forward hook on ``model`` (for DDP, on the DDP
    wrapper, so DDP's own pre-forward work is included);
  - ``backward``: from the moment the gradient of the model's output is computed (a hook
    on the output tensor, registered in the forward hook when autograd is recording) to
    the end of the backward pass (a callback queued on the autograd engine). For DDP that
    end comes *before* DDP's own end-of-backward wait for its buckets (DDP queues its
    callback later), so the wait for the last bucket shows in the comm records;
  - ``optimizer``: ``optimizer.step`` (and the step is closed after it, unless
    ``auto_step=False``);
  - ``sync``: for Horovod's ``DistributedOptimizer``, ``optimizer.synchronize`` (nested in
    ``optimizer`` when ``step()`` synchronises itself), plus :func:`horovod_comm_hook`;
  - DDP: the recording comm hook (:func:`ddp_comm_hook`), which also records DDP's wait.

* :func:`ddp_comm_hook`: registers a comm hook that calls PyTorch's default
  ``allreduce_hook`` unchanged and records

  - each bucket's allreduce, from launch to the first time its completion is seen, as
    ``cat: "comm"``, ``name: "allreduce"`` with ``args: {"bucket", "bytes", "step",
    "epoch", "last"}`` (in flight: ``sync_total``). No Python runs on the communication
    threads: completion is observed when a later bucket's hook runs (``future.done()``)
    or, for the buckets still in flight then, when the final callback below has waited
    for them, so the end is exact for the buckets the step waits for and an upper bound
    (by the gap between two bucket launches) for the others. Each bucket gets its own trace track
    (``tid`` = 1,000,000 + bucket index, named ``allreduce bucket i``), because allreduces
    overlap the backward phase and one another and Chrome-trace tracks must nest;
  - DDP's wait for its buckets as a ``sync`` phase (``args: {"source": "ddp_hook"}``): from
    the moment the last bucket is ready (its hook is called: gradient computation is over)
    to the moment all bucket allreduces have completed, measured by an autograd final
    callback queued from that hook which waits on the buckets' futures (the wait DDP's
    own end-of-backward callback would do). Inside ``loss.backward()``, so it nests in a
    hand-placed ``backward`` phase; ``sync_exposed``.

* :func:`horovod_comm_hook`: on Horovod's ``DistributedOptimizer``, records the time its
  gradient allreduces are in flight in each step: from the first gradient submitted
  (``_allreduce_grad_async``, called by Horovod's gradient hooks during backward) to the
  end of ``synchronize()``, as ``cat: "comm"``, ``name: "allreduce"``, ``args:
  {"hook": "horovod", "tensors"}`` on track 999,999 (``horovod allreduce in flight``).

All of it is a no-op before :func:`instrumentation.init`, and every hook swallows its own
errors (one warning) so training behaves exactly as without instrumentation.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from instrumentation import phases as _ph
from instrumentation._env import warn_once

__all__ = ["COMM_TID_BASE", "HOROVOD_TID", "ddp_comm_hook", "horovod_comm_hook", "instrument", "wrap_loader"]

COMM_TID_BASE = 1_000_000
HOROVOD_TID = COMM_TID_BASE - 1


# -- data loader ---------------------------------------------------------------------------
class TimedLoader:
    """An iterable that records each ``next()`` of the wrapped loader as a ``data`` phase.

    Attribute access (``len``, ``dataset``, ``sampler``, ...) is forwarded to the loader.
    The last ``next()`` that raises ``StopIteration`` is recorded too (its time is real),
    without a step, and does not open one.
    """

    def __init__(self, loader: Iterable):
        self._loader = loader

    def __iter__(self) -> Iterator:
        it = iter(self._loader)
        while True:
            opened = _ph.may_open_step()
            p = _ph.Phase("data")
            p.enter()
            try:
                item = next(it)
            except StopIteration:
                p.abort(opened_step=opened, end_of_data=True)
                return
            except BaseException:
                p.exit()
                raise
            p.exit()
            _ph.note_batch(item, source="loader")  # the step's samples (epoch_end without samples=)
            yield item

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def wrap_loader(loader: Iterable) -> Iterable:
    """Return ``loader`` wrapped so that each ``next()`` is recorded as a ``data`` phase.

    A loader with a sized ``dataset`` (``torch.utils.data.DataLoader``) gives ``run.json``
    ``loader_dataset_size`` (``len(loader.dataset)``: the whole dataset before a sampler
    shards it), and ``dataset_size`` where the script did not set one."""
    if isinstance(loader, TimedLoader):
        return loader
    _note_dataset(loader)
    return TimedLoader(loader)


def _note_dataset(loader: Any) -> None:
    from instrumentation import run as _run

    try:
        n = len(loader.dataset)  # type: ignore[attr-defined]
    except Exception:
        return
    if isinstance(n, int) and n > 0:
        _run.note_manifest({"loader_dataset_size": n}, write=False, override=True)
        _run.note_manifest({"dataset_size": n}, write=False)


# -- model hooks -----------------------------------------------------------------------------
def _first_grad_tensor(out: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if isinstance(out, torch.Tensor):
        return out if out.requires_grad else None
    if isinstance(out, (list, tuple)):
        vals: Iterable = out
    elif isinstance(out, dict):
        vals = out.values()
    else:
        return None
    for v in vals:
        t = _first_grad_tensor(v)
        if t is not None:
            return t
    return None


#: End (perf_counter ns) of the last automatic ``backward`` phase: DDP's ``sync`` phase
#: starts no earlier, so the two never overlap on a track.
_last_backward_end = 0


class _ModelHooks:
    """Forward/backward phase hooks on one module."""

    def __init__(self, model: Any):
        # (the forward phase, None), or for an evaluation forward (NVTX range pushed, start ns)
        self.stack: list[tuple[_ph.Phase | bool, int | None]] = []
        self.backward_open: _ph.Phase | None = None
        self.handles = [
            model.register_forward_pre_hook(self.pre_forward),
            model.register_forward_hook(self.post_forward),
        ]

    def pre_forward(self, module: Any, args: Any) -> None:
        try:
            torch = sys.modules.get("torch")
            training = torch is None or torch.is_grad_enabled()
            if not training and _ph.may_open_step():
                # a forward without gradients outside a step is an evaluation: like a forward
                # inside phase("eval") it carries no step and opens none (timed here, so no
                # step state is touched even if the forward raises)
                self.stack.append((_ph.nvtx_push("forward"), _ph.now()))
                return
            p = _ph.Phase("forward")
            p.enter()
            self.stack.append((p, None))
            if training:  # a training forward: count its samples
                _ph.note_batch(args, source="forward")
        except Exception as exc:
            warn_once("hook-forward", f"forward hook failed: {exc!r}")

    def post_forward(self, module: Any, args: Any, out: Any) -> None:
        try:
            if self.stack:
                p, t0 = self.stack.pop()
                if t0 is None:
                    p.exit()
                else:  # an evaluation forward: p says whether an NVTX range was pushed
                    t1 = _ph.now()
                    if p:
                        _ph.nvtx_pop()
                    _ph.record("phase", "forward", t0, t1, step=None, epoch=_ph.current_epoch())
            torch = sys.modules.get("torch")
            if torch is None or not torch.is_grad_enabled() or not _ph.recording():
                return
            t = _first_grad_tensor(out)
            if t is not None:
                t.register_hook(self.on_output_grad)
        except Exception as exc:
            warn_once("hook-forward", f"forward hook failed: {exc!r}")

    def on_output_grad(self, grad: Any) -> None:
        try:
            if self.backward_open is not None or not _ph.recording():
                return None
            # No NVTX range: the end callback may run on another autograd thread and
            # NVTX push/pop ranges are per thread.
            p = _ph.Phase("backward", nvtx=False)
            p.enter()
            self.backward_open = p
            import torch

            torch.autograd.Variable._execution_engine.queue_callback(self.end_backward)
        except Exception as exc:
            self.backward_open = None
            warn_once("hook-backward", f"backward hook failed: {exc!r}")
        return None

    def end_backward(self) -> None:
        global _last_backward_end
        p, self.backward_open = self.backward_open, None
        if p is None:
            return
        try:
            p.exit()
            _last_backward_end = _ph.now()
        except Exception as exc:
            warn_once("hook-backward", f"backward hook failed: {exc!r}")


def _wrap_method(obj: Any, attr: str, name: str, *, after: Any = None) -> None:
    orig = getattr(obj, attr)
    if getattr(orig, "_scalescope_wrapped", False):
        return

    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _ph.Phase(name):
            out = orig(*args, **kwargs)
        if after is not None:
            after()
        return out

    wrapped._scalescope_wrapped = True  # type: ignore[attr-defined]
    wrapped.__wrapped__ = orig  # type: ignore[attr-defined]
    # Bound with MethodType so that ``opt.step.__func__`` exists (LR schedulers use it).
    setattr(obj, attr, types.MethodType(wrapped, obj))


def _is_ddp(model: Any) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return isinstance(model, torch.nn.parallel.DistributedDataParallel)
    except Exception:
        return False


def _is_horovod_optimizer(optimizer: Any) -> bool:
    return hasattr(optimizer, "synchronize") and "horovod" in type(optimizer).__module__


def instrument(model: Any = None, optimizer: Any = None, loader: Iterable | None = None, *,
               auto_step: bool = True, comm_hook: bool = True) -> Iterable | None:
    """Instrument a training loop automatically; return the wrapped loader.

    Parameters
    ----------
    model
        A ``torch.nn.Module`` (or a DDP wrapper): ``forward`` and ``backward`` phases.
    optimizer
        ``optimizer.step`` becomes the ``optimizer`` phase; for Horovod's
        ``DistributedOptimizer`` ``synchronize`` becomes ``sync`` and its gradient
        allreduces are recorded (:func:`horovod_comm_hook`).
    loader
        Wrapped with :func:`wrap_loader` and returned.
    auto_step
        Close the step (:func:`instrumentation.step_end`) after each ``optimizer.step``.
    comm_hook
        For a DDP model, register the recording comm hook (:func:`ddp_comm_hook`); for a
        Horovod optimizer, :func:`horovod_comm_hook`.
    """
    try:
        if model is not None:
            model._scalescope_hooks = _ModelHooks(model)
            _ph.note_model(model)
            _note_model(model)
            if comm_hook and _is_ddp(model):
                ddp_comm_hook(model)
        if optimizer is not None:
            if _is_horovod_optimizer(optimizer):
                if comm_hook:
                    horovod_comm_hook(optimizer)
                _wrap_method(optimizer, "synchronize", "sync")
            _wrap_method(optimizer, "step", "optimizer", after=_ph.step_end if auto_step else None)
    except Exception as exc:
        warn_once("instrument", f"automatic instrumentation failed: {exc!r}")
    return wrap_loader(loader) if loader is not None else None


def _note_model(model: Any) -> None:
    """``n_params`` (every parameter) and ``grad_bytes`` (the bytes of the gradients a
    data-parallel step reduces: parameters that require a gradient) of ``model`` into
    ``run.json`` (rank 0; a value the script gave in ``init(config=...)`` is kept)."""
    from instrumentation import run as _run

    try:
        params = list(model.parameters())
        n_params = sum(int(p.numel()) for p in params)
        grad = sum(int(p.numel()) * int(p.element_size()) for p in params if p.requires_grad)
        _run.note_manifest({"n_params": n_params}, write=True)
        _run.note_manifest({"grad_bytes": grad, "grad_bytes_source": "model"}, write=True)
    except Exception as exc:
        warn_once("note-model", f"cannot count the model's parameters: {exc!r}")


def _note_grad_bytes(nbytes: int, source: str, tensors: int) -> None:
    """The bytes the gradient collectives of one step carried, as a hook saw them (overrides
    the model's count: what was really reduced); written with the next manifest update."""
    from instrumentation import run as _run

    _run.note_manifest({"grad_bytes": int(nbytes), "grad_bytes_source": source, "grad_tensors": int(tensors)},
                       write=False, override=True)


# -- DDP comm hook ------------------------------------------------------------------------------
_named_buckets: set[int] = set()


class _DdpWait:
    """The bucket allreduces in flight in the current backward pass, and DDP's wait for them
    (one per process).

    No Python runs on the communication threads: a bucket's completion is observed from the
    training side, when a later bucket's hook runs (``fut.done()``) or, for the buckets still
    in flight then, when the final callback has waited for them. A completion is stamped at
    the first observation after it (a bucket found complete when the final callback starts
    is stamped then): an upper bound, exact for the buckets the step waits for.
    """

    pending: ClassVar[list] = []  # [future, t0, tid, step, epoch, args] per bucket
    n_buckets = 0
    t_ready = 0
    dev_ready: object | None = None  # the device mark of "gradients ready" (a CUDA event)
    step: int | None = None
    epoch: int | None = None
    pushed_on: int | None = None
    step_bytes = 0  # bytes of the buckets of the first step (run.json grad_bytes)
    bytes_noted = False

    @classmethod
    def launched(cls, entry: list) -> None:
        """A bucket's hook ran: note it, and stamp earlier buckets that have completed."""
        cls.stamp()
        cls.pending.append(entry)
        cls.n_buckets += 1

    @classmethod
    def stamp(cls, *, wait: bool = False) -> None:
        """Close the record of every pending bucket whose future is seen complete, at the
        time it is seen so: the clock is read after ``done()`` said so (a time read before,
        such as the next bucket's launch, can precede the completion and even the
        collective's start: the allreduce call between them takes hundreds of µs on a busy
        machine)."""
        keep = []
        for entry in cls.pending:
            fut = entry[0]
            if not fut.done():
                if not wait:
                    keep.append(entry)
                    continue
                try:
                    fut.wait()
                except Exception:
                    pass  # DDP's own wait raises the allreduce's error; ours must not
            now = _ph.now()
            _ph.record("comm", "allreduce", entry[1], now, step=entry[3], epoch=entry[4], tid=entry[2],
                       args=entry[5])
        cls.pending = keep

    @classmethod
    def last_bucket_ready(cls, t_ready: int) -> None:
        """Called from the hook of the iteration's last bucket: gradient compute is over."""
        import threading

        import torch

        cls.t_ready = max(t_ready, _last_backward_end)
        cls.step, cls.epoch = _ph.current_step(), _ph.current_epoch()
        # on the device: the stream reaches this mark when the last bucket's gradients exist
        cls.dev_ready = _ph.device_mark()
        # An NVTX range only on the training thread, where the final callback runs too on
        # CPU; on a CUDA autograd thread no range is pushed (push/pop are per thread).
        tid = threading.get_native_id()
        cls.pushed_on = tid if tid == threading.main_thread().native_id and _ph.nvtx_push("sync") else None
        torch.autograd.Variable._execution_engine.queue_callback(cls.wait_done)

    @classmethod
    def wait_done(cls) -> None:
        """Autograd final callback: wait for every bucket (as DDP does), record ``sync``."""
        import threading

        cls.stamp(wait=True)
        # after fut.wait() the stream waits for the allreduces: this mark completes when
        # they have (on NCCL the host never waits here; the device does)
        _ph.device_span("phase", "sync", cls.dev_ready, _ph.device_mark(), step=cls.step, epoch=cls.epoch,
                        args={"source": "ddp_hook"})
        cls.dev_ready = None
        t1 = _ph.now()
        if cls.pushed_on is not None and cls.pushed_on == threading.get_native_id():
            _ph.nvtx_pop()
        cls.pushed_on = None
        n, cls.n_buckets = cls.n_buckets, 0
        _ph.record("phase", "sync", cls.t_ready, t1, step=cls.step, epoch=cls.epoch,
                   args={"source": "ddp_hook", "buckets": n})


#: The communication hook the recording hook runs (``ddp_comm_hook(hook=)``); None: DDP's
#: default allreduce.
_inner_hook: Any = None


def _recording_allreduce_hook(state, bucket):  # type: ignore[no-untyped-def]
    # No annotations: DDP rejects a ``bucket`` annotated with anything but dist.GradBucket
    # (and with ``from __future__ import annotations`` every annotation is a string).
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    t0 = _ph.now()
    fut = (_inner_hook or allreduce_hook)(state, bucket)
    if not _ph.recording():
        return fut
    try:
        idx = int(bucket.index())
        buf = bucket.buffer()
        last = bool(bucket.is_last())
        tid = COMM_TID_BASE + idx
        if idx not in _named_buckets:
            _named_buckets.add(idx)
            _ph.name_track(tid, f"allreduce bucket {idx}")
        args = {"bucket": idx, "bytes": int(buf.numel() * buf.element_size()), "last": last}
        _DdpWait.launched([fut, t0, tid, _ph.current_step(), _ph.current_epoch(), args])
        if not _DdpWait.bytes_noted:
            _DdpWait.step_bytes += args["bytes"]
        if last:
            if not _DdpWait.bytes_noted:
                _DdpWait.bytes_noted = True
                _note_grad_bytes(_DdpWait.step_bytes, "ddp_hook", _DdpWait.n_buckets)
            _DdpWait.last_bucket_ready(t0)
    except Exception as exc:
        warn_once("ddp-hook", f"DDP comm hook bookkeeping failed: {exc!r}")
    return fut


def ddp_comm_hook(ddp_model: Any, process_group: Any = None, *, hook: Any = None) -> bool:
    """Register the recording allreduce comm hook on a ``DistributedDataParallel`` model.

    Must be called before the first backward pass (DDP allows one comm hook per model).
    ``hook``: a comm hook of the script's own (``hook(state, bucket) -> Future``) that the
    recording hook runs instead of DDP's default allreduce (compression, a delayed
    allreduce). Returns ``True`` when registered; on failure warns once and returns ``False``.
    """
    global _inner_hook
    try:
        _inner_hook = hook
        ddp_model.register_comm_hook(state=process_group, hook=_recording_allreduce_hook)
        return True
    except Exception as exc:
        warn_once("ddp-hook-register", f"could not register the DDP comm hook: {exc!r}")
        return False


def _grad_nbytes(obj: Any) -> int:
    """Bytes of the gradient Horovod's hook submits: ``p.grad`` of a parameter (or a list of
    them for the grouped call)."""
    try:
        if isinstance(obj, (list, tuple)):
            return sum(_grad_nbytes(o) for o in obj)
        g = getattr(obj, "grad", None)
        return 0 if g is None else int(g.numel()) * int(g.element_size())
    except Exception:
        return 0


# -- Horovod ------------------------------------------------------------------------------------
def horovod_comm_hook(optimizer: Any) -> bool:
    """Record the time Horovod's gradient allreduces are in flight in each step.

    Wraps the ``DistributedOptimizer``'s ``_allreduce_grad_async`` and
    ``_grouped_allreduce_grad_async`` (called by its gradient hooks) to note the first
    submission of a step, and ``synchronize`` to close the record when every handle is
    done. Call it before the first backward pass; returns ``True`` when installed.
    """
    try:
        if getattr(optimizer, "_scalescope_hvd_hook", False):
            return True
        state = {"t0": None, "n": 0, "step": None, "epoch": None, "bytes": 0, "noted": False, "m0": None}

        def wrap_submit(attr: str) -> None:
            orig = getattr(optimizer, attr, None)
            if orig is None:
                return

            def submit(*args: Any, **kwargs: Any) -> Any:
                if state["t0"] is None and _ph.recording():
                    state["t0"] = _ph.now()
                    state["step"], state["epoch"] = _ph.current_step(), _ph.current_epoch()
                    state["m0"] = _ph.device_mark()  # the first gradient is ready on the device
                state["n"] += 1
                if not state["noted"]:
                    state["bytes"] += _grad_nbytes(args[0] if args else None)
                return orig(*args, **kwargs)

            setattr(optimizer, attr, submit)

        wrap_submit("_allreduce_grad_async")
        wrap_submit("_grouped_allreduce_grad_async")
        sync = optimizer.synchronize

        def synchronize(*args: Any, **kwargs: Any) -> Any:
            out = sync(*args, **kwargs)
            t0, state["t0"] = state["t0"], None
            if t0 is not None:
                _ph.device_span("comm", "allreduce", state["m0"], _ph.device_mark(), step=state["step"],
                                epoch=state["epoch"], args={"hook": "horovod"})
                state["m0"] = None
                t1 = _ph.now()
                n, state["n"] = state["n"], 0
                if not state["noted"]:
                    state["noted"] = True
                    _note_grad_bytes(state["bytes"], "horovod_hook", n)
                try:
                    if not getattr(optimizer, "_scalescope_hvd_named", False):
                        optimizer._scalescope_hvd_named = True
                        _ph.name_track(HOROVOD_TID, "horovod allreduce in flight")
                    _ph.record("comm", "allreduce", t0, t1, step=state["step"], epoch=state["epoch"],
                               tid=HOROVOD_TID, args={"hook": "horovod", "tensors": n})
                except Exception as exc:
                    warn_once("horovod-hook-record", f"Horovod allreduce recording failed: {exc!r}")
            return out

        optimizer.synchronize = synchronize
        optimizer._scalescope_hvd_hook = True
        return True
    except Exception as exc:
        warn_once("horovod-hook", f"could not install the Horovod allreduce recording: {exc!r}")
        return False
