"""PyTorch profiler (Kineto) Chrome-trace reader (docs/formats.md §2).

Reads ``prof.export_chrome_trace`` / ``tensorboard_trace_handler`` output (``.json`` or
``.json.gz``, and the ``.tmp`` a crashed run leaves), every schema generation: the old
categories ``Operator``/``Kernel``/``Runtime``/``Memcpy``/``Memset``, the current
``cpu_op``/``kernel``/``cuda_runtime``/``gpu_memcpy``/..., and pre-Kineto bare arrays.

Mapping
-------
===========================================  =================================================
source                                       row
===========================================  =================================================
``kernel``                                   kind ``compute``; ``comm`` for NCCL kernels
                                             (``nccl*`` names) and kernels with
                                             ``Collective name``
``gpu_memcpy`` / ``gpu_memset``              ``memcpy`` / ``memset``, ``bytes`` = args.bytes
``cuda_runtime`` / ``cuda_driver``           ``runtime``
``cuda_sync``                                ``sync_wait``
``cpu_op``                                   ``cpu_op``; ``comm`` for collective ops
                                             (``c10d::*``, ``record_param_comms``, ``nccl:*``,
                                             ``gloo:*``, ``mpi:*``)
``user_annotation``                          ``range``; ``comm`` for ``nccl:*``/``gloo:*``;
                                             ``data`` for ``enumerate(DataLoader)#...``;
                                             ``ProfilerStep#N`` is a ``range`` with step N
``gpu_user_annotation``                      ``range`` on the GPU row
``python_function``                          ``other`` (Python call-stack frames overlap the
                                             ops they call; counting them as ``cpu_op`` would
                                             count CPU time twice)
instants (``ph`` i/I)                        ``marker``, ``dur_ns`` 0
``M``, flows ``s``/``f``/``t``, counters     not events: skipped (they are metadata and links,
``C``, samples/objects                       not time spans; no data is lost)
anything else (``overhead``, ``Trace``...)   ``other``
===========================================  =================================================

Columns: ``cat`` is the source's own category; GPU rows (kernels, copies, sets, GPU
annotations) have ``device`` = the trace pid and ``stream`` = ``args.stream`` (else the tid),
and missing ``pid``/``tid``; host rows have ``pid``/``tid`` = OS ids. Synthetic tracks with
*string* pids/tids (``"Spans"``, ``"Traces"``, ``""``: the profiler window span and the
``Iteration Start``/``Record Window End`` instants, a handful per file) are kept as rows with
``pid``/``tid`` missing. ``rank`` comes from ``distributedInfo.rank``, else from the file
name (``rank-N``, ``rank_N``, ``workerN``), else is missing; ``host`` from ``host_name``.
``correlation`` is the CUDA correlation id (``args.correlation``: runtime call <-> GPU
activity); ``External id`` (CPU op <-> launch) has no column in the schema and is not kept.

``bytes``: collectives with ``In msg nelems`` (``record_param_comms`` and the NCCL kernels
Kineto copies it to) -> nelems x sizeof(``dtype``); ``gloo:*``/``nccl:*``/``c10d::*`` rows
without it -> sum over the tensor inputs of prod(``Input Dims``) x sizeof(``Input type``)
when ``record_shapes`` was on; copies and sets -> ``args.bytes``.

``step``: host rows inside a ``ProfilerStep#N`` range (by time, on any thread) get N; GPU
rows get the step of the runtime call with the same correlation id (the earliest, should
two share one); ``ProfilerStep#N`` rows on the GPU get N from their name.

Time: ``start_ns`` = ``baseTimeNanoseconds`` + round(ts x 1000) when the trace has a base
(Kineto >= 2024), else round(ts x 1000) (older traces: ts is epoch µs). ``displayTimeUnit``
is a display hint only. Fractional µs are kept to the ns exactly, at any size
(:func:`analysis.readers._chrome.event_times`).
"""

from __future__ import annotations

