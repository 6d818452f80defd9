"""The readers' two process-wide memory measures, kept apart here (issue 26, rule 7).

Both act only around a read (``analysis.read``: the frame building of the streaming
readers), and both were measured to matter (``benchmarks/process_effects.py``,
``benchmarks/README.md``, "Process-wide memory measures"):

* :func:`release_freed_memory`: glibc's ``malloc_trim`` hands heap memory the read freed
  back to the OS. It changes nothing a program can observe but its resident size (no
  value, no setting); elsewhere than glibc it does nothing.
* :func:`small_pages`: NumPy's ``MADV_HUGEPAGE`` hint is switched off while a frame is
  built, where the kernel would stall the first touch of a marked array to compact memory
  (:func:`hugepages_stall`). NumPy's switch is process-wide: while any read is inside,
  arrays that other threads of the process allocate are not marked either (they get the
  kernel's default pages; no value changes), and the switch is restored, to whatever the
  program had set, when the last read leaves. Nothing else of the process is touched.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_TRIM: Callable[[int], int] | bool | None = False  # False: not looked up yet


def release_freed_memory() -> None:
    """Give memory that was freed back to the OS now (glibc ``malloc_trim``; elsewhere no-op).

    Pieces are small arrays freed column by column while the frame's columns are built.
    glibc keeps such freed heap memory resident and serves the large column arrays from
    fresh ``mmap`` pages instead, so without a trim the peak is the pieces *plus* the frame
    rather than the frame plus one column's pieces.
    """
    global _TRIM
    if _TRIM is False:
        _TRIM = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                _TRIM = ctypes.CDLL("libc.so.6").malloc_trim
            except (OSError, AttributeError):  # musl or another libc: nothing to call
                _TRIM = None
    if _TRIM is not None:
        _TRIM(0)


_PAGES_LOCK = threading.Lock()
_PAGES_USERS = 0
_PAGES_SAVED: bool | None = None


def hugepages_stall() -> bool:
    """Whether this kernel may stall a fault on memory marked ``MADV_HUGEPAGE`` to compact
    memory for a huge page: Linux's transparent-huge-page ``defrag`` setting is
    ``always``, ``madvise`` or ``defer+madvise`` (not ``defer`` or ``never``)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/defrag") as fh:
            text = fh.read()
    except OSError:
        return False
    mode = text[text.find("[") + 1 : text.find("]")] if "[" in text else ""
    return mode in ("always", "madvise", "defer+madvise")


#: :func:`small_pages` acts only for inputs of at least this many bytes of text (a gzipped
#: file counts :data:`GZIP_RATIO` times its size): below, a frame's arrays are too small
#: for the compaction stall to show (``benchmarks/README.md``, "Process-wide memory
#: measures": no difference at 150 MB files, 0.6 s of a 1 GB timeline's read).
SMALL_PAGES_MIN_BYTES = 256 << 20
#: How much larger than its file a gzipped trace's text is taken to be (JSON traces
#: compress 8-15 times).
GZIP_RATIO = 8


def needs_small_pages(size: int, gzipped: bool) -> bool:
    """Whether a read of a file of ``size`` bytes makes frames large enough for
    :func:`small_pages` to matter."""
    return size * (GZIP_RATIO if gzipped else 1) >= SMALL_PAGES_MIN_BYTES


@contextmanager
def small_pages(active: bool = True) -> Iterator[None]:
    """Inside: NumPy does not mark its large arrays ``MADV_HUGEPAGE``, where the kernel
    would compact memory on their first touch (:func:`hugepages_stall`). With ``active``
    false (a small input, :func:`needs_small_pages`), nothing is switched.

    A frame build touches fresh arrays of hundreds of MiB once each, and there the
    compaction costs more than huge pages save (numpy/numpy#31590 describes the stall;
    measured in ``benchmarks/README.md``). NumPy's own switch is process-wide, so it is
    set while any thread is inside and restored when the last one leaves; elsewhere, or
    without the switch, nothing changes.
    """
    global _PAGES_USERS, _PAGES_SAVED
    try:
        from numpy._core import multiarray as _ma
    except ImportError:  # NumPy 1.x
        from numpy.core import multiarray as _ma
    get = getattr(_ma, "_get_madvise_hugepage", None)
    put = getattr(_ma, "_set_madvise_hugepage", None)
    if not active or get is None or put is None or not hugepages_stall():
        yield
        return
    with _PAGES_LOCK:
        if _PAGES_USERS == 0:
            _PAGES_SAVED = bool(get())
            put(False)
        _PAGES_USERS += 1
    try:
        yield
    finally:
        with _PAGES_LOCK:
            _PAGES_USERS -= 1
            if _PAGES_USERS == 0:
                put(_PAGES_SAVED)
