"""Horovod timeline reader (``HOROVOD_TIMELINE=file``; FORMATS.md section 1).

The timeline is a Chrome-trace JSON array written by the coordinator (rank 0) only. Each
tensor is a "process": ``pid`` N is the tensor named by the ``process_name`` metadata record
of that pid. Per tensor, records nest as ``NEGOTIATE_<REQ>`` B ... E (with one ``X`` tick per
rank that reported the tensor ready), then the top-level op B (``ALLREDUCE``...), activity
B/E pairs (``MEMCPY_IN_FUSION_BUFFER``, ``MPI_ALLREDUCE``...), and the op's E.

Rows (one per matched B/E pair or instant):

=============  ==========  ============  ====================================================
``cat``        ``kind``    ``rank``      what
=============  ==========  ============  ====================================================
negotiate      negotiate   0             ``NEGOTIATE_*`` span
op             comm        0             top-level op span (``ALLREDUCE``, ``BROADCAST``...);
                                         ``bytes`` from the E record's dtype and shape
activity       see below   0             activity span inside an op
rank_ready     marker      the tick's    per-rank readiness tick (``X`` named "3"): ``name``
                           rank          is the enclosing ``NEGOTIATE_*``
cycle          marker      0             ``CYCLE_START`` instant (``HOROVOD_TIMELINE_MARK_CYCLES``)
=============  ==========  ============  ====================================================

Activity kinds: ``comm`` for backend collectives (``NCCL_*``, ``MPI_*``, ``GLOO_*``, ``CCL_*``,
``*_ALLREDUCE``, ``*_BCAST``, ``*_ALLGATHER``...), ``memcpy`` for ``MEMCPY_*`` and
``COPY_*``, ``sync_wait`` for ``WAIT_FOR_DATA``, ``WAIT_FOR_OTHER_TENSOR_DATA`` and
``QUEUE``, ``other`` otherwise (``INIT_FUSION_BUFFER``, ``ALLOCATE_OUTPUT``, ``INIT_NCCL``...).

Notes
-----
* ``rank`` is 0 for every row except the readiness ticks: the coordinator writes the file,
  and its spans are the coordinator's view. ``pid``/``tid`` are missing (a timeline pid is
  a tensor id, kept as the ``tensor`` name).
* ``start_ns`` is epoch ns when pid 0's ``process_name`` record carries
  ``start_time_since_epoch_in_micros`` (Horovod >= 0.20.1), else µs since the timeline was
  initialised (trace-relative). Timestamps are integer µs, so ns are exact.
* E records carry no name: each E closes the innermost open B on its pid (a stack per pid).
  B records left open at the end (a killed job) and E records with nothing open are dropped
  and counted in the file's one :class:`~analysis.errors.RecoveryWarning`. One exception,
  not damage and not warned about: Horovod (0.28.1) writes an E for every barrier and join
  response although it wrote no top-level B for it, so an E that arrives on a pid whose
  last closed span was a ``NEGOTIATE_BARRIER``/``NEGOTIATE_JOIN`` closes nothing and is
  skipped (every real timeline of a job that calls ``hvd.barrier()`` has them; Perfetto
  drops them the same way). Matching runs
  chunk by chunk while the file streams, carrying only the B records still open into the
  next chunk, so a read holds the output rows and one chunk, not every record of the file;
  the result is the same as matching the whole file at once.
* Unterminated arrays (Horovod <= 0.20 always; killed jobs) and files cut mid-record are
  read up to the last complete record. Tensor names are written unescaped, so a name with
  ``"`` breaks the JSON: such records are recovered by a record-by-record parse with a
  regex for the ``process_name`` record layout (counted in the warning).
* **Fusion duplicates** (FORMATS.md section 1, quirk 1): Horovod writes the same activity
  for every tensor of a fused batch, so summing activity time across tensors overcounts.
  The reader keeps the rows as written; use :func:`dedupe_fused` before summing.
"""

from __future__ import annotations

import re
from operator import attrgetter
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from analysis import _io
from analysis.readers import _chrome, default_run_id, register
from analysis.schema import KINDS, make_events

NAME = "horovod"

# Horovod DataType names (common/message.cc) -> bytes per element.
DTYPE_BYTES = {
    "uint8": 1, "int8": 1, "bool": 1, "uint16": 2, "int16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "float32": 4, "int64": 8, "float64": 8,
}

_COMM_ACTIVITY = re.compile(
    r"^(NCCL|MPI|GLOO|CCL|DDL|ROCM|RCCL)_|_(ALLREDUCE|BCAST|BROADCAST|ALLGATHER|REDUCESCATTER|"
    r"ALLTOALL|REDUCE|ADASUM)$"
)
_SYNC_ACTIVITY = {"WAIT_FOR_DATA", "WAIT_FOR_OTHER_TENSOR_DATA", "QUEUE"}
_PROCESS_NAME_RE = re.compile(
    rb'^\{\s*"name"\s*:\s*"process_name"\s*,\s*"ph"\s*:\s*"M"\s*,\s*"pid"\s*:\s*(\d+)\s*,'
    rb'\s*"args"\s*:\s*\{\s*"name"\s*:\s*"(.*)"\s*\}\s*\}$',
    re.S,
)


