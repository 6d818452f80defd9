"""Small shared I/O helpers for readers: gzip-aware reading with clear errors."""

from __future__ import annotations

import warnings
import zlib
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from analysis.errors import ReadError, RecoveryWarning

GZIP_MAGIC = b"\x1f\x8b"


def head(path: Path, n: int = 4096) -> bytes:
    """The first ``n`` bytes of a file, decompressed if it is gzip (for ``sniff``)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(n)
            if raw[:2] != GZIP_MAGIC:
                return raw
            fh.seek(0)
            d = zlib.decompressobj(wbits=31)
            out = b""
            while len(out) < n:
                chunk = fh.read(65536)
                if not chunk:
                    break
                out += d.decompress(chunk, n - len(out))
            return out
    except (OSError, zlib.error):
        return b""


def open_binary(path: str | Path) -> BinaryIO:
    """``open(path, "rb")`` with a :class:`ReadError` naming the file for every failure."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise ReadError(path, "file not found") from None
    except IsADirectoryError:
        raise ReadError(path, "is a directory, not a file") from None
    except OSError as exc:
        raise ReadError(path, f"cannot read: {exc.strerror or exc}") from None


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

