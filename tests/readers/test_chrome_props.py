"""Property tests: write generated events with tiny test-only writers, read them back."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from _helpers import interleave  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from analysis.errors import ReadError, RecoveryWarning  # noqa: E402
from analysis.readers import _chrome, horovod, kineto, numbers  # noqa: E402
from analysis.schema import validate_events  # noqa: E402

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

# --------------------------------------------------------------------------------------
# Horovod: tensors, each with a list of ops; an op = (negotiate µs, ranks, [activities])

_ACTS = ["MEMCPY_IN_FUSION_BUFFER", "NCCL_ALLREDUCE", "QUEUE", "MPI_ALLREDUCE", "ALLOCATE_OUTPUT"]
op_st = st.tuples(
    st.integers(0, 50),  # negotiation length
    st.lists(st.integers(0, 15), max_size=4),  # ranks ticking
    st.lists(st.tuples(st.sampled_from(_ACTS), st.integers(0, 1000)), max_size=3),
    st.integers(0, 30),  # gap before the op
)
timeline_st = st.lists(st.lists(op_st, min_size=1, max_size=4), min_size=1, max_size=4)


def write_horovod(tensors, seed: int, *, anchor: int | None):
    """Test-only writer: returns (records, expected spans [(tensor, name, start, dur)])."""
    rng = np.random.default_rng(seed)
    streams, expected = [], []
    for pid, ops in enumerate(tensors, start=1):
        recs = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"t{pid}"}}]
        ts = int(rng.integers(0, 100))
        for neg, ranks, acts, gap in ops:
            recs.append({"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": ts, "pid": pid})
            expected.append((f"t{pid}", "NEGOTIATE_ALLREDUCE", ts, neg))
            for r in ranks:
                recs.append({"ph": "X", "name": str(r), "ts": ts, "pid": pid, "dur": 0})
            ts += neg
            recs.append({"ph": "E", "ts": ts, "pid": pid})
            ts += gap
            start = ts
            recs.append({"ph": "B", "name": "ALLREDUCE", "ts": ts, "pid": pid})
            for name, d in acts:
                recs.append({"ph": "B", "name": name, "ts": ts, "pid": pid})
                expected.append((f"t{pid}", name, ts, d))
                ts += d
                recs.append({"ph": "E", "ts": ts, "pid": pid})
            recs.append({"ph": "E", "ts": ts, "pid": pid,
                         "args": {"dtype": "float32", "shape": "[2, 3]"}})
            expected.append((f"t{pid}", "ALLREDUCE", start, ts - start))
        streams.append(recs)
    out = interleave(streams, rng)  # the tensors' records at random, each tensor's order kept
    if anchor is not None:
        out.insert(0, {"name": "process_name", "ph": "M", "pid": 0,
                       "args": {"start_time_since_epoch_in_micros": anchor}})
    return out, expected


@SETTINGS
@given(timeline_st, st.integers(0, 2**16), st.one_of(st.none(), st.integers(0, 2**51)),
       st.booleans())
def test_horovod_roundtrip(tmp_path, tensors, seed, anchor, terminated):
    recs, expected = write_horovod(tensors, seed, anchor=anchor)
    text = "[\n" + ",\n".join(json.dumps(r) for r in recs) + ("\n]\n" if terminated else ",\n")
    p = tmp_path / "t.json"
    p.write_text(text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = horovod.read(p)
    rec = [w for w in caught if issubclass(w.category, RecoveryWarning)]
    assert len(rec) == (0 if terminated else 1)
    validate_events(df)
    spans = df[df["cat"].isin(["negotiate", "op", "activity"])]
    off = (anchor or 0) * 1000
    got = sorted(zip(spans["tensor"], spans["name"], spans["start_ns"] - off, spans["dur_ns"],
                     strict=True))
    assert got == sorted((t, n, s * 1000, d * 1000) for t, n, s, d in expected)
    n_ticks = sum(len(op[1]) for ops in tensors for op in ops)
    assert (df["cat"] == "rank_ready").sum() == n_ticks
    assert (df.loc[df["cat"] == "op", "bytes"] == 24).all()


@SETTINGS
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=60))
def test_vectorised_matcher_equals_stack(pairs):
    is_b = np.array([b for b, _ in pairs], dtype=bool)
    pid = np.array([p for _, p in pairs], dtype=np.int64)
    _assert_matchers_agree(is_b, pid)


def _assert_matchers_agree(is_b: np.ndarray, pid: np.ndarray) -> None:
    """The vectorised B/E matcher gives the reference stack loop's pairs, levels and open
    B records, and gives up (None) exactly when an E has nothing open on its pid."""
    fast = horovod._match_compact(is_b, pid)
    slow = horovod._match_loop_compact(is_b, pid, np.zeros(is_b.size, dtype=bool), set())
    assert (fast is None) == (slow[4] > 0)
    if fast is not None:
        for a, b in zip(fast[:3], slow[:3], strict=True):
            np.testing.assert_array_equal(a, b)
        assert fast[3] == slow[3].size


# --------------------------------------------------------------------------------------
# Kineto: events with integer-ns times written as µs with 3 decimals

_CATS = ["cpu_op", "kernel", "cuda_runtime", "gpu_memcpy", "user_annotation", "python_function"]
event_st = st.tuples(
    st.sampled_from(_CATS),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1,
             max_size=12),
    st.integers(0, 2**53 - 1),  # ts in ns (relative): up to ~2.9e12 µs... and beyond 2**43 µs
    st.integers(0, 10**9),  # dur in ns
)


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def write_kineto(events, *, base: int | None) -> str:
    """Test-only writer of a Kineto-style trace."""
    recs = []
    for cat, name, ts, dur in events:
        pid, tid = (0, 7) if cat in ("kernel", "gpu_memcpy") else (1234, 1235)
        recs.append(f'{{"ph": "X", "cat": {json.dumps(cat)}, "name": {json.dumps(name)}, '
                    f'"pid": {pid}, "tid": {tid}, "ts": {_us(ts)}, "dur": {_us(dur)}, '
                    '"args": {"External id": 1}}')
        recs.append(f'{{"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": {_us(ts)}, '
                    '"cat": "ac2g", "name": "ac2g"}')
    head = '{\n  "schemaVersion": 1,\n  "distributedInfo": {"rank": 5},\n'
    if base is not None:
        head += f'  "baseTimeNanoseconds": {base},\n'
    return head + '  "traceEvents": [\n  ' + ",\n  ".join(recs) + '\n  ],\n  "traceName": "x"\n}'


@SETTINGS
@given(st.lists(event_st, max_size=30), st.one_of(st.none(), st.integers(0, 2**60)))
def test_kineto_roundtrip_exact_ns(tmp_path, events, base):
    p = tmp_path / "t.pt.trace.json"
    p.write_text(write_kineto(events, base=base))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecoveryWarning)
        df = kineto.read(p)
    validate_events(df)
    got = sorted(zip(df["name"], df["start_ns"], df["dur_ns"], strict=True))
    assert got == sorted((n, (base or 0) + ts, d) for _, n, ts, d in events)
    assert len(df) == len(events) and (df["rank"] == 5).all()
    gpu = df["cat"].isin(["kernel", "gpu_memcpy"])
    assert (df["device"].notna() == gpu).all()


@SETTINGS
@given(st.lists(event_st, min_size=1, max_size=15), st.data())
def test_kineto_fuzzed_truncation(tmp_path, events, data):
    text = write_kineto(events, base=10**18).encode()
    cut = data.draw(st.integers(0, len(text) - 1))
    p = tmp_path / "t.pt.trace.json.tmp"
    p.write_bytes(text[:cut])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            df = kineto.read(p)
        except ReadError:
            return
    validate_events(df)
    full = sorted((n, 10**18 + ts, d) for _, n, ts, d in events)
    got = sorted(zip(df["name"], df["start_ns"], df["dur_ns"], strict=True))
    # every recovered row is a row of the complete file
    for row in got:
        assert row in full


@SETTINGS
@given(timeline_st, st.integers(0, 2**16), st.data())
def test_horovod_fuzzed_truncation(tmp_path, tensors, seed, data):
    recs, _ = write_horovod(tensors, seed, anchor=None)
    text = ("[\n" + ",".join(json.dumps(r) for r in recs) + "]").encode()
    cut = data.draw(st.integers(0, len(text) - 1))
    p = tmp_path / "t.json"
    p.write_bytes(text[:cut])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            df = horovod.read(p)
        except ReadError:
            return
    validate_events(df)
    assert sum(issubclass(w.category, RecoveryWarning) for w in caught) == 1


@SETTINGS
@given(st.integers(-(2**62), 2**62))
def test_us_to_ns_exact_or_flagged(ns):
    us = float(_us(abs(ns)) if ns >= 0 else "-" + _us(-ns))
    got, inexact = numbers.us_to_ns(np.array([us]))
    if abs(ns) < 2**43 * 1000:  # below 2**43 µs float64 keeps every ns
        assert not inexact[0] and got[0] == ns
    assert numbers.text_us_to_ns(_us(abs(ns)) if ns >= 0 else "-" + _us(-ns)) == ns


@pytest.mark.parametrize("block", [97, 4096])
def test_tiny_blocks_give_the_same_frames(block, monkeypatch, data_dir):
    """Streaming cuts files into blocks at record boundaries; the frame must not depend on
    where the cuts fall (B/E matching and truncation accounting carry across blocks)."""
    import warnings

    import pandas as pd


    corpus = data_dir.parents[2] / "shared" / "corpus" / "horovod_timeline"  # used when present
    files = [*sorted((data_dir / "horovod").glob("*.json")), *sorted((data_dir / "kineto").glob("*.json*")),
             *(corpus / n for n in ("tflogs-72f32f9__horovod_timeline.json", "alcf__timeline_cpu_n1.json")
               if (corpus / n).exists())]
    for f in files:
        reader = horovod if "horovod" in str(f) else kineto
        with warnings.catch_warnings(record=True) as w_default:
            warnings.simplefilter("always")
            expected = reader.read(f)
        monkeypatch.setattr(_chrome, "BLOCK_BYTES", block)
        with warnings.catch_warnings(record=True) as w_small:
            warnings.simplefilter("always")
            got = reader.read(f)
        monkeypatch.undo()
        pd.testing.assert_frame_equal(expected, got, obj=f"{f.name} with {block}-byte blocks")
        assert [str(w.message) for w in w_default] == [str(w.message) for w in w_small], f.name
