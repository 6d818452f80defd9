"""Every figure of the report at thesis quality: no fixed width (it fills the report page or a
notebook's output area), integer rank ticks, hover text with units, one trace or bar per
configuration, and a PNG at the documented print size (6.3 in at 300 dpi) from kaleido and a
real Chromium (skips cleanly without one)."""

from __future__ import annotations

import struct

import pandas as pd
import pytest

from analysis import plots as P
from analysis import report as R
from analysis.export import PRINT_DPI, PRINT_WIDTH_IN, export_many, find_browser


@pytest.fixture(scope="module")
def figures(data_dir):
    """Every figure the report draws on the hand-built experiment."""
    ctx = R.load([data_dir / "experiment_small"])
    figs = {}
    for sec in R.run_studies(ctx, []):
        figs.update(dict(sec.figures))
    assert len(figs) >= 8
    return figs


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_no_fixed_width_and_hover_with_units(figures):
    for name, fig in figures.items():
        assert fig.layout.width is None, name  # responsive: the page or notebook decides
        assert fig.layout.autosize is True, name
        assert 300 <= fig.layout.height <= 2400, name
        for tr in fig.data:
            if tr.hoverinfo == "skip" or tr.type not in ("bar", "scatter") or tr.name == "ideal":
                continue
            if tr.name and (tr.name.startswith("fit") or tr.name.startswith("ideal")):
                continue
            assert tr.hovertemplate, f"{name}: trace {tr.name!r} has raw hover text"


def test_rank_axes_have_integer_ticks(figures):
    checked = 0
    for name, fig in figures.items():
        for ax in [a for a in fig.layout if a.startswith("xaxis")]:
            axis = fig.layout[ax]
            if axis.title.text == P.RANKS_TITLE and axis.type != "category":
                assert axis.tickmode == "array", (name, ax)
                assert all(float(v).is_integer() for v in axis.tickvals), (name, ax)
                checked += 1
    assert checked >= 3


def test_overhead_never_stacks_batch_sizes():
    t = pd.DataFrame({"config_backend": ["ddp-gloo", "ddp-gloo", "horovod-mpi", "horovod-mpi"],
                      "batch_size": [75, 300, 75, 300], "epoch_time_s": [0.36, 0.28, 0.2, 0.3],
                      "baseline_epoch_time_s": [0.3, 0.25, 0.24, 0.25], "overhead_pct": [20.0, 12.0, -17.0, 20.0]})
    fig = P.plot_overhead(t)
    for tr in fig.data:
        assert len(set(tr.x)) == len(tr.x) == 4  # one bar per (framework, batch size)
    assert "-17.0 %" in fig.data[1].text and fig.data[1].cliponaxis is False
    assert fig.layout.yaxis.range[1] > 360  # room for the labels above the bars (ms)


def test_scaling_lines_split_batch_sizes():
    t = pd.DataFrame({"config_backend": "hg", "batch_size": [75, 75, 300, 300], "n_ranks": [1, 2, 1, 2],
                      "speedup": [0.9, 1.5, 0.95, 1.7], "efficiency_frac": [0.9, 0.75, 0.95, 0.85],
                      "baseline_n_ranks": 1.0})
    fig = P.plot_scaling(t)
    names = {tr.name for tr in fig.data if tr.xaxis == "x" and tr.name != "ideal"}
    assert names == {"hg · bs 75", "hg · bs 300"}


@pytest.mark.chromium
def test_every_figure_renders_at_the_print_size(figures, tmp_path):
    if find_browser() is None:
        pytest.skip("no Chromium-based browser")
    paths = export_many(figures, tmp_path, formats=["png"])
    assert len(paths) == len(figures)
    for p in paths:
        w, h = _png_size(p.read_bytes())
        assert w == round(PRINT_WIDTH_IN * PRINT_DPI), p.name  # 1890 px: one column at 300 dpi
        assert 0.4 * w <= h <= 3.0 * w, (p.name, w, h)
        assert p.stat().st_size > 20_000, p.name  # something was drawn
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically
