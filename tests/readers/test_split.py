"""One Chrome-JSON file read in parts by several processes (``analysis.readers._split``):
the frame and the warnings are those of the serial read, wherever the cuts fall.

Most tests join the parts in this process (``_part`` for every part, then the reader's
merge), which lets them try every number of parts, so that cuts fall inside negotiations,
between an op's B and its activities, between a barrier and Horovod's stray E after it.
One test per reader runs the real process pool."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _helpers import interleave

from analysis.readers import _chrome, _split, horovod, kineto

_ACTS = ["MEMCPY_IN_FUSION_BUFFER", "NCCL_ALLREDUCE", "WAIT_FOR_DATA", "QUEUE", None]


def _timeline(seed: int, *, n_tensors: int = 5, n_ops: int = 30, damage: bool = False) -> list:
    """Horovod-like records: negotiations with readiness ticks (some outside any), ops with
    activities and payloads, barriers followed by Horovod's stray E, many tied times, the
    tensors' streams interleaved. ``damage``: an unmatched E and spans left open."""
    rng = np.random.default_rng(seed)
    streams = []
    for t in range(n_tensors):
        pid = t + 1
        recs = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"grad_{t}"}}]
        ts = int(rng.integers(0, 3))
        for _ in range(n_ops):
            if rng.random() < 0.15:  # a barrier: its negotiation, then a stray E
                recs.append({"ph": "B", "name": "NEGOTIATE_BARRIER", "ts": ts, "pid": pid})
                recs.append({"ph": "X", "name": "0", "ts": ts, "pid": pid, "dur": 0})
                ts += int(rng.integers(0, 2))
                recs.append({"ph": "E", "ts": ts, "pid": pid})
                recs.append({"ph": "E", "ts": ts, "pid": pid})
                continue
            recs.append({"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": ts, "pid": pid})
            for r in rng.permutation(4)[: int(rng.integers(0, 4))].tolist():
                ts += int(rng.integers(0, 2))
                recs.append({"ph": "X", "name": str(r), "ts": ts, "pid": pid, "dur": 0})
            ts += int(rng.integers(0, 2))
            recs.append({"ph": "E", "ts": ts, "pid": pid})
            if rng.random() < 0.2:  # a tick outside any negotiation: named "NEGOTIATE"
                recs.append({"ph": "X", "name": "2", "ts": ts, "pid": pid, "dur": 0})
            recs.append({"ph": "B", "name": "ALLREDUCE", "ts": ts, "pid": pid})
            for _ in range(int(rng.integers(0, 4))):
                name = _ACTS[int(rng.integers(len(_ACTS)))]
                b = {"ph": "B", "ts": ts, "pid": pid}
                if name is not None:
                    b["name"] = name
                recs.append(b)
                ts += int(rng.integers(0, 2))
                recs.append({"ph": "E", "ts": ts, "pid": pid})
            ts += int(rng.integers(0, 2))
            e = {"ph": "E", "ts": ts, "pid": pid}
            if rng.random() < 0.8:
                e["args"] = {"dtype": "float32", "shape": f"[{int(rng.integers(1, 9))}, 4]"}
            recs.append(e)
        if damage and t == 0:
            recs.append({"ph": "E", "ts": ts, "pid": pid})  # nothing open: unmatched
            recs.append({"ph": "B", "name": "ALLREDUCE", "ts": ts, "pid": pid})  # never closed
        streams.append(recs)
    head = [{"name": "process_name", "ph": "M", "pid": 0,
             "args": {"start_time_since_epoch_in_micros": 1_700_000_000_000_000}}]
    return head + interleave(streams, rng, marker=lambda: {
        "ph": "i", "name": "CYCLE_START", "ts": int(rng.integers(0, 20)), "s": "g",
    } if rng.random() < 0.03 else None)


def _write(path: Path, recs: list, *, obj: bool = False) -> Path:
    body = ",\n".join(json.dumps(r) for r in recs)
    if obj:
        path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + body
                        + '\n], "traceName": "x ]}", "distributedInfo": {"rank": 3}}\n')
    else:
        path.write_text("[\n" + body + "\n]\n")
    return path


