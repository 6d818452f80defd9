"""Issue 33, experiments shared between people: opening one must not harm the reader or the
experiment, and a report shows nothing from outside it.

* **run ids from experiment.json** (``../x``, ``/abs``, ``..``, ``a/b``, ``a\\b``, any mix):
  ``scalescope status`` (with a SLURM job to reconcile, which writes) and the runs table never
  open or write anything outside the experiment; the entry is named, not followed;
* **symbolic links out of the experiment** (a run's ``run.json``, log, trace, samples or
  epochs, or a whole run directory): never followed, so the content of the file they point
  to reaches neither the report nor its "Damaged runs" table; the link is named;
* **text of any kind in labels** (bidi overrides and isolates, controls, lone surrogates):
  the HTML report shows it escaped as ``status`` does, through the one filter
  (:func:`instrumentation.progress.printable`), in tables, text and figures;
* **re-reporting**: the export folder holds only the current report's files; what the
  user put there stays.

Examples are few and fixed (``derandomize``) so CI cost stays bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from analysis import report, tables  # noqa: E402
from analysis.runset import RunSet  # noqa: E402
from analysis.studies import Section  # noqa: E402
from instrumentation import paths, scheduler, slurm_jobs  # noqa: E402
from instrumentation.progress import printable  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
EXAMPLES = int(os.environ.get("SCALESCOPE_FUZZ_EXAMPLES", "20"))
SETTINGS = {"deadline": None, "derandomize": os.environ.get("SCALESCOPE_FUZZ_RANDOM") != "1", "database": None,
            "suppress_health_check": [HealthCheck.function_scoped_fixture]}
RUN = "horovod-gloo_np2_bs10_r1"
BASE = "none_np1_bs10_r1"
SECRET = "SECRET-TOKEN-8c1f"


def _experiment(root: Path, name: str = "EXP") -> Path:
    """Two runs of experiment_small (a framework run and the baseline) as an experiment."""
    src = DATA / "experiment_small"
    out = root / name
    out.mkdir(parents=True)
    for r in (RUN, BASE):
        shutil.copytree(src / r, out / r)
    exp = json.loads((src / "experiment.json").read_text())
    exp["runs"] = [e for e in exp["runs"] if e["run_id"] in (RUN, BASE)]
    (out / "experiment.json").write_text(json.dumps(exp))
    return out


def _snapshot(root: Path, leave_out: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``root`` but those under ``leave_out``: its mode and bytes."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            if leave_out in p.parents:
                continue
            out[str(p)] = (p.lstat().st_mode, p.read_bytes() if p.is_file() and not p.is_symlink() else b"")
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A shared experiment beside another experiment (the victim) and a secret file."""
    root = tmp_path_factory.mktemp("shared")
    exp = _experiment(root)
    victim = _experiment(root, "OTHER")
    (root / "home").mkdir()
    (root / "home" / "credentials").write_text(f"{SECRET}\nsecond line\n")
    return root, exp, victim


# ------------------------------------------------------------------ run ids

_SEGMENT = st.sampled_from(["..", ".", "", "OTHER", RUN, "x", "run.json", "home", "credentials"])
RUN_IDS = st.one_of(
    st.lists(_SEGMENT, min_size=1, max_size=5).map("/".join),          # ../OTHER/RUN, a/b, ./x
    st.lists(_SEGMENT, min_size=1, max_size=4).map(lambda s: "/" + "/".join(s)),  # absolute
    st.lists(_SEGMENT, min_size=2, max_size=4).map("\\".join),          # a\b (a separator elsewhere)
    st.sampled_from(["..", ".", "", "x\0y", "../" * 12 + "tmp"]),
).filter(lambda r: not paths.is_run_id(r))