import math
import re
from itertools import compress, repeat
from operator import attrgetter, is_not
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from analysis import _io
from analysis.readers import _assembly, _chrome, numbers
from analysis.readers.registry import default_run_id, register
from analysis.schema import KINDS

NAME = "kineto"

#: c10 ScalarType names (``dtype`` of collectives) -> bytes per element.
SCALAR_BYTES = {
    "float": 4, "double": 8, "half": 2, "bfloat16": 2, "int": 4, "long": 8, "short": 2,
    "char": 1, "byte": 1, "bool": 1, "complexfloat": 8, "complexdouble": 16,
    "complexhalf": 4, "uint16": 2, "uint32": 4, "uint64": 8, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "qint8": 1, "quint8": 1,
    "qint32": 4,
}
#: C++ type names in ``Input type`` (record_shapes) -> bytes per element.
CPP_TYPE_BYTES = {
    "float": 4, "double": 8, "c10::half": 2, "c10::bfloat16": 2, "int": 4, "long int": 8,
    "long": 8, "short int": 2, "short": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "int64_t": 8, "int32_t": 4,
}

_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "memcpy", "memset"}
_CAT_KIND = {
    "kernel": "compute", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset",
    "memset": "memset", "cuda_runtime": "runtime", "cuda_driver": "runtime",
    "runtime": "runtime", "driver": "runtime", "cuda_sync": "sync_wait", "cpu_op": "cpu_op",
    "operator": "cpu_op", "user_annotation": "range", "gpu_user_annotation": "range",
    "python_function": "other", "cpu_instant_event": "marker", "collective_comm": "comm",
}
_HOST_COLLECTIVE = re.compile(r"^(c10d::|record_param_comms$|nccl:|gloo:|mpi:|ucc:)")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_DATALOADER = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.I)
_STREAM_TID = re.compile(r"^stream\s*(\d+)", re.I)

_KIND_NAMES = sorted(KINDS)  # alphabetical, as pd.Categorical(strings) orders them
_KIND = {k: np.int8(i) for i, k in enumerate(_KIND_NAMES)}
_KEEP = frozenset({"X", "i", "I"})
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
#: Phases that are metadata or links rather than events: skipped, not data loss.
_NOT_EVENTS = frozenset({"M", "s", "t", "f", "C", "P", "O", "N", "D", "R"})
_KEEP_CODES = np.array([ord(c) for c in sorted(_KEEP)], dtype=np.uint8)
_NOT_EVENT_CODES = np.array([ord(c) for c in sorted(_NOT_EVENTS)], dtype=np.uint8)
_PH_X = ord("X")


class _Args(msgspec.Struct, frozen=True, gc=False):
    correlation: Any = None
    stream: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    dtype: Any = None
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    nbytes: Any = msgspec.field(default=None, name="bytes")
    input_dims: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input type")


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    # int | float keeps the int/float distinction: integer µs are exact at any size, a
    # float at or above 2**43 µs may have lost its ns (see _chrome.event_times)
    ts: int | float | None = None
    dur: int | float | None = None
    args: _Args = _NO_ARGS


_LIST_DECODER = msgspec.json.Decoder(list[_Event])


# --------------------------------------------------------------------------------------
# sniff


def sniff(path: Path) -> bool:
    """A JSON object with ``traceEvents`` (or a legacy bare array with ``cat``/``tid``)."""
    path = Path(path)
    name = path.name.lower()
    if ".json" not in name:
        return False
    head = _io.head(path, 8192)
    if b"scalescope_clock" in head:
        return False
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if stripped.startswith(b"{"):
        return any(k in head for k in (b'"traceEvents"', b'"schemaVersion"',
                                       b'"deviceProperties"', b'"distributedInfo"'))
    if stripped.startswith(b"["):
        return b'"ph"' in head and (b'"cat"' in head or b'"tid"' in head)
    return False


# --------------------------------------------------------------------------------------
# decoding