def _caught(fn, *args, **kwargs) -> tuple[pd.DataFrame, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = fn(*args, **kwargs)
    return df, [str(w.message) for w in caught]


def _in_parts(mod, path: Path, parts: int, monkeypatch) -> tuple[pd.DataFrame, list[str], bool]:
    """``mod.read(path, workers=parts)`` with the parts read one after the other in this
    process; also whether the reader merged them (else it read the file serially)."""

    def here(path, workers, part):
        split = _chrome.plan_split(path, [1.0] * workers)
        return None if split is None else [part(path, split, i) for i in range(len(split.parts))]

    merged = []
    real = mod._merge

    def spy(results):
        out = real(results)
        merged.append(out is not None)
        return out

    with monkeypatch.context() as m:
        m.setattr(_split, "read_parts", here)
        m.setattr(mod, "_merge", spy)
        df, w = _caught(mod.read, path, run_id="t", workers=parts)
    return df, w, merged == [True]


def _serial(mod, path: Path) -> tuple[pd.DataFrame, list[str]]:
    return _caught(mod.read, path, run_id="t")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_horovod_parts_equal_the_serial_read_wherever_the_cuts_fall(seed, tmp_path, monkeypatch):
    f = _write(tmp_path / "t.json", _timeline(seed))
    expected, w_expected = _serial(horovod, f)
    assert (expected["name"] == "NEGOTIATE_BARRIER").any() and (expected["cat"] == "rank_ready").any()
    for parts in range(2, 41):
        got, w_got, merged = _in_parts(horovod, f, parts, monkeypatch)
        assert merged, f"{parts} parts: not merged"  # nothing here for the merge to decline
        pd.testing.assert_frame_equal(expected, got, obj=f"{parts} parts")
        assert w_got == w_expected


def test_horovod_parts_of_a_damaged_timeline_count_as_serial(tmp_path, monkeypatch):
    """Unmatched E and spans left open: the counts in the one warning are the serial ones."""
    f = _write(tmp_path / "t.json", _timeline(7, damage=True))
    expected, w_expected = _serial(horovod, f)
    assert len(w_expected) == 1 and "no matching E" in w_expected[0] and "no open B" in w_expected[0]
    for parts in (2, 5, 9, 17):
        got, w_got, merged = _in_parts(horovod, f, parts, monkeypatch)
        assert merged  # the counts are merged, not left to a serial read
        pd.testing.assert_frame_equal(expected, got, obj=f"{parts} parts")
        assert w_got == w_expected


def test_a_cut_inside_a_string_is_never_merged(tmp_path, monkeypatch):
    """Horovod writes tensor names unescaped: '},{' inside a name looks like a record
    boundary. The parts on both sides of such a cut fail to decode, and the file is read
    serially (with the serial read's own recovery and warning)."""
    recs = _timeline(4, n_tensors=2, n_ops=5)
    trap = '{"name": "process_name", "ph": "M", "pid": 9, "args": {"name": "a"},{"b"}}'
    text = "[\n" + ",\n".join([json.dumps(recs[0]), trap] + [json.dumps(r) for r in recs[1:]]) + "\n]\n"
    f = tmp_path / "t.json"
    f.write_text(text)
    expected, w_expected = _serial(horovod, f)
    assert len(w_expected) == 1 and "could not be parsed" in w_expected[0]
    at = text.index("},{")
    split = _chrome.Split("array", b"", [(2, at + 1), (at + 2, None)])  # the wrong cut, forced
    results = [horovod._part(f, split, i) for i in range(2)]
    assert not any(_split.clean(r["damage"]) for r in results)
    assert horovod._merge(results) is None
    monkeypatch.setattr(_split, "read_parts", lambda path, workers, part: results)
    got, w_got = _caught(horovod.read, f, run_id="t", workers=2)
    pd.testing.assert_frame_equal(expected, got)
    assert w_got == w_expected


def test_kineto_parts_equal_the_serial_read(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    recs = []
    for i in range(3000):
        cat = ["cpu_op", "kernel", "cuda_runtime", "gpu_memcpy", "user_annotation"][int(rng.integers(5))]
        name = {"user_annotation": f"ProfilerStep#{i // 300}", "kernel": f"k{int(rng.integers(9))}"}.get(
            cat, f"aten::op{int(rng.integers(40))}")
        r = {"ph": "X", "cat": cat, "name": name, "pid": 1 if cat in ("kernel", "gpu_memcpy") else 77,
             "tid": 7 if cat in ("kernel", "gpu_memcpy") else 78, "ts": 1000.5 + i, "dur": 0.25 + i % 3,
             "args": {"correlation": i // 2}}
        if cat == "gpu_memcpy":
            r["args"]["bytes"] = 4096
        recs.append(r)
        if rng.random() < 0.02:
            recs.append({"ph": "f", "id": i, "pid": 1, "tid": 7, "ts": 1000 + i, "cat": "ac2g"})
    f = _write(tmp_path / "rank3.pt.trace.json", recs, obj=True)
    expected, w_expected = _serial(kineto, f)
    assert expected["rank"].iloc[0] == 3 and expected["step"].notna().any()
    for parts in range(2, 30):
        got, w_got, merged = _in_parts(kineto, f, parts, monkeypatch)
        assert merged, f"{parts} parts: not merged"
        pd.testing.assert_frame_equal(expected, got, obj=f"{parts} parts")
        assert w_got == w_expected


def _corpus_plain(corpus: Path, tmp_path: Path, sub: str) -> list[Path]:
    """The corpus's files of one format, gunzipped into ``tmp_path`` (a gzip stream cannot
    be split)."""
    out = []
    for f in sorted((corpus / sub).rglob("*.json*")):
        if f.name.endswith(".gz"):
            plain = tmp_path / f.name[:-3]
            with gzip.open(f, "rb") as src, open(plain, "wb") as dst:
                shutil.copyfileobj(src, dst)
            out.append(plain)
        else:
            out.append(f)
    return out


@pytest.mark.parametrize("sub,mod", [("horovod_timeline", horovod), ("kineto", kineto)])
def test_corpus_files_in_parts_equal_the_serial_read(sub, mod, corpus_dir, tmp_path, monkeypatch):
    files = _corpus_plain(corpus_dir, tmp_path, sub)
    assert files
    n_merged = 0
    for f in files:
        expected, w_expected = _serial(mod, f)
        for parts in (2, 3, 7):
            got, w_got, merged = _in_parts(mod, f, parts, monkeypatch)
            n_merged += merged
            pd.testing.assert_frame_equal(expected, got, obj=f"{f.name} in {parts} parts")
            assert w_got == w_expected, f.name
    assert n_merged >= len(files)  # most real files are merged, not read again serially


@pytest.mark.parametrize("mod", [horovod, kineto])
def test_the_process_pool_reads_one_file_in_parts(mod, tmp_path, monkeypatch):
    """``read(workers=3)`` for real: forked workers, results joined in file order."""
    if mod is horovod:
        f = _write(tmp_path / "t.json", _timeline(5, n_tensors=8, n_ops=60))
    else:
        recs = [{"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 0, "tid": 7, "ts": i, "dur": 1,
                 "args": {"correlation": i}} for i in range(20000)]
        f = _write(tmp_path / "t.json", recs, obj=True)
    monkeypatch.setattr(_split, "MIN_PART_BYTES", 1)
    used = []
    real = _split.read_parts

    def spy(*args):
        out = real(*args)
        used.append(None if out is None else len(out))
        return out

    monkeypatch.setattr(_split, "read_parts", spy)
    shm = Path(_split._shm_dir() or tempfile.gettempdir())
    before = set(shm.glob("scalescope-part-*"))
    expected, w_expected = _caught(mod.read, f, workers=1)
    got, w_got = _caught(mod.read, f, workers=3)
    assert used == [None, 3]  # workers=1 never splits; workers=3 read three parts
    pd.testing.assert_frame_equal(expected, got)
    assert w_got == w_expected
    assert set(shm.glob("scalescope-part-*")) == before  # the workers' files are removed


_REAL_PART = horovod._part
_WHO: dict = {}  # set by the test before the pool forks: the log file and this process's id


def _part_logged(path, split, index):  # module level: the pool pickles it by name
    """The real part, logged with the process that read it. The calling process waits
    for the worker to begin part 1, which then takes long, so every later part is free for
    the calling process to take from the back."""
    import os
    import time

    here = os.getpid() == _WHO["parent"]
    with open(_WHO["log"], "a") as fh:
        fh.write(f"{index} {'caller' if here else 'worker'}\n")
    if here and index == 0:
        deadline = time.monotonic() + 30
        while "1 worker" not in Path(_WHO["log"]).read_text() and time.monotonic() < deadline:
            time.sleep(0.01)
    if not here and index == 1:
        time.sleep(1.0)
    return _REAL_PART(path, split, index)


def test_shares_cut_one_part_per_process_then_a_tail_of_small_parts(monkeypatch):
    monkeypatch.setattr(_split, "MIN_PART_BYTES", 100)
    monkeypatch.setattr(_split, "MIN_TAIL_PART_BYTES", 10)
    assert _split.shares(150, 4) is None  # not two parts' worth
    assert _split.shares(240, 4) == [0.4, 0.4] + [0.05] * 4  # 48 bytes of tail: 4 parts
    monkeypatch.setattr(_split, "MIN_TAIL_PART_BYTES", 30)
    assert _split.shares(240, 4) == [1.0, 1.0]  # two parts; the tail would be one part
    monkeypatch.setattr(_split, "MIN_TAIL_PART_BYTES", 10)
    got = _split.shares(10_000, 2)
    assert len(got) == 2 + 4 * 2  # at most TAIL_PARTS_PER_WORKER small parts per process
    assert got[0] == got[1] and sum(got[2:]) == pytest.approx(_split.TAIL) and sum(got) == pytest.approx(1)
    assert len(_split.shares(600, 3)) == 3 + 12  # 120 bytes of tail: 12 parts of 10


def test_tail_parts_go_to_whichever_process_is_free(tmp_path, monkeypatch):
    """The worker is slow in its part: the calling process takes every small part from
    the back; the worker skips the parts handed to it that were taken. Each part is read
    once, and the frame is the serial one."""
    f = _write(tmp_path / "t.json", _timeline(7, n_tensors=6, n_ops=60))
    monkeypatch.setattr(_split, "MIN_PART_BYTES", 1)
    monkeypatch.setattr(_split, "MIN_TAIL_PART_BYTES", 1)
    monkeypatch.setattr(horovod, "_part", _part_logged)
    log = tmp_path / "log"
    monkeypatch.setitem(_WHO, "log", str(log))
    monkeypatch.setitem(_WHO, "parent", os.getpid())
    merged = []
    real = horovod._merge
    monkeypatch.setattr(horovod, "_merge", lambda parts: merged.append(parts is not None) or real(parts))
    expected, w_expected = _caught(horovod.read, f, workers=1)
    log.write_text("")
    got, w_got = _caught(horovod.read, f, workers=2)
    assert merged == [False, True]
    pd.testing.assert_frame_equal(expected, got)
    assert w_got == w_expected
    read = [line.split() for line in log.read_text().splitlines()]
    n = 2 + 4 * 2
    assert sorted(int(i) for i, _ in read) == list(range(n))  # every part once
    assert {int(i) for i, who in read if who == "worker"} == {1}
    assert [int(i) for i, who in read if who == "caller"] == [0, *range(n - 1, 1, -1)]


def test_a_worker_skips_a_part_another_process_claimed(tmp_path):
    claims = str(tmp_path)
    assert _split._claim(claims, 3) and not _split._claim(claims, 3)
    called = []
    assert _split._shipped(lambda *a: called.append(a), tmp_path / "t.json", None, 3, claims) is None
    assert called == []
    got = {}

    class Done:
        def result(self):
            return None

    _split._take_back(got, 3, Done())
    assert got == {}




def _first_part_fails(path, split, index):  # module level: the pool pickles it by name
    """The first part fails, once both workers' parts have come back (and their files
    have been removed, in this process's result thread)."""
    import time

    if index == 0:
        deadline = time.monotonic() + 30
        while len(_WHO["removed"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        raise MemoryError("the calling process ran out of memory")
    return _REAL_PART(path, split, index)


def test_a_failing_part_leaves_the_serial_read_and_no_files(tmp_path, monkeypatch):
    """The first part fails in the calling process after the workers wrote theirs: the
    file is read serially and the workers' files are removed."""
    f = _write(tmp_path / "t.json", _timeline(5, n_tensors=4, n_ops=30))
    monkeypatch.setattr(_split, "MIN_PART_BYTES", 1)
    monkeypatch.setattr(horovod, "_part", _first_part_fails)
    removed = []
    real = _split._remove

    def spy(name):  # runs here, in the calling process
        removed.append(name)
        real(name)

    monkeypatch.setattr(_split, "_remove", spy)
    shm = Path(_split._shm_dir() or tempfile.gettempdir())
    before = set(shm.glob("scalescope-part-*"))
    monkeypatch.setitem(_WHO, "removed", removed)
    expected, w_expected = _caught(horovod.read, f, workers=1)
    got, w_got = _caught(horovod.read, f, workers=3)
    pd.testing.assert_frame_equal(expected, got)
    assert w_got == w_expected
    assert len(removed) == 2  # the two workers' parts were written, then removed
    assert set(shm.glob("scalescope-part-*")) == before


def test_gzip_and_small_files_are_not_split(tmp_path):
    f = _write(tmp_path / "t.json", _timeline(1, n_ops=5))
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(f.read_bytes()))
    assert _chrome.plan_split(gz, [1.0] * 4) is None
    assert _split.shares(f.stat().st_size, 4) is None  # smaller than two parts' worth
    split = _chrome.plan_split(f, [1.0] * 4)
    assert split is not None and len(split.parts) == 4
    text = f.read_bytes()
    for start, end in split.parts:  # every part starts at a record and ends after one
        assert text[start:].lstrip()[:1] == b"{"
        assert end is None or text[end - 1:end] == b"}"


def test_analysis_read_splits_large_files_by_default(tmp_path, monkeypatch):
    """``analysis.read``: ``workers=None`` splits a file of two parts' worth or more in a
    notebook (not in a pool's or a cluster's worker), ``workers=1`` never; ``read_many`` of
    one file does the same; the parse cache is keyed without ``workers``."""
    import multiprocessing

    import analysis

    f = _write(tmp_path / "t.json", _timeline(2, n_ops=40))
    asked = []
    monkeypatch.setattr(_split, "read_parts", lambda path, workers, part: asked.append(workers))
    monkeypatch.setattr(_split, "MIN_PART_BYTES", f.stat().st_size // 2)
    monkeypatch.setattr("analysis.scale.default_workers", lambda: 6)
    expected = analysis.read(f, cache=False, workers=1)
    assert asked == [1]
    analysis.read(f, cache=False)
    analysis.read_many([f], cache=False)
    assert asked == [1, 6, 6]
    with monkeypatch.context() as m:
        m.setattr(multiprocessing, "parent_process", lambda: object())  # in a worker
        analysis.read(f, cache=False)
    monkeypatch.setattr(_split, "MIN_PART_BYTES", f.stat().st_size)  # too small to split
    analysis.read(f, cache=False)
    assert asked == [1, 6, 6, 1, 1]
    monkeypatch.setattr(_split, "MIN_PART_BYTES", f.stat().st_size // 2)
    del asked[:]
    from analysis import scale

    g = _write(tmp_path / "u.json", _timeline(3, n_ops=40))
    scale.read_files([f], workers=4)  # one file: in parts
    scale.read_files([f, g], workers=1)  # several: each file by one process
    analysis.read_many([f, g], cache=False, workers=1)
    scale.reduce_files([f], horovod.dedupe_fused, cache=False)
    assert asked == [4, 1, 1, 1, 1, 6]
    monkeypatch.undo()
    first = analysis.read(f, cache=True, workers=3)
    again = analysis.read(f, cache=True, workers=1)  # a cache hit: the same frame
    pd.testing.assert_frame_equal(first, again)
    pd.testing.assert_frame_equal(expected, again)


def test_parts_go_through_the_temporary_directory_when_shared_memory_is_small(tmp_path, monkeypatch):
    """A container's /dev/shm is often 64 MiB: a part that does not fit goes through the
    temporary directory instead (and the frame is the same)."""
    f = _write(tmp_path / "t.json", _timeline(6, n_tensors=4, n_ops=30))
    monkeypatch.setattr(_split, "MIN_PART_BYTES", 1)
    assert _split._shm_dir(1 << 60) is None  # no file system has an exabyte free
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    real = _split._shm_dir
    monkeypatch.setattr(_split, "_shm_dir", lambda need=0: real(need + (1 << 60)))
    removed = []
    real_remove = _split._remove
    monkeypatch.setattr(_split, "_remove", lambda name: (removed.append(name), real_remove(name)))
    expected = horovod.read(f, workers=1)
    # the worker surely reads part 1 (the calling process waits for it to begin)
    monkeypatch.setattr(horovod, "_part", _part_logged)
    monkeypatch.setitem(_WHO, "log", str(tmp_path / "log"))
    monkeypatch.setitem(_WHO, "parent", os.getpid())
    got = horovod.read(f, workers=2)
    pd.testing.assert_frame_equal(expected, got)
    assert len(removed) == 1 and Path(removed[0]).parent == tmp_path / "tmp"
    assert not list((tmp_path / "tmp").glob("scalescope-part-*"))  # removed after use
