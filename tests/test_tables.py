"""Tables for people (analysis.tables): headers and units from column-name conventions,
rounding, intervals, residue, notes on odd numbers, HTML escaping; and spreadsheet-safe CSVs
from export and convert (OWASP formula injection)."""

from __future__ import annotations

import csv
import json
import re

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis import convert, tables
from analysis.export import export_table, safe_csv_frame, spreadsheet_safe


@pytest.mark.parametrize(("name", "header", "unit", "stat"), [
    ("epoch_time_s_median", "Epoch time (median)", "ms", "median"),
    ("efficiency_min_frac", "Efficiency (min)", "%", "min"),
    ("cpu_util_pct_mean_jump", "CPU utilisation (change at a new node)", "%", "jump"),
    ("throughput_samples_per_s_median", "Throughput (median)", "samples/s", "median"),
    ("alpha_stderr_s", "Latency alpha (std. error)", "ms", "stderr"),
    ("comm_bytes", "Communication", "MiB", None),
    ("rss_mib_mean", "Resident memory (mean)", "MiB", "mean"),
    ("n_ranks", "Ranks", "", None),
    ("brand_new_metric_s", "Brand new metric", "ms", None),  # a column nobody named: its words
    ("speedup", "Speedup", "", None),
])
def test_describe_follows_the_conventions(name, header, unit, stat):
    spec = tables.describe(name)
    assert (spec.header, spec.unit, spec.stat) == (header, unit, stat)


def test_verdict_columns_are_recognised():
    assert tables.describe("gap_s_verdict").kind == "verdict"
    assert tables.describe("verdict").header == "Verdict"


def test_humanize_units_rounding_intervals_residue_and_shared_columns():
    df = pd.DataFrame({
        "config_backend": ["ddp-gloo", "horovod-gloo"], "batch_size": [75, 75], "n_ranks": [2, 2],
        "step_time_s": [0.0181971, 0.0432], "step_time_s_ci_low": [0.0179, 0.040],
        "step_time_s_ci_high": [0.0185, 0.047], "other_s": [5.421e-20, 0.002],
        "efficiency_frac": [0.8123, 0.5], "efficiency_std_frac": [0.01, 0.02],
    })
    h = tables.humanize(df)
    assert list(h.columns) == ["Configuration", "Step time [ms]", "Other / idle [ms]", "Efficiency [%]"]  # the cause words (metrics.gap.CAUSE_LABELS)
    # half-width 0.3 ms -> one decimal; 3.5 ms -> no decimal beyond the units digit
    assert h["Step time [ms]"].tolist() == ["18.2 [17.9, 18.5]", "43 [40, 47]"]
    assert h["Other / idle [ms]"].iloc[0] == "0"  # residue below 1e-12 of the row's scale
    assert h["Efficiency [%]"].tolist() == ["81.2", "50.0"]
    assert h.attrs["shared"] == ["Batch size: 75", "Ranks: 2"]  # the same in every row
    assert "efficiency_std_frac" not in " ".join(h.columns)  # spread left to the CSV


def test_seconds_become_seconds_when_long():
    h = tables.humanize(pd.DataFrame({"wall_s": [35.2, 120.0], "rank": [0, 1]}))
    assert "Wall time [s]" in h.columns and h["Wall time [s]"].tolist() == ["35.2", "120.0"]