@pytest.mark.timeout(300)
@settings(max_examples=EXAMPLES, **SETTINGS)
@given(run_id=RUN_IDS, state=st.sampled_from(["TIMEOUT", "CANCELLED", "COMPLETED", "NODE_FAIL"]))
def test_status_and_the_runs_table_never_follow_a_run_id_out_of_the_experiment(world, monkeypatch, run_id, state):
    root, exp, _victim = world
    monkeypatch.setattr(scheduler, "job_states", lambda ids: {j: scheduler.JobState(j, state) for j in ids})
    monkeypatch.setattr(scheduler, "job_exit_code", lambda job: 1)
    manifest = exp / "experiment.json"
    good = manifest.read_text()
    data = json.loads(good)
    data["runs"].append({"run_id": run_id, "status": "running", "config": data["runs"][0]["config"],
                         "slurm": {"job_id": "4242"}})
    manifest.write_text(json.dumps(data))
    before = _snapshot(root, exp)
    try:
        rows, problem = slurm_jobs.status_rows(exp)
        assert problem is None
        shown = [r for r in rows if r["status"] == "invalid"]
        assert len(shown) == 1 and "not followed" in shown[0]["note"]
        assert slurm_jobs.status_main(exp) == 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rs = RunSet.from_dirs(exp)
        assert rs.damaged["reason"].str.contains("no valid run_id").any()
        assert set(rs.runs["run_id"]) == {RUN, BASE}
        assert _snapshot(root, exp) == before, "a file outside the experiment was written"
        # the entry is kept as it was (nothing lost), never rewritten through its path
        assert any(e.get("run_id") == run_id for e in json.loads(manifest.read_text())["runs"])
    finally:
        manifest.write_text(good)


@pytest.mark.parametrize("run_id", ["../OTHER/" + RUN, "/etc", "..", ".", "a\\b", "", "x\0"])
def test_run_dir_refuses_what_is_not_a_directory_of_the_experiment(tmp_path, run_id):
    with pytest.raises(ValueError, match="not followed"):
        paths.run_dir(tmp_path, run_id)
    assert paths.run_dir(tmp_path, RUN) == tmp_path / RUN


# ------------------------------------------------------------------ links out of the experiment

LINKS = {
    "run.json": lambda exp: exp / RUN / "run.json",
    "stderr.log of a failed run": lambda exp: exp / BASE / "stderr.log",
    "a rank's trace": lambda exp: exp / RUN / "rank-00000.trace.json",
    "samples": lambda exp: next((exp / RUN).glob("samples-*.csv")),
    "epochs": lambda exp: exp / RUN / "rank-00001.epochs.jsonl",
    "the run directory": lambda exp: exp / RUN,
}


def _link_out(exp: Path, where: str, target: Path) -> Path:
    link = LINKS[where](exp)
    if link.is_dir():
        shutil.rmtree(link)
    elif link.exists():
        link.unlink()
    link.symlink_to(target)
    return link


@pytest.mark.parametrize("where", list(LINKS))
def test_a_link_out_of_the_experiment_is_named_never_read(tmp_path, where):
    exp = _experiment(tmp_path)
    secret = tmp_path / "credentials"
    secret.write_text(f"{SECRET}\n")
    if where == "the run directory":
        outside = tmp_path / "elsewhere"
        shutil.copytree(DATA / "experiment_small" / RUN, outside)
        (outside / "stderr.log").write_text(f"{SECRET}\n")
        target = outside
    else:
        target = secret
    if where.startswith("stderr"):  # the baseline failed: its log tail is what a report quotes
        data = json.loads((exp / "experiment.json").read_text())
        for e in data["runs"]:
            if e["run_id"] == BASE:
                e["status"] = "failed"
                e.pop("log_tail", None)
        (exp / "experiment.json").write_text(json.dumps(data))
    link = _link_out(exp, where, target)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rs = RunSet.from_dirs(exp)
        frames = [rs.runs, rs.damaged]
        for part in ("events", "samples", "epochs"):
            try:
                frames.append(getattr(rs, part))
            except Exception as exc:  # what it says must not quote the file either
                frames.append(pd.DataFrame({"error": [str(exc)]}))
        frames.append(rs.damaged)
    text = "\n".join(f.to_csv() for f in frames) + "\n".join(str(w.message) for w in caught)
    assert SECRET not in text
    assert str(target) not in text, "the link's target is not named either"
    assert rs.damaged["reason"].str.contains(paths.LEAVES, regex=False).any()
    assert rs.damaged["path"].astype(str).str.contains(link.name, regex=False).any()


