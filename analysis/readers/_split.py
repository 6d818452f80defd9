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

The first part is read in the calling process while the next ones run in forked workers,
one per worker. The last share of the file (:data:`TAIL`) is cut into small parts that
whichever process is free first reads: the workers take them from the front, in the order
they were handed to the pool, and the calling process, once its own part is done, takes
those no worker has started from the back. So the processes finish within about one small
part of each other, however their speeds differ (another program's load, a part with
denser records) and whichever process is slowed.

A worker's result travels through shared memory: its arrays' buffers are written, out of
band of the pickle (protocol 5), to a file in ``/dev/shm`` (the temporary directory when
that has not room for them) from which the caller reads each array straight into memory
of its own: arrays are neither pickled row by row nor pushed through a pipe, and each is
freed when the frame building has placed it.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from analysis.readers import _chrome

#: Smallest part: a file is split only into parts of at least this many bytes (a smaller
#: file is read faster by one process than by starting others).
MIN_PART_BYTES = 48 << 20
#: Share of the file read in small parts at the end, by whichever process is free.
TAIL = 0.2
#: Smallest of those small parts (each costs a worker's hand-over and a merge step).
MIN_TAIL_PART_BYTES = 16 << 20
#: At most this many small parts per process.
TAIL_PARTS_PER_WORKER = 4


def shares(size: int, workers: int) -> list[float] | None:
    """Relative sizes of the parts of a file of ``size`` bytes read by ``workers``
    processes: one part per process (at least :data:`MIN_PART_BYTES` each), then the
    :data:`TAIL` in small parts when it makes two or more; None when the file makes fewer
    than two parts."""
    big = min(workers, size // MIN_PART_BYTES)
    if big < 2:
        return None
    small = min(int(size * TAIL) // MIN_TAIL_PART_BYTES, TAIL_PARTS_PER_WORKER * big)
    if small < 2:
        return [1.0] * big
    return [(1 - TAIL) / big] * big + [TAIL / small] * small


def read_parts(path: Path, workers: int, part: Callable[[Path, _chrome.Split, int], Any],
               ) -> list[Any] | None:
    """``[part(path, split, i) for each part i]`` on ``workers`` processes (this one
    included), in file order; None when the file is not split (gzipped, too small, one
    worker) or a part raised (the serial read then reports the problem).

    Every part but the first is handed to the pool, in order; a process reads a part only
    once it has claimed it (:func:`_claim`), so a part the calling process took from the
    back is skipped by the worker it was handed to."""
    if workers < 2:
        return None
    try:
        weights = shares(os.stat(path).st_size, workers)
        split = None if weights is None else _chrome.plan_split(path, weights)
    except Exception:  # the serial read reports what is wrong with the file
        return None
    if split is None:
        return None
    from analysis.scale import _pool

    n = len(split.parts)
    got: dict[int, Any] = {}
    claims = tempfile.mkdtemp(prefix="scalescope-claims-", dir=_shm_dir())
    try:
        with _pool(min(workers, n) - 1) as pool:
            for i in range(1, n):  # each read back as soon as its worker is done
                pool.submit(_shipped, part, path, split, i, claims).add_done_callback(
                    partial(_take_back, got, i))
            try:
                got[0] = part(path, split, 0)
                for i in range(n - 1, 0, -1):  # the parts no worker has begun, from the back
                    if not _claim(claims, i):
                        break  # a worker has it; the workers take the earlier ones
                    got[i] = part(path, split, i)
            except BaseException:  # the workers skip what they have not begun
                for i in range(1, n):
                    _claim(claims, i)
                raise
        # leaving the pool waited for every worker and for their parts to be read back
        results = [got.get(i) for i in range(n)]
        if any(r is None or isinstance(r, BaseException) for r in results):
            return None
        return results
    except Exception:
        return None
    finally:
        shutil.rmtree(claims, ignore_errors=True)


def _claim(claims: str, index: int) -> bool:
    """Whether this process is the first to claim part ``index`` (creating a file of that
    name in ``claims`` succeeds only once, across processes)."""
    try:
        os.close(os.open(os.path.join(claims, str(index)), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _take_back(got: dict[int, Any], i: int, future: Any) -> None:
    """Read part ``i`` back from its worker (in the pool's result thread, while this
    process may still be decoding a part; the copy from the file releases the GIL) and
    remove its file; ``got[i]`` becomes the part, or the exception that lost it. A part
    the worker skipped (another process claimed it) is left alone."""
    try:
        shipped = future.result()
    except BaseException as exc:  # the worker failed: its part is lost, no file is left
        got[i] = exc
        return
    if shipped is None:
        return
    head, name, layout = shipped
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
             index: int, claims: str) -> tuple[bytes, str, list[tuple[int, int]]] | None:
    """``part(path, split, index)`` in a worker, sent back as the pickle of its structure
    and a shared-memory file of its arrays' buffers, one after the other; returns the
    pickle, the file's name and each buffer's ``(offset, length)``. None, and nothing read,
    when another process has claimed the part."""
    if not _claim(claims, index):
        return None
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
