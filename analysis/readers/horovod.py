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
  and counted in the file's one :class:`~analysis.errors.RecoveryWarning`.
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


class _State:
    """Column chunks accumulated while streaming."""

    def __init__(self, damage: _chrome.Damage) -> None:
        self.damage = damage
        self.ph = _chrome.Categories()
        self.name = _chrome.Categories()
        self.ts: list[np.ndarray] = []
        self.pid: list[np.ndarray] = []  # int32, -1 = missing
        self.ts_mask: list[np.ndarray] = []
        self.inexact = 0
        self.n = 0
        self.tensors: dict[int, str] = {}
        self.epoch_us: int | None = None
        self.args_pos: list[int] = []
        self.args_val: list[tuple[str | None, str | None]] = []

    def add(self, recs: list, body: bytes) -> None:
        self.ph.add([e.ph for e in recs])
        self.name.add([e.name for e in recs])
        ts = np.array([e.ts for e in recs], dtype=np.float64)
        has_ts = ~np.isnan(ts)
        ns, inexact = _chrome.us_to_ns(np.where(has_ts, ts, 0.0))
        self.inexact += int(inexact.sum())
        self.ts.append(ns)
        self.ts_mask.append(~has_ts)
        pid = np.array([e.pid for e in recs], dtype=np.int64)
        if pid.size and pid.max() >= 2**31:
            self.damage.notes.append("pid values beyond 2**31 were treated as missing")
            pid[pid >= 2**31] = -1
        self.pid.append(pid.astype(np.int32))
        base = self.n
        for i, e in [(i, e) for i, e in enumerate(recs) if e.args is not None]:
            a = e.args
            if e.ph == "M":
                if e.name == "process_name" and e.pid >= 0:
                    if a.start_time_since_epoch_in_micros is not None:
                        self.epoch_us = a.start_time_since_epoch_in_micros
                    if a.name is not None:
                        self.tensors[e.pid] = a.name
            elif a.dtype is not None or a.shape is not None:
                self.args_pos.append(base + i)
                self.args_val.append((a.dtype, a.shape))
        self.n += len(recs)


def _decode(data: bytes) -> list:
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
    if idx.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, 0, 0
    p = pid[idx]
    order = np.argsort(p, kind="stable")
    sidx = idx[order]
    del idx, order
    sp = np.sort(p, kind="stable")
    del p
    sb = is_b[sidx]
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
        return _match_spans_loop(is_b, is_e, pid, benign_after)
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
    e_sorted = o2[pair]
    b_sorted = o2[pair - 1]
    del o2
    n_b = int(sb.sum())
    n_e = int(sb.size - n_b)
    b_index = sidx[b_sorted]
    e_index = sidx[e_sorted]
    lev = level[b_sorted]
    del sidx, level, b_sorted, e_sorted
    # restore file order of the B records
    o3 = np.argsort(b_index, kind="stable")
    return b_index[o3], e_index[o3], lev[o3], n_b - pair.size, n_e - pair.size


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


