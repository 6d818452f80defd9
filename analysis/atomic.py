"""Every file ``analysis`` writes goes through here: written to a temporary file in the
same directory and renamed into place, so a crash, Ctrl-C or a full disk leaves the
previous version or nothing, never a truncated file.

``replacing(path)`` yields a temporary path for writers that want a path of their own
(pandas, pyarrow, kaleido; the parse and run caches, whose entries are named by their
content's digest: ``named=``); ``write_text`` and ``write_bytes`` cover the rest. A location
that cannot be written raises :class:`~analysis.errors.OutputError` naming the path.

``instrumentation/`` cannot import ``analysis``: its one writer of the same kind is
:func:`instrumentation.manifest.replacing`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from analysis.errors import OutputError

__all__ = ["replacing", "why_not_written", "write_bytes", "write_text"]


def why_not_written(exc: OSError, dest: Path | None = None) -> str:
    """What stopped writing ``dest``, in words: a file where a folder must be (naming it), a
    full disk, a read-only location, else the system's message."""
    if exc.errno in (errno.EEXIST, errno.ENOTDIR) and dest is not None:
        for parent in (dest, *dest.parents):  # mkdir or mkstemp met a file where a folder must be
            if parent.exists() and not parent.is_dir():
                return f"{parent} is a file, not a folder"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "permission denied (read-only location?)"
    return exc.strerror or str(exc)


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], *, named: Callable[[Path], Path] | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path`` (or onto
    ``named(temporary path)``, a name in the same folder made from the written content).

    On any error (or KeyboardInterrupt) the temporary file is removed and ``path`` keeps its
    previous content. An ``OSError`` from creating, writing or renaming becomes an
    ``OutputError`` naming ``path``.
    """
    dest = Path(path)
    tmp: Path | None = None
    try:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            with _no_sigint():  # a Ctrl-C between creating the file and knowing its name would leak it
                fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
                tmp = Path(tmp_name)
            os.close(fd)
        except OSError as exc:
            raise OutputError(f"cannot write {dest}: {why_not_written(exc, dest)}") from exc
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, 0o644)
        if named is not None:
            dest = named(tmp)
        os.replace(tmp, dest)
    except OSError as exc:
        raise OutputError(f"cannot write {dest}: {why_not_written(exc, dest)}") from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


@contextlib.contextmanager
def _no_sigint() -> Iterator[None]:
    """A Ctrl-C inside is held back and acted on when the block ends. Python runs SIGINT
    handlers in the main thread whichever thread the signal reached, so the handler is
    swapped for one that notes the signal (masking the signal would not do: another thread
    could take it). Elsewhere than the main thread, nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, caught[0])  # the usual KeyboardInterrupt, now
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike[str], text: str, *, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (see the module docstring)."""
    write_bytes(path, text.encode(encoding))
