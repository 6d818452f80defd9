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
from analysis.readers import formats, read, read_many, register, sniff
from analysis.schema import (
    EVENT_COLUMNS,
    KINDS,
    SAMPLE_COLUMNS,
    validate,
    validate_events,
    validate_samples,
)

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
    if name == "RunSet":
        from analysis.runset import RunSet

        return RunSet
    if name in ("metrics", "plots", "report", "export"):
        import importlib

        return importlib.import_module(f"analysis.{name}")
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
