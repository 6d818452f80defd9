"""Small helpers shared by the instrumentation modules: warnings issued once, env lookups.

Nothing here imports torch, horovod or :mod:`analysis`.
"""

from __future__ import annotations

import errno
import os
import threading
import warnings

__all__ = ["InstrumentationWarning", "env_float", "env_str", "warn_once", "warn_write_error"]


class InstrumentationWarning(UserWarning):
    """Something in scalescope's instrumentation failed; training goes on without that part."""


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """Issue ``message`` as an :class:`InstrumentationWarning` the first time ``key`` is seen.

    Never raises: a warning filter set to ``error`` would otherwise turn a harmless
    instrumentation failure into a training crash.
    """
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    try:
        warnings.warn(f"scalescope: {message}", InstrumentationWarning, stacklevel=3)
    except Exception:  # "error" filters: fall back to stderr
        try:
            import sys

            print(f"scalescope warning: {message}", file=sys.stderr, flush=True)
        except Exception:
            pass


#: errno values that mean "the disk (or quota) is full": every writer hits it at once.
_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def warn_write_error(key: str, message: str, exc: BaseException) -> None:
    """A writer (trace, sampler, epoch metrics) cannot write and is off from now on.

    A full disk reaches every writer within a second, so it gives one warning for the whole
    process (the first writer's, saying the others stop too); any other error gives one
    warning per ``key``.
    """
    if isinstance(exc, OSError) and exc.errno in _FULL:
        warn_once("write:disk-full", f"{message}. The disk is full: every scalescope file that cannot be "
                  "written any more (trace, samples, epoch metrics) stops without another warning; "
                  "training goes on")
        return
    warn_once(key, message)


def _reset_warnings() -> None:
    """Forget which warnings were issued (tests)."""
    with _warned_lock:
        _warned.clear()


def env_str(name: str, default: str | None = None) -> str | None:
    """``os.environ[name]`` or ``default`` when unset or empty."""
    value = os.environ.get(name)
    return value if value else default


def env_float(name: str, default: float) -> float:
    """``float(os.environ[name])``, or ``default`` (with a warning) when unset or unparsable."""
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return float(value)
    except ValueError:
        warn_once(f"env:{name}", f"{name}={value!r} is not a number; using {default}")
        return default