def test_note_on_efficiency_above_one_says_within_noise_from_the_verdict_or_interval():
    df = pd.DataFrame({"config_backend": ["a", "b", "c"], "n_ranks": [1, 1, 2],
                       "efficiency": [1.22, 1.05, 0.8], "efficiency_ci_low": [1.1, 0.9, 0.7],
                       "efficiency_ci_high": [1.3, 1.2, 0.9]})
    notes = tables.humanize(df).attrs["notes"]
    assert len(notes) == 1 and notes[0].startswith("Efficiency above 100 %")
    # "Why not ideal?"'s efficiency (a fraction without _frac) is shown in % like the Summary's
    assert "a 1 ranks: 122.0 %, distinguishable" in notes[0] and "b 1 ranks: 105.0 %, within noise" in notes[0]
    assert "a baseline slowed by other processes" in notes[0] and "work per step miscounted" in notes[0]
    v = tables.humanize(df.assign(verdict=["within noise", "no interval (n<3)", "distinguishable"])
                        .drop(columns=["efficiency_ci_low", "efficiency_ci_high"])).attrs["notes"][0]
    assert "a 1 ranks: 122.0 %, within noise" in v and "fewer than 3 repeats" in v


def test_note_on_negative_overhead_and_none_for_ordinary_numbers():
    df = pd.DataFrame({"config_backend": ["horovod-mpi", "ddp"], "batch_size": [75, 75],
                       "overhead_pct": [-17.0, 30.0]})
    notes = tables.humanize(df).attrs["notes"]
    assert len(notes) == 1 and notes[0].startswith("Negative overhead") and "-17.0 %" in notes[0]
    assert "no interval" in notes[0]
    assert tables.humanize(df.assign(overhead_pct=[1.0, 2.0])).attrs["notes"] == []


def test_html_is_escaped_and_carries_units_and_notes():
    df = pd.DataFrame({"run_id": ["<script>alert(1)</script>", "b"], "overhead_frac": [-0.2, 0.1]})
    out = tables.to_html(df)
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "<span class=\"unit\">[%]</span>" in out and "−20.0" in out
    assert "table-note odd" in out


def test_latex_escape_prints_everything_literally():
    s = tables.latex_escape("\\protect\\input{/etc/passwd} 50% & $x$ #1 ^_~ <a|b>\x1b[2J")
    assert "\\input{" not in s and "\\textbackslash{}input\\{/etc/passwd\\}" in s
    for raw in ("%", "&", "$", "#"):
        assert f"\\{raw}" in s
    assert "\x1b" not in s
    assert tables.latex_label("\\protect\\input{x}") == "tab:protect-input-x"


