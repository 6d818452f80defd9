"""Horovod timeline reader: known answers on tests/data/horovod and the real corpus files."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.errors import ReadError, RecoveryWarning
from analysis.metrics import dedupe_fused
from analysis.readers import horovod, kineto
from analysis.schema import validate_events

HVD = "horovod_timeline"
TFLOGS = f"{HVD}/tflogs-72f32f9__horovod_timeline.json"
ALCF_GPU = f"{HVD}/alcf__timeline_gpu_n1.json"
ALCF_CPU = f"{HVD}/alcf__timeline_cpu_n1.json"


def _read(path, n_warnings=0):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = horovod.read(path)
    rec = [w for w in caught if issubclass(w.category, RecoveryWarning)]
    assert len(rec) == n_warnings, [str(w.message) for w in rec]
    validate_events(df)
    return df, [str(w.message) for w in rec]


def _counts(df, col="name"):
    return df.groupby(col, observed=True).size().to_dict()


# --------------------------------------------------------------------------------------
# tiny fixtures (fresh clone)


def test_tiny_timeline_known_answers(data_dir):
    df, _ = _read(data_dir / "horovod" / "tiny_timeline.json")
    assert len(df) == 15
    assert _counts(df, "cat") == {"negotiate": 2, "op": 2, "activity": 5, "rank_ready": 4,
                                  "cycle": 2}
    assert df["source"].unique().tolist() == ["horovod"]
    assert df["run_id"].unique().tolist() == ["tiny_timeline"]
    # epoch anchor: start_time_since_epoch_in_micros = 1700000000000000
    neg_a = df[(df["cat"] == "negotiate") & (df["tensor"] == "grad_a")].iloc[0]
    assert neg_a["start_ns"] == (1_700_000_000_000_000 + 110) * 1000
    assert neg_a["dur_ns"] == 10_000
    ops = df[df["cat"] == "op"].set_index("tensor")
    assert ops.loc["grad_a", "dur_ns"] == 70_000 and ops.loc["grad_b", "dur_ns"] == 71_000
    assert ops.loc["grad_a", "bytes"] == 10 * 4 * 4  # float32 [10, 4]
    assert ops.loc["grad_b", "bytes"] == 3 * 2  # float16 [3]
    assert set(ops["kind"]) == {"comm"}
    act = df[df["cat"] == "activity"]
    assert _counts(act) == {"MEMCPY_IN_FUSION_BUFFER": 2, "NCCL_ALLREDUCE": 2, "WAIT_FOR_DATA": 1}
    assert dict(zip(act["name"], act["kind"], strict=True)) == {
        "MEMCPY_IN_FUSION_BUFFER": "memcpy", "NCCL_ALLREDUCE": "comm", "WAIT_FOR_DATA": "sync_wait"}
    ticks = df[df["cat"] == "rank_ready"]
    assert sorted(ticks["rank"]) == [0, 0, 1, 1]
    assert set(ticks["name"]) == {"NEGOTIATE_ALLREDUCE"} and set(ticks["kind"]) == {"marker"}
    assert (ticks["dur_ns"] == 0).all()
    assert (df.loc[df["cat"] != "rank_ready", "rank"] == 0).all()
    cyc = df[df["cat"] == "cycle"]
    assert cyc["name"].tolist() == ["CYCLE_START"] * 2 and cyc["tensor"].isna().all()
    assert df["start_ns"].is_monotonic_increasing
    assert df["pid"].isna().all() and df["tid"].isna().all()


def test_dedupe_fused_drops_fusion_duplicates_only(data_dir):
    df, _ = _read(data_dir / "horovod" / "tiny_timeline.json")
    before = df.copy()
    out = dedupe_fused(df)
    pd.testing.assert_frame_equal(df, before)  # input untouched
    assert len(out) == 13  # one MEMCPY_IN and one NCCL_ALLREDUCE duplicate gone
    assert _counts(out[out["cat"] == "activity"]) == {
        "MEMCPY_IN_FUSION_BUFFER": 1, "NCCL_ALLREDUCE": 1, "WAIT_FOR_DATA": 1}
    assert len(out[out["cat"] == "op"]) == 2
    validate_events(out)


def test_dedupe_fused_keys_on_name_and_start_only():
    """Older Horovod closes a fused activity per tensor, microseconds apart (the tflogs
    corpus timeline): same name and start is a duplicate whatever the ends (FORMATS.md
    section 1, quirk 1), and the metric uses this one definition."""
    from analysis.metrics import horovod_allreduce
    from analysis.schema import make_events

    ev = make_events(name=["MPI_ALLREDUCE", "MPI_ALLREDUCE", "MPI_ALLREDUCE"], kind="comm",
                     cat="activity", start_ns=[5, 5, 6], dur_ns=[3, 12, 3], rank=0,
                     tensor=["a", "b", "c"], run_id="r", source="horovod")
    out = dedupe_fused(ev)
    assert out["tensor"].tolist() == ["a", "c"]
    assert horovod_allreduce(ev)["n_fusion_duplicates"].tolist() == [1]


def test_unterminated_v019_with_open_negotiation(data_dir):
    df, msgs = _read(data_dir / "horovod" / "unterminated_v019.json", n_warnings=1)
    assert "not terminated" in msgs[0] and "1 B record(s) had no matching E" in msgs[0]
    assert _counts(df, "cat") == {"negotiate": 1, "op": 1, "activity": 1, "rank_ready": 3}
    # no epoch anchor in <= 0.20 files: trace-relative µs -> ns
    assert df["start_ns"].min() == 5_000_000
    assert df.loc[df["cat"] == "op", "bytes"].tolist() == [32]  # float64 [2, 2]
    last_tick = df[df["cat"] == "rank_ready"].iloc[-1]
    # the tick inside the negotiation left open at the end still gets its name
    assert last_tick["name"] == "NEGOTIATE_ALLREDUCE" and last_tick["rank"] == 1


def test_unescaped_tensor_name_is_recovered(data_dir):
    df, msgs = _read(data_dir / "horovod" / "bad_tensor_name.json", n_warnings=1)
    assert "1 record(s) were invalid JSON" in msgs[0]
    assert "not terminated" not in msgs[0]
    assert set(df["tensor"]) == {'w"eird\\name'}
    assert _counts(df, "cat") == {"negotiate": 1, "op": 1, "activity": 1, "rank_ready": 1}


def test_sniff(data_dir, tmp_path):
    for f in (data_dir / "horovod").glob("*.json"):
        assert horovod.sniff(f), f
        assert not kineto.sniff(f), f
    for f in (data_dir / "kineto").glob("*.json*"):
        assert not horovod.sniff(f), f
    own = tmp_path / "rank-00000.trace.json"
    own.write_text('[\n{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "rank 0"}},\n'
                   '{"name": "scalescope_clock", "ph": "M", "pid": 0, "args": {"rank": 0}},\n')
    assert not horovod.sniff(own) and not kineto.sniff(own)
    csv = tmp_path / "x.json"
    csv.write_text("a,b\n1,2\n")
    assert not horovod.sniff(csv)


def test_registered():
    from analysis.readers import formats

    assert formats()["horovod"].read is horovod.read


# --------------------------------------------------------------------------------------
# bad input


def test_empty_and_wrong_format(tmp_path):
    empty = tmp_path / "e.json"
    empty.write_bytes(b"")
    with pytest.raises(ReadError, match="empty"):
        horovod.read(empty)
    ws = tmp_path / "w.json"
    ws.write_bytes(b"  \n ")
    with pytest.raises(ReadError, match="whitespace"):
        horovod.read(ws)
    csv = tmp_path / "c.json"
    csv.write_text("a,b\n1,2\n")
    with pytest.raises(ReadError, match="not JSON"):
        horovod.read(csv)
    obj = tmp_path / "o.json"
    obj.write_text('{"traceEvents": []}')
    with pytest.raises(ReadError, match="not a Horovod timeline"):
        horovod.read(obj)
    with pytest.raises(ReadError, match="not found"):
        horovod.read(tmp_path / "missing.json")


def test_unmatched_end_is_counted(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('[{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "t"}},'
                 '{"ph": "E", "ts": 5, "pid": 1},'
                 '{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 10, "pid": 1},'
                 '{"ph": "E", "ts": 12, "pid": 1},{"ph": "E", "ts": 13, "pid": 1}]')
    df, msgs = _read(p, n_warnings=1)
    assert "2 E record(s) had no open B" in msgs[0]
    assert len(df) == 1 and df["dur_ns"].iloc[0] == 2000


def test_non_utf8_names_are_replaced(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b'[{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "gr\xffad"}},'
                  b'{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 10, "pid": 1},'
                  b'{"ph": "E", "ts": 12, "pid": 1}]')
    df, msgs = _read(p, n_warnings=1)
    assert "not valid UTF-8" in msgs[0]
    assert df["tensor"].tolist() == ["gr\ufffdad"]


def test_every_truncation_recovers_or_raises(data_dir, tmp_path):
    raw = (data_dir / "horovod" / "tiny_timeline.json").read_bytes()
    full = len(horovod.read(data_dir / "horovod" / "tiny_timeline.json"))
    p = tmp_path / "cut.json"
    # every 6th offset (a few ms per read) plus every offset of the last record
    for cut in sorted(set(range(0, len(raw), 6)) | set(range(len(raw) - 60, len(raw)))):
        p.write_bytes(raw[:cut])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                df = horovod.read(p)
            except ReadError:
                continue
        validate_events(df)
        assert len(df) <= full
        rec = [w for w in caught if issubclass(w.category, RecoveryWarning)]
        intact = not raw[cut:].strip()
        assert len(rec) == (0 if intact else 1), (cut, [str(w.message) for w in caught])


# --------------------------------------------------------------------------------------
# corpus


def _tflogs_records(path: Path) -> list[dict]:
    # independent parse: stdlib json after closing the array by hand
    text = path.read_text().rstrip().rstrip(",")
    return json.loads(text + "]")


@pytest.mark.corpus
def test_tflogs_known_answers(corpus_dir):
    path = corpus_dir / TFLOGS
    df, msgs = _read(path, n_warnings=1)
    assert "not terminated" in msgs[0] and "0 bytes lost" in msgs[0]
    names = _counts(df)
    # counted with grep on the file: 660 of each allreduce level, 214 of each memcpy
    assert names["NEGOTIATE_ALLREDUCE"] == 660 + 660 * 12  # spans + one tick per rank
    assert names["ALLREDUCE"] == 660 and names["MPI_ALLREDUCE"] == 660
    assert names["MEMCPY_IN_FUSION_BUFFER"] == 214 and names["MEMCPY_OUT_FUSION_BUFFER"] == 214
    assert names["BROADCAST"] == 13 and names["MPI_BCAST"] == 13
    assert names["INIT_FUSION_BUFFER"] == 2
    ticks = df[df["cat"] == "rank_ready"]
    assert sorted(ticks["rank"].unique()) == list(range(12))
    recs = _tflogs_records(path)
    assert len(ticks) == sum(r["ph"] == "X" for r in recs) == 8076
    n_b = sum(r["ph"] == "B" for r in recs)
    assert len(df[df["cat"].isin(["negotiate", "op", "activity"])]) == n_b == 2449
    # bytes of the allreduces from the E records' dtype/shape
    exp = 0
    for r in recs:
        if r["ph"] == "E" and "args" in r:
            n = int(np.prod([int(x) for x in re.findall(r"\d+", r["args"]["shape"])]))
            exp += n * {"float32": 4, "float64": 8, "int64": 8}[r["args"]["dtype"]]
    assert df.loc[df["name"] == "ALLREDUCE", "bytes"].sum() == exp
    # no epoch anchor in this (pre-0.20.1) file: ts are µs since timeline init
    first_b = min(r["ts"] for r in recs if r["ph"] == "B")
    assert df["start_ns"].min() == first_b * 1000


@pytest.mark.corpus
def test_alcf_gpu_cycles_and_epoch(corpus_dir):
    path = corpus_dir / ALCF_GPU
    df, _ = _read(path)
    recs = json.loads(path.read_text())
    assert len(df[df["cat"] == "cycle"]) == 22784
    anchor = recs[0]["args"]["start_time_since_epoch_in_micros"]
    assert anchor == 1633449303945695
    first_cycle = min(r["ts"] for r in recs if r.get("name") == "CYCLE_START")
    assert df.loc[df["cat"] == "cycle", "start_ns"].min() == (anchor + first_cycle) * 1000
    names = _counts(df)
    for n in ("NEGOTIATE_BROADCAST", "BROADCAST", "WAIT_FOR_DATA", "WAIT_FOR_OTHER_TENSOR_DATA",
              "QUEUE", "NCCL_BCAST", "INIT_NCCL"):
        assert n in names, n
    assert names["NCCL_BCAST"] == sum(r.get("name") == "NCCL_BCAST" for r in recs)
    kinds = df.drop_duplicates("name").set_index("name")["kind"]
    assert kinds["QUEUE"] == "sync_wait" and kinds["NCCL_BCAST"] == "comm"
    assert kinds["INIT_NCCL"] == "other"
    assert set(df.loc[df["cat"] == "rank_ready", "rank"]) == {0}


@pytest.mark.corpus
def test_alcf_cpu_small(corpus_dir):
    path = corpus_dir / ALCF_CPU
    df, _ = _read(path)
    recs = json.loads(path.read_text())
    assert len(recs) == 227
    assert _counts(df, "name") == {"NEGOTIATE_BROADCAST": 50, "BROADCAST": 25, "MPI_BCAST": 25}


@pytest.mark.corpus
def test_corpus_sniff_is_exclusive(corpus_dir):
    for f in sorted((corpus_dir / HVD).glob("*.json")):
        assert horovod.sniff(f) and not kineto.sniff(f), f
    for f in sorted((corpus_dir / "kineto").rglob("*.json*")):
        assert not horovod.sniff(f), f


@pytest.mark.corpus
def test_vectorised_matching_equals_stack(corpus_dir):
    recs = _tflogs_records(corpus_dir / TFLOGS)
    ph = np.array([r["ph"] for r in recs])
    pid = np.array([r.get("pid", -1) for r in recs], dtype=np.int64)
    be = (ph == "B") | (ph == "E")
    is_b, pid = ph[be] == "B", pid[be]
    fast = horovod._match_compact(is_b, pid)
    slow = horovod._match_loop_compact(is_b, pid, np.zeros(is_b.size, dtype=bool), set())
    for a, b in zip(fast[:3], slow[:3], strict=True):
        np.testing.assert_array_equal(a, b)
    assert (fast[3], slow[3].size, slow[4]) == (0, 0, 0)


def test_stray_end_after_barrier_negotiation_is_not_damage(tmp_path):
    # Horovod 0.28.1 writes an E for a barrier response although it wrote no top-level B
    # (every real timeline of a job that calls hvd.barrier() has these).
    recs = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "barrier.noname"}},
        {"name": "NEGOTIATE_BARRIER", "ph": "B", "ts": 10, "pid": 1},
        {"name": "0", "ph": "X", "ts": 11, "pid": 1, "dur": 0},
        {"name": "1", "ph": "X", "ts": 15, "pid": 1, "dur": 0},
        {"ph": "E", "ts": 15, "pid": 1},
        {"ph": "E", "ts": 40, "pid": 1},
    ]
    f = tmp_path / "timeline.json"
    f.write_text(json.dumps(recs))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = horovod.read(f)
    neg = df[df["kind"] == "negotiate"]
    assert list(neg["dur_ns"]) == [5000]
    assert sorted(df.loc[df["cat"] == "rank_ready", "rank"].tolist()) == [0, 1]
    # an E with nothing before it on its pid is still damage
    f.write_text(json.dumps([recs[0], {"ph": "E", "ts": 5, "pid": 1}, *recs[1:5]]))
    with pytest.warns(RecoveryWarning, match="1 E record"):
        horovod.read(f)