def _enclosing_span(ticks: np.ndarray, pid: np.ndarray, b_idx: np.ndarray, e_idx: np.ndarray,
                    ) -> np.ndarray:
    """Record index of the B of the span on the tick's pid that contains it (-1 if none).

    ``b_idx``/``e_idx`` are candidate spans (the ``NEGOTIATE_*`` ones; ``e_idx`` may be
    the record count for a B still open at the end). Negotiation spans on one pid do not
    overlap, so the last one that began before the tick is the only candidate.
    """
    out = np.full(ticks.size, -1, dtype=np.int64)
    if ticks.size == 0 or b_idx.size == 0:
        return out
    big = np.int64(max(int(b_idx.max()), int(ticks.max())) + 1)
    key = pid[b_idx].astype(np.int64) * big + b_idx
    o = np.argsort(key)
    key, sb, se = key[o], b_idx[o], e_idx[o]
    q = pid[ticks].astype(np.int64) * big + ticks
    j = np.searchsorted(key, q) - 1
    jc = np.maximum(j, 0)
    ok = (j >= 0) & (key[jc] // big == q // big) & (ticks < se[jc])
    out[ok] = sb[jc[ok]]
    return out


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
    state = _State(damage)

    def on_chunk(recs: list, body: bytes) -> None:
        n_bad = recs.count(None)
        if n_bad:
            damage.bad_records += n_bad
            recs = [r for r in recs if r is not None]
        if recs:
            state.add(recs, body)

    decoder = _chrome.ChunkDecoder(_decode, repair=_repair, damage=damage)
    layout = _chrome.read_events(path, decoder=decoder, on_chunk=on_chunk)
    if layout.container != "array":
        from analysis.errors import ReadError

        raise ReadError(path, "a JSON object, not a Horovod timeline (a JSON array)")
    df = _build(state, run_id)
    damage.warn(path, stacklevel=3)
    return df


def _build(state: _State, run_id: str) -> pd.DataFrame:
    damage = state.damage
    ph_names = list(state.ph.index)
    ph_codes = (np.concatenate(state.ph.codes).astype(np.int8) if state.ph.codes
                else np.zeros(0, dtype=np.int8))
    state.ph.codes = []

    def ph_is(*values: str) -> np.ndarray:
        wanted = [ph_names.index(v) for v in values if v in ph_names]
        return np.isin(ph_codes, wanted) if wanted else np.zeros(ph_codes.size, dtype=bool)

    cats = [str(c) for c in state.name.index]
    name_codes = (np.concatenate(state.name.codes) if state.name.codes
                  else np.zeros(0, dtype=np.int32))
    state.name.codes = []
    ts_ns = np.concatenate(state.ts) if state.ts else np.zeros(0, dtype=np.int64)
    has_ts = ~np.concatenate(state.ts_mask) if state.ts_mask else np.zeros(0, dtype=bool)
    pid = np.concatenate(state.pid) if state.pid else np.zeros(0, dtype=np.int32)
    pid_na = pid < 0
    state.ts = state.ts_mask = state.pid = []  # free the chunks
    if state.inexact:
        damage.notes.append(
            f"{state.inexact} timestamp(s) had a fraction of a µs beyond float64 precision "
            "(Horovod writes integer µs); rounded"
        )
    offset_ns = state.epoch_us * 1000 if state.epoch_us is not None else 0

    b_any, e_any = ph_is("B"), ph_is("E")
    is_b = b_any & has_ts & ~pid_na
    is_e = e_any & has_ts & ~pid_na
    no_pid = int(((b_any | e_any) & pid_na).sum())
    benign_names = [i for i, c in enumerate(cats) if c in ("NEGOTIATE_BARRIER", "NEGOTIATE_JOIN")]
    benign = is_b & np.isin(name_codes, benign_names) if benign_names else None
    b_idx, e_idx, level, open_b, bad_e = match_spans(is_b, is_e, pid, benign)
    if open_b:
        damage.notes.append(f"{open_b} B record(s) had no matching E (still open at the end) "
                            "and were dropped")
    if bad_e:
        damage.notes.append(f"{bad_e} E record(s) had no open B on their pid and were dropped")
    if no_pid:
        damage.notes.append(f"{no_pid} B/E record(s) without a pid were dropped")

    # per-name-category properties; the extra last slot serves code -1 (no name)
    neg_of = np.array([c.startswith("NEGOTIATE") for c in cats] + [False], dtype=bool)
    kind_names = list(KINDS)
    act_kind_of = np.array([kind_names.index(_activity_kind(c)) for c in cats]
                           + [kind_names.index("other")], dtype=np.int8)
    digit_of = np.array([c.isdigit() for c in cats] + [False], dtype=bool)
    rank_of = np.array([int(c) if c.isdigit() and len(c) < 10 else -1 for c in cats] + [-1],
                       dtype=np.int64)
    cycle_of = np.array([c == "CYCLE_START" for c in cats] + [False], dtype=bool)

    cat_names = ["negotiate", "op", "activity", "rank_ready", "cycle", "instant"]
    CN, CO, CA, CR, CC, CI = range(6)
    K = {k: np.int8(i) for i, k in enumerate(kind_names)}

    # spans
    sc = name_codes[b_idx]
    is_neg = neg_of[sc]
    top = (level == 1) & ~is_neg
    span_cat = np.where(is_neg, CN, np.where(top, CO, CA)).astype(np.int8)
    span_kind = np.where(is_neg, K["negotiate"], np.where(top, K["comm"], act_kind_of[sc]))
    span_start = ts_ns[b_idx]
    span_dur = ts_ns[e_idx] - span_start
    if (span_dur < 0).any():
        damage.notes.append(f"{int((span_dur < 0).sum())} span(s) ended before they began; "
                            "their duration was set to 0")
        span_dur = np.maximum(span_dur, 0)
    span_bytes = np.zeros(b_idx.size, dtype=np.int64)
    span_bytes_na = np.ones(b_idx.size, dtype=bool)
    if state.args_pos and e_idx.size:
        apos = np.array(state.args_pos, dtype=np.int64)
        cache: dict[tuple, int | None] = {}
        vals = np.zeros(apos.size, dtype=np.int64)
        vals_ok = np.zeros(apos.size, dtype=bool)
        for k, key in enumerate(state.args_val):
            if key not in cache:
                cache[key] = _bytes_of(*key)
            v = cache[key]
            if v is not None:
                vals[k] = v
                vals_ok[k] = True
        e_order = np.argsort(e_idx)
        e_sorted = e_idx[e_order]
        hit = np.minimum(np.searchsorted(e_sorted, apos), e_sorted.size - 1)
        ok = (e_sorted[hit] == apos) & vals_ok
        rows = e_order[hit[ok]]
        span_bytes[rows] = vals[ok]
        span_bytes_na[rows] = False

    # ticks (X named with a rank number) and other X records
    x_idx = np.flatnonzero(ph_is("X") & has_ts)
    xc = name_codes[x_idx]
    is_tick = digit_of[xc] & ~pid_na[x_idx] & (rank_of[xc] >= 0)
    tick_idx = x_idx[is_tick]
    neg_b = is_neg.copy()
    cand_b, cand_e = b_idx[neg_b], e_idx[neg_b]
    if open_b:  # a killed job: ticks inside a negotiation still open at the end
        still_open = np.setdiff1d(np.flatnonzero(is_b), b_idx, assume_unique=True)
        still_open = still_open[neg_of[name_codes[still_open]]]
        cand_b = np.concatenate([cand_b, still_open])
        cand_e = np.concatenate([cand_e, np.full(still_open.size, name_codes.size, dtype=np.int64)])
    enc = _enclosing_span(tick_idx, pid, cand_b, cand_e)
    cats_out = [*cats, "NEGOTIATE"]
    tick_name = np.where(enc >= 0, name_codes[np.maximum(enc, 0)], len(cats))
    tick_rank = rank_of[name_codes[tick_idx]]
    other_x = x_idx[~is_tick]
    oxc = name_codes[other_x]
    # instants
    i_idx = np.flatnonzero(ph_is("i", "I", "n") & has_ts)
    ic = name_codes[i_idx]

    known = ph_is("B", "E", "X", "i", "I", "n", "M")
    if (~known).any():
        bad_ph = sorted({ph_names[c] for c in np.unique(ph_codes[~known]) if c >= 0})
        damage.notes.append(f"{int((~known).sum())} record(s) of unsupported phase(s) "
                            f"{bad_ph} were skipped")
    missing_ts = known & ~ph_is("M") & ~has_ts
    if missing_ts.any():
        damage.notes.append(f"{int(missing_ts.sum())} record(s) without a ts were dropped")

    n_t, n_o, n_i = tick_idx.size, other_x.size, i_idx.size
    rec = np.concatenate([b_idx, tick_idx, other_x, i_idx])
    name_out = np.concatenate([sc, tick_name, oxc, ic])
    kind_out = np.concatenate([span_kind.astype(np.int8), np.full(n_t, K["marker"]),
                               act_kind_of[oxc], np.full(n_i, K["marker"])])
    cat_out = np.concatenate([span_cat, np.full(n_t, CR, dtype=np.int8),
                              np.full(n_o, CA, dtype=np.int8),
                              np.where(cycle_of[ic], CC, CI).astype(np.int8)])
    start = np.concatenate([span_start, ts_ns[tick_idx], ts_ns[other_x], ts_ns[i_idx]])
    rest = n_t + n_o + n_i
    dur = np.concatenate([span_dur, np.zeros(rest, dtype=np.int64)])
    rank = np.concatenate([np.zeros(b_idx.size, dtype=np.int64), tick_rank,
                           np.zeros(n_o + n_i, dtype=np.int64)])
    nbytes = np.concatenate([span_bytes, np.zeros(rest, dtype=np.int64)])
    nbytes_na = np.concatenate([span_bytes_na, np.ones(rest, dtype=bool)])

    # tensor names by pid
    row_pid = pid[rec]
    row_pid_na = pid_na[rec]
    tcodes = np.full(rec.size, -1, dtype=np.int64)
    tensor_cats: list[str] = []
    if state.tensors:
        keys = np.array(list(state.tensors), dtype=np.int64)
        tcodes_of_key, uniq = pd.factorize(np.array(list(state.tensors.values()), dtype=object))
        tensor_cats = list(uniq)
        korder = np.argsort(keys)
        sk = keys[korder]
        pos = np.minimum(np.searchsorted(sk, row_pid), sk.size - 1)
        found = (sk[pos] == row_pid) & ~row_pid_na
        tcodes = np.where(found, tcodes_of_key[korder[pos]], -1)

    order = np.argsort(start, kind="stable")
    n = order.size
    # an unnamed record (name missing) keeps code -1 -> named by its phase below
    name_codes_out = name_out[order]
    if (name_codes_out < 0).any():
        cats_out = [*cats_out, "<unnamed>"]
        name_codes_out = np.where(name_codes_out < 0, len(cats_out) - 1, name_codes_out)
    df = make_events(
        n,
        run_id=_chrome.const_category(run_id, n),
        rank=_chrome.masked(rank[order], np.zeros(n, dtype=bool), "Int32"),
        local_rank=_chrome.na_int(n, "Int32"),
        host=_chrome.const_category(None, n),
        pid=_chrome.na_int(n, "Int64"),
        tid=_chrome.na_int(n, "Int64"),
        device=_chrome.na_int(n, "Int16"),
        stream=_chrome.na_int(n, "Int64"),
        name=_chrome.from_codes(name_codes_out, cats_out),
        kind=_chrome.from_codes(kind_out[order], kind_names),
        cat=_chrome.from_codes(cat_out[order], cat_names),
        start_ns=start[order] + offset_ns,
        dur_ns=dur[order],
        step=_chrome.na_int(n, "Int32"),
        epoch=_chrome.na_int(n, "Int32"),
        bytes=_chrome.masked(nbytes[order], nbytes_na[order], "Int64"),
        tensor=_chrome.from_codes(tcodes[order], tensor_cats),
        correlation=_chrome.na_int(n, "Int64"),
        source=_chrome.const_category(NAME, n),
    )
    return df


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
