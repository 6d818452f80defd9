"""The report's studies: each takes the loaded experiment (:class:`Context`) and returns a
:class:`Section` (intro, tables, figures, notes), or raises :class:`Skip` saying why the
experiment cannot support it. :data:`STUDIES` lists them in the report's order;
:mod:`analysis.report` loads the experiment, runs them, exports and renders.

The shared
intermediate tables live in :mod:`analysis.studies._base`; each study in a module of its own.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence

from analysis.errors import recording
from analysis.metrics.breakdown import WARMUP
from analysis.metrics.stats import CONFIDENCE
from analysis.runset import RunSet
from analysis.studies._base import (
    BASELINE,
    BASELINES,
    EVENT_TABLES,
    Context,
    Section,
    Skip,
    event_tables,
)
from analysis.studies._run import context, run_section
from analysis.studies.backends import study_backends
from analysis.studies.batch import REFERENCE_BATCH, study_batch
from analysis.studies.breakdown import study_breakdown
from analysis.studies.clusters import study_clusters
from analysis.studies.input_size import study_input_size
from analysis.studies.memory import study_memory
from analysis.studies.model import study_model
from analysis.studies.overhead import study_overhead
from analysis.studies.scaling import study_scaling
from analysis.studies.scope import study_scope
from analysis.studies.stragglers import study_stragglers
from analysis.studies.strong_weak import study_strong_weak
from analysis.studies.summary import study_summary
from analysis.studies.sync import study_sync
from analysis.studies.usage import study_usage
from analysis.studies.why import study_why

__all__ = ["BASELINE", "BASELINES", "CONFIDENCE", "EVENT_TABLES", "REFERENCE_BATCH", "STUDIES", "WARMUP", "Context",
           "Section", "Skip", "context", "event_tables", "run_section", "run_study"]

#: The report's studies in order: (key, title, function); a function raises Skip to say why
#: its study cannot run on this experiment.
STUDIES: tuple[tuple[str, str, Callable[[Context], Section]], ...] = (
    ("summary", "Summary", study_summary),
    ("why", "Why not ideal?", study_why),
    ("breakdown", "1. Time breakdown of a training step", study_breakdown),
    ("sync", "2. Synchronisation cost against ranks", study_sync),
    ("scaling", "3. Scaling: speedup and efficiency", study_scaling),
    ("overhead", "4. Framework overhead at one rank", study_overhead),
    ("usage", "5. Device usage against ranks", study_usage),
    ("backends", "6. Backend comparison", study_backends),
    ("batch", "7. Batch size and learning rate", study_batch),
    ("memory", "8. Compute against weight update, and memory per rank", study_memory),
    ("model", "9. What-if: alpha-beta ring-allreduce model", study_model),
    ("stragglers", "10. Stragglers", study_stragglers),
    ("clusters", "11. Clusters and partitions", study_clusters),
    ("strong_weak", "12. Strong and weak scaling", study_strong_weak),
    ("input_size", "13. Input size and the memory limit", study_input_size),
    ("scope", "Scope, and where a CPU run differs from a GPU run", study_scope),
)


def run_study(key: str, experiment: Context | RunSet | str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
              *, warmup: int | str | None = WARMUP, confidence: float = CONFIDENCE,
              baseline: str = BASELINE) -> Section:
    """One study of the report (a key of :data:`analysis.studies.STUDIES`) on an experiment.

    Parameters
    ----------
    key
        ``"summary"``, ``"why"``, ``"scaling"``, ... (``[k for k, _, _ in STUDIES]``).
    experiment
        A :class:`~analysis.runset.RunSet`, experiment or run directories, or a
        :class:`Context` already loaded (several studies then share its intermediate tables).
    warmup
        The steps dropped per rank as warm-up: ``"auto"`` (until the step time settles,
        docs/metrics.md), a number of steps, or 0.
    confidence
        The level of every interval and verdict.
    baseline
        The base case of the scaling studies: ``"auto"``, ``"none"`` or ``"min"``
        (:data:`analysis.studies.BASELINE`).

    Returns
    -------
    Section
        The report's section: ``sec.table(name)``, ``sec.figure(name)``, ``sec.notes``, and
        ``sec.skipped`` saying why when the experiment cannot support the study. Warnings of
        the study's own analysis are among its notes; warnings about the data are raised.
    """
    found = {k: (title, fn) for k, title, fn in STUDIES}
    if key not in found:
        raise KeyError(f"no study {key!r}; the studies are {list(found)}")
    ctx = context(experiment, warmup=warmup, confidence=confidence, baseline=baseline)
    with recording() as caught:
        sec = run_section(key, *found[key], ctx, caught)
    for w in caught:  # the data's warnings, for the caller
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return sec
