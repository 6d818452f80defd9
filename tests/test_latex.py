"""Every exported LaTeX table compiles with pdflatex under the documented preamble
(analysis.tables.LATEX_PREAMBLE, docs/export.md) and fits the text width of a default article
page: the test fails on any LaTeX error and on any overfull box. Hostile labels print literally.
Skips cleanly when pdflatex is absent (scripts/system_deps.sh installs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import report
from analysis.export import export_table
from analysis.tables import LATEX_PREAMBLE

pytestmark = pytest.mark.skipif(shutil.which("pdflatex") is None,
                                reason="pdflatex not installed (scripts/system_deps.sh installs texlive)")

HOSTILE = "\\protect\\input{/etc/passwd} 50% & $x$ #1 ^_~ {}"


def compile_tables(texs: list[Path], work: Path) -> dict[str, list[str]]:
    """Compile each table in a default article document; return {name: problems} for the
    tables with a LaTeX error or an overfull box (and the opened files, to catch \\input)."""
    work.mkdir(parents=True, exist_ok=True)
    problems: dict[str, list[str]] = {}
    for tex in texs:
        shutil.copy(tex, work / tex.name)
        doc = work / f"doc-{tex.stem}.tex"
        doc.write_text("\\documentclass{article}\n" + LATEX_PREAMBLE + "\\begin{document}\n"
                       f"\\input{{{tex.name}}}\n\\end{{document}}\n", encoding="utf-8")
        proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape",
                               doc.name], cwd=work, capture_output=True, text=True, timeout=120)
        log = (work / f"doc-{tex.stem}.log").read_text(encoding="utf-8", errors="replace")
        bad = [ln for ln in log.splitlines() if ln.startswith("!") or re.match(r"Overfull \\[hv]box", ln)]
        if "/etc/passwd" in re.sub(r"\s+", "", "".join(re.findall(r"\(([^()\s]+)", log))):
            bad.append("a file named in a cell or caption was read")
        if proc.returncode or bad:
            problems[tex.name] = bad or [log[-800:]]
    return problems


@pytest.fixture(scope="module")
def exported(data_dir, tmp_path_factory):
    """The report's export/ folder on the hand-built experiment (no browser needed)."""
    out = tmp_path_factory.mktemp("latex") / "rep"
    report.build_report(data_dir / "experiment_small", out, static=False)
    return out / "export"


def test_every_exported_table_compiles_and_fits_the_page(exported, tmp_path):
    texs = sorted(exported.glob("*.tex"))
    assert len(texs) >= 10
    assert compile_tables(texs, tmp_path) == {}
    for tex in texs:
        text = tex.read_text(encoding="utf-8")
        assert "\\label{tab:scalescope-" in text and "\\caption{" in text
        assert "_s_median" not in text.split("\\midrule")[0]  # headers are for people


def test_wide_table_keeps_what_fits_and_names_the_rest(tmp_path):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"config_backend": ["horovod-gloo", "ddp-nccl"], "n_ranks": [2, 4]})
    for i in range(25):
        df[f"some_long_metric_number_{i}_s"] = rng.uniform(0.001, 2.0, 2)
    df["efficiency_frac"] = [0.9, 1.2]
    tex, _ = export_table(df, tmp_path / "wide", caption="A wide table", main=("efficiency_frac",))
    text = tex.read_text()
    assert "are in wide.csv" in text and "Efficiency" in text
    assert "Efficiency above 100" in text
    assert compile_tables([tex], tmp_path / "build") == {}


def test_hostile_labels_print_literally(tmp_path):
    df = pd.DataFrame({"partition": [HOSTILE, "=cmd|' /C calc'!A0"], "n_ranks": [1, 2],
                       "gap_s": [0.01, -0.002], "gap_s_ci_low": [0.008, -0.004], "gap_s_ci_high": [0.012, 0.0],
                       "comment": ["a very long comment that has to wrap inside its cell " * 2, "\x1b[2J\n"]})
    tex, _ = export_table(df, tmp_path / "hostile", caption=f"Partition {HOSTILE}", label=HOSTILE)
    text = tex.read_text()
    assert "\\input{" not in text.replace("\\textbackslash{}input\\{", "")
    assert "\x1b" not in text
    assert compile_tables([tex], tmp_path / "build") == {}
    if shutil.which("pdftotext"):
        pdf = tmp_path / "build" / "doc-hostile.pdf"
        words = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
        assert "input{/etc/passwd}" in words.replace(" ", "") and "root:" not in words


def test_the_check_catches_errors_and_overfull_boxes(tmp_path):
    wide = tmp_path / "wide.tex"
    wide.write_text("\\begin{tabular}{l}\n" + "x" * 200 + " \\\\\n\\end{tabular}\n")
    broken = tmp_path / "broken.tex"
    broken.write_text("\\caption{gap_s}\n")
    problems = compile_tables([wide, broken], tmp_path / "build")
    assert any("Overfull" in p for p in problems["wide.tex"])
    assert any(p.startswith("!") for p in problems["broken.tex"])


def test_captions_name_the_columns_by_the_headers_the_table_prints():
    from analysis.tables import to_latex

    df = pd.DataFrame({"config_backend": ["ddp-gloo"], "n_ranks": [2], "efficiency_frac": [0.8],
                       "efficiency_frac_verdict": ["distinguishable"], "repeats_for_5pct": [4]})
    tex = to_latex(df, caption="efficiency_frac_verdict: against 1; repeats_for_5pct: repeats per side.",
                   csv_name="summary.csv", width_pt=80)
    caption = re.search(r"\\caption\{(.*)\}", tex).group(1).replace("\\allowbreak{}", "").replace("\\_", "_")
    assert "efficiency_frac_verdict" not in caption and "repeats_for_5pct:" not in caption
    assert "(in summary.csv)" in caption  # a column too wide for 80 pt is named with where it is
