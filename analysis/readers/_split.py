"""One large Chrome-JSON file (Kineto trace, Horovod timeline) read by several processes.

The file is cut into byte ranges at record boundaries (:func:`_chrome.plan_split`); each
range is decoded in its own process by the reader's usual chunk loop, starting from an
empty state, and the reader merges the parts' states in file order (category codes
renumbered, row and record numbers shifted; the Horovod reader also closes the spans that
were open across a cut) before it builds the frame as a serial read does. The frame and
warnings are those of a serial read.

Only clean parts are merged: a part whose decode noted any damage (a record that did not
decode, bytes that are not UTF-8, a cut that fell inside a string and broke the records on
both sides of it) or whose state the merge cannot carry across a cut makes the reader read
the whole file serially, so a damaged file gets exactly the serial read's recovery and
warning. A gzipped file cannot be entered in the middle: it is always read serially.

The first part is read in the calling process while the others run in forked workers. A
worker's result travels through shared memory: its arrays' buffers are written, out of
band of the pickle (protocol 5), to a file in ``/dev/shm`` (the temporary directory when
that has not room for them) from which the caller reads each array straight into memory
of its own: arrays are neither pickled row by row nor pushed through a pipe, and each is
freed when the frame building has placed it.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from analysis.readers import _chrome

#: Smallest part: a file is split only into parts of at least this many bytes (a smaller
#: file is read faster by one process than by starting others).
MIN_PART_BYTES = 48 << 20
#: How much larger the first part is (a fraction of a part): it is read in the calling
#: process, while the others also write their rows out for it to read back (about 3 % of
#: a part's time).
LEAD = 0.03


def read_parts(path: Path, workers: int, part: Callable[[Path, _chrome.Split, int], Any],
               ) -> list[Any] | None:
    """``[part(path, split, i) for each part i]`` on ``workers`` processes (this one
    included), in file order; None when the file is not split (gzipped, too small, one
    worker) or a part raised (the serial read then reports the problem)."""
    if workers < 2:
        return None
    try:
        split = _chrome.plan_split(path, workers, min_part_bytes=MIN_PART_BYTES, lead=LEAD)
    except Exception:  # the serial read reports what is wrong with the file
        return None
    if split is None:
        return None
    from analysis.scale import _pool

    n = len(split.parts)
    got: list[Any] = [None] * (n - 1)
    try:
        with _pool(n - 1) as pool:
            futures = [pool.submit(_shipped, part, path, split, i) for i in range(1, n)]
            for i, f in enumerate(futures):  # read back as soon as a worker is done
                f.add_done_callback(partial(_take_back, got, i))
            first = part(path, split, 0)
        # leaving the pool waited for every worker and for their parts to be read back
        if any(r is None or isinstance(r, BaseException) for r in got):
            return None
        return [first, *got]
    except Exception:
        return None


def _take_back(got: list[Any], i: int, future: Any) -> None:
    """Read worker ``i``'s part back (in the pool's result thread, while this process may
    still be decoding its own part; the copy from the file releases the GIL) and remove its
    file; ``got[i]`` becomes the part, or the exception that lost it."""
    try:
        head, name, layout = future.result()
    except BaseException as exc:  # the worker failed: its part is lost, no file is left
        got[i] = exc
        return
    try:
        got[i] = _received(head, name, layout)
    except BaseException as exc:
        got[i] = exc
    finally:
        _remove(name)


def _shm_dir(need: int = 0) -> str | None:
    """Shared memory's file system when there is one (Linux) with ``need`` bytes free (a
    container's is often 64 MiB), else None: the temporary directory."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    if not os.access("/dev/shm", os.W_OK) or st.f_bavail * st.f_frsize < need + (16 << 20):
        return None
    return "/dev/shm"


def _shipped(part: Callable[[Path, _chrome.Split, int], Any], path: Path, split: _chrome.Split,
             index: int) -> tuple[bytes, str, list[tuple[int, int]]]:
    """``part(path, split, index)`` in a worker, sent back as the pickle of its structure
    and a shared-memory file of its arrays' buffers, one after the other; returns the
    pickle, the file's name and each buffer's ``(offset, length)``."""
    result = part(path, split, index)
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(result, protocol=5, buffer_callback=buffers.append)
    need = sum(buf.raw().nbytes for buf in buffers)
    fd, name = tempfile.mkstemp(prefix="scalescope-part-", suffix=".bin", dir=_shm_dir(need))
    layout = []
    try:
        with os.fdopen(fd, "wb") as fh:
            at = 0
            for buf in buffers:
                raw = buf.raw()
                layout.append((at, raw.nbytes))
                fh.write(raw)
                at += raw.nbytes
    except BaseException:
        _remove(name)
        raise
    return head, name, layout


def _received(head: bytes, name: str, layout: list[tuple[int, int]]) -> Any:
    """The result :func:`_shipped` sent: each array read from the file into memory of its
    own (one copy, freed with the array; mapping the pages instead made the frame building
    that touches them slower than the copy costs)."""
    buffers = []
    with open(name, "rb", buffering=0) as fh:
        for _, n in layout:
            buf = bytearray(n)
            with memoryview(buf) as view:
                got = 0
                while got < n:  # one read returns at most about 2 GiB
                    k = fh.readinto(view[got:])
                    if not k:
                        raise OSError(f"{name}: shorter than its layout")
                    got += k
            buffers.append(buf)
    return pickle.loads(head, buffers=buffers)


def _remove(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass


def clean(damage: _chrome.Damage) -> bool:
    """Whether a part's decode noted nothing (the only parts that are merged)."""
    return damage.message(Path("")) is None
