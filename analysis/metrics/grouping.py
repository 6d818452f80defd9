"""The one grouping rule of every study: which columns keep runs apart (``docs/metrics.md``,
"Grouping").

A report may read many experiments at once (``scalescope report data/sample_partitions``).
Runs that differ in the experiment they belong to, where they ran (cluster, partition, GPU
model), the scaling mode, the backend, the batch size, an injected delay or a swept script
option (``--vary``) are different configurations: no study pools them, and a ratio's
baseline comes from the same values of all of them, except the ones a study names on
purpose (the clusters study's one baseline for every partition).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.schema import MACHINE_AXES

#: The axes, besides the framework configuration, on which runs of a report may differ, in
#: the order tables show them: the experiment, where it ran, and the scaling mode.
VARYING_AXES: tuple[str, ...] = ("experiment", *MACHINE_AXES, "gpu_model", "scaling", "batch_mode")

#: Columns that say which framework a run used: a baseline without a framework differs from
#: its configuration in these, so they are never matched when a baseline is chosen.
FRAMEWORK_KEYS: tuple[str, ...] = ("config_backend", "backend", "requested_backend", "framework", "inject")


def _varies(per_run: pd.DataFrame, col: str) -> bool:
    """Two or more values, a missing value counting as one (a run without ``--vary`` beside
    runs with it is a configuration of its own)."""
    return col in per_run.columns and per_run[col].astype(object).where(per_run[col].notna(), "<NA>").nunique() >= 2


def swept_axes(per_run: pd.DataFrame) -> tuple[str, ...]:
    """The ``vary_*`` columns (``scalescope sweep --vary``) that differ between the runs;
    ``vary_inject`` is the ``inject`` column's."""
    return tuple(c for c in per_run.columns if str(c).startswith("vary_") and c != "vary_inject" and _varies(per_run, c))


def study_axes(per_run: pd.DataFrame, *, without: Sequence[str] = ()) -> tuple[str, ...]:
    """The :data:`VARYING_AXES` and swept options on which the runs differ (each a
    configuration of its own in every study), less ``without``.

    Examples
    --------
    >>> pr = pd.DataFrame({"experiment": ["a", "a", "b"], "partition": ["x", "x", "x"],
    ...                    "vary_lr": [None, None, "sqrt"]})
    >>> study_axes(pr)
    ('experiment', 'vary_lr')
    """
    axes = (*(c for c in VARYING_AXES if _varies(per_run, c)), *swept_axes(per_run))
    return tuple(c for c in axes if c not in without)


def batch_key(per_run: pd.DataFrame) -> str:
    """``global_batch_size`` where every run held the global batch fixed (``scalescope sweep
    --global-batch-size``: the per-rank batch then changes with the ranks and does not make a
    configuration), else ``batch_size`` (the per-rank batch, the default mode)."""
    glob = "batch_mode" in per_run.columns and len(per_run) and (per_run["batch_mode"] == "global").all()
    return "global_batch_size" if glob else "batch_size"


def config_by(per_run: pd.DataFrame, *, without: Sequence[str] = ()) -> tuple[str, ...]:
    """The columns that make one configuration in every study: :func:`study_axes`, the
    backend, the batch (:func:`batch_key`), and ``inject`` where a run has an injected delay.

    Examples
    --------
    >>> pr = pd.DataFrame({"experiment": ["a", "b"], "config_backend": "ddp-gloo", "batch_size": 75,
    ...                    "inject": [None, None]})
    >>> config_by(pr)
    ('experiment', 'config_backend', 'batch_size')
    """
    inject = ("inject",) if "inject" in per_run.columns and per_run["inject"].notna().any() else ()
    cols = (*study_axes(per_run), "config_backend", batch_key(per_run), *inject)
    return tuple(c for c in cols if c not in without)


def baseline_match(by: Sequence[str]) -> tuple[str, ...]:
    """The columns of ``by`` a baseline without a framework shares with its configuration:
    all but the :data:`FRAMEWORK_KEYS` (so each experiment, partition, mode and swept value
    has its own baseline).

    >>> baseline_match(("experiment", "config_backend", "batch_size", "vary_lr"))
    ('experiment', 'batch_size', 'vary_lr')
    """
    return tuple(c for c in by if c not in FRAMEWORK_KEYS)


_WORDS = {"experiment": "experiment", "config_backend": "backend", "batch_size": "batch size per rank",
          "scaling": "scaling mode", "gpu_model": "GPU model", "inject": "injected delay", "n_ranks": "ranks",
          "global_batch_size": "global batch"}


def grouped_by(by: Sequence[str]) -> str:
    """The words a table's caption uses to say what it grouped by.

    >>> grouped_by(("experiment", "config_backend", "batch_size", "vary_lr-scaling"))
    'Grouped by experiment, backend, batch size per rank, --lr-scaling.'
    """
    words = [_WORDS.get(c, "--" + c.removeprefix("vary_") if c.startswith("vary_") else c) for c in by]
    return "Grouped by " + ", ".join(dict.fromkeys(words)) + "."
