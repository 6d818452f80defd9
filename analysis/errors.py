"""Error and warning types. Every reader raises :class:`ReadError` (naming the file and the
problem) or warns with :class:`RecoveryWarning` (saying what was dropped) -- never a bare
``json.JSONDecodeError`` or ``KeyError`` from deep inside a parser."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from os import PathLike

#: One warning recorder at a time per process: ``warnings.catch_warnings`` swaps the
#: process-wide warning state, so two threads recording at once would take each other's
#: warnings or lose them (a Dask cluster of threads runs tasks in threads of one process).
_RECORDING = threading.RLock()


def _new_lock_in_child() -> None:
    # a process forked while another thread records starts with a lock of its own (the
    # inherited one would stay held by a thread the child does not have)
    global _RECORDING
    _RECORDING = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


@contextmanager
def recording() -> Iterator[list[warnings.WarningMessage]]:
    """``warnings.catch_warnings(record=True)`` showing every warning ("always"), held by
    one thread of the process at a time (re-entrant); yields the list of caught warnings.
    Every place that records warnings to hand them on (the parse cache, pool and Dask
    tasks) records through this, so that a task's warnings are its own."""
    with _RECORDING, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


@contextmanager
def replaying() -> Iterator[None]:
    """Hold the recorder of :func:`recording` without recording, while warnings recorded
    elsewhere (a cached parse's, a task's) are raised again: they reach this thread's caller,
    never the record of another thread recording at that moment (``catch_warnings`` is
    process-wide, so such a warning would be kept, and replayed, as that thread's own)."""
    with _RECORDING:
        yield


class ScalescopeError(Exception):
    """Base class of every error scalescope raises on purpose."""


class ReadError(ScalescopeError):
    """A file could not be read. ``str(err)`` is ``"<path>: <problem>"``."""

    def __init__(self, path: str | PathLike[str] | None, problem: str):
        self.path = None if path is None else str(path)
        self.problem = problem
        super().__init__(problem if path is None else f"{path}: {problem}")

    def __reduce__(self):  # so that it crosses process boundaries (a pool, Dask workers)
        return (type(self), (self.path, self.problem))


class UnknownFormatError(ReadError):
    """No registered reader recognised the file."""


class SchemaError(ScalescopeError):
    """A frame does not match the event or sample schema."""


class RecoveryWarning(UserWarning):
    """Input was damaged and part of it was recovered; the message says how much was lost."""


class OutputError(ScalescopeError):
    """A file could not be written (unwritable location, full disk). The message names the
    path; the previous version of the file, if any, is left as it was."""
