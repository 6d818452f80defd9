"""The device timeline of a distributed step: collectives matched across ranks, peer wait
and transfer, exposed communication, blocking host calls and the GPU work host ranges
launched (``docs/metrics.md``, "Device timeline").

Every function takes the tidy event frame of kernel-level traces (Kineto, nsys, nvprof:
every rank of one or more runs, as :func:`analysis.read_many` gives it) and returns a new
frame; none changes its input. GPU rows are those of kind ``compute``, ``comm``,
``memcpy`` or ``memset`` with a ``device``; NCCL kernels are the GPU rows of kind
``comm``.

Clocks. A collective is compared across ranks by its kernels' timestamps, so the ranks'
GPU timestamps must share one clock. CUPTI converts GPU timestamps to the host clock of
the process that traced them, and Kineto writes them on that clock (epoch µs in older
traces, ``baseTimeNanoseconds`` + relative ns in newer ones): ranks of one node share it,
ranks of different nodes share it as far as the nodes' clocks agree (NTP/PTP). Nothing is
shifted by default (``align="none"``). Checked on the 8-rank DLRM step of the corpus: the
ends of every matched NCCL kernel agree within 7 µs (the traces' resolution is 1 µs)
across the 8 ranks, the physical fact that a collective completes together everywhere.
Where they do not (ranks of several nodes with drifting clocks), ``align="ends"``
estimates each rank's offset from the ends of the collectives and removes it.
"""

from __future__ import annotations

import re
import warnings
from typing import Literal

import numpy as np
import pandas as pd

from analysis.errors import ScalescopeError
from analysis.metrics import _intervals as iv
from analysis.metrics._common import NS_PER_S, end_ns, plain, require_columns
from analysis.metrics._mapping import maps_over
from analysis.metrics.breakdown import covered_in_windows

#: Host calls that return only when the GPU has caught up (``blocking_calls``): stream,
#: device and event synchronisation, the synchronous copies (not ``*Async``), and
#: ``aten::_local_scalar_dense`` (``tensor.item()``, a copy to the host and a wait).
BLOCKING_CALLS: frozenset[str] = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "cudaMemcpyPeer",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD", "cuMemcpyHtoD_v2", "cuMemcpyDtoD", "cuMemcpyDtoD_v2", "hipStreamSynchronize",
    "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy", "aten::_local_scalar_dense",
})
#: nsys names CUDA API calls with their version: ``cudaStreamSynchronize_v3020``.
_VERSION = re.compile(r"_v\d+$")
_GPU_KINDS = ("compute", "comm", "memcpy", "memset")
_RANGE_KINDS = ("phase", "range", "data")
_PROFILER_STEP = r"^ProfilerStep#\d+$"

COLLECTIVE_COLUMNS = ("run_id", "rank", "seq", "pg", "name", "stream", "step", "start_ns", "end_ns", "dur_s",
                      "wait_s", "transfer_s", "last_rank", "n_ranks", "match", "clock_offset_ns")
BLOCKING_COLUMNS = ("run_id", "rank", "pid", "tid", "name", "start_ns", "dur_s", "op", "phase", "step", "nested")
LAUNCHED_COLUMNS = ("run_id", "rank", "kind", "name", "n_ranges", "gpu_s", "n_kernels", "n_copies",
                    "first_start_ns", "last_end_ns")
EXPOSED_COLUMNS = ("comm_s", "exposed_s", "exposed_blocking_s", "exposed_idle_s", "wait_s", "transfer_s")
STEP_PART_COLUMNS = ("run_id", "rank", "step", "step_start_ns", "step_end_ns", "step_s", "compute_s", "sync_s",
                     "straggler_s", "other_s", "source")
OUTSIDE_COLUMNS = ("run_id", "rank", "name", "start_ns", "dur_s", "op", "nested", "after_step", "before_step",
                   "gap_start_ns", "gap_end_ns", "gap_s")


# --------------------------------------------------------------------------------------
# helpers


#: The columns the device timeline reads (``pg``/``seq`` too where a frame has them).
_COLUMNS = ("run_id", "rank", "pid", "tid", "device", "stream", "name", "kind", "cat", "start_ns", "dur_ns", "step",
            "correlation", "pg", "seq")


