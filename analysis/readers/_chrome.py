"""Shared machinery for Chrome-trace JSON readers (Horovod timeline, Kineto).

The readers never hold the whole list of decoded events at once. The file is read in
blocks (gunzipped on the fly) into one reusable ``bytearray``, the event array is cut into
byte ranges of about one block that end at a record boundary, and each range is decoded
in place as its own JSON array by a typed :mod:`msgspec` decoder (the bytes just before and
just after the range are swapped for ``[`` and ``]`` during the decode, so no copy of the
range is made); the reader turns each chunk of records into column chunks straight away.
Transient memory is therefore bounded by about 1.5 blocks of text plus one chunk's decoded
records, whatever the file size.

Damage is handled here, once for both formats:

* an array with no closing ``]`` (Horovod <= 0.20 always, any killed writer) or cut in the
  middle of a record is read up to the last complete record;
* a record that is not valid JSON (Horovod writes tensor names unescaped) sends its chunk
  to a record-by-record parse, where the reader may repair it (``repair`` hook) or it is
  dropped and counted;
* bytes that are not UTF-8 are replaced with U+FFFD.

Everything recovered this way is described in :attr:`Damage.notes`; the reader emits
**one** :class:`~analysis.errors.RecoveryWarning` per file from them.

Why a cut can be validated by decoding: a chunk starts at a record boundary, so
``b"[" + chunk + b"]"`` is valid JSON only if the chunk ends at a record boundary too; a cut
inside a string or a nested object leaves an unterminated string or an unclosed container.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from analysis import _io
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers.numbers import EXACT_LIMIT_US, in_range, text_us_to_ns, us_to_ns

#: Bytes read per block; a chunk decoded at once is 0.5 to 1.5 blocks. Bounds the transient
#: memory of a read: the text buffer and one chunk's records, whatever the file size. A
#: chunk's text and records then stay in a core's share of the CPU caches, so processes
#: decoding at once slow each other little (measured in benchmarks/README.md).
BLOCK_BYTES = 1 << 20

_WS = b" \t\r\n"
# Record separators for the record-by-record fallback: "}" [ws] "," [ws] before "{".
_SEP = re.compile(rb"\}\s*,\s*(?=\{)")
# The end of an event array: a record's closing brace, then "]" (after a trailing comma, which
# is not JSON, when a writer leaves one).
_ARRAY_END = re.compile(rb"\}\s*(,\s*)?\]")
_TRAILING_COMMA = ("a trailing comma after the last record, before the ']' that closes the event array "
                   "(not valid JSON), was ignored")
@dataclass
class Damage:
    """What was lost or repaired while reading one file."""

    unterminated: bool = False
    lost_bytes: int = 0
    lost_records: int = 0
    bad_records: int = 0
    repaired_records: int = 0
    replaced_utf8: int = 0
    not_events: int = 0
    #: what the first record dropped as unparsable held (NUL bytes, invalid UTF-8, ...)
    first_bad: str | None = None
    #: ids (a stream or correlation in ``args``) that are not a non-negative integer
    bad_ids: int = 0
    notes: list[str] = field(default_factory=list)

    def message(self, path: Path) -> str | None:
        parts = []
        if self.unterminated or self.lost_bytes:
            what = "the event array is not terminated (no closing ']')"
            if self.lost_bytes:
                recs = f", {self.lost_records} incomplete record(s)" if self.lost_records else ""
                parts.append(
                    f"{what}; the file is cut off: {self.lost_bytes:,} byte(s) after the last "
                    f"complete record were dropped{recs}"
                )
            else:
                parts.append(f"{what}, as Horovod <= 0.20 and killed jobs leave it; "
                             "every record up to the end was complete (0 bytes lost)")
        if self.repaired_records:
            parts.append(
                f"{self.repaired_records} record(s) were invalid JSON (unescaped quote or "
                "backslash in a name) and were recovered by a tolerant parse"
            )
        if self.bad_records:
            found = f" (the first holds {self.first_bad})" if self.first_bad else ""
            parts.append(f"{self.bad_records} record(s) could not be parsed and were dropped{found}")
        if self.bad_ids:
            parts.append(f"{self.bad_ids} args.stream/args.correlation value(s) that are not a non-negative "
                         "integer were left empty (a GPU row's stream is then its tid)")
        if self.not_events:
            parts.append(f"{self.not_events} value(s) in the event array are valid JSON but not event objects "
                         "and were dropped")
        if self.replaced_utf8:
            parts.append(
                f"{self.replaced_utf8} byte sequence(s) were not valid UTF-8 and were "
                "replaced with U+FFFD"
            )
        parts.extend(self.notes)
        if not parts:
            return None
        return f"{path}: " + "; ".join(parts)

    def warn(self, path: Path, *, stacklevel: int = 3) -> None:
        msg = self.message(path)
        if msg:
            warnings.warn(msg, RecoveryWarning, stacklevel=stacklevel)


# --------------------------------------------------------------------------------------
# Decoding helpers


def _skip_ws(buf: bytes | memoryview, pos: int) -> int:
    n = len(buf)
    while pos < n and buf[pos] in _WS:
        pos += 1
    return pos


def _last_boundary(buf: bytes, lo: int, hi: int) -> int:
    """Index just after the last ``}`` in ``buf[lo:hi]`` followed by ``[ws] , [ws] {``.

    -1 if there is none. Only a candidate: the caller validates it by decoding. Requiring the
    next record's ``{`` keeps the cut out of the keys that follow Kineto's ``traceEvents``.
    """
    end = hi
    for _ in range(64):
        p = buf.rfind(b"}", lo, end)
        if p < 0:
            return -1
        q = p + 1
        while q < hi and buf[q] in _WS:
            q += 1
        if q < hi and buf[q] == 0x2C:  # ","
            q += 1
            while q < hi and buf[q] in _WS:
                q += 1
            if q < hi and buf[q] == 0x7B:  # "{"
                return p + 1
        end = p
    return -1


class ChunkDecoder:
    """Decode byte ranges of an event array, falling back to a tolerant parse.

    Parameters
    ----------
    decode
        ``decode(json_array_bytes) -> list`` of records (a typed msgspec decoder). May raise
        ``msgspec.DecodeError`` (invalid JSON) or ``UnicodeDecodeError``.
    repair
        Optional ``repair(record_bytes) -> record | None`` for records that are not valid
        JSON (format-specific: Horovod's unescaped tensor names).
    """

    def __init__(
        self,
        decode: Callable[[bytes], list],
        *,
        repair: Callable[[bytes], Any] | None = None,
        damage: Damage,
    ):
        self.decode = decode
        self.repair = repair
        self.damage = damage

    def _decode_array(self, body: bytes) -> list:
        data = b"[" + body + b"]"
        try:
            return self.decode(data)
        except UnicodeDecodeError:
            text = data.decode("utf-8", "replace")
            self.damage.replaced_utf8 += text.count("\ufffd") - data.count("\ufffd".encode())
            return self.decode(text.encode("utf-8"))

    def window(self, buf: bytearray, lo: int, hi: int, on_chunk: Callable[[list, Any], None],
               ) -> bool:
        """Decode ``buf[lo:hi]`` (records separated by commas) in place, without a copy.

        ``buf[lo - 1]`` and ``buf[hi]`` (a separator or whitespace, never part of a record)
        are overwritten with ``[`` and ``]`` for the decode and restored afterwards. On
        success the records go to ``on_chunk(records, body)`` with ``body`` a memoryview of
        the range, valid only during the call, and True is returned. When the range is not
        valid JSON or not UTF-8, nothing is called and False is returned: the caller then
        takes the copying path (:meth:`chunk`), which repairs and counts.
        """
        before, after = buf[lo - 1], buf[hi]
        mv = memoryview(buf)
        win = mv[lo - 1 : hi + 1]
        buf[lo - 1] = 0x5B  # "["
        buf[hi] = 0x5D  # "]"
        try:
            recs = self.decode(win)
        except (msgspec.DecodeError, UnicodeDecodeError):
            recs = None
        finally:
            buf[lo - 1] = before
            buf[hi] = after
        ok = recs is not None
        if ok and recs:
            body = mv[lo:hi]
            try:
                on_chunk(recs, body)
            finally:
                # records may hold views of the buffer (msgspec.Raw): drop them before
                # the views are released, so that the buffer can be resized again
                del recs
                _release(body)
        else:
            del recs
        _release(win, mv)
        return ok

    def chunk(self, body: bytes, *, final: bool) -> tuple[list, int]:
        """Decode ``body`` (records separated by commas, no brackets).

        Returns the records and how many bytes of ``body`` were consumed: all of it, except
        when ``final`` is false and the tolerant parse left an incomplete last record, which
        the caller carries into the next chunk.
        """
        try:
            return self._decode_array(body), len(body)
        except msgspec.DecodeError:
            return self.tolerant(body, final=final)

    def tolerant(self, body: bytes, *, final: bool) -> tuple[list, int]:
        """Record-by-record parse of ``body``; invalid records go to ``repair`` or are counted."""
        starts = [0]
        ends = []
        for m in _SEP.finditer(body):
            ends.append(m.start() + 1)
            starts.append(m.end())
        stripped = len(body.rstrip(_WS + b","))
        ends.append(stripped)
        out: list = []
        n = len(starts)
        i = 0
        consumed = len(body)
        while i < n:
            if starts[i] >= ends[i]:
                i += 1
                continue
            recs = None
            j = i
            # a separator inside a string or a nested object splits one record in pieces:
            # join the following pieces until the result decodes (bounded)
            while j < n and j - i < 16:
                try:
                    recs = self._decode_array(body[starts[i] : ends[j]])
                    break
                except msgspec.DecodeError:
                    j += 1
            if recs is not None:
                out.extend(recs)
                i = j + 1
                continue
            rec_bytes = body[starts[i] : ends[i]]
            fixed = self.repair(rec_bytes) if self.repair is not None else None
            values = _plain_values(rec_bytes) if fixed is None else None
            if fixed is not None:
                out.append(fixed)
                self.damage.repaired_records += 1
            elif values is not None:  # e.g. [1, 2]: whole JSON, only not records
                self.damage.not_events += values
            elif i == n - 1:
                # the last piece: an incomplete record (the file is cut here) or garbage
                if not final:
                    consumed = starts[i]
                    break
                # counted from the record itself, whatever whitespace the chunk began with
                self.damage.lost_bytes += len(body) - _skip_ws(body, starts[i])
                self.damage.lost_records += 1
            else:
                self.damage.bad_records += 1
                if self.damage.first_bad is None:
                    self.damage.first_bad = _io.describe_bytes(rec_bytes)
            i += 1
        return out, consumed


def _plain_values(piece: bytes) -> int | None:
    """How many JSON values ``piece`` (comma-separated, no brackets) holds when it is valid
    JSON and holds no object; None otherwise."""
    try:
        values = msgspec.json.decode(b"[" + piece + b"]")
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    return None if any(isinstance(v, dict) for v in values) else len(values)


@dataclass
class TraceLayout:
    """How a Chrome trace file is laid out."""

    container: str  # "array" (bare event array) or "object" ({..., "traceEvents": [...]})
    metadata: dict | None  # top-level keys other than traceEvents (object container)


class _Text:
    """The file's text as one reusable ``bytearray``, extended block by block."""

    def __init__(self, path: Path, block_bytes: int, damage: Damage) -> None:
        self.blocks = _io.iter_blocks(path, block_bytes, on_note=lambda note: damage.notes.insert(0, note))
        self.buf = bytearray()
        self.eof = False

    def more(self) -> bool:
        """Append the next block (in place: the buffer is reused, not rebuilt)."""
        if self.eof:
            return False
        try:
            self.buf.extend(next(self.blocks))
        except StopIteration:
            self.eof = True
            return False
        return True

    def skip_ws(self, pos: int) -> int:
        """The first non-whitespace position at or after ``pos``, reading more as needed."""
        pos = _skip_ws(self.buf, pos)
        while pos >= len(self.buf) and self.more():
            pos = _skip_ws(self.buf, pos)
        return pos


def read_events(
    path: Path,
    *,
    decoder: ChunkDecoder,
    on_chunk: Callable[[list, bytes], None],
    block_bytes: int | None = None,
) -> TraceLayout:
    """Stream the events of a Chrome trace through ``on_chunk(records, chunk_bytes)``.

    Raises :class:`ReadError` when the file is not a JSON array or a JSON object with a
    ``traceEvents`` array. Damage goes to ``decoder.damage``.
    """
    damage = decoder.damage
    block_bytes = block_bytes or BLOCK_BYTES
    text = _Text(path, block_bytes, damage)
    text.more()
    _io.check_encoding(bytes(text.buf[:512]), path)  # UTF-16/32: a ReadError saying so
    pos = _skip_ws(text.buf, 0)
    if text.buf[pos : pos + 3] == b"\xef\xbb\xbf":  # UTF-8 byte order mark
        pos += 3
    pos = text.skip_ws(pos)
    if pos >= len(text.buf):
        raise ReadError(path, "file holds only whitespace, no JSON")
    if text.buf[pos] == 0x5B:  # "["
        container, header, pos = "array", b"", pos + 1
    elif text.buf[pos] == 0x7B:  # "{"
        container = "object"
        header, pos = _find_events(path, text, pos)
        if pos < 0:
            damage.notes.append("the file ends before the traceEvents array starts")
            return TraceLayout(container, _decode_meta(header, b"}", damage))
    else:
        raise ReadError(path, "not JSON trace data "
                        f"(starts with {bytes(text.buf[pos:pos + 20])!r})")
    pos = _decode_chunks(text, pos, decoder, on_chunk, block_bytes)
    with memoryview(text.buf) as mv:
        rest = bytes(mv[pos:])
    text.buf.clear()
    return TraceLayout(container, _finish(rest, 0, container, header, decoder, on_chunk))


def _dropping_none(on_records: Callable[[list, Any], None], damage: Damage,
                   ) -> Callable[[list, Any], None]:
    """``on_records`` for the records of a chunk that converted; those that did not (None)
    are dropped and counted in ``damage``."""

    def on_chunk(recs: list, body: Any) -> None:
        # only a record-by-record conversion (:func:`lenient`) gives None: a chunk the typed
        # decoder took whole is not scanned (comparing each record with None is not free)
        n_bad = recs.count(None) if type(recs) is not list else 0
        if n_bad:
            damage.bad_records += n_bad
            recs = [r for r in recs if r is not None]
        if recs:
            on_records(recs, body)

    return on_chunk


def stream(path: Path, decode: Callable[[bytes], list], on_records: Callable[[list, Any], None],
           damage: Damage, *, repair: Callable[[bytes], Any] | None = None) -> TraceLayout:
    """:func:`read_events` with a :class:`ChunkDecoder` of ``decode`` (and ``repair``): each
    chunk's records go to ``on_records(records, chunk_bytes)``, without the records that
    did not convert (None), which are dropped and counted in ``damage``."""
    decoder = ChunkDecoder(decode, repair=repair, damage=damage)
    return read_events(path, decoder=decoder, on_chunk=_dropping_none(on_records, damage))


def _find_events(path: Path, text: _Text, pos: int) -> tuple[bytes, int]:
    """``(header, position after the "[")`` of an object's ``traceEvents`` array; the
    position is -1 when the file ends before the array starts."""
    buf = text.buf
    while (key := buf.find(b'"traceEvents"', pos)) < 0 and text.more():
        pass
    if key < 0:
        try:
            meta = msgspec.json.decode(buf)
        except (msgspec.DecodeError, UnicodeDecodeError):
            raise ReadError(path, "a JSON object without a 'traceEvents' array (and not "
                            "valid JSON either)") from None
        if not isinstance(meta, dict):
            raise ReadError(path, "not a JSON object")
        raise ReadError(path, "JSON object has no 'traceEvents' key: not a Chrome trace")
    header = bytes(buf[pos:key])  # from the object's "{": not a byte order mark before it
    p = text.skip_ws(key + len(b'"traceEvents"'))
    if p < len(buf) and buf[p] == 0x3A:  # ":"
        p = text.skip_ws(p + 1)
    if p >= len(buf):
        return header, -1
    if buf[p] != 0x5B:
        raise ReadError(path, "'traceEvents' is not a JSON array")
    return header, p + 1


def _release(*views: memoryview) -> None:
    """Release memoryviews of the read buffer. One that something else still holds (a
    profiler keeping a frame of the decode alive, as Dask's does) stays until collected; the
    buffer then cannot be resized, and :func:`_decode_chunks` goes on with a copy."""
    for v in views:
        try:
            v.release()
        except BufferError:
            pass


def _decode_chunks(text: _Text, pos: int, decoder: ChunkDecoder,
                   on_chunk: Callable[[list, bytes], None], block_bytes: int) -> int:
    """Decode the records from ``pos`` on, chunk by chunk, up to the end of the text; returns
    where the undecoded rest (the last chunk and the end of the file) begins."""
    buf = text.buf
    # buf[pos:] starts at a record (or whitespace before one), and buf[pos - 1] is the "["
    # or "," before it (overwritten during an in-place decode).
    while True:
        # decode once half a block or more is buffered: a chunk is at most about 1.5 blocks
        # and what stays behind is the start of one record (little to move)
        if not text.eof and len(buf) - pos < block_bytes // 2:
            text.more()
            continue
        if text.eof:
            return pos
        cut = _last_boundary(buf, pos, len(buf))
        if cut < 0:
            if not text.more():
                return pos
            continue
        if decoder.window(buf, pos, cut, on_chunk):
            used = cut - pos
        else:
            body = bytes(buf[pos:cut])
            recs, used = decoder.chunk(body, final=False)
            if recs:
                on_chunk(recs, body)
            del recs, body
        # skip the separating comma
        nxt = pos + used
        if used == cut - pos:
            nxt = _skip_ws(buf, cut)
            if nxt < len(buf) and buf[nxt] == 0x2C:
                nxt += 1
        # keep the byte before the next record (the "[" slot of the next in-place decode);
        # deleting a bytearray's prefix is cheap (no copy of the rest)
        try:
            del buf[: nxt - 1]
        except BufferError:  # a view of it is still alive (see _release): go on with a copy
            text.buf = buf = bytearray(buf[nxt - 1 :])
        pos = 1


def _decode_meta(header: bytes, rest: bytes, damage: Damage) -> dict | None:
    if not header:
        return None
    try:
        meta = msgspec.json.decode(header + b'"traceEvents": []' + rest)
    except (msgspec.DecodeError, UnicodeDecodeError):
        # header alone, closed after the last complete key
        h = header.rstrip(_WS + b",")
        try:
            meta = msgspec.json.decode(h + b"}")
        except (msgspec.DecodeError, UnicodeDecodeError):
            damage.notes.append("the top-level metadata could not be decoded")
            return {}
    if isinstance(meta, dict):
        meta.pop("traceEvents", None)
        return meta
    return {}


def _without_zero_fill(rest: bytes, damage: Damage) -> bytes:
    """``rest`` without NUL bytes (and whitespace) at its end: the zero fill a crash leaves
    after the end of an extended file, noted in ``damage``."""
    padded = rest.rstrip(_WS + b"\0")
    if b"\0" not in rest[len(padded):]:
        return rest
    damage.notes.append(f"{rest.count(0, len(padded)):,} byte(s) of NUL data after the end of the trace were ignored")
    return padded


def _closings(rest: bytes, end: int) -> tuple[list[int], dict[int, int]]:
    """Where the event array may close in ``rest[:end]``: the candidate ``]`` positions, and
    for those after a trailing comma, where the records end (just after the last ``}``)."""
    cands, comma = [], {}
    for m in _ARRAY_END.finditer(rest, 0, end):
        cands.append(m.end() - 1)
        if m.group(1):
            comma[m.end() - 1] = m.start() + 1
    lead = _skip_ws(rest, 0)
    if lead < end and rest[lead] == 0x5D:
        cands.insert(0, lead)
    if not cands:  # an array of values that are not records, e.g. [1, 2]: closed all the same
        close = rest.find(b"]", 0, end)
        if close > 0 and b"{" not in rest[:close] and _plain_values(rest[:close]) is not None:
            cands.append(close)
    return cands[-64:], comma


def _after_the_end(rest: bytes, cands: list[int], comma: dict[int, int], container: str, header: bytes,
                   decoder: ChunkDecoder) -> tuple[list, dict | None, bytes, int] | None:
    """``(records, metadata, junk, where the records end)`` when ``rest`` holds the end of
    a closed event array (and, for an object, its closing keys) whose records all decode,
    followed by junk; None otherwise. The latest such end is taken."""
    for p in reversed(cands):
        body = rest[: comma.get(p, p)]
        try:
            recs = decoder._decode_array(body) if body.strip(_WS) else []
        except msgspec.DecodeError:
            continue
        trailer = rest[p + 1:]
        if container == "array":
            return recs, None, trailer.strip(_WS), len(body)
        close = -1
        for _ in range(64):  # the object's closing brace: the first "}" after which it decodes
            close = trailer.find(b"}", close + 1)
            if close < 0:
                break
            try:
                meta = msgspec.json.decode(header + b'"traceEvents": []' + trailer[:close + 1])
            except (msgspec.DecodeError, UnicodeDecodeError):
                continue
            meta = meta if isinstance(meta, dict) else {}
            meta.pop("traceEvents", None)
            return recs, meta, trailer[close + 1:].strip(_WS), len(body)
    return None


def _finish(buf: bytes, pos: int, container: str, header: bytes, decoder: ChunkDecoder,
            on_chunk) -> dict | None:
    """Decode the last part of the array, find its end, and the object's trailing keys."""
    damage = decoder.damage
    rest = _without_zero_fill(buf[pos:], damage)
    end = len(rest.rstrip(_WS))
    # 1. a properly closed array: "]" right after a record's "}" (or an empty array);
    # try the candidates from the end (keys after the array may hold "]" in strings)
    cands, comma = _closings(rest, end)
    for p in reversed(cands):
        body = rest[: comma.get(p, p)]
        trailer = rest[p + 1 : end]
        meta = None
        if container == "array":
            if trailer.strip(_WS):
                continue
        else:
            # the keys after the array: cheap to check first (a "}]" inside the last
            # record leaves a trailer that is not the end of an object)
            try:
                meta = msgspec.json.decode(header + b'"traceEvents": []' + trailer)
            except (msgspec.DecodeError, UnicodeDecodeError):
                continue
            meta = meta if isinstance(meta, dict) else {}
            meta.pop("traceEvents", None)
        try:
            recs = decoder._decode_array(body) if body.strip(_WS) else []
        except msgspec.DecodeError:
            # the array is closed but holds invalid records (or the "]" closes a string
            # in a record cut short): keep every record that parses
            recs, _ = decoder.tolerant(body, final=True)
        if recs:
            on_chunk(recs, body)
        if p in comma:
            damage.notes.append(_TRAILING_COMMA)
        return meta
    # 2. a closed array whose records all decode, followed by bytes that are not the end of
    # the file's JSON (junk appended after the end): the trace is whole; the junk is named
    junk = _after_the_end(rest[:end], cands, comma, container, header, decoder)
    if junk is not None:
        recs, meta, tail, at = junk
        if recs:
            on_chunk(recs, rest[:at])
        if at in comma.values():
            damage.notes.append(_TRAILING_COMMA)
        damage.notes.append(f"{len(tail):,} byte(s) after the end of the trace ({_io.describe_bytes(tail)}) "
                            "were ignored")
        return meta
    # 3. unterminated or cut off: keep every complete record
    damage.unterminated = True
    body = rest[:end]
    stripped = body.rstrip(_WS + b",]")
    hi = len(stripped)
    for _ in range(16):
        p = stripped.rfind(b"}", 0, hi)
        if p < 0:
            break
        try:
            recs = decoder._decode_array(stripped[: p + 1])
        except msgspec.DecodeError:
            hi = p
            continue
        lost = stripped[p + 1 :]
        lost_stripped = lost.strip(_WS + b",]")
        if lost_stripped:
            damage.lost_bytes += len(lost_stripped)
            damage.lost_records += 1 if b"{" in lost_stripped else 0
        if recs:
            on_chunk(recs, stripped[: p + 1])
        return _decode_meta(header, b"}", damage) if container == "object" else None
    # 4. damaged records near the end: record by record
    recs, _ = decoder.tolerant(stripped, final=True)
    if recs:
        on_chunk(recs, stripped)
    return _decode_meta(header, b"}", damage) if container == "object" else None


# --------------------------------------------------------------------------------------
# Records


def lenient(decoder: msgspec.json.Decoder, record: type, *, drop: tuple[str, ...] = (),
            errors: tuple[type[Exception], ...] = (msgspec.ValidationError,),
            ) -> Callable[[bytes], list]:
    """A ``decode`` for :class:`ChunkDecoder`: the typed ``decoder`` (a list of ``record``),
    and when a field somewhere has an unexpected type, a record-by-record conversion.

    A record that does not convert (raising one of ``errors``) is retried without the keys
    ``drop`` that hold an object (unusual ``args``: the event is kept), else becomes None.
    """

    def convert(r: Any) -> Any:
        try:
            return msgspec.convert(r, record, strict=False)
        except errors:
            if isinstance(r, dict) and any(isinstance(r.get(k), dict) for k in drop):
                try:
                    return msgspec.convert({k: v for k, v in r.items() if k not in drop},
                                           record, strict=False)
                except errors:
                    pass
            return None

    def decode(data: bytes) -> list:
        try:
            return decoder.decode(data)
        except msgspec.ValidationError:
            raw = msgspec.json.decode(data)
            if not isinstance(raw, list):
                raise
            return Converted(convert(r) for r in raw)

    return decode


class Converted(list):
    """Records converted one by one (:func:`lenient`): some may be None. A plain ``list``
    from the typed decoder never holds None."""


class _ExactTimes(msgspec.Struct, gc=False):
    ph: str = ""
    ts: Any = None
    dur: Any = None


_EXACT_DECODER = msgspec.json.Decoder(list[_ExactTimes], float_hook=str)


def _needs_text(raw: list, values: np.ndarray) -> bool:
    """Whether a float value at or above 2**43 µs (where float64 spacing exceeds 0.5 ns) is
    present (``raw``: the decoded values, ``values`` the same as float64): its ns must be
    read from the text."""
    if float not in set(map(type, raw)):  # integer µs (old Kineto): exact at any size
        return False
    big = np.flatnonzero(np.abs(np.nan_to_num(values)) >= EXACT_LIMIT_US)
    return any(type(raw[i]) is float for i in big.tolist())


def event_times(keep: list, body: bytes, phases: frozenset[str], damage: Damage,
                complete: np.ndarray | None = None) -> tuple[list, np.ndarray, np.ndarray]:
    """``(records, ts_ns, dur_ns)``: the records of a chunk that have a ``ts``, and their
    ``ts`` and ``dur`` (0 when absent) in exact int64 ns.

    ``keep`` are the chunk's records (decoded with ``ts``/``dur`` as ``int | float``) whose
    phase is in ``phases``, ``body`` the chunk's text. Values are converted with
    :func:`us_to_ns`; when a float at or above 2**43 µs is present, the chunk is decoded
    again with its numbers kept as text (:func:`text_us_to_ns`). Records without a ``ts``
    are dropped; both are noted in ``damage``. ``complete``: which records are complete
    events (ph ``X``), when the caller knows already.
    """
    ts_raw = [e.ts for e in keep]
    dur_raw = [e.dur for e in keep]
    ts = np.array(ts_raw, dtype=np.float64)
    dur = np.array(dur_raw, dtype=np.float64)
    far = ~in_range(ts) | ~in_range(dur)
    if far.any():
        damage.notes.append(f"{int(far.sum())} event(s) with a ts or dur beyond ±2**62 ns (about 146 years) "
                            "were dropped")
        ts[far] = np.nan
    ts_ok = ~np.isnan(ts)
    dur = np.where(ts_ok, dur, 0.0)
    no_dur = np.isnan(dur)
    if no_dur.any():
        no_dur &= complete if complete is not None else np.array([e.ph == "X" for e in keep], dtype=bool)
    if no_dur.any():
        damage.notes.append(f"{int(no_dur.sum())} complete event(s) (ph X) without a dur (absent or null) were "
                            "kept with dur 0")
    ts_ns, bad_ts = us_to_ns(np.where(ts_ok, ts, 0.0))
    dur_ns, bad_dur = us_to_ns(np.where(np.isnan(dur), 0.0, dur))
    if bad_ts.any() or bad_dur.any() or _needs_text(ts_raw, ts) or _needs_text(dur_raw, dur):
        try:
            exact = [e for e in _EXACT_DECODER.decode(b"[" + body + b"]") if e.ph in phases]
        except (msgspec.DecodeError, UnicodeDecodeError):
            exact = None
        if exact is not None and len(exact) == len(keep):
            ts_ns = np.array([text_us_to_ns(e.ts) or 0 for e in exact], dtype=np.int64)
            dur_ns = np.array([text_us_to_ns(e.dur) or 0 for e in exact], dtype=np.int64)
        else:
            damage.notes.append(
                "timestamps beyond float64 ns precision (>= 2**43 µs) could not be "
                "re-read exactly in a damaged chunk and were rounded")
    if not ts_ok.all():
        if int((~ts_ok).sum()) > int(far.sum()):
            damage.notes.append(f"{int((~ts_ok).sum() - far.sum())} event(s) without a ts were dropped")
        keep = [e for e, ok in zip(keep, ts_ok, strict=True) if ok]
        ts_ns, dur_ns = ts_ns[ts_ok], dur_ns[ts_ok]
    return keep, ts_ns, dur_ns


def phase_codes(recs: list) -> tuple[np.ndarray, set[str]]:
    """``(codes, odd)``: one uint8 per record, the ASCII code of its one-character phase
    (``ph``) or :data:`PH_ODD`, and the set of phases that are not one ASCII character."""
    phs = [e.ph for e in recs]
    joined = "".join(phs)
    if len(joined) == len(phs) and joined.isascii() and "" not in phs:
        return np.frombuffer(joined.encode("ascii"), dtype=np.uint8), set()
    codes = np.array([ord(x) if len(x) == 1 and x.isascii() else PH_ODD for x in phs],
                     dtype=np.uint8)
    return codes, {x for x in phs if not (len(x) == 1 and x.isascii())}


#: The phase code of a record whose ``ph`` is not one ASCII character.
PH_ODD = 255
