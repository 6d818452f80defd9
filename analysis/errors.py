"""Error and warning types. Every reader raises :class:`ReadError` (naming the file and the
problem) or warns with :class:`RecoveryWarning` (saying what was dropped) -- never a bare
``json.JSONDecodeError`` or ``KeyError`` from deep inside a parser."""

from __future__ import annotations

from os import PathLike


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
