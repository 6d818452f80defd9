"""The HTML report on the hand-built experiment, its export/ folder, the browser-free
fallback, and one render in headless Chromium that fails on any JavaScript error (the report
on a real sweep is in test_end_to_end.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from analysis import cli, report
from analysis.export import find_browser
from analysis.runset import RunSet

SECTION_IDS = ("summary", "_study_breakdown|breakdown", "sync", "scaling", "overhead", "usage", "backends", "batch",
               "memory", "model", "stragglers")


@pytest.fixture(scope="module")
def exp(data_dir):
    return data_dir / "experiment_small"


def check_report(exp_dir: Path, page: Path) -> str:
    """Assertions that hold for any experiment: every run listed, every study either shown or
    skipped with a reason, failed runs with their log tails, plotly.js inlined once."""
    html = page.read_text(encoding="utf-8")
    assert html.count("* plotly.js v") == 1
    rs = RunSet.from_dirs(exp_dir)
    for run_id in rs.runs["run_id"]:
        assert run_id in html
    for f in rs.failed_runs().itertuples():
        assert f"<strong>{f.run_id}</strong>" in html
    for _, title, _ in report.STUDIES:
        assert title in html
    n_skipped = html.count('class="skipped">Skipped: ')
    n_figures = len(re.findall(r'<div class="figure" id="figure-', html))
    assert n_figures + n_skipped >= 1
    assert (page.parent / "export").is_dir()
    return html


def test_report_on_hand_built_experiment(exp, tmp_path):
    page = report.build_report(exp, tmp_path / "rep", static=False)
    assert page == tmp_path / "rep" / "index.html"
    html = check_report(exp, page)
    assert "Static figure export was skipped (--no-static)." in html
    # the failed run with its log tail
    assert "RuntimeError: Gloo connectFullMesh failed" in html
    # the one study this experiment cannot support, with the reason
    assert "Skipped: needs two or more backends" in html
    for fig in ("why_waterfall", "why_lost_speedup", "breakdown", "sync", "scaling", "overhead", "device_usage",
                "batch_size", "model", "stragglers", "negotiation", "horovod_allreduce"):
        assert f'id="figure-{fig}"' in html, fig
    summary = pd.read_csv(tmp_path / "rep" / "export" / "summary.csv")
    hg = summary[summary["config_backend"] == "horovod-gloo"].set_index("n_ranks")
    assert hg.loc[4, "speedup"] == pytest.approx(40 / 15)
    assert hg.loc[2, "efficiency_frac"] == pytest.approx(40 / 27 / 2)
    assert hg.loc[4, "sync_exposed_frac"] == pytest.approx(5 / 15)
    assert hg.loc[1, "data_frac"] == pytest.approx(1 / 11.5)
    why = pd.read_csv(tmp_path / "rep" / "export" / "why_not_ideal.csv")
    causes = ["framework_s", "sync_s", "straggler_s", "data_s", "compute_s", "other_s"]
    assert why[causes].sum(axis=1).tolist() == pytest.approx(why["gap_s"].tolist())
    assert "reaches" in html and "lost per step" in html
    # one repeat per configuration: no interval, said so, and the individual runs shown instead
    assert "no interval: 1 repeat(s), fewer than 3" in html
    assert 'id="table-summary_runs"' in html or "summary_runs" in html
    # Summary and "Why not ideal?" give one efficiency per configuration and rank count
    sw = why[why["n_ranks"] > 1].set_index(["config_backend", "n_ranks"])["efficiency"]
    ss = summary.set_index(["config_backend", "n_ranks"]).loc[sw.index, "efficiency_frac"]
    assert ss.tolist() == pytest.approx(sw.tolist(), rel=1e-12)
    overhead = pd.read_csv(tmp_path / "rep" / "export" / "overhead.csv")
    assert overhead["overhead_pct"].iloc[0] == pytest.approx(15.0)
    hv = pd.read_csv(tmp_path / "rep" / "export" / "horovod_allreduce.csv")
    # per step: negotiation [6.0, 6.4) ms and op [6.5, 9.8) ms; 4 steps, the first one warm-up
    assert hv["allreduce_total_s"].iloc[0] == pytest.approx(3 * 3.7e-3)
    assert hv["n_fusion_duplicates"].iloc[0] == 9  # 3 per step
    assert (tmp_path / "rep" / "export" / "scaling.tex").read_text().startswith("\\begin{table}")
    assert not list((tmp_path / "rep" / "export").glob("*.pdf"))


def test_report_without_browser_still_writes_html(exp, tmp_path, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "missing-chromium"))
    page = report.build_report(exp, tmp_path / "rep", static=True)
    html = page.read_text(encoding="utf-8")
    assert "Static figure export was skipped: static figure export needs a Chromium-based browser" in html
    assert 'id="figure-scaling"' in html


def test_report_command_line(exp, tmp_path, capsys):
    rc = cli.main(["report", str(exp), "--out", str(tmp_path / "cli"), "--no-static"])
    assert rc == 0
    assert (tmp_path / "cli" / "index.html").is_file()
    assert "report written to" in capsys.readouterr().out
    assert cli.main(["report", str(tmp_path / "nowhere"), "--no-static"]) == 1


def test_report_default_out_dir(exp, tmp_path):
    copy = tmp_path / "exp"
    shutil.copytree(exp, copy)
    page = report.build_report(copy, static=False)
    assert page == copy / "report" / "index.html"


ERROR_COLLECTOR = """<script>
window.__errors = [];
window.addEventListener('error', function (e) { window.__errors.push(String(e.message || e)); });
window.addEventListener('unhandledrejection', function (e) { window.__errors.push('rejection: ' + e.reason); });
window.addEventListener('load', function () {
  setTimeout(function () {
    var out = document.createElement('pre');
    out.id = '__scalescope_errors';
    out.textContent = JSON.stringify({errors: window.__errors,
                                      plots: document.querySelectorAll('.js-plotly-plot .main-svg').length > 0 ?
                                             document.querySelectorAll('.js-plotly-plot').length : 0});
    document.body.appendChild(out);
  }, 500);
});
</script>"""


@pytest.mark.chromium
def test_report_static_export_and_renders_without_js_errors(exp, tmp_path):
    browser = find_browser()
    if browser is None:
        pytest.skip("no Chromium-based browser")
    page = report.build_report(exp, tmp_path / "rep", static=True)
    export_dir = tmp_path / "rep" / "export"
    for fmt in ("pdf", "svg", "png"):
        assert (export_dir / f"scaling.{fmt}").stat().st_size > 0
    html = page.read_text(encoding="utf-8")
    n_figures = len(re.findall(r'<div class="figure" id="figure-', html))
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("<head>", "<head>" + ERROR_COLLECTOR, 1), encoding="utf-8")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'prof'}",
           "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="__scalescope_errors">(.*?)</pre>', done.stdout, re.S)
    assert m, f"the page never finished loading; chromium said: {done.stderr[-2000:]}"
    result = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert result["errors"] == []
    assert result["plots"] == n_figures


def test_the_report_never_holds_every_runs_events(data_dir):
    """``scalescope report`` takes its studies' tables of the events run by run
    (``RunSet.reduce_tables``): neither the RunSet nor any one-run part keeps the events of
    the runs once loaded and studied (issue 31, item 5); and each table is the metric of all
    events at once."""
    import warnings

    from analysis.errors import recording
    from analysis.studies import EVENT_TABLES

    sweep = data_dir.parents[1] / "data" / "sample_sweep"
    with recording() as caught:
        ctx = report.load([sweep])
        report.run_studies(ctx, caught)
    assert ctx.rs.loaded("events") is None
    assert not any(isinstance(v, pd.DataFrame) and {"start_ns", "dur_ns"} <= set(v.columns)
                   for v in vars(ctx).values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        everything = RunSet.from_dirs(sweep, workers=1).events
    for name, metric, options, _warm in EVENT_TABLES:  # default warm-up
        want = metric(everything, **options)
        got = ctx.event_table(name)
        if isinstance(want, pd.Series):
            pd.testing.assert_series_equal(got, want, check_categorical=False, obj=name)
        else:
            pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True),
                                          check_categorical=False, obj=name)
