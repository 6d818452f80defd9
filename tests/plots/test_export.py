"""Static export: kaleido through a real Chromium (marked), tables to LaTeX and CSV."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import pytest

from analysis.errors import ScalescopeError
from analysis.export import export, export_table, find_browser


def test_export_table_latex_and_csv(tmp_path):
    df = pd.DataFrame({"n_ranks": [1, 2], "speedup": [1.0, 1.48148], "config_backend": ["hvd_gloo", "x"]})
    tex, csv = export_table(df, tmp_path / "scaling", caption="Speedup")
    assert tex.name == "scaling.tex" and csv.name == "scaling.csv"
    text = tex.read_text()
    assert "\\toprule" in text and "1.48" in text and "hvd\\_gloo" in text and "\\caption{Speedup}" in text
    assert "\\label{tab:scaling}" in text and "Speedup" in text and "Ranks" in text
    pd.testing.assert_frame_equal(pd.read_csv(csv), df)


def test_missing_browser_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chromium"))
    assert find_browser() is None
    with pytest.raises(ScalescopeError, match=r"Chromium-based browser.*apt-get install chromium"):
        export(go.Figure(), tmp_path / "fig")


@pytest.mark.chromium
def test_export_pdf_svg_png(tmp_path):
    if find_browser() is None:
        pytest.skip("no Chromium-based browser")
    fig = go.Figure(go.Bar(x=[1, 2], y=[3, 4]))
    paths = export(fig, tmp_path / "bars.pdf")
    assert [p.name for p in paths] == ["bars.pdf", "bars.svg", "bars.png"]
    assert paths[0].read_bytes()[:4] == b"%PDF"
    assert b"<svg" in paths[1].read_bytes()[:500]
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
