"""The instrumentation modules import one another without cycles, and never import analysis.

Imports are read with ``ast`` from every ``instrumentation/*.py``, including the ones inside
functions (a cycle hidden in a function is still a cycle: the two modules are one).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "instrumentation"


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module name -> the package's modules it imports anywhere in its file (top level or not)."""
    pkg = package_dir.name
    modules = {p.stem for p in package_dir.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for path in sorted(package_dir.glob("*.py")):
        name = path.stem
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == pkg:
                        deps.add(parts[1] if len(parts) > 1 else "__init__")
                    elif parts[0] == "analysis":
                        deps.add("analysis")
            elif isinstance(node, ast.ImportFrom):
                target = node.module or ""
                if node.level:  # relative: from . import x / from .x import y
                    target = f"{pkg}.{target}" if target else pkg
                parts = target.split(".")
                if parts[0] == "analysis":
                    deps.add("analysis")
                if parts[0] != pkg:
                    continue
                if len(parts) > 1:
                    deps.add(parts[1])
                else:
                    subs = [a.name for a in node.names if a.name in modules]
                    deps.update(subs or ["__init__"])
        deps.discard(name)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or ``None``. ``__init__`` is the package itself,
    imported before any of its modules anyway, so edges into it are not followed."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if dep in ("__init__", "analysis") or dep not in graph:
                continue
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_between_instrumentation_modules():
    graph = import_graph(ROOT / PACKAGE)
    assert {"sweep", "slurm", "experiment", "local", "run"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_sweep_room_layering():
    graph = import_graph(ROOT / PACKAGE)
    assert "slurm" not in graph["local"] and "local" not in graph["slurm"]
    assert "experiment" in graph["local"] and "experiment" in graph["slurm"]
    assert not graph["experiment"] & {"sweep", "slurm", "local"}


def test_instrumentation_never_imports_analysis():
    graph = import_graph(ROOT / PACKAGE)
    assert [m for m, deps in graph.items() if "analysis" in deps] == []


def test_function_level_cycle_is_found(tmp_path):
    pkg = tmp_path / PACKAGE
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from instrumentation import b\n")
    (pkg / "b.py").write_text("def f():\n    from instrumentation.c import g\n    return g\n")
    (pkg / "c.py").write_text("def g():\n    from . import a\n    return a\n")
    assert find_cycle(import_graph(pkg)) == ["a", "b", "c", "a"]
    (pkg / "c.py").write_text("def g():\n    return 1\n")
    assert find_cycle(import_graph(pkg)) is None