#: Decodes a chunk; a record with unusual ``args`` (a string where a number was expected)
#: is kept without them, another record of unexpected types becomes None (dropped, counted).
_decode = _chrome.lenient(_LIST_DECODER, _Event, drop=("args",),
                          errors=(msgspec.ValidationError, TypeError))


class _State:
    """Turns each chunk of records into rows of the frame straight away (pieces of an
    :class:`_assembly.Assembler`): times, name/category codes, the ``kind`` of each row,
    ids, and sparse byte counts and ``stream N`` track ids."""

    def __init__(self, damage: _chrome.Damage) -> None:
        self.damage = damage
        self.rows = _assembly.Assembler()
        self.name = _assembly.Categories(  # flags by name code
            nccl=(lambda x: str(x).lower().startswith("nccl"), bool, False),
            host_coll=(lambda x: bool(_HOST_COLLECTIVE.match(str(x))), bool, False),
            data=(lambda x: bool(_DATALOADER.match(str(x))), bool, False))
        self.cat = _assembly.Categories(  # kind and flags by category code; none: a legacy op
            kind=(lambda x: _KIND[_CAT_KIND.get(str(x).lower(), "other")], np.int8,
                  _KIND["cpu_op"]),
            kernel=(lambda x: str(x).lower() == "kernel", bool, False),
            host_op=(lambda x: str(x).lower() in ("cpu_op", "operator", "user_annotation"),
                     bool, False))
        self.skipped_unknown: dict[str, int] = {}
        self.unnamed = 0
        self.negative = 0

    def add(self, recs: list, body: bytes) -> None:
        ph, _ = _chrome.phase_codes(recs)
        kept = np.isin(ph, _KEEP_CODES)
        if not kept.all():
            self._skipped(recs, ph, kept)
            keep = list(compress(recs, kept.tolist()))
            ph = ph[kept]
        else:
            keep = recs
        keep, ts_ns, dur_ns = _chrome.event_times(keep, body, _KEEP, self.damage,
                                                  complete=ph == _PH_X)
        if not keep:
            return
        base = self.rows.n
        names = [e.name for e in keep]
        types = set(map(type, names))
        if not types <= {str}:  # None stays missing; another value is named by its text
            if type(None) in types:
                self.unnamed += names.count(None)
            names = [x if type(x) is str or x is None else str(x) for x in names]
        nm = self.name.encode(names)
        ct = self.cat.encode([e.cat for e in keep])
        inst = (ph != _PH_X if len(keep) == ph.size else  # else: some had no ts
                np.array([e.ph != "X" for e in keep], dtype=bool))
        self.negative += int((dur_ns < 0).sum())
        dur_ns = np.where(inst, 0, np.maximum(dur_ns, 0))  # instants last 0
        args = [e.args for e in keep]
        coll = self._sparse(args, nm, base)
        ids = self._ids(keep, args, base)
        self.rows.add(start=ts_ns, dur=dur_ns, kind=self._kind(nm, ct, inst, coll), name=nm,
                      cat=ct, **ids)

    def _skipped(self, recs: list, ph: np.ndarray, kept: np.ndarray) -> None:
        """Count the records of phases that are neither events nor known metadata/links."""
        odd = ~kept & ~np.isin(ph, _NOT_EVENT_CODES)
        for i in np.flatnonzero(odd).tolist():
            e = recs[i].ph
            if e not in _NOT_EVENTS:
                self.skipped_unknown[e] = self.skipped_unknown.get(e, 0) + 1

    def _ids(self, keep: list, args: list, base: int) -> dict[str, np.ndarray]:
        """pid, tid, correlation and stream columns with their missing-masks; a text tid
        ``stream N`` is kept as a sparse ``track`` id (used on GPU rows without a stream)."""
        out = {}
        tids = [e.tid for e in keep]
        streams = [a.stream for a in args]
        if str in set(map(type, streams)):
            streams = [_hex_id(x) for x in streams]
        for col, values in (("pid", [e.pid for e in keep]), ("tid", tids),
                            ("corr", [a.correlation for a in args]), ("stream", streams)):
            out[col], out[col + "_na"], not_int = numbers.int_ids(values)
            if col in ("corr", "stream"):  # present but not an id: left empty, and said
                bad = (out[col] < 0) | not_int
                if bad.any():
                    self.damage.bad_ids += int(bad.sum())
                    out[col + "_na"] = out[col + "_na"] | bad
        tracks = [(base + i, int(m.group(1))) for i in np.flatnonzero(out["tid_na"]).tolist()
                  if isinstance(tids[i], str) and (m := _STREAM_TID.match(tids[i]))]
        if tracks:
            track_rows, track_ids = np.array(tracks, dtype=np.int64).T
            self.rows.add_sparse("track", track_rows, track_ids)
        return out

    def _sparse(self, args: list, nm: np.ndarray, base: int) -> np.ndarray:
        """Stores the chunk's byte counts (sparse: record_shapes sizes first, then explicit
        counts, then collective sizes, so that a later one wins); returns the chunk
        positions of collective records. ``nm``: the records' name codes."""
        nbytes, coll, nelems = _present(args, "nbytes"), _present(args, "collective"), _present(args, "in_nelems")
        # host collectives without a collective size: sum of the inputs' sizes
        shaped = [(i, _shape_bytes(bytes(a.input_dims), bytes(a.input_type)))
                  for i in np.flatnonzero(self.name.props["host_coll"][nm]).tolist()
                  if (a := args[i]).in_nelems is None and a.input_dims]
        counted = [(i, args[i].nbytes) for i in nbytes if type(args[i].nbytes) is int]
        counted += [(i, _collective_bytes(args[i].in_nelems, args[i].dtype)) for i in nelems]
        found = [(base + i, b) for i, b in shaped + counted
                 if b is not None and _I64_MIN <= b <= _I64_MAX]
        if found:  # arrays, not Python tuples: nothing small outlives the chunk
            rows, values = np.array(found, dtype=np.int64).T
            self.rows.add_sparse("bytes", rows, values)
        return np.array(coll, dtype=np.int64)

    def _kind(self, nm: np.ndarray, ct: np.ndarray, inst: np.ndarray,
              coll: np.ndarray) -> np.ndarray:
        """The ``kind`` code of rows from their name and category codes (the mapping in the
        module docstring); ``coll``: positions of records with a ``Collective name``."""
        name, cat = self.name.props, self.cat.props
        k = cat["kind"][ct]
        is_coll = name["nccl"][nm]
        is_coll[coll] = True
        k[cat["kernel"][ct] & is_coll] = _KIND["comm"]
        host_op = cat["host_op"][ct]
        k[host_op & name["host_coll"][nm]] = _KIND["comm"]
        k[host_op & name["data"][nm]] = _KIND["data"]
        k[inst] = _KIND["marker"]
        return k