def _rows(events: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """The rows of ``mask`` (only the columns used here), ``run_id``/``name``/``kind`` as
    plain objects so groupbys make no empty groups, and ``end_ns``."""
    df = events.loc[mask, [c for c in _COLUMNS if c in events.columns]]
    df = df.assign(**{c: plain(df[c]) for c in ("run_id", "name", "kind") if c in df.columns})
    return df.assign(end_ns=end_ns(df))


def _gpu_rows(events: pd.DataFrame, kinds: tuple[str, ...] = _GPU_KINDS) -> pd.DataFrame:
    return _rows(events, (events["kind"].isin(kinds) & events["device"].notna()).to_numpy())


def _host_rows(events: pd.DataFrame) -> pd.DataFrame:
    return _rows(events, events["device"].isna().to_numpy())


def _codes(a: pd.DataFrame, b: pd.DataFrame, by: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """One integer group code per row of ``a`` and of ``b`` for the same ``by`` values."""
    code = np.zeros(len(a) + len(b), np.int64)
    for c in by:
        col = pd.concat([plain(a[c]), plain(b[c])], ignore_index=True)
        f, uniq = pd.factorize(col, use_na_sentinel=False)
        code = np.unique(code * (len(uniq) + 1) + f, return_inverse=True)[1].astype(np.int64)
    return code[: len(a)], code[len(a):]


def _enclosing(cont: pd.DataFrame, qry: pd.DataFrame, by: list[str], *, whole: bool) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (query position, container position), same ``by`` values, where the query
    starts in the container's ``[start, end)`` (``whole``: and ends by the container's end)."""
    if cont.empty or qry.empty:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cc, qc = _codes(cont, qry, by)
    cs, ce = cont["start_ns"].to_numpy(np.int64), cont["end_ns"].to_numpy(np.int64)
    qs, qe = qry["start_ns"].to_numpy(np.int64), qry["end_ns"].to_numpy(np.int64)
    # one sorted key over (group, time): the queries a container stabs are a contiguous run
    t0 = min(int(cs.min()), int(qs.min()))
    stride = max(int(ce.max()), int(qs.max())) - t0 + 2
    if (max(int(cc.max()), int(qc.max())) + 1) * stride >= 2**62:
        raise ScalescopeError("the events' times span too wide a range to match host ranges")
    qkey = qc * stride + (qs - t0)
    qorder = np.argsort(qkey, kind="stable")
    lo = np.searchsorted(qkey[qorder], cc * stride + (cs - t0), "left")
    hi = np.searchsorted(qkey[qorder], cc * stride + (ce - t0), "right" if whole else "left")
    n = np.maximum(hi - lo, 0)
    ci = np.repeat(np.arange(len(cont)), n)
    offs = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + np.repeat(lo, n)
    qi = qorder[offs]
    if whole:
        # a call at a container's end is inside it only if the call is an instant: below the
        # resolution of µs traces, whose truncated ends often equal a child's start
        keep = (qe[qi] <= ce[ci]) & ((qs[qi] < ce[ci]) | (qs[qi] == qe[qi]))
        qi, ci = qi[keep], ci[keep]
    return qi, ci


def _innermost(qi: np.ndarray, ci: np.ndarray, cont: pd.DataFrame, n: int) -> np.ndarray:
    """For each of ``n`` queries, the position of its innermost container among the pairs
    (latest start, then earliest end), or -1."""
    out = np.full(n, -1, np.int64)
    if qi.size == 0:
        return out
    s = cont["start_ns"].to_numpy(np.int64)[ci]
    e = cont["end_ns"].to_numpy(np.int64)[ci]
    order = np.lexsort((-e, s, qi))  # the last pair of each query is its innermost
    qi, ci = qi[order], ci[order]
    last = np.append(qi[1:] != qi[:-1], True)
    out[qi[last]] = ci[last]
    return out


def _take(values: pd.Series, pos: np.ndarray) -> np.ndarray:
    """``values`` at positions ``pos`` as objects, None where ``pos`` is -1."""
    v = values.to_numpy(object)
    out = np.full(len(pos), None, dtype=object)
    out[pos >= 0] = v[pos[pos >= 0]]
    return out


def _union_by_group(code: np.ndarray, s: np.ndarray, e: np.ndarray) -> pd.Series:
    """Length of the union of intervals per group code (vectorised)."""
    if code.size == 0:
        return pd.Series(dtype=np.int64)
    t0 = int(s.min())
    stride = int(e.max()) - t0 + 1
    if (int(code.max()) + 1) * stride >= 2**62:  # times too far apart to shift: group by group
        return pd.Series({k: iv.union_length(s[code == k], e[code == k]) for k in np.unique(code)})
    # shift each group past the previous ones: one running maximum then serves all groups
    order = np.lexsort((s, code))
    g = code[order]
    gs = (s[order] - t0) + g * stride
    ge = (e[order] - t0) + g * stride
    run_end = np.maximum.accumulate(ge)
    new = np.ones(g.size, bool)
    new[1:] = gs[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    block_end = np.append(run_end[idx[1:] - 1], run_end[-1])
    return pd.Series(block_end - gs[idx]).groupby(g[idx]).sum()


# --------------------------------------------------------------------------------------
# collectives


def _match_keys(k: pd.DataFrame) -> pd.DataFrame:
    """``seq``, ``pg``, ``match`` and a ``_lane`` for each NCCL kernel (see :func:`collectives`)."""
    k = k.sort_values(["run_id", "rank", "start_ns", "stream"], kind="stable")
    pg = k["pg"].astype(object) if "pg" in k.columns else pd.Series(pd.NA, index=k.index, dtype=object)
    seq = pd.to_numeric(k["seq"], errors="coerce") if "seq" in k.columns else pd.Series(np.nan, index=k.index)
    by_seq = (pg.notna() & seq.notna()).to_numpy()
    rk = k.assign(rank=k["rank"].fillna(-1))
    # order: the n-th kernel of the rank's i-th NCCL stream (streams in order of first use)
    first = rk.groupby(["run_id", "rank", "stream"], dropna=False, sort=False)["start_ns"].transform("min")
    lane = rk.assign(_f=first).groupby(["run_id", "rank"], sort=False)["_f"].rank(method="dense")
    nth = rk.assign(_l=lane).groupby(["run_id", "rank", "_l"], sort=False).cumcount()
    return k.assign(
        seq=np.where(by_seq, seq.fillna(-1), nth).astype(np.int64),
        pg=pg.where(by_seq, pd.NA),
        match=np.where(by_seq, "seq", "order"),
        _lane=np.where(by_seq, -1, lane.fillna(0).astype(np.int64)),
    )


def _clock_offsets(k: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Per kernel, its rank's clock offset (ns): the median over the rank's collectives of
    its end minus the median end of the collective over all ranks."""
    med = k.groupby(keys, sort=False)["end_ns"].transform("median")
    diff = (k["end_ns"] - med).astype(float)
    off = diff.groupby([k["run_id"], k["rank"].fillna(-1)], sort=False).transform("median")
    return off.round().astype(np.int64)


@maps_over(unit="run")
def collectives(events: pd.DataFrame, *, align: Literal["none", "ends"] = "none") -> pd.DataFrame:
    """Every NCCL kernel matched with the same collective on the other ranks of its run:
    how long the rank waited for its peers and how long the transfer took.

    Parameters
    ----------
    events
        Kernel-level events of every rank of one or more runs (GPU rows of kind ``comm``
        with a ``device`` are the NCCL kernels). Optional extra columns ``pg`` and ``seq``
        (process group name and collective sequence number, Kineto's ``Process Group
        Name`` / ``Seq`` args) match by them; without them kernels match by order.
    align
        ``"none"`` (default): use the timestamps as recorded (one clock on a node).
        ``"ends"``: first remove each rank's clock offset, estimated from the ends of the
        matched collectives (see Notes); the offset is in ``clock_offset_ns``.

    Returns
    -------
    pandas.DataFrame
        One row per (rank, matched collective), ordered by ``run_id``, collective,
        ``rank``: ``seq`` (int64), ``pg``, ``name`` (kernel), ``stream``, ``step``,
        ``start_ns``, ``end_ns`` (int64, after alignment), ``dur_s``, ``wait_s``,
        ``transfer_s`` (float s), ``last_rank`` (Int32), ``n_ranks`` (int64, ranks the
        collective was found on), ``match`` (``"seq"`` or ``"order"``), ``clock_offset_ns``.

    Notes
    -----
    For collective c on rank r with kernel ``[s_rc, e_rc)``: ``wait_s`` =
    ``max_r' s_r'c - s_rc`` (time the kernel spent waiting for the last rank to arrive; 0
    on the last arriver ``last_rank``, ties going to the lowest rank) and ``transfer_s`` =
    ``max(e_rc - max_r' s_r'c, 0)``, so ``dur_s = wait_s + transfer_s`` where the kernel
    outlives the last arrival. Matching: by (``pg``, ``seq``) where the frame has both
    (``match="seq"``); else the n-th (0-based, ``seq``) kernel on the rank's i-th NCCL
    stream (streams numbered by first use), which assumes every rank issues the same
    collectives in the same order on one communicator per stream (``match="order"``,
    ``pg`` missing). Matching is within ``run_id``: give the ranks of one job one run id.
    ``align="ends"``: offset_r = median_c (e_rc - median_r' e_r'c), subtracted from the
    rank's times before the formulas above. Validated on the 8-rank DLRM step of the
    corpus (``tests/metrics/test_collectives_corpus.py``).

    Examples
    --------
    >>> from analysis.schema import make_events
    >>> ev = make_events(run_id="r", rank=[0, 1], device=[0, 1], kind="comm", name="ncclKernel_AllReduce",
    ...                  start_ns=[100, 400], dur_ns=[400, 100])
    >>> c = collectives(ev)
    >>> c["wait_s"].tolist(), c["transfer_s"].tolist(), c["last_rank"].tolist()
    ([3e-07, 0.0], [1e-07, 1e-07], [1, 1])
    """
    require_columns(events, ("run_id", "rank", "kind", "device", "stream", "name", "start_ns", "dur_ns", "step"),
                    "collectives")
    if align not in ("none", "ends"):
        raise ScalescopeError(f"align must be 'none' or 'ends', not {align!r}")
    k = _gpu_rows(events, ("comm",))
    if k.empty:
        return _empty(COLLECTIVE_COLUMNS)
    _warn_single_rank_runs(k)
    k = _match_keys(k)
    keys = ["run_id", "match", "_pgkey", "_lane", "seq"]
    k = k.assign(_pgkey=k["pg"].astype(object).where(k["pg"].notna(), "").astype(str))
    off = _clock_offsets(k, keys) if align == "ends" else pd.Series(0, index=k.index, dtype=np.int64)
    k = k.assign(start_ns=k["start_ns"] - off, end_ns=k["end_ns"] - off, clock_offset_ns=off)
    g = k.groupby(keys, sort=False)
    last_start = g["start_ns"].transform("max")
    by_arrival = k.assign(_r=k["rank"].fillna(-1)).sort_values(["start_ns", "_r"], ascending=[True, False])
    last = by_arrival.groupby(keys, sort=False)["rank"].transform("last").reindex(k.index)
    _check_order(k, g)
    out = k.assign(
        dur_s=(k["end_ns"] - k["start_ns"]) / NS_PER_S,
        wait_s=(last_start - k["start_ns"]) / NS_PER_S,
        transfer_s=np.maximum(k["end_ns"] - last_start, 0) / NS_PER_S,
        last_rank=last.astype("Int32"),
        n_ranks=g["rank"].transform("nunique").astype(np.int64),
        _first=g["start_ns"].transform("min"),
    )
    _check_ends(out, keys)
    out = out.sort_values(["run_id", "_first", "_lane", "seq", "rank"], kind="stable")
    return out[list(COLLECTIVE_COLUMNS)].reset_index(drop=True)


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})


