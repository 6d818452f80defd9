"""Running a study: :func:`context` (the experiment read once) and :func:`run_section` (one
study as the report and :func:`analysis.studies.run_study` show it). Both build the same
:class:`~analysis.studies._base.Section` from the same :class:`~analysis.studies._base.Context`,
so the report and a notebook cannot give different tables for the same experiment."""

from __future__ import annotations

import os
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from analysis.metrics.breakdown import WARMUP
from analysis.metrics.stats import CONFIDENCE
from analysis.runset import RunSet
from analysis.studies._base import BASELINE, Context, Section, Skip

#: Where a warning raised in these folders comes from a study's own analysis (it becomes a
#: note of that study), not from reading the data.
_OWN_DIRS = ("metrics", "studies")


def _own(w: warnings.WarningMessage) -> bool:
    return Path(str(w.filename)).parent.name in _OWN_DIRS and issubclass(w.category, UserWarning)


def run_section(key: str, title: str, study: Callable[[Context], Section], ctx: Context,
                caught: list) -> Section:
    """``study`` on ``ctx`` as the report shows it: a study the experiment cannot support is
    a skipped section saying why, one that fails says how (never raises); the warnings its own
    analysis raised (taken out of ``caught``, the list warnings are being recorded into) become
    its notes."""
    first = len(caught)
    try:
        sec = study(ctx)
    except Skip as exc:
        sec = Section(key, title, skipped=str(exc))
    except Exception as exc:
        sec = Section(key, title, skipped=f"failed with {type(exc).__name__}: {exc}",
                      notes=[traceback.format_exc(limit=3)])
    sec.key, sec.title = key, title
    for w in [w for w in caught[first:] if _own(w)]:
        caught.remove(w)
        note = f"Warning: {w.message}"
        if note not in sec.notes:
            sec.notes.append(note)
    return sec


def context(experiment: Context | RunSet | str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
            warmup: int | str | None = WARMUP, confidence: float = CONFIDENCE, baseline: str = BASELINE) -> Context:
    """The :class:`Context` studies read: the RunSet (or the experiment or run directories)
    read once with these analysis options; a Context is returned as it is (with its own
    options: one asked for here that is not the default must be its own)."""
    if isinstance(experiment, Context):
        asked = {"warmup": warmup, "confidence": confidence, "baseline": baseline}
        default = {"warmup": WARMUP, "confidence": CONFIDENCE, "baseline": BASELINE}
        has = {k: getattr(experiment, k) for k in asked}
        differ = {k: v for k, v in asked.items() if v != default[k] and v != has[k]}
        if differ:
            raise ValueError(f"the Context was loaded with {has}, not {differ}: load another with context()")
        return experiment
    rs = experiment if isinstance(experiment, RunSet) else RunSet.from_dirs(
        [experiment] if isinstance(experiment, (str, os.PathLike)) else list(experiment))
    return Context.from_runset(rs, warmup=warmup, confidence=confidence, baseline=baseline)
