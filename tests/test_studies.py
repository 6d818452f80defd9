"""One definition per study (issue 32, item 1): ``analysis.studies.run_study`` gives the
report's sections, table for table; the report's analysis options (``--warmup``,
``--confidence``, ``--baseline``) are the library's, with its defaults; the identities of
docs/metrics.md hold in the tables every view shows."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from analysis import report as R
from analysis.errors import ScalescopeError, recording
from analysis.metrics.breakdown import WARMUP
from analysis.metrics.stats import CONFIDENCE
from analysis.runset import RunSet
from analysis.studies import BASELINE, STUDIES, Section, context, run_study

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small(data_dir):
    return data_dir / "experiment_small"


@pytest.fixture(scope="module")
def report_sections(small):
    with recording() as caught:
        ctx = R.load([small])
        return {s.key: s for s in R.run_studies(ctx, caught)}


def _same(a: Section, b: Section) -> None:
    assert (a.key, a.title, a.skipped, a.intro) == (b.key, b.title, b.skipped, b.intro)
    assert a.table_names == b.table_names and a.figure_names == b.figure_names
    assert a.notes == b.notes
    for name in a.table_names:
        pd.testing.assert_frame_equal(a.table(name), b.table(name), check_exact=True, obj=f"{a.key}/{name}")


def test_run_study_gives_the_report_sections(small, report_sections):
    """Every study through run_study on its own Context (read from the RunSet, as a
    notebook does) is the report's section: the same tables exactly, figures, notes."""
    ctx = context(RunSet.from_dirs([small]))
    ran = 0
    for key, _, _ in STUDIES:
        sec = run_study(key, ctx)
        _same(sec, report_sections[key])
        ran += not sec.skipped
    assert ran >= 8, "most studies run on the hand-built experiment"


def test_run_study_from_a_directory(small, report_sections):
    _same(run_study("summary", small), report_sections["summary"])


def test_sections_address_tables_and_figures_by_name(report_sections):
    sec = report_sections["scaling"]
    assert sec.table("scaling") is sec.tables[0][1]
    assert sec.figure("scaling") is sec.figures[0][1]
    with pytest.raises(KeyError, match="has no table 'nope'; it has \\['scaling', 'speedup_fit'\\]"):
        sec.table("nope")
    with pytest.raises(KeyError, match="no study 'nope'"):
        run_study("nope", ".")


def test_options_change_what_they_say(small, report_sections):
    """--confidence narrows the intervals, --warmup 0 keeps every step, --baseline min measures
    against each configuration's fewest ranks; the defaults are the report's."""
    rs = RunSet.from_dirs([small])
    half = run_study("scaling", context(rs, confidence=0.5))
    narrow, wide = half.table("speedup_fit"), report_sections["scaling"].table("speedup_fit")
    width = wide["slope_ci_high"] - wide["slope_ci_low"]
    ok = width > 0
    assert ok.any()
    assert ((narrow["slope_ci_high"] - narrow["slope_ci_low"])[ok] < width[ok]).all()
    assert (narrow["confidence"] == 0.5).all() and (wide["confidence"] == CONFIDENCE).all()
    assert "50 %" in run_study("summary", context(rs, confidence=0.5)).intro
    why0 = run_study("why", context(rs, warmup=0))
    assert (why0.table("warmup")["n_warmup"] == 0).all()
    assert (report_sections["why"].table("warmup")["n_warmup"] > 0).any()
    mins = run_study("scaling", context(rs, baseline="min"))
    assert any("fewest ranks" in n for n in mins.notes)
    assert not mins.table("scaling")["framework"].eq("none").any() or \
        not mins.table("scaling").equals(report_sections["scaling"].table("scaling"))


def test_a_context_keeps_its_options(small):
    ctx = context(RunSet.from_dirs([small]), warmup=0)
    assert context(ctx) is ctx
    with pytest.raises(ValueError, match="loaded with"):
        run_study("summary", ctx, warmup=3)


@pytest.mark.parametrize("options, word", [({"warmup": -1}, "warmup"), ({"warmup": "soon"}, "warmup"),
                                           ({"confidence": 1.5}, "confidence"), ({"baseline": "max"}, "baseline")])
def test_bad_options_name_the_option(small, options, word):
    with pytest.raises(ScalescopeError, match=f"^{word}: "):
        context(RunSet.from_dirs([small]), **options)


def test_report_command_takes_the_options_with_the_library_defaults(capsys):
    import argparse

    parser = argparse.ArgumentParser()
    R.add_arguments(parser)
    args = parser.parse_args(["EXP"])
    assert (args.warmup, args.confidence, args.baseline) == (WARMUP, CONFIDENCE, BASELINE)
    args = parser.parse_args(["EXP", "--warmup", "3", "--confidence", "0.9", "--baseline", "min"])
    assert (args.warmup, args.confidence, args.baseline) == (3, 0.9, "min")
    for bad in (["--warmup", "x"], ["--confidence", "95"], ["--baseline", "max"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["EXP", *bad])
        assert "Traceback" not in capsys.readouterr().err


def test_notebook_parameters_default_to_the_library_constants():
    """Each notebook's WARMUP, CONFIDENCE and BASELINE are the report's defaults."""
    want = {"WARMUP": WARMUP, "CONFIDENCE": CONFIDENCE, "BASELINE": BASELINE}
    seen = 0
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        values = {t.id: ast.literal_eval(n.value) for n in ast.parse(code[0].source).body
                  if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        got = {k: values[k] for k in want if k in values}
        if got:
            assert got == want, path.name
            seen += 1
    assert seen == 13, "every notebook but 07 (other tools' files) runs the report's studies"


def test_syncs_per_epoch_are_the_batches_per_epoch(report_sections, small):
    """docs/metrics.md: syncs per epoch = batches per rank per epoch, warm-up steps included."""
    sync = report_sections["sync"].table("sync_per_run")
    from analysis import metrics as M

    st = M.step_table(RunSet.from_dirs([small]).events)  # every step, warm-up ones included (flagged)
    batches = st.groupby(["run_id", "rank", "epoch"], observed=True).size().groupby("run_id").mean()
    both = sync.set_index("run_id")["syncs_per_epoch"].to_frame().join(batches.rename("batches"), how="inner")
    assert len(both) >= 4 and (both["syncs_per_epoch"] == both["batches"]).all(), both
