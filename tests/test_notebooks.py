"""Every notebook is committed without outputs, starts with a tagged parameters cell that
points at the project's own data, stays thin over the library, and executes without error
against data/ (a few minutes each at most on 2 cores)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
ids = [p.name for p in NOTEBOOKS]


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 14, [p.name for p in NOTEBOOKS]


def test_every_report_section_has_a_notebook_and_every_notebook_a_section():
    from analysis.notebooks import STUDY_NOTEBOOKS
    from analysis.report import STUDIES

    keys = {key for key, _, _ in STUDIES}
    assert keys == set(STUDY_NOTEBOOKS), sorted(keys ^ set(STUDY_NOTEBOOKS))
    assert {n for names in STUDY_NOTEBOOKS.values() for n in names} == {p.stem for p in NOTEBOOKS}


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
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), "first code cell must be tagged 'parameters'"
    assert "../data/" in code[0].source or "corpus" in code[0].source, "parameters must default to data/"
    for cell in code:
        tree = ast.parse(cell.source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                assert n <= 6, f"{path.name}: function {node.name} is {n} lines: move it into analysis/"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_notebook_executes(path, tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    env_export = tmp_path / "export"
    os.environ["SCALESCOPE_EXPORT_DIR"] = str(env_export)
    try:
        client = NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        client.execute()
    finally:
        os.environ.pop("SCALESCOPE_EXPORT_DIR", None)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
