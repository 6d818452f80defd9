"""Every docstring example in analysis/ runs and shows what it says (issue 32: examples that
never run drift from the code)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import analysis

_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _examples(name: str) -> list[doctest.DocTest]:
    """The docstring tests defined in module ``name`` itself (not in what it imports) with an
    example that is not marked ``+SKIP``."""
    mod = importlib.import_module(name)
    return [t for t in doctest.DocTestFinder().find(mod, name)
            if any(not ex.options.get(doctest.SKIP) for ex in t.examples)
            and (t.filename or "").endswith(mod.__file__.split("/")[-1])]


def _modules_with_examples() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(analysis.__path__, "analysis.") if _examples(m.name)]


MODULES = _modules_with_examples()


def test_there_are_examples():
    assert len(MODULES) >= 5, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    runner = doctest.DocTestRunner(optionflags=_FLAGS)
    for test in _examples(name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (see above)"