@pytest.mark.parametrize(("cell", "safe"), [
    ("=1+1", "'=1+1"), ("+cmd", "'+cmd"), ("-2+3", "'-2+3"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"),
    ("\rx", "'\rx"), ("-3", "-3"), ("-1.5e-3", "-1.5e-3"), ("ok", "ok"), (-3.0, -3.0), (None, None),
])
def test_spreadsheet_safe(cell, safe):
    assert spreadsheet_safe(cell) == safe


def test_export_table_csv_is_safe_and_keeps_numbers(tmp_path):
    df = pd.DataFrame({"label": ["=HYPERLINK(\"http://x\")", "ok"], "gap_s": [-0.5, 0.25],
                       "@evil": [1, 2]})
    _, path = export_table(df, tmp_path / "t")
    rows = list(csv.reader(path.open()))
    assert rows[0] == ["label", "gap_s", "'@evil"]
    assert rows[1][0].startswith("'=") and rows[1][1] == "-0.5"
    back = pd.read_csv(path)
    assert back["gap_s"].tolist() == [-0.5, 0.25]
    assert safe_csv_frame(df.select_dtypes("number").drop(columns="@evil")) is not None


def test_convert_csv_neutralises_formula_names(tmp_path, data_dir):
    text = (data_dir / "horovod" / "tiny_timeline.json").read_text()
    src = tmp_path / "evil_timeline.json"
    src.write_text(text.replace("grad_a", "=cmd|' /C calc'!A0").replace("grad_b", "-2+3"))
    json.loads(src.read_text())  # still valid JSON
    written = convert.convert_one(src, to="csv", out=tmp_path / "out")
    cells = {c for row in csv.reader(written[0].open()) for c in row}
    assert "'=cmd|' /C calc'!A0" in cells and "'-2+3" in cells
    assert not any(c.startswith(("=", "@")) or (c.startswith(("+", "-")) and not _is_number(c)) for c in cells)
    assert not list((tmp_path / "out").glob(".*.tmp"))  # atomic write left no temporary file


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def test_a_wide_range_keeps_three_significant_digits_per_cell():
    h = tables.humanize(pd.DataFrame({"run_id": ["a", "b", "c"], "sync_sum_s": [3e-5, 0.0123, 10.27]}))
    assert h["Sync (sum) [ms]"].tolist() == ["0.0300", "12.3", "10,270"]


def test_the_same_numbers_twice_show_once_with_one_note():
    df = pd.DataFrame({"config_backend": ["a", "b"], "overhead_s": [-0.06, 0.1], "overhead_frac": [-0.24, 0.3],
                       "overhead_pct": [-24.0, 30.0]})
    h = tables.humanize(df)
    assert list(h.columns) == ["Configuration", "Overhead [ms]", "Overhead [%]"]
    assert len(h.attrs["notes"]) == 1 and "-24.0 %" in h.attrs["notes"][0]


@pytest.mark.parametrize("df", [
    pd.DataFrame(), pd.DataFrame(columns=["a_s", "b"]), pd.DataFrame({"x_s": [float("nan")] * 2, "n_ranks": [1, 2]}),
    pd.DataFrame({"slowest_rank": pd.array([1, None], dtype="Int32"), "v_s": [1.0, 2.0]}),
    pd.DataFrame({"m": [1, "a", None, 2.5], "t": pd.to_datetime(["2020-01-01"] * 4)}),
    pd.DataFrame({"c": pd.Categorical(["a", "b"]), "v": [float("inf"), -float("inf")]}),
    pd.DataFrame({0: [1, 2], 1: ["x", "y"]}), pd.DataFrame([[1, 2]], columns=["a", "a"]),
    pd.DataFrame({"flag": pd.array([True, None], dtype="boolean"), "labels": [["a", "b"], {"k": "v"}]}),
    pd.DataFrame({"x_bytes": [1e300, 1e-300], "y": [1e308, -1e308]}),
    pd.DataFrame({"foo_ci_low": [1.0], "foo_ci_high": [2.0]}),
], ids=lambda df: ",".join(map(str, df.columns)) or "empty")
def test_odd_frames_never_break_a_table(df):
    tables.humanize(df)
    assert "<table>" in tables.to_html(df)
    assert tables.to_latex(df, caption="c", label="l").startswith("\\begin{table}")


_ESCAPES = re.compile(r"\\textbackslash\{\}|\\textasciitilde\{\}|\\textless\{\}|\\textgreater\{\}|\\textbar\{\}"
                      r"|\\\^\{\}|\\[{}$&#_%]|\\allowbreak\{\}|\\ldots\{\}|\$(\\times|\\cdot|\\rightarrow|\\leftarrow"
                      r"|\\le|\\ge|\\pm|\\mu|\\alpha|\\beta|-|\^\\circ)\$")


#: What a character outside Latin-1 becomes (issue 33): an accent command on a letter (nested
#: for two accents), a letter command, or its code point in braced brackets.
_ACCENT = re.compile(r"\\[`'^~=\"uvHcdkbr.]\{([A-Za-z]|\\[ij]\{\})\}")
_OTHER = re.compile(r"\\(l|L|oe|OE|i|j)\{\}|\{\[\}(U\+[0-9A-F]{4,6}\+?)+\{\]\}")


def _without_escapes(text: str) -> str:
    while True:
        shorter = _ACCENT.sub(r"\1", text)
        if shorter == text:
            return _OTHER.sub("", _ESCAPES.sub("", text))
        text = shorter


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_latex_escape_leaves_no_special_character(text):
    rest = _without_escapes(tables.latex_escape(text, breakable=True))
    assert not set(rest) & set("\\{}$&#_%^~")
    assert all(ord(c) >= 32 for c in rest)
