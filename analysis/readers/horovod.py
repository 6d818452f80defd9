"""Horovod timeline reader (``HOROVOD_TIMELINE=file``; docs/formats.md §1).

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
* **Fusion duplicates** (docs/formats.md §1, quirk 1): Horovod writes the same activity
  for every tensor of a fused batch, so summing activity time across tensors overcounts.
  The reader keeps the rows as written; use :func:`analysis.metrics.dedupe_fused` before
  summing.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from analysis import _io
from analysis.readers import _assembly, _chrome, numbers
from analysis.readers.registry import default_run_id, register
from analysis.schema import KINDS

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
_get_dtype = attrgetter("dtype")
_get_shape = attrgetter("shape")


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


#: Decodes a chunk; a record with a field of an unexpected type becomes None (dropped, counted).
_decode = _chrome.lenient(_LIST_DECODER, _Event)


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
    the reference loop :func:`_match_loop_compact`, which knows about Horovod's benign
    stray E records).
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


def _match_loop_compact(is_b: np.ndarray, pid: np.ndarray, benign: np.ndarray,
                        benign_pids: set[int]):
    """Reference stack matcher over B/E records (``is_b`` False = E) in file order, used
    when an E arrives with nothing open on its pid; state is carried between chunks.

    ``benign`` marks the B records after whose span Horovod writes one stray E: a
    ``NEGOTIATE_BARRIER``/``NEGOTIATE_JOIN`` span is followed by the E that
    ``Timeline::End`` writes for the response, although barrier and join responses get no
    top-level B (every real Horovod 0.28.1 timeline with a barrier). Such an E is dropped
    without being counted as unmatched. ``benign_pids`` holds the pids whose last closed
    span was such a negotiation not yet followed by its stray E; it is updated in place.
    Returns ``(b_pos, e_pos, level, open_pos, n_bad_e)``: the pairs in B order with their
    nesting level (1 = outermost), the B records left open and the count of E records
    with nothing open.
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