def test_the_report_quotes_nothing_from_outside_the_experiment(tmp_path):
    exp = _experiment(tmp_path)
    secret = tmp_path / "credentials"
    secret.write_text(f"{SECRET}\nmore\n")
    for where in ("run.json", "samples"):
        _link_out(exp, where, secret)
    (exp / BASE / "stderr.log").unlink(missing_ok=True)
    (exp / BASE / "stderr.log").symlink_to(secret)
    page = report.build_report(exp, static=False)
    written = [page, *sorted((page.parent / "export").iterdir())]
    for f in written:
        assert SECRET not in f.read_text(encoding="utf-8", errors="replace"), f
    assert paths.LEAVES in page.read_text(encoding="utf-8")


# ------------------------------------------------------------------ text of any kind in labels

#: What must never reach the page raw: bidi overrides, isolates and marks, C0/C1 controls.
HOSTILE = [*map(chr, [0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069, 0x200E, 0x200F,
                      0x061C, 0x1B, 0x07, 0x0D, 0x08, 0x9B, 0x9D])]
#: A name that is not UTF-8 (its bytes as Python's lone surrogates): never raw in the page either.
UNDECODABLE = ["\udcff", "\udc80"]
LABELS = st.lists(st.one_of(st.sampled_from(HOSTILE + UNDECODABLE), st.text(max_size=3)), min_size=1,
                  max_size=6).map("".join)


@settings(max_examples=EXAMPLES * 3, **SETTINGS)
@given(label=LABELS)
def test_labels_reach_the_page_as_the_terminal_shows_them(label):
    import plotly.graph_objects as go

    df = pd.DataFrame({"run_id": pd.Series([label, "b"], dtype=object), "wall_s": [1.0, 2.0]})
    fig = go.Figure(go.Bar(x=[label, "b"], y=[1, 2], name=label))
    page = report._render({  # the template, as render() fills it, with the hostile label everywhere
        "title": label, "generated": label, "experiment_dirs": [label], "plotlyjs": "",
        "runs_table": tables.to_html(df), "n_runs": 2, "n_ok": 1,
        "failed": [{"run_id": label, "status": "failed", "exit_code": "1", "log_tail": label, "rank": "0",
                    "cause": label, "log": label, "hint": label}],
        "damaged_table": None, "n_damaged": 0,
        "sections": [{"key": "k", "title": label, "intro": label, "skipped": None, "notes": [label],
                      "figures": [{"name": "f", "html": report._figure_html(fig, "fig-f")}],
                      "tables": [{"name": "t", "caption": label, "html": tables.to_html(df)}]}],
        "skipped": [(label, label)], "events_error": label, "static_note": label, "data_warnings": [label],
        "n_figures": 1,
    })
    for ch in HOSTILE:
        assert ch not in page, f"U+{ord(ch):04X} reached the page raw"
    js = page[page.index("Plotly.newPlot"):] if "Plotly.newPlot" in page else ""
    for ch in HOSTILE:  # in the figure's JSON: escaped so that the browser shows \uXXXX, not the character
        esc = json.dumps(ch)[1:-1]
        if esc.startswith("\\u") and ch in label:
            assert "\\" + esc in js, f"U+{ord(ch):04X} in a figure label would act in the browser"
    page.encode("utf-8")  # a lone surrogate never reaches the page either
    assert not any(ch in page for ch in UNDECODABLE)
    shown = printable(label)
    assert all(ch not in shown for ch in HOSTILE)


# ------------------------------------------------------------------ re-reporting into one folder

def _section(*names: str) -> Section:
    df = pd.DataFrame({"n_ranks": [1, 2], "wall_s": [3.0, 2.0]})
    return Section("k", "Study", tables=[(n, df, "a table") for n in names])


