"""Atomic outputs (issue 25, class 5): a Ctrl-C at the worst moment of ``replacing`` leaves
no temporary file, and the previous output is kept."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest

from analysis import atomic


def _interrupting_mkstemp(real):
    """``tempfile.mkstemp`` that receives a SIGINT right after creating the file, before
    its caller can know the name (what a Ctrl-C at that moment does)."""
    def mkstemp(*args, **kwargs):
        out = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return out
    return mkstemp


def test_a_ctrl_c_while_the_temporary_file_is_created_leaves_nothing(tmp_path, monkeypatch):
    dest = tmp_path / "table.csv"
    dest.write_text("previous\n")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        monkeypatch.setattr(tempfile, "mkstemp", _interrupting_mkstemp(tempfile.mkstemp))
        with pytest.raises(KeyboardInterrupt):
            atomic.write_text(dest, "new\n")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]
    assert dest.read_text() == "previous\n"


def test_an_error_while_writing_keeps_the_previous_file_and_removes_the_temporary(tmp_path):
    dest = tmp_path / "table.csv"
    dest.write_text("previous\n")
    with pytest.raises(RuntimeError), atomic.replacing(dest) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]
    assert dest.read_text() == "previous\n"


def test_held_back_even_when_another_thread_takes_the_signal(tmp_path, monkeypatch):
    """Any thread may receive a process's SIGINT (the report has worker threads); the
    Ctrl-C must still wait until the temporary file's name is known."""
    import threading

    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        test_a_ctrl_c_while_the_temporary_file_is_created_leaves_nothing(tmp_path, monkeypatch)
    finally:
        stop.set()
        other.join()
