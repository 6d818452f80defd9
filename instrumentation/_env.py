"""Small helpers shared by the instrumentation modules: warnings issued once, env lookups.

Nothing here imports torch, horovod or :mod:`analysis`.
"""

from __future__ import annotations

import os
import threading
import warnings

__all__ = ["InstrumentationWarning", "env_float", "env_str", "warn_once"]


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
