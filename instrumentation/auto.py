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
    ``optimizer`` when ``step()`` synchronises itself);
  - DDP: the recording comm hook (:func:`ddp_comm_hook`).

* :func:`ddp_comm_hook`: registers a comm hook that calls PyTorch's default
  ``allreduce_hook`` unchanged and records each bucket's allreduce, from launch to the
  completion callback of its future, as ``cat: "comm"``, ``name: "allreduce"`` with
  ``args: {"bucket", "bytes", "step", "epoch", "last"}``. Each bucket gets its own trace
  track (``tid`` = 1,000,000 + bucket index, named ``allreduce bucket i``), because
  allreduces overlap the backward phase and one another and Chrome-trace tracks must nest.

All of it is a no-op before :func:`instrumentation.init`, and every hook swallows its own
errors (one warning) so training behaves exactly as without instrumentation.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any

from instrumentation import phases as _ph
from instrumentation._env import warn_once

__all__ = ["COMM_TID_BASE", "ddp_comm_hook", "instrument", "wrap_loader"]

COMM_TID_BASE = 1_000_000


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
        S = _ph.S
        it = iter(self._loader)
        while True:
            opened = S.rec is not None and not S.step_open and S.eval_depth == 0
            p = _ph._Phase("data")
            p.__enter__()
            try:
                item = next(it)
            except StopIteration:
                _abort_data(p, opened)
                return
            except BaseException:
                p.__exit__(None, None, None)
                raise
            p.__exit__(None, None, None)
            yield item

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def _abort_data(p: _ph._Phase, opened: bool) -> None:
    S = _ph.S
    rec = S.rec
    if rec is None or not p.t0:
        return
    t1 = _ph._now()
    if S.nvtx is not None:
        try:
            S.nvtx.pop()  # data
            if opened and S.step_open:
                S.nvtx.pop()  # the step this data phase opened
        except Exception as exc:
            _ph._nvtx_failed(exc)
    if opened:
        S.step_open = False
    rec.add(("phase", "data", p.t0, t1, _ph._tid(), None, S.epoch, {"end_of_data": True}))


def wrap_loader(loader: Iterable) -> Iterable:
    """Return ``loader`` wrapped so that each ``next()`` is recorded as a ``data`` phase."""
    if isinstance(loader, TimedLoader):
        return loader
    return TimedLoader(loader)


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


class _ModelHooks:
    """Forward/backward phase hooks on one module."""

    def __init__(self, model: Any):
        self.stack: list[_ph._Phase] = []
        self.backward_open: _ph._Phase | None = None
        self.handles = [
            model.register_forward_pre_hook(self.pre_forward),
            model.register_forward_hook(self.post_forward),
        ]

    def pre_forward(self, module: Any, args: Any) -> None:
        try:
            p = _ph._Phase("forward")
            p.__enter__()
            self.stack.append(p)
        except Exception as exc:
            warn_once("hook-forward", f"forward hook failed: {exc!r}")

    def post_forward(self, module: Any, args: Any, out: Any) -> None:
        try:
            if self.stack:
                self.stack.pop().__exit__(None, None, None)
            torch = sys.modules.get("torch")
            if torch is None or not torch.is_grad_enabled() or _ph.S.rec is None:
                return
            t = _first_grad_tensor(out)
            if t is not None:
                t.register_hook(self.on_output_grad)
        except Exception as exc:
            warn_once("hook-forward", f"forward hook failed: {exc!r}")

    def on_output_grad(self, grad: Any) -> None:
        try:
            if self.backward_open is not None or _ph.S.rec is None:
                return None
            p = _ph._Phase("backward")
            # No NVTX range: the end callback may run on another autograd thread and
            # NVTX push/pop ranges are per thread.
            nv, _ph.S.nvtx = _ph.S.nvtx, None
            try:
                p.__enter__()
            finally:
                _ph.S.nvtx = nv
            self.backward_open = p
            import torch

            torch.autograd.Variable._execution_engine.queue_callback(self.end_backward)
        except Exception as exc:
            self.backward_open = None
            warn_once("hook-backward", f"backward hook failed: {exc!r}")
        return None

    def end_backward(self) -> None:
        p, self.backward_open = self.backward_open, None
        if p is None:
            return
        try:
            nv, _ph.S.nvtx = _ph.S.nvtx, None
            try:
                p.__exit__(None, None, None)
            finally:
                _ph.S.nvtx = nv
        except Exception as exc:
            warn_once("hook-backward", f"backward hook failed: {exc!r}")


def _wrap_method(obj: Any, attr: str, name: str, *, after: Any = None) -> None:
    orig = getattr(obj, attr)
    if getattr(orig, "_scalescope_wrapped", False):
        return

    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _ph._Phase(name):
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
        ``DistributedOptimizer`` ``synchronize`` becomes ``sync``.
    loader
        Wrapped with :func:`wrap_loader` and returned.
    auto_step
        Close the step (:func:`instrumentation.step_end`) after each ``optimizer.step``.
    comm_hook
        For a DDP model, register the recording comm hook (:func:`ddp_comm_hook`).
    """
    try:
        if model is not None:
            model._scalescope_hooks = _ModelHooks(model)
            if comm_hook and _is_ddp(model):
                ddp_comm_hook(model)
        if optimizer is not None:
            if _is_horovod_optimizer(optimizer):
                _wrap_method(optimizer, "synchronize", "sync")
            _wrap_method(optimizer, "step", "optimizer", after=_ph.step_end if auto_step else None)
    except Exception as exc:
        warn_once("instrument", f"automatic instrumentation failed: {exc!r}")
    return wrap_loader(loader) if loader is not None else None


# -- DDP comm hook ------------------------------------------------------------------------------
_named_buckets: set[int] = set()


def _recording_allreduce_hook(state, bucket):  # type: ignore[no-untyped-def]
    # No annotations: DDP rejects a ``bucket`` annotated with anything but dist.GradBucket
    # (and with ``from __future__ import annotations`` every annotation is a string).
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    t0 = _ph._now()
    fut = allreduce_hook(state, bucket)
    rec = _ph.S.rec
    if rec is None:
        return fut
    try:
        idx = int(bucket.index())
        buf = bucket.buffer()
        nbytes = int(buf.numel() * buf.element_size())
        extra = {"bucket": idx, "bytes": nbytes, "last": bool(bucket.is_last())}
        step, epoch = _ph.current_step(), _ph.S.epoch
        tid = COMM_TID_BASE + idx
        if idx not in _named_buckets:
            _named_buckets.add(idx)
            rec.add(("meta", f"allreduce bucket {idx}", t0, None, tid, None, None, None))
    except Exception as exc:
        warn_once("ddp-hook", f"DDP comm hook bookkeeping failed: {exc!r}")
        return fut

    def done(f: Any) -> Any:
        try:
            rec.add(("comm", "allreduce", t0, _ph._now(), tid, step, epoch, extra))
        except Exception:
            pass
        return f.value()  # unchanged result (and unchanged error, if the allreduce failed)

    return fut.then(done)


def ddp_comm_hook(ddp_model: Any, process_group: Any = None) -> bool:
    """Register the recording allreduce comm hook on a ``DistributedDataParallel`` model.

    Must be called before the first backward pass (DDP allows one comm hook per model).
    Returns ``True`` when registered; on failure warns once and returns ``False``.
    """
    try:
        ddp_model.register_comm_hook(state=process_group, hook=_recording_allreduce_hook)
        return True
    except Exception as exc:
        warn_once("ddp-hook-register", f"could not register the DDP comm hook: {exc!r}")
        return False
