"""The Parquet parse cache never returns a frame that differs from a fresh parse (issue 16,
part 4): same-size rewrites with the mtime restored, byte flips in an entry, another file's
entry in the slot and a directory in its place are all detected; a damaged file's warnings
are given again on every cached re-read."""

from __future__ import annotations

import os
import shutil
import warnings

import pandas as pd
import pytest

import analysis
from analysis.errors import RecoveryWarning
from analysis.readers import cache_dir

FIXTURE = "scalescope/ddp_gloo_np2/rank-00000.trace.json"


@pytest.fixture()
def trace(data_dir, tmp_path):
    p = tmp_path / "rank-00000.trace.json"
    shutil.copy(data_dir / FIXTURE, p)
    return p


def _entries() -> list:
    return sorted(cache_dir().glob("*.parquet"))


def _fresh(path):
    return analysis.read(path, cache=False)


def _same_size_edit(path, old: bytes, new: bytes) -> None:
    assert len(old) == len(new)
    st = os.stat(path)
    raw = path.read_bytes()
    assert old in raw
    path.write_bytes(raw.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # touch -r: the mtime as before
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns


def test_same_size_rewrite_with_restored_mtime(trace):
    first = analysis.read(trace, cache=True)
    assert len(_entries()) == 1
    _same_size_edit(trace, b'"forward"', b'"forwarX"')
    again = analysis.read(trace, cache=True)
    assert "forwarX" in set(again["name"].astype(str)) and "forwarX" not in set(first["name"].astype(str))
    pd.testing.assert_frame_equal(again, _fresh(trace))
    assert len(_entries()) == 1  # the stale entry was replaced, not kept beside


def test_rename_over_with_same_size_and_mtime(trace, tmp_path):
    analysis.read(trace, cache=True)
    other = tmp_path / "other.json"
    other.write_bytes(trace.read_bytes().replace(b'"backward"', b'"backwarX"', 1))
    st = os.stat(trace)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, trace)
    got = analysis.read(trace, cache=True)
    assert "backwarX" in set(got["name"].astype(str))
    pd.testing.assert_frame_equal(got, _fresh(trace))


def test_byte_flips_in_an_entry_are_never_returned(trace):
    truth = _fresh(trace)
    analysis.read(trace, cache=True)
    (entry,) = _entries()
    good = entry.read_bytes()
    positions = sorted({int(i * (len(good) - 1) / 89) for i in range(90)})
    for pos in positions:
        for e in _entries():
            e.unlink()
        damaged = bytearray(good)
        damaged[pos] ^= 0x10
        entry.write_bytes(bytes(damaged))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = analysis.read(trace, cache=True)
        pd.testing.assert_frame_equal(got, truth)
        assert any("damaged" in str(w.message) for w in caught), pos
    assert len(_entries()) == 1


def test_another_files_entry_in_the_slot_is_not_used(trace, tmp_path, data_dir):
    other = tmp_path / "rank-00001.trace.json"
    shutil.copy(data_dir / "scalescope/ddp_gloo_np2/rank-00001.trace.json", other)
    analysis.read(other, cache=True)
    (other_entry,) = _entries()
    analysis.read(trace, cache=True)
    (mine,) = [e for e in _entries() if e != other_entry]
    slot = mine.name.split(".")[0]
    mine.unlink()
    shutil.copy(other_entry, cache_dir() / f"{slot}.{other_entry.name.split('.', 1)[1]}")
    with pytest.warns(UserWarning, match="foreign"):
        got = analysis.read(trace, cache=True)
    pd.testing.assert_frame_equal(got, _fresh(trace))


def test_a_directory_at_the_entry_path(trace):
    analysis.read(trace, cache=True)
    (entry,) = _entries()
    entry.unlink()
    entry.mkdir()
    with pytest.warns(UserWarning, match="not a regular file"):
        got = analysis.read(trace, cache=True)
    pd.testing.assert_frame_equal(got, _fresh(trace))