class _Args(msgspec.Struct, gc=False):
    name: str | None = None
    start_time_since_epoch_in_micros: int | None = None
    dtype: str | None = None
    shape: str | None = None


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    name: str | None = None
    ts: float = float("nan")  # NaN: absent
    pid: int = -1  # -1: absent (timeline pids are >= 0)
    args: _Args | None = None


_LIST_DECODER = msgspec.json.Decoder(list[_Event])
_get_args = attrgetter("args")
_get_dtype = attrgetter("dtype")
_get_shape = attrgetter("shape")
_MISSING = object()


# --------------------------------------------------------------------------------------
# sniff


def sniff(path: Path) -> bool:
    """A JSON array of Chrome-trace records with no ``tid``/``cat`` and Horovod's names."""
    path = Path(path)
    name = path.name.lower()
    if not (name.endswith(".json") or name.endswith(".json.gz") or ".json." in name):
        return False
    head = _io.head(path, 4096)
    if b"scalescope_clock" in head:
        return False
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if not stripped.startswith(b"["):
        return False
    if b'"tid"' in head or b'"cat"' in head:
        return False
    return (
        b'"process_name"' in head
        or b"NEGOTIATE_" in head
        or b"CYCLE_START" in head
        or b"start_time_since_epoch_in_micros" in head
    )


# --------------------------------------------------------------------------------------
# decoding


def _decode(data) -> list:
    try:
        return _LIST_DECODER.decode(data)
    except msgspec.ValidationError:
        # a field of an unexpected type somewhere: convert record by record, leniently
        raw = msgspec.json.decode(data)
        out = []
        for r in raw:
            try:
                out.append(msgspec.convert(r, _Event, strict=False))
            except msgspec.ValidationError:
                out.append(None)
        return out


def _repair(rec: bytes):
    """A ``process_name`` record whose tensor name holds an unescaped ``"`` or ``\\``."""
    m = _PROCESS_NAME_RE.match(rec.strip())
    if not m:
        return None
    name = m.group(2).decode("utf-8", "replace")
    return _Event(ph="M", name="process_name", pid=int(m.group(1)), args=_Args(name=name))


# --------------------------------------------------------------------------------------
# B/E matching


def _match_compact(is_b: np.ndarray, pid: np.ndarray):
    """Vectorised stack matching over B/E records only (``is_b`` False = E), in file order.

    Returns ``(b_pos, e_pos, level, n_open_b)`` (positions into the inputs, pairs in B
    order), or None when some E arrives with nothing open on its pid (the caller then runs
    the reference loop, which knows about Horovod's benign stray E records).
    """
    empty = np.zeros(0, dtype=np.int64)
    if is_b.size == 0:
        return empty, empty, empty, 0
    order = np.argsort(pid, kind="stable")
    sp = pid[order]
    sb = is_b[order]
    cs = np.cumsum(np.where(sb, 1, -1).astype(np.int32), dtype=np.int32)
    new = np.empty(sp.size, dtype=bool)
    new[0] = True
    np.not_equal(sp[1:], sp[:-1], out=new[1:])
    del sp
    group = np.cumsum(new, dtype=np.int64) - 1
    starts = np.flatnonzero(new)
    del new
    base = np.concatenate([np.zeros(1, dtype=np.int32), cs])[starts][group]
    del starts
    depth_after = cs - base
    del cs, base
    if (depth_after < 0).any():
        return None
    level = np.where(sb, depth_after, depth_after + 1).astype(np.int32)
    del depth_after
    maxlev = int(level.max()) + 1
    key = group * maxlev + level
    del group
    o2 = np.argsort(key, kind="stable")
    k2 = key[o2]
    del key
    b2 = sb[o2]
    # an E pairs with the record right before it in (pid, level) order, which is its B
    pair = np.flatnonzero((~b2[1:]) & b2[:-1] & (k2[1:] == k2[:-1])) + 1
    del k2, b2
    b_sorted = o2[pair - 1]
    b_pos = order[b_sorted]
    e_pos = order[o2[pair]]
    lev = level[b_sorted]
    n_open = int(sb.sum()) - pair.size
    o3 = np.argsort(b_pos, kind="stable")
    return b_pos[o3], e_pos[o3], lev[o3], n_open


