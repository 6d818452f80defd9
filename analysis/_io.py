"""The one layer that opens every input file: checks, decompression, encoding, damage.

Every reader takes its bytes from here, never from ``gzip`` or ``zlib`` itself:

* :func:`check_file` / :func:`open_binary`: a regular file, or a :class:`ReadError` naming
  the real problem (not found, symbolic link loop, permission denied, a FIFO or device, a
  symbolic link leaving the experiment it was found in).
* :class:`Gunzip` / :func:`read_bytes` / :func:`iter_gunzip` / :func:`head`: a gzip file of
  any number of members (``cat a.gz b.gz`` is a normal way to join logs) reads as the
  concatenation of their contents; a stream cut short gives what it held with a
  :class:`RecoveryWarning`; bytes after the last member that are not gzip data are named in
  a warning (zero padding is ignored, as ``gunzip`` does); corrupt data is a ReadError.
* :func:`check_encoding` / :func:`strip_bom`: text must be UTF-8. A UTF-8 byte order mark is
  skipped (and one at the start of a line inside the file, where ``cat`` joined two files, is
  removed with a warning); UTF-16 and UTF-32 (with or without a mark) are refused with a ReadError that says
  how to convert the file.
* :func:`drop_nul_lines` / :func:`decode_utf8` / :func:`read_text`: damage in the middle of
  a line-based file costs the damaged line(s), not the rest of the file, and the warning
  names what was found and where (``16 byte(s) of NUL data at offset 3,620 (line 12)``).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import warnings
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from analysis.errors import ReadError, RecoveryWarning
from instrumentation.paths import LEAVES, leaves

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"

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
    reading one cannot hang). A file inside an experiment (or run directory) that a
    symbolic link takes out of it is refused without being opened
    (:func:`instrumentation.paths.leaves`): a shared experiment cannot make a report quote
    a file of the reader's."""
    try:
        if leaves(path):
            raise ReadError(path, LEAVES)
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


# --------------------------------------------------------------------------------------
# gzip, any number of members


