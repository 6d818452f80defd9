"""The notebooks: committed without outputs, a tagged parameters cell with ``EXPERIMENTS = None``,
thin over the library; executed against the bundled samples and against a fresh demo-like
experiment (``scalescope notebooks EXP``'s variable set), where every notebook shows that
experiment and nothing else, holds no traceback, and either runs to the end or stops with
one line saying what its study needs. Plus the rule of ``analysis.notebooks`` (parameters
cell, then ``$SCALESCOPE_EXPERIMENTS``, then the sample), its clean stop in a real kernel,
Dask being optional, and the ``scalescope notebooks`` command line."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from _helpers import REAL_BACKENDS

from analysis import notebooks as nbs

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
ids = [p.name for p in NOTEBOOKS]

#: The notebooks whose study a demo-like experiment (one machine, strong scaling, no profiler
#: files, no varied input size) cannot support, and a phrase of the line each stops with.
DEMO_STOPS = {
    "07_other_tools": "no other tools' files",
    "09_clusters_partitions": "two or more clusters or partitions",
    "10_strong_weak": "weak",
    "11_input_size": "--find-max",
}
#: Words that name an experiment other than the one opened.
FOREIGN = ("sample_sweep", "sample_partitions", "data/sample", "shared/corpus")


# ------------------------------------------------------------------ the committed files
def test_there_are_notebooks():
    assert len(NOTEBOOKS) == 14, [p.name for p in NOTEBOOKS]


def test_every_report_section_has_a_notebook_and_every_notebook_a_section():
    from analysis.report import STUDIES

    keys = {key for key, _, _ in STUDIES}
    assert keys == set(nbs.STUDY_NOTEBOOKS), sorted(keys ^ set(nbs.STUDY_NOTEBOOKS))
    assert {n for names in nbs.STUDY_NOTEBOOKS.values() for n in names} == {p.stem for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_outputs_are_stripped(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name}: a code cell has outputs (run nbstripout)"
            assert cell.execution_count is None, f"{path.name}: execution counts left in"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_structure(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].cell_type == "markdown", "first cell: what the notebook answers"
    assert "scalescope notebooks" in nb.cells[0].source, "the first cell says how to open your own runs"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), "first code cell must be tagged 'parameters'"
    params = code[0].source
    assert "EXPERIMENTS = None" in params and "EXPORT = None" in params, \
        "the parameters cell leaves EXPERIMENTS and EXPORT to the library's rule"
    assert "import" not in params, "the parameters cell holds values only (papermill, the rule)"
    for cell in code:
        assert "os.environ" not in cell.source and "SCALESCOPE_" not in cell.source, \
            f"{path.name}: the environment is read by analysis.notebooks only (one rule)"
        assert "../data" not in cell.source, f"{path.name}: the samples are the library's default"
        tree = ast.parse(cell.source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                assert n <= 6, f"{path.name}: function {node.name} is {n} lines: move it into analysis/"
    opened = code[1].source
    assert "open_experiment(EXPERIMENTS" in opened or "tool_files(EXPERIMENTS" in opened


def _requirement_closure(extras: set[str]) -> set[str]:
    """Normalised names of the distributions `pip install .[extras]` brings (installed ones)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    def norm(name: str) -> str:
        return name.lower().replace("_", "-").replace(".", "-")

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = list(project["dependencies"])
    for extra in extras:
        todo += project["optional-dependencies"][extra]
    seen: set[str] = set()
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in (*req.extras, "")):
            continue
        name = norm(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
    return seen


def test_what_the_notebooks_import_is_installed_by_make_demo():
    """``make demo`` installs ``.[train,notebooks]``: every module a notebook imports comes from
    it (Dask is optional, behind ``analysis.notebooks.local_dask``)."""
    from importlib import metadata

    installed = _requirement_closure({"train", "notebooks"})
    providers = metadata.packages_distributions()
    missing = []
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code":
                continue
            for node in ast.walk(ast.parse(cell.source)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
                for top in {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - {"analysis"}:
                    dists = {d.lower().replace("_", "-") for d in providers.get(top, [top])}
                    if not dists & installed:
                        missing.append(f"{path.name}: {top}")
    assert not missing, missing
    assert "distributed" not in installed and "distributed" in _requirement_closure({"scale"}), \
        "Dask stays optional (the scale extra)"


# ------------------------------------------------------------------ the rule
def test_rule_sample_then_environment_then_parameters_cell(monkeypatch, tmp_path):
    monkeypatch.delenv(nbs.ENV_VAR, raising=False)
    sample = nbs.resolve(None, sample="sample_sweep")
    assert sample.sample and sample.dirs == ((ROOT / "data" / "sample_sweep").resolve(),)
    assert ROOT not in sample.export.parents, "the sample's exports must not go into the checkout"
    assert "bundled sample" in sample.line() and "no experiment opened" in sample.line()

    a, b = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv(nbs.ENV_VAR, f"{a}{os.pathsep}{b}")
    env = nbs.resolve(None, sample="sample_sweep")
    assert env.dirs == (a, b) and not env.sample
    assert env.export == a / nbs.EXPORT_DIRNAME
    assert "scalescope notebooks" in env.why and "bundled sample" not in env.line()

    mine = tmp_path / "mine"
    cell = nbs.resolve(str(mine), sample="sample_sweep", export=tmp_path / "out")
    assert cell.dirs == (mine,) and cell.export == tmp_path / "out"
    assert "parameters cell" in cell.why and nbs.ENV_VAR in cell.why, cell.why
    chosen = nbs.resolve(ROOT / "notebooks" / ".." / "data" / "sample_sweep", sample="sample_sweep")
    assert not chosen.sample and ROOT not in chosen.export.parents, "a sample chosen in the cell exports outside"


def test_an_opened_experiment_never_falls_back_to_the_sample(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(nbs.ENV_VAR, str(tmp_path / "gone"))
    with pytest.raises(nbs.NotebookStop, match="does not exist") as stop:
        nbs.open_experiment(None, sample="sample_sweep")
    assert stop.value._render_traceback_() == [f"Stopped: {stop.value}"]
    assert "sample" not in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    with pytest.raises(nbs.NotebookStop, match="neither an experiment directory"):
        nbs.open_experiment(tmp_path / "empty", sample="sample_sweep")


def test_need():
    nbs.need(True, "unused")
    with pytest.raises(nbs.NotebookStop, match=r"^the study needs x$"):
        nbs.need([], "the study needs x")


def test_dask_is_optional(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` fails as uninstalled
    assert nbs.local_dask() == (None, None)
    out = capsys.readouterr().out
    assert "Dask is not installed" in out and "scalescope[scale]" in out


def test_a_stop_ends_the_queued_cells_in_a_real_kernel():
    """What JupyterLab's Run All does: cells queued after a stop are aborted, and the stop's
    output is its one line, no traceback."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(ROOT))
    try:
        kc.execute_interactive(f"import sys; sys.path.insert(0, {str(ROOT)!r})", timeout=60)
        first = kc.execute("from analysis.notebooks import need\nneed(False, 'no weak-scaling runs here')")
        second = kc.execute("print('ran after the stop')")
        replies, outputs = {}, []
        while len(replies) < 2:
            msg = kc.get_iopub_msg(timeout=60) if kc.iopub_channel.msg_ready() else None
            if msg is not None:
                outputs.append(msg)
                continue
            reply = kc.get_shell_msg(timeout=60)
            replies[reply["parent_header"]["msg_id"]] = reply["content"]
        while kc.iopub_channel.msg_ready():
            outputs.append(kc.get_iopub_msg(timeout=5))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert replies[first]["status"] == "error" and replies[first]["ename"] == "NotebookStop"
    assert replies[second]["status"] == "aborted"
    errors = [m["content"] for m in outputs if m["msg_type"] == "error"]
    assert [e["traceback"] for e in errors] == [["Stopped: no weak-scaling runs here"]]
    streams = "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")
    assert "ran after the stop" not in streams


# ------------------------------------------------------------------ the command
def test_command_points_jupyter_at_the_experiments(monkeypatch, tmp_path, capsys):
    exp = tmp_path / "EXP"
    (exp / "run1").mkdir(parents=True)
    (exp / "run1" / "run.json").write_text("{}")
    calls = []
    # JupyterLab replaces the process (exec): stopping `scalescope notebooks` by its PID stops the server
    monkeypatch.setattr(nbs.os, "execve", lambda path, cmd, env: calls.append((path, cmd, env)))
    monkeypatch.setattr(nbs, "jupyter_command", lambda **kw: ["jupyter", "lab", *(f"{k}={v}" for k, v in kw.items())])
    from analysis.cli import build_parser

    args = build_parser().parse_args(["notebooks", str(exp), str(exp), "--port", "8899", "--no-browser"])
    assert args.func(args) == 0
    (path, cmd, env), = calls
    assert path == "jupyter" and cmd == ["jupyter", "lab", "port=8899", "no_browser=True"]
    assert json.loads(env[nbs.ENV_VAR]) == [str(exp), str(exp)]  # a list no directory name can break
    assert str(exp / nbs.EXPORT_DIRNAME) in capsys.readouterr().out


def test_jupyter_command_options():
    cmd = nbs.jupyter_command(port=8899, no_browser=True)
    assert Path(cmd[0]).name == "jupyter" and cmd[1] == "lab"
    assert "--port=8899" in cmd and "--no-browser" in cmd and f"--notebook-dir={nbs.NOTEBOOKS}" in cmd


def test_command_refuses_a_directory_that_is_not_an_experiment(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "analysis.cli", "notebooks", str(tmp_path), "--no-browser"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode != 0
    assert "not an experiment directory" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------ executing them
def _execute(path: Path) -> tuple[nbformat.NotebookNode, str | None]:
    """Run ``path`` as nbclient does in CI; returns the executed notebook and the stop's
    message (None when it ran to the end). Any error but a NotebookStop fails the test."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except CellExecutionError as exc:
        assert exc.ename == "NotebookStop", f"{path.name} failed:\n{exc}"
        return nb, exc.evalue
    return nb, None


def _outputs(nb) -> list[dict]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _check_clean(nb, name: str, stop: str | None) -> str:
    """No traceback anywhere; a stop is one line; returns all output as one text."""
    outs = _outputs(nb)
    errors = [o for o in outs if o["output_type"] == "error"]
    if stop is None:
        assert not errors, f"{name}: {errors}"
    else:
        assert [e["traceback"] for e in errors] == [[f"Stopped: {stop}"]], f"{name}: {errors}"
    printed = json.dumps([o for o in outs if o["output_type"] in ("stream", "error")])
    assert "Traceback (most recent call last)" not in printed, f"{name}: a traceback in the outputs"
    return json.dumps(outs)  # tables may quote a failed run's own log (11: its MemoryError)


def _exports_in_checkout() -> set[Path]:
    return {p for p in ROOT.glob("**/" + nbs.EXPORT_DIRNAME) if ".venv" not in p.parts} | \
        set((ROOT / "notebooks").glob("export"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_notebook_executes_on_the_samples(path, monkeypatch):
    monkeypatch.delenv(nbs.ENV_VAR, raising=False)
    before = _exports_in_checkout()
    nb, stop = _execute(path)
    if stop is not None:  # only notebook 07, without the real-file corpus of a development checkout
        assert path.stem == "07_other_tools" and not nbs.CORPUS.is_dir(), stop
    text = _check_clean(nb, path.name, stop)
    if path.stem != "07_other_tools":
        assert "Showing the bundled sample" in text
    assert _exports_in_checkout() == before, "exports written into the checkout"


@pytest.fixture(scope="module")
def demo_experiment(tmp_path_factory):
    """A fresh experiment made as ``scalescope demo`` makes it (its own sweep arguments: 1 and 2
    ranks on every backend this machine has, the baseline, both batch sizes), with tiny
    settings: one repeat, two short epochs."""
    from analysis.demo import sweep_argv

    out = tmp_path_factory.mktemp("demo") / "EXP"
    data = tmp_path_factory.mktemp("demo-data")
    argv = sweep_argv(str(out))
    for flag, value in {"--repeats": "1", "--epochs": "2", "--samples": "1200",
                        "--backend": ",".join(REAL_BACKENDS)}.items():
        argv[argv.index(flag) + 1] = value
    cut = argv.index("--")
    argv = [*argv[:cut], "--timeout", "180", *argv[cut:], "--data-dir", str(data), "--device", "cpu"]
    proc = subprocess.run([sys.executable, "-m", "instrumentation.sweep", *argv], capture_output=True,
                          text=True, cwd=ROOT, timeout=900)
    assert (out / "experiment.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_notebook_follows_the_experiment_opened(path, demo_experiment, monkeypatch):
    """As after ``scalescope notebooks EXP``: the notebook shows EXP (its first line says so),
    nothing of another experiment, no traceback; it runs to the end, or, where EXP cannot
    support its study, stops with the line that says so; its exports go next to EXP."""
    monkeypatch.setenv(nbs.ENV_VAR, str(demo_experiment))
    before = _exports_in_checkout()
    nb, stop = _execute(path)
    text = _check_clean(nb, path.name, stop)
    expected = DEMO_STOPS.get(path.stem)
    if expected is None:
        assert stop is None, f"{path.name} stopped on a demo experiment: {stop}"
        assert (demo_experiment / nbs.EXPORT_DIRNAME / path.stem[:2]).parent.is_dir()
        assert any((demo_experiment / nbs.EXPORT_DIRNAME).glob(path.stem[:2] + "_*/*")), "nothing exported"
    else:
        assert stop is not None and expected in stop, f"{path.name}: expected a stop about {expected!r}: {stop}"
    first = next(o["text"] for o in _outputs(nb) if o["output_type"] == "stream")
    assert str(demo_experiment) in first.splitlines()[0] and "scalescope notebooks" in first.splitlines()[0]
    for word in FOREIGN:
        assert word not in text, f"{path.name}: an output mentions {word!r}"
    assert _exports_in_checkout() == before, "exports written into the checkout"


@pytest.mark.slow
def test_notebook_01_goes_on_without_dask(demo_experiment, monkeypatch, tmp_path):
    """After ``make demo`` alone Dask is not installed (the scale extra): notebook 01's Dask cell
    says how to install it and the notebook runs to its export."""
    fake = tmp_path / "no-dask" / "distributed"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'distributed'\", name='distributed')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake.parent), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(nbs.ENV_VAR, str(demo_experiment))
    nb, stop = _execute(ROOT / "notebooks" / "01_single_run_breakdown.ipynb")
    assert stop is None
    text = _check_clean(nb, "01", stop)
    assert "Dask is not installed" in text and "scalescope[scale]" in text
    assert "same table as breakdown_per_rank" not in text, "the Dask cell ran although Dask was missing"
    assert (demo_experiment / nbs.EXPORT_DIRNAME / "01_single_run_breakdown").is_dir()


# ------------------------------------------------------------------ the report's numbers
#: The cell appended to a notebook to hand its sections back: every Section it holds, by key.
_DUMP = """
import pickle as _pickle
from analysis.studies import Section as _Section
_secs = {v.key: [(n, df) for n, df, _ in v.tables] for v in list(globals().values()) if isinstance(v, _Section)}
with open(OUT, "wb") as _f:
    _pickle.dump(_secs, _f)
"""


def _sample_of(path: Path) -> str | tuple[str, ...]:
    """The ``sample=`` a notebook opens when nothing else is set."""
    for cell in nbformat.read(path, as_version=4).cells:
        for node in ast.walk(ast.parse(cell.source)) if cell.cell_type == "code" else ():
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open_experiment":
                return next(ast.literal_eval(k.value) for k in node.keywords if k.arg == "sample")
    raise AssertionError(f"{path.name} opens no experiment")


@pytest.fixture(scope="module")
def report_tables():
    """The report's sections per sample experiment (computed once each)."""
    from analysis import report as R
    from analysis.errors import recording

    done: dict = {}

    def get(dirs: tuple[Path, ...]) -> dict:
        if dirs not in done:
            with recording() as caught:
                ctx = R.load(list(dirs))
                done[dirs] = {s.key: s for s in R.run_studies(ctx, caught)}
        return done[dirs]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.stem != "07_other_tools"],
                         ids=[p.name for p in NOTEBOOKS if p.stem != "07_other_tools"])
def test_notebook_tables_are_the_reports(path, report_tables, monkeypatch, tmp_path):
    """Issue 32/35: a notebook and the report give the same tables for the same experiment.
    The notebook runs on its sample (data/sample_sweep, or the data/sample_partitions
    experiments it opens); every study it shows is compared, table by table, exactly, with
    the report's section over the same experiment directories."""
    import pickle

    monkeypatch.delenv(nbs.ENV_VAR, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "sections.pkl"
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(_DUMP.replace("OUT", repr(str(out)))))
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    shown = pickle.loads(out.read_bytes())
    assert shown, f"{path.name} shows no study"
    assert set(shown) <= set(nbs.STUDY_NOTEBOOKS) and all(path.stem in nbs.STUDY_NOTEBOOKS[k] for k in shown)
    report = report_tables(nbs.resolve(None, sample=_sample_of(path)).dirs)
    for key, tables in shown.items():
        mine = report[key]
        assert [n for n, _ in tables] == mine.table_names, key
        for name, df in tables:
            pd.testing.assert_frame_equal(df, mine.table(name), check_exact=True, obj=f"{path.stem}: {key}/{name}")