def _present(args: list, field: str) -> list[int]:
    """Positions of the args whose ``field`` is not None (most are: a C-level scan)."""
    values = list(map(attrgetter(field), args))
    if values.count(None) == len(values):
        return []
    return list(compress(range(len(values)), map(is_not, values, repeat(None))))


def _collective_bytes(nelems: Any, dtype: Any) -> int | None:
    if type(nelems) is not int or not isinstance(dtype, str):
        return None
    size = SCALAR_BYTES.get(dtype.lower())
    return None if size is None else nelems * size


def _shape_bytes(dims_raw: bytes, types_raw: bytes) -> int | None:
    try:
        dims = msgspec.json.decode(dims_raw)
        types = msgspec.json.decode(types_raw) if types_raw else []
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    sizes = [math.prod(d) * CPP_TYPE_BYTES[t.lower()] for d, t in zip(dims, types, strict=False)
             if isinstance(t, str) and isinstance(d, list) and d and t.lower() in CPP_TYPE_BYTES
             and all(type(x) is int and x >= 0 for x in d)]
    return sum(sizes) if sizes else None


def _hex_id(value: Any) -> Any:
    """A stream id as ROCm's roctracer writes it (``"0x0"``) as its integer; others as given."""
    if isinstance(value, str) and value[:2].lower() == "0x":
        try:
            return int(value, 16)
        except ValueError:
            return value
    return value


