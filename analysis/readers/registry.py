"""The registry of readers: one entry per format, filled by the format modules.

Each format module defines ``sniff(path) -> bool`` (cheap: suffix and first bytes, never a
full parse) and ``read(path, *, run_id=None) -> DataFrame`` in the event or sample schema,
and registers itself with :func:`register`. Third-party readers register through the
entry-point group ``scalescope.readers`` (each entry point names a module that calls
:func:`register` on import). The format modules import this module, never the
``analysis.readers`` package, which reads files with them.
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Literal

import pandas as pd

from analysis._io import check_encoding, check_file, head, open_binary
from analysis.errors import ReadError, UnknownFormatError

BUILTIN_MODULES = (
    "analysis.readers.scalescope",
    "analysis.readers.horovod",
    "analysis.readers.kineto",
    "analysis.readers.nsys_sqlite",
    "analysis.readers.nsys_csv",
    "analysis.readers.nvprof_csv",
    "analysis.readers.nvprof_sqlite",
    "analysis.readers.nvml",
    "analysis.readers.nccl",
    "analysis.readers.nvsmi_topo",
)


@dataclass(frozen=True)
class Reader:
    """A registered format."""

    name: str
    sniff: Callable[[Path], bool]
    read: Callable[..., pd.DataFrame]
    kind: Literal["events", "samples"] = "events"
    suffixes: tuple[str, ...] = ()
    description: str = ""
    version: int = 1
    extra: dict = field(default_factory=dict)


REGISTRY: dict[str, Reader] = {}
_loaded = False


def register(
    name: str,
    *,
    sniff: Callable[[Path], bool],
    read: Callable[..., pd.DataFrame],
    kind: Literal["events", "samples"] = "events",
    suffixes: Iterable[str] = (),
    description: str = "",
    version: int = 1,
) -> Reader:
    """Add a reader to :data:`REGISTRY` (replacing one of the same name)."""
    reader = Reader(name, sniff, read, kind, tuple(suffixes), description, version)
    REGISTRY[name] = reader
    return reader


def load_builtins() -> None:
    """Import the built-in reader modules and the plug-ins of the ``scalescope.readers``
    entry-point group (once; each registers its formats)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in BUILTIN_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:  # a real missing dependency, not a module not yet written
                raise
    try:
        for ep in entry_points(group="scalescope.readers"):
            try:
                ep.load()
            except Exception as exc:  # a broken plug-in must not break the built-ins
                warnings.warn(f"reader plug-in {ep.name!r} failed to load: {exc}", stacklevel=2)
    except Exception:  # pragma: no cover - importlib.metadata quirks
        pass


def formats() -> dict[str, Reader]:
    """All registered readers by name."""
    load_builtins()
    return dict(REGISTRY)


def describe_formats() -> str:
    """The registered formats, for error messages."""
    return ", ".join(f"{r.name} ({r.description})" if r.description else r.name for r in REGISTRY.values())


def sniff(path: str | os.PathLike[str]) -> str:
    """Name of the first registered reader whose ``sniff`` accepts ``path``."""
    load_builtins()
    path = Path(path)
    if os.path.isdir(path):
        raise ReadError(path, "is a directory; use analysis.read_many() for run directories")
    if check_file(path).st_size == 0:  # not found, link loop, no permission, FIFO or device: ReadError
        raise ReadError(path, "file is empty (0 bytes)")
    with open_binary(path):  # unreadable: "permission denied", not "not a format scalescope knows"
        pass
    for reader in REGISTRY.values():
        try:
            if reader.sniff(path):
                return reader.name
        except Exception:  # sniff must be cheap and total; a failing sniff means "not mine"
            continue
    check_encoding(head(path, 512), path)  # UTF-16/32 text: say so, not "unknown format"
    raise UnknownFormatError(
        path, "not a format scalescope knows. Known formats: " + describe_formats()
    )




def default_run_id(path: Path) -> str:
    """The file name without its suffixes (``rank0.pt.trace.json.gz`` -> ``rank0``)."""
    name = path.name
    for suffix in (".gz", ".json", ".sqlite", ".csv", ".nvprof", ".nvvp", ".trace", ".pt", ".jsonl"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or path.name
