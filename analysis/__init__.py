"""scalescope analysis: readers into one tidy schema, a multi-run model, metrics, figures.

Never imports torch or horovod: it runs on a laptop after the fact.
"""

from __future__ import annotations

from analysis.errors import (
    ReadError,
    RecoveryWarning,
    ScalescopeError,
    SchemaError,
    UnknownFormatError,
)

# The readers and the schema (pandas, numpy) load on first use, like the heavier parts
# below: the ``scalescope`` command imports this package before it can install its Ctrl-C
# handling, and a command that needs no frame (sweep, status, --help) never pays for them.
_LAZY = {
    "formats": "analysis.readers", "read": "analysis.readers", "read_many": "analysis.readers",
    "register": "analysis.readers", "sniff": "analysis.readers",
    "EVENT_COLUMNS": "analysis.schema", "KINDS": "analysis.schema",
    "SAMPLE_COLUMNS": "analysis.schema", "validate": "analysis.schema",
    "validate_events": "analysis.schema", "validate_samples": "analysis.schema",
}

__version__ = "0.1.0"

__all__ = [
    "EVENT_COLUMNS",
    "KINDS",
    "SAMPLE_COLUMNS",
    "ReadError",
    "RecoveryWarning",
    "ScalescopeError",
    "SchemaError",
    "UnknownFormatError",
    "formats",
    "read",
    "read_many",
    "register",
    "sniff",
    "validate",
    "validate_events",
    "validate_samples",
]


def __getattr__(name: str):
    # Heavier parts load on first use so that `import analysis` stays quick.
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name == "RunSet":
        from analysis.runset import RunSet

        return RunSet
    if name in ("metrics", "plots", "report", "export"):
        return importlib.import_module(f"analysis.{name}")
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