#: Ranks and world sizes beyond this are not ranks (the schema's rank is 32-bit).
_RANK_LIMIT = 2**31


def _meta_int(value: Any) -> int | None:
    """An integer metadata value: an int (not a bool), or a string of decimal digits."""
    if type(value) is int:
        return value
    if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
        return int(value.strip())
    return None


def _rank_from(meta: dict | None, path: Path, damage: _chrome.Damage) -> int | None:
    """The rank: ``distributedInfo.rank`` when it is an integer in ``[0, world_size)``,
    else (with a note saying why it was not used) the rank in the file name, else None."""
    m = _RANK_IN_NAME.search(path.name)
    by_name = int(m.group(1)) if m and int(m.group(1)) < _RANK_LIMIT else None
    fallback = (f"the rank in the file name ({by_name}) is used" if by_name is not None
                else "the rank is left empty")
    di = meta.get("distributedInfo") if meta else None
    if di is None or (isinstance(di, dict) and "rank" not in di):
        return by_name
    if not isinstance(di, dict):
        damage.notes.append(f"distributedInfo is a {type(di).__name__}, not an object; {fallback}")
        return by_name
    raw_rank, raw_world = di.get("rank"), di.get("world_size")
    rank, world = _meta_int(raw_rank), _meta_int(raw_world)
    if raw_world is not None and (world is None or not 1 <= world <= _RANK_LIMIT):
        damage.notes.append(f"distributedInfo.world_size {raw_world!r} is not a number of ranks; ignored")
        world = None
    if rank is None:
        damage.notes.append(f"distributedInfo.rank {raw_rank!r} is not an integer; {fallback}")
        return by_name
    if not 0 <= rank < (world if world is not None else _RANK_LIMIT):
        bound = f"[0, world_size {world})" if world is not None else "the range of ranks"
        damage.notes.append(f"distributedInfo.rank {raw_rank!r} is outside {bound}; {fallback}")
        return by_name
    if type(raw_rank) is not int:
        damage.notes.append(f"distributedInfo.rank is the string {raw_rank!r}; read as rank {rank}")
    return rank


# --------------------------------------------------------------------------------------
# read


def read(path: str | Path, *, run_id: str | None = None) -> pd.DataFrame:
    """Read a PyTorch profiler (Kineto) Chrome trace into the event schema.

    Parameters
    ----------
    path
        ``*.json``, ``*.json.gz`` or an unterminated ``*.json.tmp``.
    run_id
        Value of the ``run_id`` column; default: the file name without suffixes.

    Returns
    -------
    pandas.DataFrame
        Event schema (:data:`analysis.schema.EVENT_COLUMNS`), rows sorted by ``start_ns``
        (stable). See the module docstring for the mapping of each column.

    Raises
    ------
    ReadError
        Missing, empty, non-JSON or non-trace file; corrupt gzip.
    """
    path = Path(path)
    run_id = run_id if run_id is not None else default_run_id(path)
    damage = _chrome.Damage()
    state = _State(damage)
    layout = _chrome.stream(path, _decode, state.add, damage)
    df = _build(state, layout.metadata, path, run_id)
    damage.warn(path, stacklevel=3)
    return df