def test_warnings_of_a_damaged_file_are_replayed_on_cached_reads(trace):
    raw = trace.read_bytes()
    trace.write_bytes(raw[: len(raw) * 2 // 3])  # a killed rank: no closing ']'
    for _ in range(3):
        with pytest.warns(RecoveryWarning, match="trace is not terminated"):
            df = analysis.read(trace, cache=True)
    assert len(_entries()) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pd.testing.assert_frame_equal(df, _fresh(trace))


def test_threads_reading_at_once_keep_their_own_warnings(tmp_path, monkeypatch):
    """The cache records a parse's warnings to replay them; ``warnings.catch_warnings`` is
    process-wide, so a second thread parsing at the same moment must not leak its warning
    into the first one's record (a Dask cluster of threads reads in threads)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from analysis import readers
    from analysis.schema import make_events

    a_warned, b_warned = threading.Event(), threading.Event()

    def read(path, *, run_id=None):
        # without one recorder at a time, b records while a parses and a's warning,
        # given while b's recorder is the process's, lands in b's record
        if path.name == "a.bin":
            b_warned.wait(0.5)
            warnings.warn(f"{path.name}: damaged", RecoveryWarning, stacklevel=2)
            a_warned.set()
        else:
            warnings.warn(f"{path.name}: damaged", RecoveryWarning, stacklevel=2)
            b_warned.set()
            a_warned.wait(0.5)
        return make_events(name=["x"], kind="compute", start_ns=[1], dur_ns=[1], source="t")

    monkeypatch.setitem(readers.REGISTRY, "threads_test",
                        readers.Reader("threads_test", lambda p: False, read))
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"a" * 100)
    b.write_bytes(b"b" * 100)

    def one(path):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            analysis.read(path, "threads_test", cache=True)
        return [str(w.message) for w in caught]

    # the threads record nothing themselves (catch_warnings is not theirs to use); what the
    # library replays after each parse lands here, unchecked
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with ThreadPoolExecutor(2) as pool:
            fa = pool.submit(analysis.read, a, "threads_test", cache=True)
            time.sleep(0.05)
            fb = pool.submit(analysis.read, b, "threads_test", cache=True)
            fa.result(), fb.result()
    for path in (a, b):  # the cached entries replay exactly their own file's warning
        assert one(path) == [f"{path.name}: damaged"]


@pytest.mark.parametrize(("fixture", "old", "new"), [(FIXTURE, b'"forward"', b'"forwarX"'),
                                                  ("kineto/tiny_rank1.pt.trace.json", b'"aten::mm"', b'"aten::mX"')])
def test_a_symlink_to_a_cached_file_gives_the_frame_of_its_own_name(data_dir, tmp_path, fixture, old, new):
    """Issue 25, class 6: the run_id (and Kineto's rank from the name) come from the path as
    given, so a link read after its target was cached gives what a fresh parse of the link
    gives, never the target's cached frame; and the other way round."""
    target = tmp_path / "rank-00000.trace.json"
    shutil.copy(data_dir / fixture, target)
    link = tmp_path / "worker7.trace.json"
    link.symlink_to(target)
    for first, second in ((target, link), (link, target)):
        analysis.read(first, cache=True)
        got = analysis.read(second, cache=True)
        pd.testing.assert_frame_equal(got, _fresh(second))
        assert set(got["run_id"].astype(str)) == {second.name.split(".")[0]}
    # the link re-pointed at another file: that file's content, not the cached frame
    other = tmp_path / "other.json"
    raw = target.read_bytes()
    assert old in raw
    other.write_bytes(raw.replace(old, new, 1))
    link.unlink()
    link.symlink_to(other)
    got = analysis.read(link, cache=True)
    assert new.strip(b'"').decode() in set(got["name"].astype(str))
    pd.testing.assert_frame_equal(got, _fresh(link))


def test_run_entries_follow_the_file_entries_protocol(data_dir, tmp_path):
    """The run cache (a Dask RunSet's events) has the parse cache's protocol: an entry named
    by its digest, reused while whole, written again (with a note) when damaged, and a new
    entry when a file of the run changes."""
    from analysis.readers.cache import run_entry

    run = tmp_path / "run"
    shutil.copytree(data_dir / "scalescope" / "ddp_gloo_np2", run)
    events = analysis.read_many(run, cache=False)
    calls = []

    def load():
        calls.append(1)
        return events

    first = run_entry(str(run), "r", load)
    assert first.parent == cache_dir() / "runs" and len(first.name.split(".")) == 3
    pd.testing.assert_frame_equal(pd.read_parquet(first), events, check_categorical=False)
    assert run_entry(str(run), "r", load) == first and len(calls) == 1  # whole: reused
    raw = bytearray(first.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    first.write_bytes(bytes(raw))
    with pytest.warns(UserWarning, match="damaged"):
        again = run_entry(str(run), "r", load)
    assert len(calls) == 2 and again.is_file()
    pd.testing.assert_frame_equal(pd.read_parquet(again), events, check_categorical=False)
    with open(run / "rank-00000.epochs.jsonl", "a", encoding="utf-8") as fh:
        fh.write("\n")
    assert run_entry(str(run), "r", load) != again and len(calls) == 3  # a file changed: another key