def _payload_at(payload: tuple[np.ndarray, np.ndarray], e_loc: np.ndarray,
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(found, bytes)`` of the E records at chunk positions ``e_loc``: whether each has a
    payload (``payload``: sorted chunk positions and byte counts of the records with dtype
    and shape) and its byte count (0 where it has none)."""
    a_pos, a_val = payload
    nbytes = np.zeros(e_loc.size, dtype=np.int64)
    if not a_pos.size:
        return np.zeros(e_loc.size, dtype=bool), nbytes
    hit = np.minimum(np.searchsorted(a_pos, e_loc), a_pos.size - 1)
    ok = a_pos[hit] == e_loc
    nbytes[ok] = a_val[hit[ok]]
    return ok, nbytes


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
    # one sortable key per (pid, record): pid * big + record, the pids made dense first
    # when the product could overflow (timeline pids are small: it cannot, nearly always)
    big = np.int64(max(int(cand_b.max()), int(tick_rec.max())) + 1)
    pids = np.concatenate([cand_pid, tick_pid]).astype(np.int64)
    if pids.min() < 0 or int(pids.max()) >= (2**62) // int(big):
        _, pids = np.unique(pids, return_inverse=True)
    key = pids[: cand_b.size] * big + cand_b
    q = pids[cand_b.size :] * big + tick_rec
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
_OPEN = np.iinfo(np.int64).max  # "E record" of a span still open
_NEG_TICK = -2  # name code of a tick outside any negotiation: "NEGOTIATE"
_BYTES_CACHE_MAX = 1 << 16
#: Row groups, in storage order: spans (rec, name, top, start, dur, pid), readiness ticks
#: (name, rank, start, pid), other X records and instants (name, start, pid).
_GROUPS = ("spans", "ticks", "other", "inst")
_KIND = {k: np.int8(i) for i, k in enumerate(KINDS)}  # kind codes, in KINDS order
_CAT = {c: np.int8(i) for i, c in enumerate(
    ["negotiate", "op", "activity", "rank_ready", "cycle", "instant"])}


def _take(table: dict[str, np.ndarray], which: np.ndarray) -> dict[str, np.ndarray]:
    """The rows ``which`` (indices or a mask) of a table of equal-length columns."""
    return {k: v[which] for k, v in table.items()}


def _cat(*tables: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Tables stacked (the columns of the first; record number, pid, ns, name code)."""
    return {k: np.concatenate([t[k] for t in tables]) for k in ("rec", "pid", "ts", "name")
            if k in tables[0]}


class _Stream:
    """Turns each chunk of records into output rows straight away.

    B/E records are matched per chunk; the B records still open at the end of a chunk (a
    few per tensor) are carried into the next one, so memory holds the output rows and one
    chunk, never a column per record of the whole file.
    """

    def __init__(self, damage: _chrome.Damage) -> None:
        self.damage = damage
        # name categories, and properties by name code
        self.names = _assembly.Categories(
            neg=(lambda c: str(c).startswith("NEGOTIATE"), bool, False),
            benign=(lambda c: str(c) in ("NEGOTIATE_BARRIER", "NEGOTIATE_JOIN"), bool, False),
            rank=(_tick_rank, np.int32, -1),
            act_kind=(lambda c: _KIND[_activity_kind(str(c))], np.int8, _KIND["other"]),
            cycle=(lambda c: str(c) == "CYCLE_START", bool, False))
        self.n = 0
        self.count: Counter[str] = Counter()  # what was dropped or repaired (see _NOTES)
        self.bad_ph_names: set[str] = set()
        self.tensors: dict[int, str] = {}
        # a pid named again with another tensor name: the records after it are stored under
        # a pid of their own (one per lifetime), counted down from the top of int32
        self.alias: dict[int, int] = {}
        self.next_alias = 2**31 - 1
        self.epoch_us: int | None = None
        self.bytes_cache: dict[tuple, int | None] = {}
        # B records open at the end of the last chunk: record number, pid, ns, name code
        self.open = {"rec": np.zeros(0, dtype=np.int64), "pid": np.zeros(0, dtype=np.int64),
                     "ts": np.zeros(0, dtype=np.int64), "name": np.zeros(0, dtype=np.int32)}
        self.benign_pids: set[int] = set()
        self.rows = _assembly.Assembler(_GROUPS)  # the output rows, and sparse "bytes"

    def add(self, recs: list, body: object = None) -> None:
        base = self.n
        self.n += len(recs)
        ph, odd = _chrome.phase_codes(recs)
        self.bad_ph_names.update(odd)
        names = self.names.encode([e.name for e in recs])
        ts = np.fromiter([e.ts for e in recs], np.float64, count=len(recs))
        far = ~numbers.in_range(ts)
        if far.any():  # a B at 1e300 would otherwise become a span from the origin
            self.count["far_ts"] += int(far.sum())
            ts[far] = np.nan
        has_ts = ~np.isnan(ts)
        ts_ns, inexact = numbers.us_to_ns(np.where(has_ts, ts, 0.0))
        del ts
        self.count["inexact"] += int(inexact.sum())
        pid = np.fromiter([e.pid for e in recs], np.int64, count=len(recs))
        if pid.size and pid.max() >= 2**31:
            self.count["big_pid"] += 1
            pid[pid >= 2**31] = -1
        pid = self._lifetimes(recs, ph, pid)
        pid_ok = pid >= 0
        payload = self._args(recs, ph, pid)

        # B/E matching, with the B records carried open from earlier chunks
        is_b = ph == _PH_B
        be_any = is_b | (ph == _PH_E)
        self.count["no_pid"] += int((be_any & ~pid_ok).sum())
        be = np.flatnonzero(be_any & has_ts & pid_ok)
        new = {"rec": base + be, "pid": pid[be], "ts": ts_ns[be], "name": names[be]}
        closed, still_open, kept = self._match(is_b[be], new, be, ts_ns, payload)

        # X records: per-rank readiness ticks (named by a rank number) and others
        xi = np.flatnonzero((ph == _PH_X) & has_ts)
        xr = self.names.props["rank"][names[xi]]
        is_tick = (xr >= 0) & pid_ok[xi]
        ti, oi = xi[is_tick], xi[~is_tick]
        if ti.size:
            tname = self._tick_names(base + ti, pid[ti], closed, still_open, kept)
            self.rows.add("ticks", name=tname.astype(np.int32), rank=xr[is_tick],
                          start=ts_ns[ti], pid=pid[ti].astype(np.int32))
        if oi.size:
            self.rows.add("other", name=names[oi], start=ts_ns[oi], pid=pid[oi].astype(np.int32))
        ii = np.flatnonzero(np.isin(ph, _PH_INSTANT) & has_ts)
        if ii.size:
            self.rows.add("inst", name=names[ii], start=ts_ns[ii], pid=pid[ii].astype(np.int32))
        self.open = _cat(kept, still_open)

        known = np.isin(ph, _PH_KNOWN)
        if not known.all():
            self.count["bad_ph"] += int((~known).sum())
            self.bad_ph_names.update(chr(c) for c in np.unique(ph[~known]).tolist()
                                     if c != _chrome.PH_ODD)
        self.count["missing_ts"] += int((known & (ph != _PH_M) & ~has_ts & ~far).sum())

    def _match(self, is_b: np.ndarray, new: dict, be: np.ndarray, ts_ns: np.ndarray,
               payload: tuple[np.ndarray, np.ndarray]) -> tuple[dict, dict, dict]:
        """Match the chunk's B/E records (``new``, at chunk positions ``be``) and the B
        records carried open on their pids; store the closed spans. Returns the closed
        spans (with ``e``, the record number of their E), the B records still open among
        those matched, and the carried ones not involved."""
        involved = np.isin(self.open["pid"], new["pid"])
        kept = _take(self.open, ~involved)
        comb = _cat(_take(self.open, involved), new)
        nc = int(involved.sum())
        comb_b = np.concatenate([np.ones(nc, dtype=bool), is_b])
        benign_of = self.names.props["benign"]
        res = _match_compact(comb_b, comb["pid"])
        if res is None:
            benign = comb_b & benign_of[comb["name"]]
            b_pos, e_pos, level, open_pos, bad = _match_loop_compact(comb_b, comb["pid"], benign,
                                                                     self.benign_pids)
            self.count["bad_e"] += bad
        else:
            b_pos, e_pos, level, _ = res
            still = comb_b.copy()
            still[b_pos] = False
            open_pos = np.flatnonzero(still)
            if b_pos.size and (self.benign_pids or benign_of.any()):
                self._track_benign(comb["pid"][b_pos], e_pos, benign_of[comb["name"][b_pos]])
        e_loc = be[e_pos - nc]  # an E is always in this chunk
        closed = _take(comb, b_pos)
        closed["e"] = new["rec"][e_pos - nc]
        if b_pos.size:
            self._spans(closed, level, ts_ns[e_loc], e_loc, payload)
        return closed, _take(comb, open_pos), kept

    def _spans(self, spans: dict, level: np.ndarray, end: np.ndarray, e_loc: np.ndarray,
               payload: tuple[np.ndarray, np.ndarray]) -> None:
        """Store closed spans; a payload (``(chunk positions, bytes)`` of records with
        dtype and shape) belongs to the span its E record closes."""
        start = spans["ts"]
        dur = end - start
        neg = dur < 0
        if neg.any():
            self.count["neg_dur"] += int(neg.sum())
            dur = np.maximum(dur, 0)
        ok, nbytes = _payload_at(payload, e_loc)
        if ok.any():  # kept sparse: only op spans have one
            self.rows.add_sparse("bytes", self.rows.sizes["spans"] + np.flatnonzero(ok),
                                 nbytes[ok], group="spans")
        self.rows.add("spans", rec=spans["rec"], name=spans["name"], top=level == 1,
                      start=start, dur=dur, pid=spans["pid"].astype(np.int32))

    def _tick_names(self, rec: np.ndarray, pid: np.ndarray, closed: dict, still_open: dict,
                    kept: dict) -> np.ndarray:
        """A tick's name is its negotiation's: the ``NEGOTIATE_*`` span on its pid that
        contains it (closed in this chunk, or still open); else ``NEGOTIATE``."""
        neg = self.names.props["neg"]
        cands = [_take(t, neg[t["name"]]) for t in (closed, still_open, kept)]
        if not sum(c["name"].size for c in cands):  # no negotiation at all
            return np.full(rec.size, _NEG_TICK)
        ends = np.concatenate([cands[0]["e"],
                               np.full(cands[1]["rec"].size + cands[2]["rec"].size, _OPEN)])
        c = _cat(*cands)
        enc = _enclosing(rec, pid, c["rec"], ends, c["pid"])
        return np.where(enc >= 0, c["name"][np.maximum(enc, 0)], _NEG_TICK)

    def _lifetimes(self, recs: list, ph: np.ndarray, pid: np.ndarray) -> np.ndarray:
        """``pid`` with each pid's records after a ``process_name`` record that renames it
        (a tensor name other than the one it had) moved to a pid of their own, so that
        every span stays under the tensor named when it was written."""
        # renames in force: (raw pid, from chunk position, pid of the lifetime)
        moves = [(p, 0, v) for p, v in self.alias.items()]
        seen: dict[int, str] = {}
        for i in np.flatnonzero(ph == _PH_M).tolist():
            e = recs[i]
            a = e.args
            if e.name != "process_name" or e.pid < 0 or e.pid >= 2**31 or a is None or a.name is None:
                continue
            cur = self.alias.get(e.pid, e.pid)
            old = seen.get(cur, self.tensors.get(cur))
            if old is None or old == a.name:
                seen[cur] = a.name
                continue
            v = self.next_alias
            self.next_alias -= 1
            self.alias[e.pid] = v
            self.count["reused_pid"] += 1
            moves.append((e.pid, i, v))
            seen[v] = a.name
        if not moves:
            return pid
        # each record takes the last move of its raw pid at or before its position
        mv = np.array(moves, dtype=np.int64)
        mkey = mv[:, 0] * 2**32 + mv[:, 1]
        order = np.argsort(mkey, kind="stable")
        mkey, mpid, mnew = mkey[order], mv[order, 0], mv[order, 2]
        ok = pid >= 0
        key = np.where(ok, pid, 0) * 2**32 + np.arange(pid.size, dtype=np.int64)
        at = np.searchsorted(mkey, key, side="right") - 1
        hit = ok & (at >= 0)
        hit[hit] = mpid[at[hit]] == pid[hit]
        out = pid.copy()
        out[hit] = mnew[at[hit]]
        return out

    def _args(self, recs: list, ph: np.ndarray, pid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Metadata (tensor names, epoch anchor) and the payload of records with dtype/shape.

        Returns the chunk positions (sorted) and byte counts of the records whose dtype and
        shape give a payload.
        """
        args = [e.args for e in recs]
        idx = np.fromiter(compress(range(len(args)), args), np.int64)  # the records with args
        if not idx.size:
            return idx, np.zeros(0, dtype=np.int64)
        is_m = ph[idx] == _PH_M
        for i in idx[is_m].tolist():
            e = recs[i]
            if e.name == "process_name" and e.pid >= 0:
                a = e.args
                epoch = a.start_time_since_epoch_in_micros
                if epoch is not None:
                    if type(epoch) is int and 0 <= epoch < 2**62 // 1000:  # epoch ns fit int64
                        self.epoch_us = epoch
                    else:
                        self.count["bad_epoch"] += 1
                if a.name is not None and pid[i] >= 0:
                    self.tensors[int(pid[i])] = a.name  # the pid of this lifetime
        rest = idx[~is_m]
        sel = [args[i] for i in rest.tolist()]
        del args
        # one payload per distinct (dtype, shape): the same few keys repeat every cycle
        cache = self.bytes_cache
        if len(cache) >= _BYTES_CACHE_MAX:  # bounded, whatever a file holds
            cache.clear()
        keys = zip(map(_get_dtype, sel), map(_get_shape, sel), strict=True)
        vals = [cache[k] if k in cache else cache.setdefault(k, _bytes_of(*k)) for k in keys]
        ok = np.array([v is not None for v in vals], dtype=bool)
        return rest[ok], np.array([v for v in vals if v is not None], dtype=np.int64)

    def _track_benign(self, pair_pid: np.ndarray, e_pos: np.ndarray, flag: np.ndarray) -> None:
        """Record, per pid, whether its last closed span was a barrier/join negotiation."""
        if not flag.any():  # no barrier or join closed here: every pid's last was another
            u = np.unique(pair_pid).tolist()
            self.benign_pids.difference_update(u)
            return
        o = np.argsort(e_pos)[::-1]  # latest closure first
        u, first = np.unique(pair_pid[o], return_index=True)
        last = flag[o][first]
        self.benign_pids.update(u[last].tolist())
        self.benign_pids.difference_update(u[~last].tolist())

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
    layout = _chrome.stream(path, _decode, state.add, damage, repair=_repair)
    if layout.container != "array":
        from analysis.errors import ReadError

        raise ReadError(path, "a JSON object, not a Horovod timeline (a JSON array)")
    df = _build(state, run_id)
    damage.warn(path, stacklevel=3)
    return df


#: The notes of the file's warning, in order: a count of :attr:`_Stream.count` and its text.
_NOTES = (
    ("big_pid", "pid values beyond 2**31 were treated as missing"),
    ("inexact", "{} timestamp(s) had a fraction of a µs beyond float64 precision "
                "(Horovod writes integer µs); rounded"),
    ("open_b", "{} B record(s) had no matching E (still open at the end) and were dropped"),
    ("bad_e", "{} E record(s) had no open B on their pid and were dropped"),
    ("no_pid", "{} B/E record(s) without a pid were dropped"),
    ("neg_dur", "{} span(s) ended before they began; their duration was set to 0"),
    ("bad_ph", "{} record(s) of unsupported phase(s) {names} were skipped"),
    ("missing_ts", "{} record(s) without a ts were dropped"),
    ("far_ts", "{} record(s) with a ts beyond ±2**62 ns (about 146 years) were dropped"),
    ("bad_epoch", "{} start_time_since_epoch_in_micros value(s) outside [0, 2**62 ns) were ignored "
                  "(times are relative to the timeline's own origin)"),
    ("reused_pid", "{} process_name record(s) gave a pid that already named a tensor another name; "
                   "the records after each are that new tensor's"),
)


def _damage_notes(st: _Stream) -> None:
    """Describe in the file's warning what the streaming state dropped or repaired."""
    st.count["open_b"] = st.open["rec"].size
    for key, text in _NOTES:
        if st.count[key]:
            st.damage.notes.append(text.format(st.count[key], names=sorted(st.bad_ph_names)))


def _tick_rank(name: str | None) -> int:
    """The rank a readiness tick's name says (-1: not a rank number)."""
    c = str(name)
    try:
        return int(c) if c.isdigit() and len(c) < 10 else -1
    except ValueError:  # a Unicode digit int() does not take
        return -1


def _build(st: _Stream, run_id: str) -> pd.DataFrame:
    """The frame from the streamed rows (:class:`_assembly.Assembler`, which bounds the
    memory). Row order: by start; tied rows are spans in B-record order (a span carried
    over chunks is stored late, so the record number is the tie key), then ticks, other X
    and instants: the order of matching the whole file at once."""
    _damage_notes(st)
    rows = st.rows
    names = rows.codes("name", [str(c) for c in st.names.index],
                       negative=("NEGOTIATE", "<unnamed>"))
    start = rows.order("start", tie_key="rec",
                       offset=st.epoch_us * 1000 if st.epoch_us is not None else 0)
    # two sets of columns built at once (NumPy scatters them without the GIL)
    (dur, name, kind, cat, rank), (nbytes, nbytes_na, tensor) = _assembly.concurrently(
        lambda: _row_columns(rows, names, st.names.props), lambda: _payload_columns(rows, st))
    return rows.events(
        run_id=run_id,
        rank=rank,
        name=_assembly.categorical(name, names.kept),
        kind=_assembly.from_codes(kind, list(_KIND), inplace=True),
        cat=_assembly.from_codes(cat, list(_CAT), inplace=True),
        start_ns=start,
        dur_ns=dur,
        bytes=pd.arrays.IntegerArray(nbytes, nbytes_na),
        tensor=tensor,
        source=NAME,
    )


def _row_columns(rows: _assembly.Assembler, names: _assembly.Codes, props: dict,
                 ) -> tuple[np.ndarray, ...]:
    """``dur``, ``name``, ``kind``, ``cat`` and ``rank`` in time order."""
    dur = rows.empty(np.int64)
    rows.place(dur, "spans", ("dur",))
    rows.fill(dur, ("ticks", "other", "inst"), 0)
    name, kind, cat = rows.empty(names.dtype), rows.empty(np.int8), rows.empty(np.int8)
    span_kind, span_cat = _span_kind_cat(props)
    rows.place((name, kind, cat), "spans", ("name", "top"),
               lambda x, top: (names(x), *_by_name_and_top((span_kind, span_cat), x, top)))
    rows.place(name, "ticks", ("name",), names)
    rows.fill((kind, cat), "ticks", (_KIND["marker"], _CAT["rank_ready"]))
    rows.place((name, kind), "other", ("name",), lambda x: (names(x), props["act_kind"][x]))
    rows.fill(cat, "other", _CAT["activity"])
    rows.place((name, cat), "inst", ("name",), lambda x: (
        names(x), np.where(props["cycle"][x], _CAT["cycle"], _CAT["instant"])))
    rows.fill(kind, "inst", _KIND["marker"])
    rank = np.zeros(rows.size, dtype=np.int32)  # 0 but for the ticks
    rows.place(rank, "ticks", ("rank",))
    return dur, name, kind, cat, rank


def _payload_columns(rows: _assembly.Assembler, st: _Stream) -> tuple[Any, ...]:
    """``bytes`` (values and missing-mask) and ``tensor`` (None without tensor names)."""
    nbytes, nbytes_na = rows.sparse("bytes", np.int64)
    tensor = None
    if st.tensors:  # tensor names by pid
        lookup = _assembly.KeyCodes(st.tensors)
        tensors = rows.codes("pid", lookup.categories, convert=lookup)
        tensor = _assembly.categorical(rows.column("pid", tensors.dtype, fn=tensors),
                                       tensors.kept)
    return nbytes, nbytes_na, tensor


def _span_kind_cat(props: dict) -> tuple[np.ndarray, np.ndarray]:
    """``kind`` and ``cat`` codes of a span by ``2 * name code + top level`` (for
    :func:`_by_name_and_top`): a negotiation, a top-level op (``comm``) or an activity.
    Like the name properties, the last row serves name code -1."""
    neg = props["neg"]
    kind = np.empty((neg.size, 2), dtype=np.int8)
    kind[:, 0] = np.where(neg, _KIND["negotiate"], props["act_kind"])
    kind[:, 1] = np.where(neg, _KIND["negotiate"], _KIND["comm"])
    cat = np.empty((neg.size, 2), dtype=np.int8)
    cat[:, 0] = np.where(neg, _CAT["negotiate"], _CAT["activity"])
    cat[:, 1] = np.where(neg, _CAT["negotiate"], _CAT["op"])
    return kind.ravel(), cat.ravel()


def _by_name_and_top(tables: tuple[np.ndarray, ...], x: np.ndarray, top: np.ndarray,
                     ) -> tuple[np.ndarray, ...]:
    """Each table of :func:`_span_kind_cat` looked up for spans of name codes ``x`` and
    top-level flags ``top``."""
    at = x.astype(np.intp)
    at *= 2
    at += top
    return tuple(t[at] for t in tables)


register(
    NAME,
    sniff=sniff,
    read=read,
    kind="events",
    suffixes=(".json",),
    description="Horovod timeline (HOROVOD_TIMELINE)",
)
