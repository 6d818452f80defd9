"""Small shared I/O helpers for readers: gzip-aware reading with clear errors."""

from __future__ import annotations

import errno
import os
import stat
import warnings
import zlib
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from analysis.errors import ReadError, RecoveryWarning

GZIP_MAGIC = b"\x1f\x8b"


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def _os_problem(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symbolic link loop (too many levels of symbolic links)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.ENOENT:
        return "file not found"
    if exc.errno == errno.ENOTDIR:
        return "a component of the path is not a directory"
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return f"cannot read: {exc.strerror or exc}"


def check_file(path: str | os.PathLike[str]) -> os.stat_result:
    """``os.stat`` of a regular file, or a :class:`ReadError` naming the real problem: not
    found, a symbolic link loop, permission denied (on the file or a directory above it), a
    directory, or not a regular file (a FIFO, socket or device is refused, never opened, so
    reading one cannot hang)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT and os.path.islink(path):
            raise ReadError(path, "broken symbolic link (its target does not exist)") from None
        raise ReadError(path, _os_problem(exc)) from None
    except ValueError as exc:  # an embedded NUL byte
        raise ReadError(path, f"invalid path: {exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ReadError(path, "is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        what = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise ReadError(path, f"is {what}, not a regular file; refused")
    return st


def head(path: Path, n: int = 4096) -> bytes:
    """The first ``n`` bytes of a file, decompressed if it is gzip (for ``sniff``); empty
    for anything that is not a readable regular file (never blocks on a FIFO)."""
    try:
        check_file(path)
    except ReadError:
        return b""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(n)
            if raw[:2] != GZIP_MAGIC:
                return raw
            fh.seek(0)
            d = zlib.decompressobj(wbits=31)
            out = b""
            while len(out) < n:
                chunk = fh.read(1024)  # small steps: a bad CRC at the end still leaves the head
                if not chunk:
                    break
                try:
                    out += d.decompress(chunk, n - len(out))
                except zlib.error:
                    break  # the reader reports the damage; sniffing needs only the head
            return out
    except OSError:
        return b""


def open_binary(path: str | Path) -> BinaryIO:
    """``open(path, "rb")`` of a regular file (:func:`check_file`) with a :class:`ReadError`
    naming the file and the real problem for every failure."""
    check_file(path)
    try:
        return open(path, "rb")
    except IsADirectoryError:
        raise ReadError(path, "is a directory, not a file") from None
    except OSError as exc:
        raise ReadError(path, _os_problem(exc)) from None


def read_bytes(path: str | Path) -> bytes:
    """Whole file as bytes, gunzipped when it starts with the gzip magic.

    A truncated gzip stream gives what could be decompressed with a
    :class:`RecoveryWarning`; a corrupt one raises :class:`ReadError`.
    """
    path = Path(path)
    with open_binary(path) as fh:
        try:
            raw = fh.read()
        except OSError as exc:
            raise ReadError(path, f"cannot read: {exc.strerror or exc}") from None
    if not raw:
        raise ReadError(path, "file is empty (0 bytes)")
    if raw[:2] != GZIP_MAGIC:
        return raw
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(raw)
    except zlib.error as exc:
        if "incorrect data check" in str(exc) or "incorrect length check" in str(exc):
            raise ReadError(path, f"corrupt gzip file: its CRC/length check fails ({exc}); the data is damaged") from None
        raise ReadError(path, f"corrupt gzip data: {exc}") from None
    if not d.eof:
        warnings.warn(
            f"{path}: gzip stream is truncated ({len(raw):,} compressed bytes gave "
            f"{len(out):,} bytes before the end); reading what was recovered",
            RecoveryWarning,
            stacklevel=3,
        )
    if not out:
        raise ReadError(path, "gzip file decompresses to nothing")
    return out


def keep_parsed(frame: pd.DataFrame, key: pd.Series, path: Path, *, detail: str, already_bad: int = 0,
                stacklevel: int = 2) -> tuple[pd.DataFrame, pd.Series]:
    """The rows of a text table whose ``key`` (time) column parsed, and those keys.

    The rows dropped here, plus ``already_bad`` rows the parse itself dropped, are counted in
    one :class:`RecoveryWarning`: ``"<path>: dropped N garbage row(s)<detail>; kept M"``.
    ``stacklevel`` is that of the caller's own ``warnings.warn``.
    """
    ok = key.notna().to_numpy()
    bad = already_bad + int((~ok).sum())
    if bad:
        warnings.warn(f"{path}: dropped {bad} garbage row(s){detail}; kept {int(ok.sum())}",
                      RecoveryWarning, stacklevel=stacklevel + 1)
    return frame[ok].reset_index(drop=True), key[ok].reset_index(drop=True)