def _build(state: _State, meta: dict | None, path: Path, run_id: str) -> pd.DataFrame:
    """The frame from the streamed rows (:class:`_assembly.Assembler`, which bounds the
    memory): names and categories narrowed to those in use, then the columns derived from
    several others (step, device, stream) computed in row blocks."""
    damage = state.damage
    if state.skipped_unknown:
        desc = ", ".join(f"{k!r}: {v}" for k, v in sorted(state.skipped_unknown.items()))
        damage.notes.append(f"events of unsupported phases were skipped ({desc})")
    if state.unnamed:  # an event with no name: kept, named by a category of its own
        damage.notes.append(f"{state.unnamed} event(s) had no name and are named '<unnamed>'")
    if state.negative:
        damage.notes.append(f"{state.negative} event(s) with a negative duration got 0")
    base = meta.get("baseTimeNanoseconds") if meta else None
    if base is not None and not (type(base) is int and 0 <= base < 2**62):
        damage.notes.append(f"baseTimeNanoseconds {str(base)[:40]!r} is not a time in ns; ignored "
                            "(times are relative to the trace's own origin)")
        base = None
    host = meta.get("host_name") if meta else None
    if host is not None and not isinstance(host, str):
        damage.notes.append(f"host_name {str(host)[:40]!r} is not a string; ignored")
    rows = state.rows
    names = rows.codes("name", [str(x) for x in state.name.index], negative=("<unnamed>",))
    cats = rows.codes("cat", list(state.cat.index))
    start = rows.order("start", offset=base if type(base) is int else 0)
    kind, name, cat = rows.empty(np.int8), rows.empty(names.dtype), rows.empty(cats.dtype)
    rows.place((kind, name, cat), "rows", ("kind", "name", "cat"),
               lambda k, nm, ct: (k, names(nm), cats(ct)))
    dur = rows.column("dur", np.int64)

    # flags by output codes (trailing slot: code -1)
    kept_lower = [str(x).lower() for x in cats.kept]
    gpu_of = np.array([x in _GPU_CATS for x in kept_lower] + [False], dtype=bool)
    runtime_of = np.array([_CAT_KIND.get(x) == "runtime" for x in kept_lower] + [False],
                          dtype=bool)
    step_of = np.array([int(m.group(1)) if (m := _STEP.match(x)) else -1 for x in names.kept]
                       + [-1], dtype=np.int64)
    corr, corr_na = rows.nullable("corr")
    step, step_na = _steps(rows.blocks(), start, dur, name, cat, corr, corr_na,
                           gpu_of, runtime_of, step_of, damage)
    nbytes, nbytes_na = rows.sparse("bytes", np.int64)
    pid, tid, device, stream = _ids(rows, cat, gpu_of, damage)
    return rows.events(
        run_id=run_id,
        rank=_rank_from(meta, path, damage),
        host=host if isinstance(host, str) else None,
        pid=pid,
        tid=tid,
        device=device,
        stream=stream,
        name=_assembly.categorical(name, names.kept),
        kind=_assembly.from_codes(kind, _KIND_NAMES, inplace=True),
        cat=_assembly.categorical(cat, cats.kept),
        start_ns=start,
        dur_ns=dur,
        step=pd.arrays.IntegerArray(step, step_na),
        bytes=pd.arrays.IntegerArray(nbytes, nbytes_na),
        correlation=pd.arrays.IntegerArray(corr, corr_na),
        source=NAME,
    )


def _ids(rows: _assembly.Assembler, cat: np.ndarray, gpu_of: np.ndarray,
         damage: _chrome.Damage) -> tuple[Any, Any, Any, Any]:
    """``(pid, tid, device, stream)``: GPU rows carry their trace pid as the device and a
    stream (``args.stream``, else a ``stream N`` track's N, else the tid), and no pid or
    tid; host rows a pid and a tid, and no device or stream."""
    pid, pid_na = rows.nullable("pid")
    tid, tid_na = rows.nullable("tid")
    stream, stream_na = rows.nullable("stream")
    at, track = rows.sparse_rows("track")
    use = gpu_of[cat[at]] & stream_na[at]  # GPU rows on a "stream 7" track without args.stream
    stream[at[use]] = track[use]
    stream_na[at[use]] = False
    device_na = np.empty(pid.size, dtype=bool)
    for b in rows.blocks():
        gpu = gpu_of[cat[b]]
        device_na[b] = ~gpu | pid_na[b]
        pid_na[b] |= gpu
        sn = stream_na[b]
        stream[b] = np.where(sn, tid[b], stream[b])  # no args.stream: the tid
        stream_na[b] = (sn & tid_na[b]) | ~gpu
        tid_na[b] |= gpu
    device = _assembly.masked(pid, device_na, "Int16", damage=damage, column="device")
    return (pd.arrays.IntegerArray(pid, pid_na), pd.arrays.IntegerArray(tid, tid_na), device,
            pd.arrays.IntegerArray(stream, stream_na))