def match_spans(is_b: np.ndarray, is_e: np.ndarray, pid: np.ndarray,
                benign_after: np.ndarray | None = None) -> tuple[
    np.ndarray, np.ndarray, np.ndarray, int, int
]:
    """Match B/E records per pid with a stack (E closes the innermost open B on its pid).

    Parameters
    ----------
    is_b, is_e
        Boolean masks over records in file order.
    pid
        int64 pid per record (only read where ``is_b | is_e``).
    benign_after
        Optional mask of B records after whose span Horovod writes one stray E: a
        ``NEGOTIATE_BARRIER``/``NEGOTIATE_JOIN`` span is followed by the E that
        ``Timeline::End`` writes for the response, although barrier and join responses get no
        top-level B (seen in every real Horovod 0.28.1 timeline with a barrier). Such an E is
        dropped without being counted as unmatched.

    Returns
    -------
    tuple
        ``(b_index, e_index, level, n_unmatched_b, n_unmatched_e)``: record indices of each
        matched pair, the pair's nesting level (1 = outermost), and the counts of B left
        open and E with nothing open.
    """
    idx = np.flatnonzero(is_b | is_e)
    res = _match_compact(is_b[idx], pid[idx])
    if res is None:
        return _match_spans_loop(is_b, is_e, pid, benign_after)
    b_pos, e_pos, level, n_open = res
    n_e = int(idx.size - is_b[idx].sum())
    return idx[b_pos], idx[e_pos], level.astype(np.int64), n_open, n_e - b_pos.size


def _match_spans_loop(is_b, is_e, pid, benign_after=None):
    """Reference stack matcher (used when an E arrives with nothing open on its pid)."""
    stacks: dict[int, list[int]] = {}
    last_closed: dict[int, int] = {}
    bs, es, lv = [], [], []
    bad_e = 0
    for i in np.flatnonzero(is_b | is_e).tolist():
        p = int(pid[i])
        st = stacks.setdefault(p, [])
        if is_b[i]:
            st.append(i)
        elif st:
            lv.append(len(st))
            b = st.pop()
            bs.append(b)
            es.append(i)
            last_closed[p] = b
        elif benign_after is not None and p in last_closed and benign_after[last_closed.pop(p)]:
            continue  # Horovod's stray E after a barrier/join negotiation: not damage
        else:
            bad_e += 1
    open_b = sum(len(s) for s in stacks.values())
    b = np.array(bs, dtype=np.int64)
    e = np.array(es, dtype=np.int64)
    lev = np.array(lv, dtype=np.int64)
    o = np.argsort(b, kind="stable")
    return b[o], e[o], lev[o], open_b, bad_e


def _match_loop_compact(is_b: np.ndarray, pid: np.ndarray, benign: np.ndarray,
                        benign_pids: set[int]):
    """:func:`_match_spans_loop` over B/E records only, with state carried between chunks.

    ``benign_pids`` holds the pids whose last closed span was a barrier/join negotiation
    that has not yet been followed by its stray E; it is updated in place. Returns
    ``(b_pos, e_pos, level, open_pos, n_bad_e)``.
    """
    stacks: dict[int, list[int]] = {}
    bs, es, lv = [], [], []
    bad_e = 0
    for i, (b, p) in enumerate(zip(is_b.tolist(), pid.tolist(), strict=True)):
        st = stacks.get(p)
        if st is None:
            st = stacks[p] = []
        if b:
            st.append(i)
        elif st:
            lv.append(len(st))
            j = st.pop()
            bs.append(j)
            es.append(i)
            if benign[j]:
                benign_pids.add(p)
            else:
                benign_pids.discard(p)
        elif p in benign_pids:
            benign_pids.discard(p)  # Horovod's stray E after a barrier/join: not damage
        else:
            bad_e += 1
    b_pos = np.array(bs, dtype=np.int64)
    o = np.argsort(b_pos, kind="stable")
    open_pos = np.array(sorted(i for s in stacks.values() for i in s), dtype=np.int64)
    return (b_pos[o], np.array(es, dtype=np.int64)[o], np.array(lv, dtype=np.int64)[o],
            open_pos, bad_e)


