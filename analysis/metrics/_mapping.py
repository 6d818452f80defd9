"""How a metric declares that it can run over a collection of runs one part at a time.

A metric is a function of a frame. Decorated with :func:`maps_over`, it also accepts any
object whose type defines ``__scalescope_metric__(self, metric, mapping, options)`` (a
:class:`~analysis.runset.RunSet` does): the call is handed to that method, which reads and
reduces the runs (one rank file or one run per task, on its engine) and returns the table
the metric gives on all their events. The metric never imports the collection, the
readers or the engine: the dispatch is on the argument's type, the way NumPy's
``__array_function__`` and Dask collections dispatch without importing the caller's type.

So adding a metric that a RunSet maps over its ranks is a decorator on the metric, and
nothing else:

>>> @maps_over(unit="rank")                                          # doctest: +SKIP
... def my_per_rank_metric(events): ...

The declaration is a promise about the metric's groups: with ``unit="rank"`` its table of
all events is the concatenation, in (``run_id``, ``rank``) order, of its tables of single
ranks (each rank's rows as they are in the run's events); with ``unit="run"`` the same of
single runs in ``run_id`` order (or what ``combine`` makes of them).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class Mapping:
    """What :func:`maps_over` declared: see there."""

    table: str = "events"
    unit: str | Callable[[dict], str] = "run"
    timeline_rank: int | str | None = None
    rank_devices: bool = False
    combine: Callable[[list[pd.DataFrame]], pd.DataFrame] | None = None

    def unit_of(self, options: dict) -> str:
        """``"rank"`` or ``"run"`` for a call with these keyword ``options``."""
        return self.unit(options) if callable(self.unit) else self.unit

    def timeline_rank_of(self, metric: Callable[..., Any], options: dict) -> int | None:
        """The rank whose rows also need the run's Horovod timeline (None: none)."""
        if not isinstance(self.timeline_rank, str):
            return self.timeline_rank
        default = inspect.signature(metric).parameters[self.timeline_rank].default
        return options.get(self.timeline_rank, default)


def maps_over(*, table: str = "events", unit: str | Callable[[dict], str] = "run",
              timeline_rank: int | str | None = None, rank_devices: bool = False,
              combine: Callable[[list[pd.DataFrame]], pd.DataFrame] | None = None,
              ) -> Callable[[Callable[..., pd.DataFrame]], Callable[..., pd.DataFrame]]:
    """Declare that a metric of a ``table`` (``"events"`` or ``"samples"``) can run over a
    collection of runs part by part.

    Parameters
    ----------
    table
        The table the metric takes.
    unit
        ``"rank"``: its groups are a run and a rank, so each rank file can be reduced in a
        task of its own; ``"run"``: one run per task. Or a function of the call's keyword
        options giving one of them (``time_breakdown(level="run")`` adds a run's ranks up).
    timeline_rank
        The rank whose task also reads the run's Horovod timeline: a number, None (no
        rank), or the name of the metric's keyword that says (its default when not given).
    rank_devices
        Pass the collection's ``rank_devices`` table as that keyword when the caller gave
        none.
    combine
        Joins the tables of single runs (``run_id`` order); default: concatenated.
    """
    mapping = Mapping(table, unit, timeline_rank, rank_devices, combine)

    def wrap(func: Callable[..., pd.DataFrame]) -> Callable[..., pd.DataFrame]:
        @functools.wraps(func)
        def metric(data: Any, *args: Any, **options: Any) -> pd.DataFrame:
            hook = getattr(type(data), "__scalescope_metric__", None)
            if hook is None:
                return func(data, *args, **options)
            if args:
                raise TypeError(f"{func.__name__}() of a collection of runs takes its options by keyword")
            return hook(data, metric, mapping, options)

        metric.mapping = mapping
        return metric

    return wrap