def _steps(blocks: list[slice], start: np.ndarray, dur: np.ndarray, name_codes: np.ndarray,
           cat_codes: np.ndarray, corr: np.ndarray, corr_na: np.ndarray, gpu_of: np.ndarray,
           runtime_of: np.ndarray, step_of: np.ndarray, damage: _chrome.Damage,
           ) -> tuple[np.ndarray, np.ndarray]:
    """The ``step`` column (int32 values, missing-mask) of rows in time order.

    Host rows inside a ``ProfilerStep#N`` range (the latest one begun at or before the row,
    on any thread) get N; GPU rows get the step of the earliest runtime call with the same
    correlation id; ``ProfilerStep#N`` rows on the GPU get N from their name. A step number
    beyond Int32 is missing, with a note.
    """
    n = start.size
    step = np.zeros(n, dtype=np.int32)
    step_na = np.ones(n, dtype=bool)
    lo32, hi32 = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    wide = 0

    def put(b: slice, where: np.ndarray, values: np.ndarray) -> None:
        nonlocal wide
        ok = (values >= lo32) & (values <= hi32)
        if not ok.all():
            wide += int((~ok).sum())
            where, values = where[ok], values[ok]
        step[b][where] = values
        step_na[b][where] = False

    # the ProfilerStep ranges on the host, already in time order
    s_start_a, s_dur, s_name = _assembly.gather(
        blocks, lambda b: (step_of[name_codes[b]] >= 0) & ~gpu_of[cat_codes[b]],
        start, dur, name_codes)
    if s_start_a.size:
        s_end_a, s_n_a = s_start_a + s_dur, step_of[s_name]
        for b in blocks:
            t = start[b]
            j = np.searchsorted(s_start_a, t, side="right") - 1
            jc = np.maximum(j, 0)
            inside = ~gpu_of[cat_codes[b]] & (j >= 0) & (t < s_end_a[jc])
            where = np.flatnonzero(inside)
            put(b, where, s_n_a[jc[where]])
        # GPU rows: the step of the runtime call that launched them (by correlation id)
        keys, vals = _assembly.gather(
            blocks, lambda b: runtime_of[cat_codes[b]] & ~corr_na[b] & ~step_na[b], corr, step)
        if keys.size:
            o = np.argsort(keys, kind="stable")  # the earliest call per id: first in order
            keys, vals = keys[o], vals[o]
            first = np.r_[True, keys[1:] != keys[:-1]]
            keys, vals = keys[first], vals[first]
            for b in blocks:
                g = np.flatnonzero(gpu_of[cat_codes[b]] & ~corr_na[b])
                if not g.size:
                    continue
                cv = corr[b][g]
                pos = np.minimum(np.searchsorted(keys, cv), keys.size - 1)
                hit = keys[pos] == cv
                put(b, g[hit], vals[pos[hit]])
    for b in blocks:  # ProfilerStep rows on the GPU: N from the name
        sn = step_of[name_codes[b]]
        where = np.flatnonzero((sn >= 0) & gpu_of[cat_codes[b]])
        if where.size:
            put(b, where, sn[where])
    if wide:
        damage.notes.append(f"{wide} step value(s) outside Int32's range were set missing")
    return step, step_na


register(
    NAME,
    sniff=sniff,
    read=read,
    kind="events",
    suffixes=(".json", ".json.gz"),
    description="PyTorch profiler / Kineto Chrome trace (.json, .json.gz)",
)