def _enclosing(tick_rec: np.ndarray, tick_pid: np.ndarray, cand_b: np.ndarray,
               cand_e: np.ndarray, cand_pid: np.ndarray) -> np.ndarray:
    """Index into the candidate spans of the one on the tick's pid containing it (-1: none).

    Candidates are ``NEGOTIATE_*`` spans given by record numbers of their B and E (a huge E
    for a span still open). Negotiation spans on one pid do not overlap, so the last one
    that began before the tick is the only candidate.
    """
    out = np.full(tick_rec.size, -1, dtype=np.int64)
    if tick_rec.size == 0 or cand_b.size == 0:
        return out
    # one sortable key per (pid, record): pids made dense so the product cannot overflow
    _, dense = np.unique(np.concatenate([cand_pid, tick_pid]), return_inverse=True)
    big = np.int64(max(int(cand_b.max()), int(tick_rec.max())) + 1)
    key = dense[: cand_b.size].astype(np.int64) * big + cand_b
    q = dense[cand_b.size :].astype(np.int64) * big + tick_rec
    o = np.argsort(key)
    key, se = key[o], cand_e[o]
    j = np.searchsorted(key, q) - 1
    jc = np.maximum(j, 0)
    ok = (j >= 0) & (key[jc] // big == q // big) & (tick_rec < se[jc])
    out[ok] = o[jc[ok]]
    return out


# --------------------------------------------------------------------------------------
# streaming state


_PH_B, _PH_E, _PH_X, _PH_M = (ord(c) for c in "BEXM")
_PH_INSTANT = np.array([ord(c) for c in "iIn"], dtype=np.uint8)
_PH_KNOWN = np.array([ord(c) for c in "BEXiInM"], dtype=np.uint8)
_PH_ODD = 255  # a phase that is not one ASCII character
_OPEN = np.iinfo(np.int64).max  # "E record" of a span still open
_NEG_TICK = -2  # name code of a tick outside any negotiation: "NEGOTIATE"
_BYTES_CACHE_MAX = 1 << 16
_GROUPS = {
    "spans": {"rec": np.int64, "name": np.int32, "top": bool, "start": np.int64,
              "dur": np.int64, "pid": np.int32},
    "ticks": {"name": np.int32, "rank": np.int32, "start": np.int64, "pid": np.int32},
    "other": {"name": np.int32, "start": np.int64, "pid": np.int32},
    "inst": {"name": np.int32, "start": np.int64, "pid": np.int32},
}


class _Stream:
    """Turns each chunk of records into output rows straight away.

    B/E records are matched per chunk; the B records still open at the end of a chunk (a
    few per tensor) are carried into the next one, so memory holds the output rows and one
    chunk, never a column per record of the whole file.
    """

    def __init__(self, damage: _chrome.Damage) -> None:
        self.damage = damage
        self.names = _chrome.Categories()
        self.cats: list[str] = []
        # per-name-category properties; the extra last slot serves code -1 (no name)
        self.neg_of = np.zeros(1, dtype=bool)
        self.benign_of = np.zeros(1, dtype=bool)
        self.rank_of = np.full(1, -1, dtype=np.int32)
        self.n = 0
        self.inexact = 0
        self.big_pid = False
        self.tensors: dict[int, str] = {}
        self.epoch_us: int | None = None
        self.bytes_cache: dict[tuple, int | None] = {}
        self.bad_ph = 0
        self.bad_ph_names: set[str] = set()
        self.missing_ts = 0
        self.no_pid = 0
        self.bad_e = 0
        self.neg_dur = 0
        # B records open at the end of the last chunk: record number, pid, ns, name code
        self.c_rec = np.zeros(0, dtype=np.int64)
        self.c_pid = np.zeros(0, dtype=np.int64)
        self.c_ts = np.zeros(0, dtype=np.int64)
        self.c_name = np.zeros(0, dtype=np.int32)
        self.benign_pids: set[int] = set()
        self.n_spans = 0
        self.bytes_at: list[np.ndarray] = []  # span number (in storage order) -> payload
        self.bytes_val: list[np.ndarray] = []
        self.rows: dict[str, dict[str, list[np.ndarray]]] = {
            g: {c: [] for c in cols} for g, cols in _GROUPS.items()
        }

    def _grow_props(self) -> None:
        new = [str(c) for c in list(self.names.index)[len(self.cats):]]
        if not new:
            return
        self.cats.extend(new)
        ranks = []
        for c in new:
            try:
                ranks.append(int(c) if c.isdigit() and len(c) < 10 else -1)
            except ValueError:  # a Unicode digit int() does not take
                ranks.append(-1)
        self.neg_of = np.concatenate([self.neg_of[:-1], [c.startswith("NEGOTIATE") for c in new],
                                      [False]])
        self.benign_of = np.concatenate([self.benign_of[:-1],
                                         [c in ("NEGOTIATE_BARRIER", "NEGOTIATE_JOIN")
                                          for c in new], [False]])
        self.rank_of = np.concatenate([self.rank_of[:-1], np.array(ranks, dtype=np.int32),
                                       np.full(1, -1, dtype=np.int32)])

    def _emit(self, group: str, **cols: np.ndarray) -> None:
        out = self.rows[group]
        for k, v in cols.items():
            out[k].append(v)

    def add(self, recs: list) -> None:
        n = len(recs)
        base = self.n
        self.n += n
        # phase: one ASCII code per record (no hashing) when every phase is one character
        phs = [e.ph for e in recs]
        joined = "".join(phs)
        if len(joined) == n and joined.isascii() and "" not in phs:
            ph = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        else:
            ph = np.array([ord(x) if len(x) == 1 and x.isascii() else _PH_ODD for x in phs],
                          dtype=np.uint8)
            self.bad_ph_names.update(x for x in phs if not (len(x) == 1 and x.isascii()))
        del phs, joined
        names = self.names.encode([e.name for e in recs])
        self._grow_props()
        ts = np.array([e.ts for e in recs], dtype=np.float64)
        has_ts = ~np.isnan(ts)
        ts_ns, inexact = _chrome.us_to_ns(np.where(has_ts, ts, 0.0))
        del ts
        self.inexact += int(inexact.sum())
        pid = np.array([e.pid for e in recs], dtype=np.int64)
        if pid.size and pid.max() >= 2**31:
            self.big_pid = True
            pid[pid >= 2**31] = -1
        pid_ok = pid >= 0
        a_pos, a_val = self._args(recs, ph)

        # B/E matching, with the B records carried open from earlier chunks
        is_bph = ph == _PH_B
        be_any = is_bph | (ph == _PH_E)
        self.no_pid += int((be_any & ~pid_ok).sum())
        be = np.flatnonzero(be_any & has_ts & pid_ok)
        loc_pid = pid[be]
        involved = np.isin(self.c_pid, loc_pid)
        ci, ck = np.flatnonzero(involved), np.flatnonzero(~involved)
        nc = ci.size
        comb_b = np.concatenate([np.ones(nc, dtype=bool), is_bph[be]])
        comb_pid = np.concatenate([self.c_pid[ci], loc_pid])
        comb_rec = np.concatenate([self.c_rec[ci], base + be])
        comb_ts = np.concatenate([self.c_ts[ci], ts_ns[be]])
        comb_name = np.concatenate([self.c_name[ci], names[be]])
        res = _match_compact(comb_b, comb_pid)
        if res is None:
            benign = comb_b & self.benign_of[comb_name]
            b_pos, e_pos, level, open_pos, bad = _match_loop_compact(comb_b, comb_pid, benign,
                                                                     self.benign_pids)
            self.bad_e += bad
        else:
            b_pos, e_pos, level, _ = res
            still = comb_b.copy()
            still[b_pos] = False
            open_pos = np.flatnonzero(still)
            if b_pos.size and (self.benign_pids or self.benign_of.any()):
                self._track_benign(comb_pid[b_pos], e_pos, self.benign_of[comb_name[b_pos]])
        e_loc = be[e_pos - nc]  # an E is always in this chunk
        if b_pos.size:
            start = comb_ts[b_pos]
            dur = ts_ns[e_loc] - start
            neg = dur < 0
            if neg.any():
                self.neg_dur += int(neg.sum())
                dur = np.maximum(dur, 0)
            if a_pos.size:  # payloads, kept sparse: only op spans have one
                hit = np.minimum(np.searchsorted(a_pos, e_loc), a_pos.size - 1)
                ok = a_pos[hit] == e_loc
                if ok.any():
                    self.bytes_at.append(self.n_spans + np.flatnonzero(ok))
                    self.bytes_val.append(a_val[hit[ok]])
            self.n_spans += b_pos.size
            self._emit("spans", rec=comb_rec[b_pos], name=comb_name[b_pos], top=level == 1,
                       start=start, dur=dur, pid=comb_pid[b_pos].astype(np.int32))
        kept = (self.c_rec[ck], self.c_pid[ck], self.c_ts[ck], self.c_name[ck])

        # X records: per-rank readiness ticks (named by a rank number) and others
        xi = np.flatnonzero((ph == _PH_X) & has_ts)
        xr = self.rank_of[names[xi]]
        is_tick = (xr >= 0) & pid_ok[xi]
        ti, oi = xi[is_tick], xi[~is_tick]
        if ti.size:
            # a tick's name is its negotiation's: the NEGOTIATE_* span on its pid that
            # contains it (closed in this chunk, or still open)
            neg_b = self.neg_of[comb_name]
            m = neg_b[b_pos]
            o = open_pos[neg_b[open_pos]]
            k = self.neg_of[kept[3]]
            cand_b = np.concatenate([comb_rec[b_pos[m]], comb_rec[o], kept[0][k]])
            cand_e = np.concatenate([base + e_loc[m], np.full(o.size + int(k.sum()), _OPEN)])
            cand_pid = np.concatenate([comb_pid[b_pos[m]], comb_pid[o], kept[1][k]])
            cand_name = np.concatenate([comb_name[b_pos[m]], comb_name[o], kept[3][k]])
            enc = _enclosing(base + ti, pid[ti], cand_b, cand_e, cand_pid)
            tname = np.where(enc >= 0, cand_name[np.maximum(enc, 0)], _NEG_TICK)
            self._emit("ticks", name=tname.astype(np.int32), rank=xr[is_tick], start=ts_ns[ti],
                       pid=pid[ti].astype(np.int32))
        if oi.size:
            self._emit("other", name=names[oi], start=ts_ns[oi], pid=pid[oi].astype(np.int32))
        ii = np.flatnonzero(np.isin(ph, _PH_INSTANT) & has_ts)
        if ii.size:
            self._emit("inst", name=names[ii], start=ts_ns[ii], pid=pid[ii].astype(np.int32))

        # carry the B records still open
        self.c_rec = np.concatenate([kept[0], comb_rec[open_pos]])
        self.c_pid = np.concatenate([kept[1], comb_pid[open_pos]])
        self.c_ts = np.concatenate([kept[2], comb_ts[open_pos]])
        self.c_name = np.concatenate([kept[3], comb_name[open_pos]])

        known = np.isin(ph, _PH_KNOWN)
        if not known.all():
            self.bad_ph += int((~known).sum())
            self.bad_ph_names.update(chr(c) for c in np.unique(ph[~known]).tolist()
                                     if c != _PH_ODD)
        self.missing_ts += int((known & (ph != _PH_M) & ~has_ts).sum())

    def _args(self, recs: list, ph: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Metadata (tensor names, epoch anchor) and the payload of records with dtype/shape.

        Returns the chunk positions (sorted) and byte counts of the records whose dtype and
        shape give a payload.
        """
        args = list(map(_get_args, recs))
        if args.count(None) == len(args):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        idx = np.array([i for i, a in enumerate(args) if a is not None], dtype=np.int64)
        is_m = ph[idx] == _PH_M
        for i in idx[is_m].tolist():
            e = recs[i]
            if e.name == "process_name" and e.pid >= 0:
                a = e.args
                if a.start_time_since_epoch_in_micros is not None:
                    self.epoch_us = a.start_time_since_epoch_in_micros
                if a.name is not None:
                    self.tensors[e.pid] = a.name
        rest = idx[~is_m]
        sel = [args[i] for i in rest.tolist()]
        del args
        # one payload per distinct (dtype, shape): the same few keys repeat every cycle
        cache = self.bytes_cache
        keys = list(zip(map(_get_dtype, sel), map(_get_shape, sel), strict=True))
        vals = [cache.get(k, _MISSING) for k in keys]
        if _MISSING in vals:
            for j, k in enumerate(keys):
                if vals[j] is _MISSING:
                    if len(cache) >= _BYTES_CACHE_MAX:
                        cache.clear()
                    vals[j] = cache[k] = _bytes_of(*k)
        ok = np.array([v is not None for v in vals], dtype=bool)
        return rest[ok], np.array([v for v in vals if v is not None], dtype=np.int64)

    def _track_benign(self, pair_pid: np.ndarray, e_pos: np.ndarray, flag: np.ndarray) -> None:
        """Record, per pid, whether its last closed span was a barrier/join negotiation."""
        o = np.argsort(e_pos)[::-1]  # latest closure first
        u, first = np.unique(pair_pid[o], return_index=True)
        for p, f in zip(u.tolist(), flag[o][first].tolist(), strict=True):
            if f:
                self.benign_pids.add(p)
            else:
                self.benign_pids.discard(p)


# --------------------------------------------------------------------------------------
# read


def _bytes_of(dtype: str | None, shape: str | None) -> int | None:
    if dtype is None or shape is None:
        return None
    size = DTYPE_BYTES.get(dtype.lower())
    if size is None:
        return None
    dims = re.findall(r"-?\d+", shape)
    if not shape.strip().startswith("["):
        return None
    n = 1
    for d in dims:
        v = int(d)
        if v < 0:
            return None
        n *= v
    return n * size


def _activity_kind(name: str) -> str:
    if name in _SYNC_ACTIVITY:
        return "sync_wait"
    if name.startswith("MEMCPY_") or name.startswith("COPY_"):
        return "memcpy"
    if name.startswith("INIT_") or name.startswith("ALLOCATE_"):
        return "other"
    if _COMM_ACTIVITY.search(name):
        return "comm"
    return "other"


def read(path: str | Path, *, run_id: str | None = None) -> pd.DataFrame:
    """Read a Horovod timeline into the event schema.

    Parameters
    ----------
    path
        ``HOROVOD_TIMELINE`` output (``.json``; gzip is accepted too).
    run_id
        Value of the ``run_id`` column; default: the file name without suffixes.

    Returns
    -------
    pandas.DataFrame
        Event schema (:data:`analysis.schema.EVENT_COLUMNS`), rows sorted by ``start_ns``;
        ``cat`` is ``negotiate``/``op``/``activity``/``rank_ready``/``cycle``, ``tensor``
        the tensor name, ``bytes`` the op's payload when its dtype and shape were written.

    Raises
    ------
    ReadError
        Missing, empty or non-JSON file, or corrupt gzip.
    """
    path = Path(path)
    run_id = run_id if run_id is not None else default_run_id(path)
    damage = _chrome.Damage()
    state = _Stream(damage)

    def on_chunk(recs: list, body) -> None:
        n_bad = recs.count(None)
        if n_bad:
            damage.bad_records += n_bad
            recs = [r for r in recs if r is not None]
        if recs:
            state.add(recs)

    decoder = _chrome.ChunkDecoder(_decode, repair=_repair, damage=damage)
    layout = _chrome.read_events(path, decoder=decoder, on_chunk=on_chunk)
    if layout.container != "array":
        from analysis.errors import ReadError

        raise ReadError(path, "a JSON object, not a Horovod timeline (a JSON array)")
    df = _build(state, run_id)
    damage.warn(path, stacklevel=3)
    return df


def _build(st: _Stream, run_id: str) -> pd.DataFrame:
    """The frame from the accumulated rows: one column at a time, each chunk list freed."""
    damage = st.damage
    if st.big_pid:
        damage.notes.append("pid values beyond 2**31 were treated as missing")
    if st.inexact:
        damage.notes.append(
            f"{st.inexact} timestamp(s) had a fraction of a µs beyond float64 precision "
            "(Horovod writes integer µs); rounded"
        )
    open_b = st.c_rec.size
    if open_b:
        damage.notes.append(f"{open_b} B record(s) had no matching E (still open at the end) "
                            "and were dropped")
    if st.bad_e:
        damage.notes.append(f"{st.bad_e} E record(s) had no open B on their pid and were dropped")
    if st.no_pid:
        damage.notes.append(f"{st.no_pid} B/E record(s) without a pid were dropped")
    if st.neg_dur:
        damage.notes.append(f"{st.neg_dur} span(s) ended before they began; "
                            "their duration was set to 0")
    if st.bad_ph:
        damage.notes.append(f"{st.bad_ph} record(s) of unsupported phase(s) "
                            f"{sorted(st.bad_ph_names)} were skipped")
    if st.missing_ts:
        damage.notes.append(f"{st.missing_ts} record(s) without a ts were dropped")
    offset_ns = st.epoch_us * 1000 if st.epoch_us is not None else 0

    cats = st.cats
    kind_names = list(KINDS)
    K = {k: np.int8(i) for i, k in enumerate(kind_names)}
    # per-name-category properties; the extra last slot serves code -1 (no name)
    act_kind_of = np.array([kind_names.index(_activity_kind(c)) for c in cats]
                           + [kind_names.index("other")], dtype=np.int8)
    cycle_of = np.array([c == "CYCLE_START" for c in cats] + [False], dtype=bool)
    neg_of = st.neg_of
    cat_names = ["negotiate", "op", "activity", "rank_ready", "cycle", "instant"]
    CN, CO, CA, CR, CC, CI = (np.int8(i) for i in range(6))

    rows = st.rows
    sizes = {g: sum(a.size for a in rows[g]["start"]) for g in _GROUPS}
    n = sum(sizes.values())
    bounds = np.cumsum([0] + [sizes[g] for g in _GROUPS]).tolist()
    seg = {g: slice(bounds[i], bounds[i + 1]) for i, g in enumerate(_GROUPS)}

    def parts(group: str, col: str) -> np.ndarray:
        lst = rows[group].pop(col)
        arr = np.concatenate(lst) if lst else np.zeros(0, dtype=_GROUPS[group][col])
        lst.clear()
        _chrome.release_freed_memory()
        return arr

    def col(name: str, dtype, **fill) -> np.ndarray:
        """One column over all rows as stored: spans, ticks, other X, instants."""
        out = np.empty(n, dtype=dtype)
        for g in _GROUPS:
            out[seg[g]] = fill[g] if g in fill else parts(g, name)
        return out

    # Row order: by start, ties in the order spans (by their B record: a span carried over
    # chunks is stored late), ticks, other X, instants; the same order as reading the whole
    # file at once.
    span_rec = parts("spans", "rec")
    start = col("start", np.int64)
    if span_rec.size > 1 and (span_rec[1:] < span_rec[:-1]).any():
        arr = np.arange(n)
        arr[seg["spans"]] = np.argsort(span_rec, kind="stable")
        del span_rec
        order = arr[np.argsort(start[arr], kind="stable")]
        del arr
    else:
        del span_rec
        order = np.argsort(start, kind="stable")
    start = start[order]
    if offset_ns:
        start += offset_ns

    def final(arr: np.ndarray) -> np.ndarray:
        return arr[order]

    dur = final(col("dur", np.int64, ticks=0, other=0, inst=0))
    # name codes; a tick outside any negotiation is "NEGOTIATE", an unnamed record "<unnamed>"
    span_name = parts("spans", "name")
    other_name = parts("other", "name")
    inst_name = parts("inst", "name")
    top = parts("spans", "top")
    span_neg = neg_of[span_name]
    span_cat = np.where(span_neg, CN, np.where(top, CO, CA)).astype(np.int8)
    span_kind = np.where(span_neg, K["negotiate"],
                         np.where(top, K["comm"], act_kind_of[span_name])).astype(np.int8)
    del top, span_neg
    kind = final(col("kind", np.int8, spans=span_kind, ticks=K["marker"],
                     other=act_kind_of[other_name], inst=K["marker"]))
    cat = final(col("cat", np.int8, spans=span_cat, ticks=CR, other=CA,
                    inst=np.where(cycle_of[inst_name], CC, CI).astype(np.int8)))
    del span_kind, span_cat
    name = final(col("name", np.int32, spans=span_name, other=other_name, inst=inst_name))
    del span_name, other_name, inst_name
    cats_out = [*cats, "NEGOTIATE"]
    name[name == _NEG_TICK] = len(cats)
    if (name < 0).any():
        cats_out.append("<unnamed>")
        name[name < 0] = len(cats_out) - 1
    rank = final(col("rank", np.int32, spans=0, other=0, inst=0))
    nbytes = np.zeros(n, dtype=np.int64)
    nbytes_na = np.ones(n, dtype=bool)
    if st.bytes_at:
        at = np.concatenate(st.bytes_at)  # spans come first in storage order
        nbytes[at] = np.concatenate(st.bytes_val)
        nbytes_na[at] = False
        del at
    st.bytes_at = st.bytes_val = []
    nbytes, nbytes_na = final(nbytes), final(nbytes_na)
    pid = final(col("pid", np.int32))

    # tensor names by pid
    tcodes = np.full(n, -1, dtype=np.int32)
    tensor_cats: list[str] = []
    if st.tensors:
        keys = np.array(list(st.tensors), dtype=np.int64)
        tcodes_of_key, uniq = pd.factorize(np.array(list(st.tensors.values()), dtype=object))
        tensor_cats = list(uniq)
        ok = pid >= 0
        if keys.min() >= 0 and keys.max() < max(4 * n, 1 << 16):
            # tensor pids are small integers: a lookup table beats a search per row
            table = np.full(int(keys.max()) + 2, -1, dtype=np.int32)
            table[keys] = tcodes_of_key
            tcodes = table[np.where(ok, np.minimum(pid, table.size - 1), table.size - 1)]
        else:
            korder = np.argsort(keys)
            sk = keys[korder]
            where = np.minimum(np.searchsorted(sk, pid), sk.size - 1)
            found = (sk[where] == pid) & ok
            tcodes[found] = tcodes_of_key[korder[where[found]]]
    del pid

    return make_events(
        n,
        copy=False,
        run_id=_chrome.const_category(run_id, n),
        rank=pd.arrays.IntegerArray(rank, np.zeros(n, dtype=bool)),
        local_rank=_chrome.na_int(n, "Int32"),
        host=_chrome.const_category(None, n),
        pid=_chrome.na_int(n, "Int64"),
        tid=_chrome.na_int(n, "Int64"),
        device=_chrome.na_int(n, "Int16"),
        stream=_chrome.na_int(n, "Int64"),
        name=_chrome.from_codes(name, cats_out),
        kind=_chrome.from_codes(kind, kind_names),
        cat=_chrome.from_codes(cat, cat_names),
        start_ns=start,
        dur_ns=dur,
        step=_chrome.na_int(n, "Int32"),
        epoch=_chrome.na_int(n, "Int32"),
        bytes=pd.arrays.IntegerArray(nbytes, nbytes_na),
        tensor=_chrome.from_codes(tcodes, tensor_cats),
        correlation=_chrome.na_int(n, "Int64"),
        source=_chrome.const_category(NAME, n),
    )


def dedupe_fused(df: pd.DataFrame) -> pd.DataFrame:
    """Drop the duplicate activity rows Horovod writes for every tensor of a fused batch.

    ``ActivityStartAll`` records the same activity (same name, same start and end) on each
    tensor of a fusion batch, so summing activity time across tensors overcounts
    (FORMATS.md section 1, quirk 1). This keeps the first row of each
    ``(run_id, rank, name, start_ns, dur_ns)`` among ``cat == "activity"`` rows; other rows
    are returned unchanged. The ``tensor`` of a kept row is one tensor of the batch.

    Parameters
    ----------
    df
        Events from :func:`read` (any frame in the event schema works).

    Returns
    -------
    pandas.DataFrame
        A new frame (input untouched) with a fresh ``RangeIndex``.

    Examples
    --------
    >>> from analysis.schema import KINDS, make_events
    >>> ev = make_events(name=["MPI_ALLREDUCE", "MPI_ALLREDUCE", "ALLREDUCE"], kind="comm",
    ...                  cat=["activity", "activity", "op"], start_ns=[5, 5, 0],
    ...                  dur_ns=[3, 3, 10], tensor=["a", "b", "a"], rank=0, source="horovod")
    >>> len(dedupe_fused(ev))
    2
    """
    act = (df["cat"] == "activity").to_numpy()
    if not act.any():
        return df.reset_index(drop=True).copy()
    sub = df.loc[act, ["run_id", "rank", "name", "start_ns", "dur_ns"]]
    dup = sub.duplicated(keep="first")
    drop = np.zeros(len(df), dtype=bool)
    drop[np.flatnonzero(act)[dup.to_numpy()]] = True
    return df.loc[~drop].reset_index(drop=True)


register(
    NAME,
    sniff=sniff,
    read=read,
    kind="events",
    suffixes=(".json",),
    description="Horovod timeline (HOROVOD_TIMELINE)",
)