class Gunzip:
    """Streaming decompression of a gzip file of one or more members.

    Feed the compressed bytes in order (:meth:`feed` returns what they decompress to), then
    call :meth:`finish`, which returns a note on what was lost (a member cut short, bytes
    after the last member that are not gzip data) or None. Corrupt data raises
    :class:`ReadError`. ``members`` counts the members begun.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self._d = zlib.decompressobj(wbits=31)
        self._carry = b""  # bytes after a member's end, too few to tell a gzip header
        self._garbage_at: int | None = None  # compressed offset of non-gzip bytes after a member
        self._garbage = 0
        self._garbage_nonzero = False
        self.members = 1
        self.read_total = 0  # compressed bytes fed
        self.produced = 0  # bytes decompressed

    def feed(self, raw: bytes) -> bytes:
        self.read_total += len(raw)
        data = self._carry + raw if self._carry else raw
        self._carry = b""
        out: list[bytes] = []
        while data:
            if self._garbage_at is not None:
                self._garbage += len(data)
                self._garbage_nonzero = self._garbage_nonzero or bool(data.strip(b"\0"))
                break
            if self._d.eof:
                if len(data) < 2:
                    self._carry = data
                    break
                if data[:2] != GZIP_MAGIC:
                    self._garbage_at = self.read_total - len(data)
                    continue
                self._d = zlib.decompressobj(wbits=31)
                self.members += 1
            try:
                out.append(self._d.decompress(data))
            except zlib.error as exc:
                if "incorrect data check" in str(exc) or "incorrect length check" in str(exc):
                    raise ReadError(self.path, f"corrupt gzip file: the CRC/length check of member "
                                    f"{self.members} fails ({exc}); the data is damaged") from None
                raise ReadError(self.path, f"corrupt gzip data in member {self.members} "
                                f"(compressed offset about {self.read_total - len(data):,}): {exc}") from None
            # after a member's end, the rest of the input is the next member (or garbage)
            data = self._d.unused_data if self._d.eof else b""
        block = b"".join(out)
        self.produced += len(block)
        return block

    def finish(self) -> str | None:
        """What was lost at the end of the stream, or None."""
        notes = []
        if self._carry:
            if self._carry.strip(b"\0"):
                notes.append(f"{len(self._carry)} byte(s) after the last gzip member are not gzip data "
                             "and were ignored")
        elif not self._d.eof:
            notes.append(f"gzip stream is truncated ({self.read_total:,} compressed bytes gave "
                         f"{self.produced:,} bytes before the end); reading what was recovered")
        if self._garbage_at is not None and self._garbage_nonzero:
            notes.append(f"{self._garbage:,} byte(s) at compressed offset {self._garbage_at:,}, after gzip "
                         f"member {self.members}, are not gzip data and were ignored")
        return "; ".join(notes) or None


def iter_gunzip(path: str | Path, fh: BinaryIO, first: bytes, block_bytes: int, *,
                on_note: Callable[[str], None] | None = None,
                on_progress: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """The decompressed content of the gzip file open as ``fh`` (its first bytes ``first``
    already read), in blocks of about ``block_bytes``, every member in turn. What was lost
    at the end (:meth:`Gunzip.finish`) goes to ``on_note``, else is warned."""
    g = Gunzip(path)
    raw = first
    out: list[bytes] = []
    out_len = 0
    while raw:
        piece = g.feed(raw)
        if piece:
            out.append(piece)
            out_len += len(piece)
        if out_len >= block_bytes:
            yield b"".join(out)
            out, out_len = [], 0
        if on_progress is not None:
            on_progress(g.read_total)
        raw = fh.read(max(block_bytes // 4, 1))
    note = g.finish()
    if note:
        if on_note is not None:
            on_note(note)
        else:
            warnings.warn(f"{path}: {note}", RecoveryWarning, stacklevel=3)
    if g.produced == 0:
        raise ReadError(path, "gzip file decompresses to nothing")
    if out:
        yield b"".join(out)


#: Files at least this large show a progress bar while :func:`iter_blocks` reads them (when
#: stderr is a terminal or ``SCALESCOPE_PROGRESS=1``).
PROGRESS_MIN_BYTES = 100 << 20


def _progress_wanted(size: int) -> bool:
    if size < PROGRESS_MIN_BYTES or os.environ.get("SCALESCOPE_PROGRESS") == "0":
        return False
    if os.environ.get("SCALESCOPE_PROGRESS") == "1":
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def iter_blocks(path: Path, block_bytes: int, *, on_note: Callable[[str], None] | None = None,
                ) -> Iterator[bytes]:
    """The content of ``path`` in blocks of about ``block_bytes``, gunzipped (every member)
    when it is gzip: the streaming read of the Chrome-trace readers, with a progress bar
    for a large file. A :class:`ReadError` for a missing, empty or unreadable file and for
    corrupt gzip data; what a stream cut short lost goes to ``on_note`` (else is warned)."""
    with open_binary(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        first = fh.read(block_bytes)
        if not first:
            raise ReadError(path, "file is empty (0 bytes)")
        progress = task = None
        if _progress_wanted(size):
            from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

            progress = Progress(f"reading {Path(path).name}", BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                                transient=True)
            progress.start()
            task = progress.add_task("read", total=size)
        try:
            if first[:2] == GZIP_MAGIC:
                on_progress = None if progress is None else (lambda done: progress.update(task, completed=done))
                yield from iter_gunzip(path, fh, first, block_bytes, on_note=on_note, on_progress=on_progress)
                return
            raw = first
            while raw:
                if progress is not None:
                    progress.update(task, completed=fh.tell())
                yield raw
                raw = fh.read(block_bytes)
        finally:
            if progress is not None:
                progress.stop()


def head(path: Path, n: int = 4096) -> bytes:
    """The first ``n`` bytes of a file, decompressed if it is gzip (for ``sniff``), with a
    UTF-8 byte order mark removed; empty for anything that is not a readable regular file
    (never blocks on a FIFO)."""
    try:
        check_file(path)
    except ReadError:
        return b""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(n + 3)
            if raw[:2] != GZIP_MAGIC:
                return strip_bom(raw)[:n]
            fh.seek(0)
            g = Gunzip(path)
            out = b""
            while len(out) < n + 3:
                chunk = fh.read(1024)  # small steps: a bad CRC at the end still leaves the head
                if not chunk:
                    break
                try:
                    out += g.feed(chunk)
                except ReadError:
                    break  # the reader reports the damage; sniffing needs only the head
            return strip_bom(out)[:n]
    except OSError:
        return b""


def _read_raw(path: Path) -> tuple[bytes, bool]:
    with open_binary(path) as fh:
        try:
            raw = fh.read()
        except OSError as exc:
            raise ReadError(path, f"cannot read: {exc.strerror or exc}") from None
    if not raw:
        raise ReadError(path, "file is empty (0 bytes)")
    if raw[:2] != GZIP_MAGIC:
        return raw, False
    g = Gunzip(path)
    out = g.feed(raw)
    note = g.finish()
    if note:
        warnings.warn(f"{path}: {note}", RecoveryWarning, stacklevel=4)
    if not out:
        raise ReadError(path, "gzip file decompresses to nothing")
    return out, True


def read_bytes(path: str | Path) -> bytes:
    """Whole file as bytes, gunzipped (every member) when it starts with the gzip magic.

    A truncated gzip stream gives what could be decompressed with a
    :class:`RecoveryWarning`; a corrupt one raises :class:`ReadError`.
    """
    return _read_raw(Path(path))[0]


# --------------------------------------------------------------------------------------
# Encodings

_OTHER_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32 big-endian", "UTF-32"),
               (b"\xff\xfe\x00\x00", "UTF-32 little-endian", "UTF-32"),
               (b"\xfe\xff", "UTF-16 big-endian", "UTF-16"),
               (b"\xff\xfe", "UTF-16 little-endian", "UTF-16"))


def _wide_guess(data: bytes) -> str | None:
    """``"UTF-16LE"``/``"UTF-16BE"`` when the head of ``data`` looks like ASCII text in
    UTF-16 without a byte order mark (every other byte NUL), else None."""
    sample = data[:512]
    if len(sample) < 16:
        return None
    even, odd = sample[0::2], sample[1::2]
    if odd.count(0) >= 0.9 * len(odd) and even.count(0) <= 0.1 * len(even):
        return "UTF-16LE"
    if even.count(0) >= 0.9 * len(even) and odd.count(0) <= 0.1 * len(odd):
        return "UTF-16BE"
    return None


#: Compressed content scalescope does not decompress: (magic, name, command that undoes it).
_OTHER_COMPRESSION = ((GZIP_MAGIC, "gzip-compressed a second time (gzip inside gzip)", "gunzip"),
                      (b"\xfd7zXZ\x00", "xz-compressed", "unxz"),
                      (b"\x28\xb5\x2f\xfd", "zstd-compressed", "unzstd"),
                      (b"PK\x03\x04", "a zip archive", "unzip"))


def check_encoding(data: bytes, path: str | Path) -> None:
    """A :class:`ReadError` when ``data`` (a text file's first bytes, decompressed) is not
    UTF-8 text: UTF-16 or UTF-32 (saying how to convert it), or compressed in a way
    scalescope does not read (bzip2, xz, zstd, zip, gzip twice: saying how to undo it)."""
    for magic, name, tool in _OTHER_COMPRESSION:
        if data.startswith(magic):
            raise ReadError(path, f"the content is {name}, which scalescope does not read; decompress it "
                            f"({tool}), or compress it with gzip")
    if data[:3] == b"BZh" and data[4:10] == b"1AY&SY":
        raise ReadError(path, "the content is bzip2-compressed, which scalescope does not read; decompress it "
                        "(bunzip2), or compress it with gzip")
    for bom, name, iconv in _OTHER_BOMS:
        if data.startswith(bom):
            raise ReadError(path, f"the text is encoded as {name} (byte order mark "
                            f"{bom.hex(' ').upper()}), not UTF-8; convert it, e.g. "
                            f"iconv -f {iconv} -t UTF-8 <file> > <file>.utf8")
    guess = _wide_guess(data)
    if guess:
        raise ReadError(path, f"the text looks like {guess} without a byte order mark (every other byte "
                        f"is NUL), not UTF-8; convert it, e.g. iconv -f {guess} -t UTF-8 <file> > <file>.utf8")


def strip_bom(data: bytes) -> bytes:
    """``data`` without a leading UTF-8 byte order mark."""
    return data[3:] if data.startswith(UTF8_BOM) else data


def read_text_bytes(path: str | Path) -> bytes:
    """:func:`read_bytes` of a UTF-8 text file: UTF-16/32 refused (:func:`check_encoding`),
    a UTF-8 byte order mark removed."""
    data = read_bytes(path)
    check_encoding(data, path)
    return strip_inner_boms(strip_bom(data), path)


def strip_inner_boms(data: bytes, path: str | Path, *, stacklevel: int = 3) -> bytes:
    """``data`` without the UTF-8 byte order marks that start a line inside it (files that
    each began with one, joined with ``cat``), with a :class:`RecoveryWarning` saying how many."""
    mark = b"\n" + UTF8_BOM
    n = data.count(mark)
    if not n:
        return data
    first = data.index(mark) + 1
    warnings.warn(f"{path}: {n} UTF-8 byte order mark(s) at the start of a line inside the file (the first at "
                  f"{_where(data, first)}; files joined with cat?) were removed", RecoveryWarning,
                  stacklevel=stacklevel)
    return data.replace(mark, b"\n")


# --------------------------------------------------------------------------------------
# Damage in the middle of a text file


def _where(data: bytes, offset: int) -> str:
    line = data.count(b"\n", 0, offset) + 1
    return f"offset {offset:,} (line {line})"


def describe_bytes(piece: bytes, offset: int | None = None) -> str:
    """What damage ``piece`` (a record that did not parse, starting at file offset
    ``offset`` when known) shows: NUL bytes, bytes that are not UTF-8, or neither (then it
    is text that is not valid in the format)."""
    def at(i: int) -> str:
        return "" if offset is None else f" at offset {offset + i:,}"

    nul = piece.find(b"\0")
    if nul >= 0:
        n = piece.count(b"\0")
        return f"{n} byte(s) of NUL data{at(nul)}"
    try:
        piece.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{exc.end - exc.start} byte(s) of invalid UTF-8{at(exc.start)}"
    return f"{len(piece):,} byte(s) of text that is not valid in the format{at(0)}"


def drop_nul_lines(data: bytes, path: str | Path, *, what: str = "line",
                   stacklevel: int = 2) -> bytes:
    """``data`` without the lines that hold NUL bytes (never part of a text format: a
    crashed file system's hole, a disk error), with one :class:`RecoveryWarning` saying how
    many bytes were found, where, and how many lines were dropped."""
    first = data.find(b"\0")
    if first < 0:
        return data
    out: list[bytes] = []
    pos, dropped, nuls = 0, 0, 0
    while True:
        i = data.find(b"\0", pos)
        if i < 0:
            out.append(data[pos:])
            break
        lo = data.rfind(b"\n", 0, i) + 1
        hi = data.find(b"\n", i)
        hi = len(data) if hi < 0 else hi + 1
        out.append(data[pos:lo])
        nuls += data.count(b"\0", lo, hi)
        dropped += 1
        pos = hi
    more = f", in {dropped} {what}s in all" if dropped > 1 else ""
    warnings.warn(f"{path}: {nuls:,} byte(s) of NUL data at {_where(data, first)}{more}; dropped "
                  f"{'that ' + what if dropped == 1 else f'those {dropped} {what}s'}, kept the rest",
                  RecoveryWarning, stacklevel=stacklevel + 1)
    return b"".join(out)


def decode_utf8(data: bytes, path: str | Path, *, stacklevel: int = 2) -> str:
    """``data`` as UTF-8; byte sequences that are not UTF-8 are replaced with U+FFFD and
    counted in one :class:`RecoveryWarning` naming the first one's offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", errors="replace")
        n = text.count("\ufffd") - data.count("\ufffd".encode())
        warnings.warn(f"{path}: {n} byte sequence(s) were not valid UTF-8 (the first at "
                      f"{_where(data, exc.start)}) and were replaced with U+FFFD", RecoveryWarning,
                      stacklevel=stacklevel + 1)
        return text


def read_text(path: str | Path, *, what: str = "line") -> str:
    """A line-based UTF-8 text file (gzip of any members allowed), as text: encoding checked,
    byte order mark removed, lines holding NUL bytes dropped, invalid UTF-8 replaced, each
    with a :class:`RecoveryWarning` naming what was found."""
    data = drop_nul_lines(read_text_bytes(path), path, what=what, stacklevel=2)
    return decode_utf8(data, path, stacklevel=2)


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
