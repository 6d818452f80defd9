"""Horovod frame assembly in row blocks: the frame must not depend on ``_assembly.BLOCK_ROWS``
(nor, with ties and spans carried over chunks, on ``_chrome.BLOCK_BYTES``)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _helpers import interleave

from analysis.readers import _assembly, _chrome, horovod

_ACTS = ["MEMCPY_IN_FUSION_BUFFER", "NCCL_ALLREDUCE", "WAIT_FOR_DATA", "QUEUE", None]


def _timeline(seed: int, *, n_tensors: int = 6, n_ops: int = 12, big_pid: bool = False) -> list:
    """Records with many tied timestamps, nesting, ticks (some outside any negotiation),
    other X records, unnamed records and instants, the tensors' streams interleaved."""
    rng = np.random.default_rng(seed)
    streams = []
    for t in range(n_tensors):
        pid = t + 1 + (10**7 if big_pid else 0)
        recs = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"grad_{t}"}}]
        ts = int(rng.integers(0, 3))

        def step(ts=None):
            return int(rng.integers(0, 2))  # often 0: ties

        for _ in range(n_ops):
            recs.append({"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": ts, "pid": pid})
            for r in rng.permutation(4)[: int(rng.integers(0, 4))].tolist():
                ts += step()
                recs.append({"ph": "X", "name": str(r), "ts": ts, "pid": pid, "dur": 0})
            ts += step()
            recs.append({"ph": "E", "ts": ts, "pid": pid})
            if rng.random() < 0.3:  # a tick outside any negotiation: named "NEGOTIATE"
                recs.append({"ph": "X", "name": "2", "ts": ts, "pid": pid, "dur": 0})
            if rng.random() < 0.3:  # an X that is not a tick, sometimes unnamed
                x = {"ph": "X", "ts": ts, "pid": pid, "dur": 3}
                if rng.random() < 0.5:
                    x["name"] = "INIT_FUSION_BUFFER"
                recs.append(x)
            recs.append({"ph": "B", "name": "ALLREDUCE", "ts": ts, "pid": pid})
            for _ in range(int(rng.integers(0, 4))):
                name = _ACTS[int(rng.integers(len(_ACTS)))]
                b = {"ph": "B", "ts": ts, "pid": pid}
                if name is not None:
                    b["name"] = name
                recs.append(b)
                ts += step()
                recs.append({"ph": "E", "ts": ts, "pid": pid})
            ts += step()
            e = {"ph": "E", "ts": ts, "pid": pid}
            if rng.random() < 0.8:
                e["args"] = {"dtype": "float32", "shape": f"[{int(rng.integers(1, 9))}, 4]"}
            recs.append(e)
            ts += step()
        streams.append(recs)
    head = [{"name": "process_name", "ph": "M", "pid": 0,
             "args": {"start_time_since_epoch_in_micros": 1_700_000_000_000_000}}]
    clock = [0]

    def marker() -> dict | None:  # cycle markers and other instants, alternating
        if rng.random() >= 0.05:
            return None
        clock[0] += 1
        return {"ph": "i", "name": "CYCLE_START" if clock[0] % 2 else "MARK",
                "ts": int(rng.integers(0, 20)), "s": "g"}

    return head + interleave(streams, rng, marker=marker)


def _write(path: Path, recs: list) -> Path:
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in recs) + "\n]\n")
    return path


def _read(path: Path) -> tuple[pd.DataFrame, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = horovod.read(path)
    return df, [str(w.message) for w in caught]


def _inputs(repo_root: Path, tmp_path: Path) -> list[Path]:
    corpus = Path(os.environ.get("SCALESCOPE_CORPUS", repo_root.parent / "shared" / "corpus"))
    files = sorted((repo_root / "tests" / "data" / "horovod").glob("*.json"))
    files += [corpus / "horovod_timeline" / n
              for n in ("tflogs-72f32f9__horovod_timeline.json", "alcf__timeline_cpu_n1.json")
              if (corpus / "horovod_timeline" / n).exists()]
    files.append(_write(tmp_path / "ties.json", _timeline(1)))
    files.append(_write(tmp_path / "big_pid.json", _timeline(2, n_tensors=3, big_pid=True)))
    return files


@pytest.mark.parametrize("rows", [1, 3, 7])
@pytest.mark.parametrize("block_bytes", [None, 300])
def test_block_rows_do_not_change_frames(rows, block_bytes, monkeypatch, repo_root, tmp_path):
    """Every row-block loop of the frame assembly, with blocks edges everywhere."""
    if block_bytes is not None:  # many chunks: spans carried over chunks, stored late
        monkeypatch.setattr(_chrome, "BLOCK_BYTES", block_bytes)
    for f in _inputs(repo_root, tmp_path):
        if block_bytes is not None and f.stat().st_size > 200_000:
            continue  # the corpus files take long in tiny chunks; the generated ones suffice
        expected, w_expected = _read(f)
        with monkeypatch.context() as m:
            m.setattr(_assembly, "BLOCK_ROWS", rows)
            got, w_got = _read(f)
        pd.testing.assert_frame_equal(expected, got, obj=f"{f.name} in {rows}-row blocks")
        assert w_expected == w_got, f.name


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_late_spans_keep_the_whole_file_order(seed, monkeypatch, tmp_path):
    """Tied starts with spans carried over chunks: the frame read in tiny chunks and tiny
    row blocks equals the one read in one chunk (spans tied at a start in B-record order)."""
    f = _write(tmp_path / "t.json", _timeline(seed, n_tensors=8, n_ops=20))
    expected, w_expected = _read(f)
    assert expected["start_ns"].duplicated().sum() > len(expected) // 4  # ties aplenty
    late = []
    real = _assembly.late_rows

    def spy(keys):
        out = real(keys)
        late.append(out.size)
        return out

    monkeypatch.setattr(_assembly, "late_rows", spy)
    monkeypatch.setattr(_chrome, "BLOCK_BYTES", 200)
    monkeypatch.setattr(_assembly, "BLOCK_ROWS", 5)
    got, w_got = _read(f)
    assert late and late[0] > 10  # the case under test: spans stored out of B order
    pd.testing.assert_frame_equal(expected, got)
    assert w_expected == w_got


def test_tick_in_a_chunk_without_negotiations(tmp_path):
    """A readiness tick in a chunk with no negotiation span at all is named "NEGOTIATE"
    (this raised IndexError)."""
    f = _write(tmp_path / "t.json", [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "g"}},
        {"ph": "X", "name": "2", "ts": 5, "pid": 1, "dur": 0},
    ])
    df, msgs = _read(f)
    assert msgs == []
    assert df[["name", "cat", "rank", "tensor"]].astype(object).values.tolist() == [
        ["NEGOTIATE", "rank_ready", 2, "g"]]