def _warn_single_rank_runs(k: pd.DataFrame) -> None:
    per_run = k.groupby("run_id", sort=False)["rank"].nunique()
    if len(per_run) > 1 and (per_run <= 1).all():
        warnings.warn(f"each of the {len(per_run)} runs holds the kernels of one rank, so no collective is matched "
                      "across ranks; give the ranks of one job one run_id (events.assign(run_id=...))",
                      UserWarning, stacklevel=3)


def _check_ends(k: pd.DataFrame, keys: list[str]) -> None:
    """A collective ends together on all its ranks: warn when matched kernels end further
    apart than the shortest of them lasts (and more than 10 µs, two ticks of µs traces)."""
    g = k.assign(_d=k["end_ns"] - k["start_ns"]).groupby(keys, sort=False)
    spread = g["end_ns"].transform("max") - g["end_ns"].transform("min")
    bad = (spread > np.maximum(g["_d"].transform("min"), 10_000)).to_numpy()
    if bad.any():
        n = k[bad].groupby(keys, sort=False).ngroups
        warnings.warn(f"the kernels of {n} matched collective(s) end up to {spread.max() / 1e6:.3f} ms apart across "
                      "ranks, longer than the shortest of them lasts, while a collective ends together everywhere: "
                      "the ranks' clocks differ (try align='ends') or the kernels do not belong together",
                      UserWarning, stacklevel=3)