def test_the_export_folder_holds_only_the_current_report(tmp_path):
    export_dir = tmp_path / "report" / "export"
    report.export([_section("scaling", "overhead")], export_dir, static=False)
    (export_dir / "my_notes.txt").write_text("mine")
    (export_dir / "my_table.tex").write_text("mine too")
    first = {p.name for p in export_dir.iterdir()}
    assert {"scaling.csv", "scaling.tex", "overhead.csv", "overhead.tex"} <= first
    # the data no longer has the overhead study: its exports go, the user's files stay
    report.export([_section("scaling")], export_dir, static=False)
    now = {p.name for p in export_dir.iterdir()}
    assert now == {"scaling.csv", "scaling.tex", "my_notes.txt", "my_table.tex", report.WRITTEN}
    assert (export_dir / "my_notes.txt").read_text() == "mine"
    # a record naming something outside the folder (a hostile shared report) removes nothing there
    (tmp_path / "victim.csv").write_text("keep")
    (export_dir / report.WRITTEN).write_text("../../victim.csv\n/etc/passwd\n..\nscaling.csv\n")
    report.export([], export_dir, static=False)
    assert (tmp_path / "victim.csv").read_text() == "keep"
    assert {p.name for p in export_dir.iterdir()} == {"scaling.tex", "my_notes.txt", "my_table.tex", report.WRITTEN}


def test_a_report_folder_that_links_out_of_the_experiment_is_not_written_through(tmp_path):
    from analysis.errors import ScalescopeError

    exp = _experiment(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (exp / "report").symlink_to(victim)
    with pytest.raises(ScalescopeError, match="leaving the experiment"):
        report.build_report(exp, static=False)
    assert list(victim.iterdir()) == []
    (exp / "report").unlink()
    (exp / "report").mkdir()
    (exp / "report" / "export").symlink_to(victim)
    with pytest.raises(ScalescopeError, match="leaving the experiment"):
        report.build_report(exp, static=False)
    assert list(victim.iterdir()) == []


def test_node_facts_are_never_written_through_a_link_out_of_the_experiment(tmp_path, monkeypatch):
    from instrumentation import commpath

    exp, victim = tmp_path / "EXP", tmp_path / "victim"
    exp.mkdir()
    victim.mkdir()
    (exp / "nodes").symlink_to(victim)
    monkeypatch.setattr(commpath, "node_info", lambda python=None: {"host": "h", "topo": {"available": True,
                                                                                         "text": "GPU0 X"}})
    info = commpath.write_node_info(exp)
    assert list(victim.iterdir()) == [] and paths.LEAVES in info["topo"]["error"]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                    max_leaves=6)


@pytest.mark.timeout(300)
@settings(max_examples=EXAMPLES * 2, **SETTINGS)
@given(field=st.sampled_from(["status", "slurm", "log_tail", "exit_note", "wall_s", "config", "run_id"]),
       value=JSON, runs_value=st.one_of(st.none(), JSON))
def test_status_of_an_experiment_json_with_any_values_never_raises(world, monkeypatch, field, value, runs_value):
    root, exp, _victim = world
    monkeypatch.setattr(scheduler, "job_states", lambda ids: {j: scheduler.JobState(j, "TIMEOUT") for j in ids})
    monkeypatch.setattr(scheduler, "job_exit_code", lambda job: 1)
    manifest = exp / "experiment.json"
    good = manifest.read_text()
    data = json.loads(good)
    entry = {"run_id": "a-run", "status": "running", "slurm": {"job_id": "7"}, "config": data["runs"][0]["config"]}
    entry[field] = value
    data["runs"].append(entry)
    if runs_value is not None and field == "run_id":  # runs itself of any type
        data["runs"] = runs_value
    manifest.write_text(json.dumps(data))
    before = _snapshot(root, exp)
    try:
        assert slurm_jobs.status_main(exp) == 0
        assert _snapshot(root, exp) == before
    finally:
        manifest.write_text(good)
        shutil.rmtree(exp / "a-run", ignore_errors=True)
