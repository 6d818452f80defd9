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

The parts' results travel as pickled NumPy arrays (whole buffers, never row by row); the
first part is read in the calling process while the others run in forked workers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.readers import _chrome

#: Smallest part: a file is split only into parts of at least this many bytes (a smaller
#: file is read faster by one process than by starting others).
MIN_PART_BYTES = 48 << 20


def read_parts(path: Path, workers: int, part: Callable[[Path, _chrome.Split, int], Any],
               ) -> list[Any] | None:
    """``[part(path, split, i) for each part i]`` on ``workers`` processes (this one
    included), in file order; None when the file is not split (gzipped, too small, one
    worker) or a part raised (the serial read then reports the problem)."""
    if workers < 2:
        return None
    try:
        split = _chrome.plan_split(path, workers, min_part_bytes=MIN_PART_BYTES)
    except Exception:  # the serial read reports what is wrong with the file
        return None
    if split is None:
        return None
    from analysis.scale import _pool

    n = len(split.parts)
    try:
        with _pool(n - 1) as pool:
            futures = [pool.submit(part, path, split, i) for i in range(1, n)]
            first = part(path, split, 0)
            return [first] + [f.result() for f in futures]
    except Exception:
        return None


def clean(damage: _chrome.Damage) -> bool:
    """Whether a part's decode noted nothing (the only parts that are merged)."""
    return damage.message(Path("")) is None