def _check_order(k: pd.DataFrame, g: object) -> None:
    """Kernels matched by order must be the same collective: warn when their names differ
    or when the ranks of a run hold different numbers of them on a stream."""
    order = (k["match"] == "order").to_numpy()
    bad = k.loc[(g["name"].transform("nunique") > 1).to_numpy() & order]
    if len(bad):
        warnings.warn(f"{bad.groupby(['run_id', '_lane', 'seq']).ngroups} collective(s) matched by order have "
                      "different kernel names on different ranks: the ranks' NCCL kernels do not line up "
                      "(different collectives, or a trace window that cuts some off)", UserWarning, stacklevel=3)
    counts = k[order].groupby(["run_id", "_lane", k["rank"].fillna(-1)], sort=False).size()
    uneven = counts.groupby(level=[0, 1], sort=False).nunique()
    if (uneven > 1).any():
        warnings.warn(f"the ranks of {int((uneven > 1).sum())} (run, NCCL stream) pair(s) hold different numbers of "
                      "NCCL kernels: matching by order pairs the n-th kernels, so the pairs after a missing one "
                      "are wrong (a trace window that cuts some off?)", UserWarning, stacklevel=3)


# --------------------------------------------------------------------------------------
# host side: blocking calls, launched work


def _cpu_ops(host: pd.DataFrame) -> pd.DataFrame:
    """Framework operators (kind ``cpu_op``, and host collective ops of a ``cpu_op`` category)."""
    cat = host["cat"].isin(["cpu_op", "operator", "Operator"]) if "cat" in host.columns else False
    op = (host["kind"] == "cpu_op") | ((host["kind"] == "comm") & cat)
    return host[op.to_numpy() & host["tid"].notna().to_numpy()]


def _ranges(host: pd.DataFrame) -> pd.DataFrame:
    """User ranges: scalescope phases, NVTX / ``record_function`` ranges (kinds ``phase``,
    ``range``, ``data``, and host collective annotations), ``ProfilerStep#N`` included."""
    cat = host["cat"].isin(["user_annotation"]) if "cat" in host.columns else False
    r = host["kind"].isin(_RANGE_KINDS) | ((host["kind"] == "comm") & cat)
    return host[r.to_numpy() & (host["dur_ns"] > 0).to_numpy()]


