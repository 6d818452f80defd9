"""One registry of readers, one module per format.

Each reader module defines ``sniff(path) -> bool`` (cheap: suffix and first bytes, never a
full parse) and ``read(path, *, run_id=None) -> DataFrame`` in the event or sample schema,
and registers itself with :func:`register`. Third-party readers register through the
entry-point group ``scalescope.readers`` (each entry point names a module that calls
:func:`register` on import).

>>> import analysis
>>> df = analysis.read("trace.json.gz")                # doctest: +SKIP
>>> df = analysis.read("report.sqlite", format="nsys_sqlite")  # doctest: +SKIP

The package's modules, each importing only those below it:

* :mod:`~analysis.readers.registry`: the registry, sniffing, the default run id; the
  format modules register here (and import nothing above it);
* the format modules (``horovod``, ``kineto``, ``nsys_sqlite``...), with their shared
  machinery (``_chrome``, ``_assembly``, ``_cupti``);
* :mod:`~analysis.readers.cache`: the Parquet caches;
* :mod:`~analysis.readers.file`: :func:`read`, one file in this process;
* :mod:`~analysis.readers.scalescope`: scalescope's own traces and run directories;
* :mod:`~analysis.readers.many`: :func:`read_many`, on :mod:`analysis.parallel`'s engine.
"""

from __future__ import annotations

from analysis.readers.cache import CACHE_MIN_BYTES, CACHE_VERSION, cache_dir
from analysis.readers.file import read
from analysis.readers.many import read_many
from analysis.readers.registry import REGISTRY, Reader, default_run_id, formats, register, sniff

__all__ = ["CACHE_MIN_BYTES", "CACHE_VERSION", "REGISTRY", "Reader", "cache_dir", "default_run_id", "formats",
           "read", "read_many", "register", "sniff"]
