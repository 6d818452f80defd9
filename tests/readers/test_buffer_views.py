"""A view of the read buffer that outlives a chunk's decode (Dask's profiler keeps frames, and
with them msgspec.Raw views, alive) must not break the read: the buffer cannot be resized
then, and the reader goes on with a copy (analysis/readers/_chrome.py, ``_release``)."""

from __future__ import annotations

import pandas as pd
import pytest

import analysis
from analysis.readers import _chrome


@pytest.mark.parametrize("name", ["tiny_rank1.pt.trace.json", "tiny_rank1.pt.trace.json.gz"])
def test_views_held_past_a_chunk_give_the_same_frame(data_dir, monkeypatch, name):
    path = data_dir / "kineto" / name
    expected = analysis.read(path, cache=False)
    kept: list[memoryview] = []
    window = _chrome.ChunkDecoder.window

    def holding(self, buf, lo, hi, on_chunk):
        def hold(recs, body):
            kept.append(body[0:1])  # outlives the call, as a profiler's frame would
            return on_chunk(recs, body)

        return window(self, buf, lo, hi, hold)

    monkeypatch.setattr(_chrome, "BLOCK_BYTES", 4096)  # many chunks, many resizes
    monkeypatch.setattr(_chrome.ChunkDecoder, "window", holding)
    got = analysis.read(path, cache=False)
    assert kept, "no chunk was decoded in place"
    pd.testing.assert_frame_equal(got, expected)