def _rank_keys(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(rank=df["rank"].astype("Int64").fillna(-1))


@maps_over(unit="rank")
def blocking_calls(events: pd.DataFrame) -> pd.DataFrame:
    """Host calls that block until the GPU has caught up, with the operator and the phase
    they were made in.

    Parameters
    ----------
    events
        Event frame with host rows (Kineto ``cuda_runtime`` / ``cpu_op`` /
        ``user_annotation``, nsys CUDA API and NVTX rows, scalescope phases).

    Returns
    -------
    pandas.DataFrame
        One row per call named in :data:`BLOCKING_CALLS` (nsys' version suffix, as in
        ``cudaStreamSynchronize_v3020``, ignored), in (``run_id``, ``rank``,
        ``start_ns``) order: ``run_id``, ``rank``, ``pid``, ``tid``, ``name``, ``start_ns``
        (int64), ``dur_s`` (float s), ``op`` (innermost enclosing framework operator on the
        same pid/tid, missing if none), ``phase`` (innermost enclosing phase / NVTX / user
        range of the rank other than ``ProfilerStep#N``, else the ``ProfilerStep#N``
        range, else missing), ``step`` (Int32), ``nested`` (bool: inside another call of
        the table on the same thread, e.g. the ``cudaStreamSynchronize`` of an ``.item()``;
        sum ``dur_s`` over ``~nested`` rows to count blocked time once).

    Notes
    -----
    A call blocks for its whole ``dur_s``: the wall time the host thread spent in it, on
    the host clock. "Innermost" = the enclosing interval that starts last (then ends
    first); an operator encloses a call when ``op.start <= call.start`` and ``call.end
    <= op.end`` (a zero-length call, below the trace's resolution, may start at the
    operator's end: µs traces truncate ends); a range (any thread of the rank: PyTorch's
    backward runs on its own thread) when the call starts in it. ``step`` is the row's own step, else the number of
    the enclosing ``ProfilerStep#N``.
    """
    require_columns(events, ("run_id", "rank", "pid", "tid", "kind", "device", "name", "start_ns", "dur_ns", "step"),
                    "blocking_calls")
    host = _rank_keys(_host_rows(events))
    names = {n for n in pd.unique(host["name"]) if _VERSION.sub("", str(n)) in BLOCKING_CALLS}
    calls = host[host["name"].isin(names).to_numpy()]
    if calls.empty:
        return _empty(BLOCKING_COLUMNS)
    calls = calls.sort_values(["run_id", "rank", "start_ns"], kind="stable")
    thread = ["run_id", "rank", "pid", "tid"]
    ops = _cpu_ops(host)
    qi, ci = _enclosing(ops, calls, thread, whole=True)
    same = ops.index.to_numpy()[ci] == calls.index.to_numpy()[qi]
    op = _innermost(qi[~same], ci[~same], ops, len(calls))
    qi, ci = _enclosing(calls, calls, thread, whole=True)
    d = calls["dur_ns"].to_numpy(np.int64)
    outer = (d[ci] > d[qi]) | ((d[ci] == d[qi]) & (ci < qi))  # of two equal calls, the first is outer
    nested = np.zeros(len(calls), bool)
    nested[qi[outer]] = True
    phase, step = _phase_of(host, calls)
    out = calls.assign(
        rank=calls["rank"].where(calls["rank"] >= 0).astype("Int32"),
        dur_s=calls["dur_ns"] / NS_PER_S,
        op=_take(ops["name"], op),
        phase=phase, step=calls["step"].astype("Int32").fillna(step), nested=nested)
    out["op"] = out["op"].where(out["op"].notna(), pd.NA)
    return out[list(BLOCKING_COLUMNS)].reset_index(drop=True)


def _phase_of(host: pd.DataFrame, calls: pd.DataFrame) -> tuple[np.ndarray, pd.Series]:
    """For each call: the innermost enclosing non-ProfilerStep range of its rank, else the
    enclosing ``ProfilerStep#N``, else NA; and that N (Int32)."""
    ranges = _ranges(host)
    is_ps = ranges["name"].astype(str).str.match(_PROFILER_STEP).to_numpy()
    user, ps = ranges[~is_ps], ranges[is_ps]
    qi, ci = _enclosing(user, calls, ["run_id", "rank"], whole=False)
    inner = _innermost(qi, ci, user, len(calls))
    qi, ci = _enclosing(ps, calls, ["run_id", "rank"], whole=False)
    step_r = _innermost(qi, ci, ps, len(calls))
    ps_names = _take(ps["name"], step_r)
    phase = np.where(inner >= 0, _take(user["name"], inner), ps_names)
    phase = pd.array(phase, dtype=object)
    phase[pd.isna(phase)] = pd.NA
    n = pd.Series([int(str(p).split("#")[1]) if p is not None else pd.NA for p in ps_names],
                  index=calls.index, dtype="Int32")
    return np.asarray(phase, dtype=object), n


def _launches(gpu: pd.DataFrame, host: pd.DataFrame) -> pd.DataFrame:
    """GPU rows joined to the host call that launched them (same run, rank, ``correlation``;
    the earliest call should two share an id): the GPU row's times plus ``launch_*`` and
    the call's ``pid``/``tid``. ``gpu``, ``host``: :func:`_gpu_rows`, :func:`_host_rows`
    with :func:`_rank_keys`."""
    gpu = gpu[gpu["correlation"].notna().to_numpy()]
    calls = host[host["correlation"].notna().to_numpy() & (host["kind"] != "cpu_op").to_numpy()]
    calls = calls.sort_values("start_ns", kind="stable").drop_duplicates(["run_id", "rank", "correlation"])
    calls = calls[["run_id", "rank", "correlation", "pid", "tid", "start_ns", "end_ns"]].rename(
        columns={"start_ns": "launch_start_ns", "end_ns": "launch_end_ns"})
    g = gpu[["run_id", "rank", "kind", "name", "device", "stream", "step", "correlation", "start_ns", "end_ns"]]
    return g.merge(calls, on=["run_id", "rank", "correlation"], how="inner")


@maps_over(unit="rank")
def launched_work(events: pd.DataFrame) -> pd.DataFrame:
    """The GPU work each host range launched: kernels and copies projected onto the
    operators and ranges that enclosed their launching call (nsys' NVTX projection).

    Parameters
    ----------
    events
        Event frame with host rows and GPU rows linked by ``correlation`` (Kineto, nsys).

    Returns
    -------
    pandas.DataFrame
        One row per (``run_id``, ``rank``, ``kind``, ``name``) of a host range that
        launched GPU work, ``kind`` being the range's (``cpu_op``, ``comm``, ``range``,
        ``phase``, ``data``): ``n_ranges`` (instances that launched work), ``gpu_s``
        (float s, union of the launched GPU intervals), ``n_kernels`` (kernels, compute
        and NCCL), ``n_copies`` (copies and sets), ``first_start_ns``, ``last_end_ns``
        (int64, first start and last end of that work).

    Notes
    -----
    A GPU row (kernel, copy, set) with correlation id c was launched by the host call
    (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...) with the same c on the same rank. It
    counts for every framework operator on the call's thread whose ``[start, end)`` holds
    the call's start, and for every range (phase, NVTX / ``record_function``,
    ``ProfilerStep#N``) of the rank that holds it, on any thread (backward kernels are
    launched from autograd's thread inside the main thread's ``backward`` range).
    ``gpu_s`` = |∪ [start, end)| over the GPU rows a name launched, in all its instances
    (nested instances count once). GPU rows whose launch is not in the trace count nowhere.
    """
    require_columns(events, ("run_id", "rank", "kind", "device", "name", "start_ns", "dur_ns", "step"),
                    "launched_work")
    require_columns(events, ("correlation", "pid", "tid"), "launched_work")
    host = _rank_keys(_host_rows(events))
    lw = _launches(_rank_keys(_gpu_rows(events)), host)
    if lw.empty:
        return _empty(LAUNCHED_COLUMNS)
    q = lw.assign(end_ns=lw["launch_start_ns"], start_ns=lw["launch_start_ns"])
    keys = ["run_id", "rank", "kind", "name"]
    conts, qis, cis = [], [], []
    for cont, by in ((_cpu_ops(host), ["run_id", "rank", "pid", "tid"]), (_ranges(host), ["run_id", "rank"])):
        qi, ci = _enclosing(cont, q, by, whole=False)
        qis.append(qi)
        cis.append(ci + sum(len(c) for c in conts))
        conts.append(cont[keys])
    allc = pd.concat(conts, ignore_index=True)
    qi, ci = np.concatenate(qis), np.concatenate(cis)
    if qi.size == 0:
        return _empty(LAUNCHED_COLUMNS)
    ccode = allc.groupby(keys, sort=False).ngroup().to_numpy()
    code = ccode[ci]
    ncode = int(ccode.max()) + 1
    # a GPU row under two instances of one name (nested) counts once for it
    pair = np.unique(qi.astype(np.int64) * ncode + code)
    pq, pc = pair // ncode, pair % ncode
    gs, ge = lw["start_ns"].to_numpy(np.int64)[pq], lw["end_ns"].to_numpy(np.int64)[pq]
    kern = lw["kind"].isin(["compute", "comm"]).to_numpy()[pq]
    used = np.unique(ci)
    out = allc.drop_duplicates(keys).assign(_code=np.arange(ncode)).set_index("_code")
    out = out.assign(
        n_ranges=np.bincount(ccode[used], minlength=ncode),
        n_kernels=np.bincount(pc, weights=kern, minlength=ncode).astype(np.int64),
        n_copies=np.bincount(pc, weights=~kern, minlength=ncode).astype(np.int64),
        first_start_ns=pd.Series(gs).groupby(pc).min(), last_end_ns=pd.Series(ge).groupby(pc).max(),
        gpu_s=_union_by_group(pc, gs, ge) / NS_PER_S)
    out = out[out["n_ranges"] > 0].sort_values(keys, kind="stable")
    out = out.astype({"first_start_ns": np.int64, "last_end_ns": np.int64})
    out["rank"] = out["rank"].where(out["rank"] >= 0).astype("Int32")
    return out[list(LAUNCHED_COLUMNS)].reset_index(drop=True)


# --------------------------------------------------------------------------------------
# exposed communication and the device step


def _device_windows(g: pd.DataFrame, *, by_step: bool) -> pd.DataFrame:
    """Step windows on one rank's device timeline (``step``, ``start``, ``end``): step N
    runs from the first start of its GPU rows to the first start of the next step's (the
    last to its rows' last end). Without steps (or ``by_step=False``) one window spans all
    GPU rows, step missing."""
    stepped = g[g["step"].notna().to_numpy()]
    if not by_step or stepped.empty:
        return pd.DataFrame({"step": pd.array([pd.NA], dtype="Int32"), "start": [int(g["start_ns"].min())],
                             "end": [int(g["end_ns"].max())]})
    w = stepped.groupby("step", sort=False).agg(start=("start_ns", "min"), end=("end_ns", "max")).reset_index()
    w = w.sort_values("start", kind="stable").reset_index(drop=True)
    end = w["end"].to_numpy(np.int64).copy()
    end[:-1] = w["start"].to_numpy(np.int64)[1:]
    w["end"] = end
    return w.assign(step=w["step"].astype("Int32"))


def _sets(g: pd.DataFrame, coll: pd.DataFrame, queued: pd.DataFrame) -> dict[str, iv.Intervals]:
    """One rank's device interval sets: ``K`` compute kernels, ``Y`` copies and sets, ``M``
    NCCL kernels, ``T`` their transfer parts, ``P`` their peer-wait parts (minus ``T``),
    ``Q`` compute kernels queued (launched, not started)."""
    def u(df: pd.DataFrame, s: str = "start_ns", e: str = "end_ns") -> iv.Intervals:
        return iv.union(df[s].to_numpy(np.int64), df[e].to_numpy(np.int64))

    kind = g["kind"].to_numpy()
    last = coll["start_ns"].to_numpy(np.int64) + np.round(coll["wait_s"].to_numpy(float) * NS_PER_S).astype(np.int64)
    cs, ce = coll["start_ns"].to_numpy(np.int64), coll["end_ns"].to_numpy(np.int64)
    t = iv.union(np.maximum(cs, last), ce)
    return {"K": u(g[kind == "compute"]), "Y": u(g[np.isin(kind, ["memcpy", "memset"])]), "M": u(g[kind == "comm"]),
            "T": t, "P": iv.subtract(iv.union(cs, np.minimum(ce, last)), t),
            "Q": u(queued, "launch_end_ns", "start_ns")}


def _per_rank(events: pd.DataFrame, *, by_step: bool):
    """Yield (run_id, rank, windows, sets, collectives of the rank) for every rank with
    GPU rows (rank -1: missing)."""
    require_columns(events, ("run_id", "rank", "kind", "device", "stream", "name", "start_ns", "dur_ns", "step"),
                    "the device timeline")
    gpu = _rank_keys(_gpu_rows(events))
    if gpu.empty:
        return
    coll = collectives(events)
    coll = coll.assign(rank=coll["rank"].astype("Int64").fillna(-1), run_id=plain(coll["run_id"]))
    coll_of = dict(tuple(coll.groupby(["run_id", "rank"], sort=False)))
    has_calls = all(c in events.columns for c in ("correlation", "pid", "tid"))
    queued = _launches(gpu, _rank_keys(_host_rows(events))) if has_calls else None
    queued_of = {} if queued is None else dict(tuple(queued[queued["kind"] == "compute"].groupby(
        ["run_id", "rank"], sort=False)))
    for (run_id, rank), g in gpu.groupby(["run_id", "rank"], sort=True):
        c = coll_of.get((run_id, rank), coll.iloc[0:0])
        q = queued_of.get((run_id, rank), pd.DataFrame({"launch_end_ns": [], "start_ns": []}))
        yield run_id, rank, _device_windows(g, by_step=by_step), _sets(g, c, q), c


def _in_windows(ivs: iv.Intervals, w: pd.DataFrame) -> np.ndarray:
    return covered_in_windows(ivs, w["start"].to_numpy(np.int64), w["end"].to_numpy(np.int64))


def _totals_in_windows(c: pd.DataFrame, w: pd.DataFrame, col: str) -> np.ndarray:
    """Sum of a collectives column over the kernels that start in each window."""
    i = np.searchsorted(w["start"].to_numpy(np.int64), c["start_ns"].to_numpy(np.int64), "right") - 1
    inside = (i >= 0) & (c["start_ns"].to_numpy(np.int64) < w["end"].to_numpy(np.int64)[np.maximum(i, 0)])
    return np.bincount(i[inside], weights=c[col].to_numpy(float)[inside], minlength=len(w))


@maps_over(unit="run")
def exposed_comm(events: pd.DataFrame, *, by_step: bool = False) -> pd.DataFrame:
    """Communication on each rank's GPU that compute does not hide, split into the part
    that held compute back and the part where the GPU would have idled anyway.

    Parameters
    ----------
    events
        Kernel-level events of every rank of a run (GPU rows, and host launch calls with
        ``correlation`` for the blocking split).
    by_step
        One row per device step window (see :func:`kernel_step_parts`) instead of one per rank.

    Returns
    -------
    pandas.DataFrame
        One row per (``run_id``, ``rank``[, ``step``]) with GPU rows, in float seconds:
        ``comm_s``, ``exposed_s``, ``exposed_blocking_s``, ``exposed_idle_s``, ``wait_s``,
        ``transfer_s`` (0 on a rank without NCCL kernels).

    Notes
    -----
    With M the union of the rank's NCCL kernels, K the union of its compute kernels and Q
    the union over compute kernels of ``[launch call end, kernel start)`` (the kernel was
    launched but had not started): ``comm_s`` = |M|, ``exposed_s`` = |M − K| (HTA's
    comm/compute overlap, from the other side), ``exposed_blocking_s`` = |(M − K) ∩ Q|
    (exposed communication with compute queued behind it: the GPU would have been busy),
    ``exposed_idle_s`` = ``exposed_s - exposed_blocking_s``. ``wait_s``/``transfer_s`` are
    the sums of :func:`collectives` over the rank's NCCL kernels (that start in the
    window). Compute kernels whose launch is not in the trace have no Q. Host and GPU
    timestamps of a Kineto trace share the host clock.
    """
    rows = []
    for run_id, rank, w, s, c in _per_rank(events, by_step=by_step):
        exposed = iv.subtract(s["M"], s["K"])
        blocking = _in_windows(iv.intersect(exposed, s["Q"]), w)
        exp = _in_windows(exposed, w)
        rows.append(pd.DataFrame({
            "run_id": run_id, "rank": rank, "step": w["step"], "comm_s": _in_windows(s["M"], w) / NS_PER_S,
            "exposed_s": exp / NS_PER_S, "exposed_blocking_s": blocking / NS_PER_S,
            "exposed_idle_s": (exp - blocking) / NS_PER_S, "wait_s": _totals_in_windows(c, w, "wait_s"),
            "transfer_s": _totals_in_windows(c, w, "transfer_s")}))
    cols = ["run_id", "rank", *(["step"] if by_step else []), *EXPOSED_COLUMNS]
    return _finish(rows, cols)


def _finish(rows: list[pd.DataFrame], cols: list[str]) -> pd.DataFrame:
    if not rows:
        return _empty(tuple(cols))
    out = pd.concat(rows, ignore_index=True)
    out["rank"] = out["rank"].where(out["rank"] >= 0).astype("Int32")
    return out[cols]


@maps_over(unit="run")
def kernel_step_parts(events: pd.DataFrame) -> pd.DataFrame:
    """Each rank's device step split into compute, exposed transfer (sync), exposed peer
    wait (straggler) and idle (other), from the kernels alone.

    Parameters
    ----------
    events
        Kernel-level events of every rank of a run.

    Returns
    -------
    pandas.DataFrame
        One row per (``run_id``, ``rank``, ``step``): ``step_start_ns``, ``step_end_ns``
        (int64), then float seconds ``step_s``, ``compute_s``, ``sync_s``,
        ``straggler_s``, ``other_s``, and ``source`` = ``"kernels"``.

    Notes
    -----
    Step window W of step N: from the first start of the GPU rows with step N (a GPU row
    has the step of its launching call, the ``ProfilerStep#N`` it was launched in) to the
    first start of the next step's rows, the last step to its rows' last end; without step
    numbers one window spans the rank's GPU rows (step missing). GPU rows outside every
    window count nowhere. With K compute kernels, Y copies and sets, M NCCL kernels, and
    each NCCL kernel split by :func:`collectives` into its peer-wait part ``[start, start
    + wait)`` (union P) and transfer part (union T):
    ``compute_s`` = |W ∩ (K ∪ (Y − M))|, ``sync_s`` = |W ∩ (T − K)|, ``straggler_s`` =
    |W ∩ (P − T − K)|, ``other_s`` = |W| − the three (the device idle), so ``step_s`` =
    ``compute_s + sync_s + straggler_s + other_s`` exactly and ``sync_s + straggler_s`` =
    :func:`exposed_comm`'s ``exposed_s`` per window.
    """
    rows = []
    for run_id, rank, w, s, _ in _per_rank(events, by_step=True):
        busy = iv.union_of(s["K"], iv.subtract(s["Y"], s["M"]))
        step = w["end"].to_numpy(np.int64) - w["start"].to_numpy(np.int64)
        compute = _in_windows(busy, w)
        sync = _in_windows(iv.subtract(s["T"], s["K"]), w)
        strag = _in_windows(iv.subtract(s["P"], iv.union_of(s["T"], s["K"])), w)
        rows.append(pd.DataFrame({
            "run_id": run_id, "rank": rank, "step": w["step"], "step_start_ns": w["start"],
            "step_end_ns": w["end"], "step_s": step / NS_PER_S, "compute_s": compute / NS_PER_S,
            "sync_s": sync / NS_PER_S, "straggler_s": strag / NS_PER_S,
            "other_s": (step - compute - sync - strag) / NS_PER_S, "source": "kernels"}))
    return _finish(rows, list(STEP_PART_COLUMNS))


# --------------------------------------------------------------------------------------
# between the steps


def _step_gaps(host: pd.DataFrame) -> pd.DataFrame:
    """Gaps between consecutive host step windows of each rank: scalescope ``step`` phases,
    else ``ProfilerStep#N`` ranges. Columns ``run_id``, ``rank``, ``start_ns``/``end_ns``
    (the gap), ``after_step``, ``before_step``."""
    names = host["name"].astype(str)
    ours = host[((host["kind"] == "phase") & (names == "step")).to_numpy()]
    prof = host[((host["kind"] == "range") & names.str.match(_PROFILER_STEP)).to_numpy()]
    prof = prof.assign(step=prof["name"].astype(str).str.split("#").str[1].astype(np.int64))
    has_ours = set(zip(ours["run_id"], ours["rank"], strict=True))
    keep = [k not in has_ours for k in zip(prof["run_id"], prof["rank"], strict=True)]
    w = pd.concat([ours, prof[keep]], ignore_index=True).sort_values(["run_id", "rank", "start_ns"], kind="stable")
    g = w.groupby(["run_id", "rank"], sort=False)
    gaps = pd.DataFrame({"run_id": w["run_id"], "rank": w["rank"], "start_ns": w["end_ns"],
                         "end_ns": g["start_ns"].shift(-1), "after_step": w["step"].astype("Int32"),
                         "before_step": g["step"].shift(-1).astype("Int32")})
    gaps = gaps[gaps["end_ns"].notna().to_numpy()]
    gaps = gaps.assign(end_ns=gaps["end_ns"].astype(np.int64))
    return gaps[(gaps["end_ns"] > gaps["start_ns"]).to_numpy()].reset_index(drop=True)


@maps_over(unit="rank")
def sync_outside_steps(events: pd.DataFrame) -> pd.DataFrame:
    """Blocking calls made between two consecutive steps of a rank: the
    ``loss.item()`` after ``optimizer.step()`` pattern, a wait for the GPU outside every
    step's window.

    Parameters
    ----------
    events
        Event frame with host rows: step windows (scalescope ``step`` phases, else Kineto's
        ``ProfilerStep#N`` ranges) and the calls of :func:`blocking_calls`.

    Returns
    -------
    pandas.DataFrame
        One row per blocking call that starts between the end of a step and the start of
        the next on its rank: ``run_id``, ``rank``, ``name``, ``start_ns``, ``dur_s``,
        ``op``, ``nested`` (as in :func:`blocking_calls`), ``after_step``,
        ``before_step`` (Int32), ``gap_start_ns``, ``gap_end_ns`` (int64) and ``gap_s``
        (the gap between the two steps, float s).

    Notes
    -----
    Step windows of a rank in time order ``[s_i, e_i)``; gap i = ``[e_i, s_{i+1})`` where
    ``e_i < s_{i+1}``; a call belongs to gap i when ``e_i <= call.start < s_{i+1}``. Its
    ``dur_s`` is host time outside every step, which a step-time metric never sees. Calls
    before the first or after the last step are not between two steps and are left out.
    """
    require_columns(events, ("run_id", "rank", "kind", "device", "name", "start_ns", "dur_ns", "step"),
                    "sync_outside_steps")
    calls = blocking_calls(events)
    host = _rank_keys(_host_rows(events))
    gaps = _step_gaps(host)
    if calls.empty or gaps.empty:
        return _empty(OUTSIDE_COLUMNS)
    q = _rank_keys(calls.assign(end_ns=calls["start_ns"], run_id=plain(calls["run_id"])))
    qi, gi = _enclosing(gaps, q, ["run_id", "rank"], whole=False)
    out = calls.iloc[qi].reset_index(drop=True)
    g = gaps.iloc[gi].reset_index(drop=True)
    out = out.assign(after_step=g["after_step"], before_step=g["before_step"], gap_start_ns=g["start_ns"],
                     gap_end_ns=g["end_ns"], gap_s=(g["end_ns"] - g["start_ns"]) / NS_PER_S)
    out = out.sort_values(["run_id", "rank", "start_ns"], kind="stable")
    return out[list(OUTSIDE_COLUMNS)].reset_index(drop=True)


def explain_blocking(blocking: pd.DataFrame, colls: pd.DataFrame, *, min_s: float = 5e-4, top: int = 3) -> list[str]:
    """Where the host blocked, in words: per rank, its longest blocking calls (at least
    ``min_s``; the ``top`` longest), the phase and operator they sat in, and the collective
    the device finished meanwhile that waited longest for a peer.

    ``blocking``: :func:`blocking_calls`; ``colls``: :func:`collectives` of the same events.
    E.g. "Rank 1: DistributedDataParallel.forward waited 6.56 ms in cudaStreamSynchronize
    under aten::copy_, for a collective that waited 7.62 ms for rank 7 (ncclKernel_SendRecv...)".
    A call waits for everything queued before it, so a collective whose kernel ended while
    the call blocked is one it waited for.
    """
    b = blocking[~blocking["nested"].astype(bool) & (blocking["dur_s"] >= min_s)]
    out = []
    for (run_id, rank), g in b.groupby(["run_id", "rank"], sort=True):
        mine = colls[(colls["run_id"] == run_id) & (colls["rank"] == rank)] if len(colls) else colls
        for r in g.nlargest(top, "dur_s").sort_values("start_ns").itertuples(index=False):
            where = r.phase if isinstance(r.phase, str) else "outside any range"
            words = f"Rank {rank}: {where} waited {1e3 * r.dur_s:.3g} ms in {r.name}"
            if isinstance(r.op, str):
                words += f" under {r.op}"
            end = r.start_ns + round(r.dur_s * NS_PER_S)
            during = mine[(mine["end_ns"] > r.start_ns) & (mine["end_ns"] <= end)] if len(mine) else mine
            if len(during) and during["wait_s"].max() > 0:
                c = during.loc[during["wait_s"].idxmax()]
                words += (f", for a collective that waited {1e3 * c['wait_s']:.3g} ms for rank {int(c['last_rank'])} "
                          f"({str(c['name'])[:40]})")
            out.append(words + (f" ({run_id})" if b["run_id"].nunique() > 1 else "") + ".")
    return out
