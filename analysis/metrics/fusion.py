"""Horovod's fusion duplicates: one activity written once per tensor of a fused batch."""

from __future__ import annotations

import numpy as np
import pandas as pd


def dedupe_fused(df: pd.DataFrame) -> pd.DataFrame:
    """Drop the duplicate activity rows Horovod writes for every tensor of a fused batch.

    ``ActivityStartAll`` records the same activity (same name, same start) on each tensor
    of a fusion batch, so summing activity time across tensors overcounts (docs/formats.md
    §1, quirk 1: deduplicate on (name, ts)). This keeps the first row of each
    ``(run_id, rank, name, start_ns)`` among ``cat == "activity"`` rows; other rows are
    returned unchanged. The end is not part of the key: older Horovod closes the activity
    of each tensor separately, microseconds apart. The ``tensor`` of a kept row is one
    tensor of the batch. This is the one definition: :func:`horovod_allreduce` uses it.

    Parameters
    ----------
    df
        Events from :func:`analysis.read` (any frame in the event schema works).

    Returns
    -------
    pandas.DataFrame
        A new frame (input untouched) with a fresh ``RangeIndex``.

    Examples
    --------
    >>> from analysis.schema import KINDS, make_events
    >>> ev = make_events(name=["MPI_ALLREDUCE", "MPI_ALLREDUCE", "ALLREDUCE"], kind="comm",
    ...                  cat=["activity", "activity", "op"], start_ns=[5, 5, 0],
    ...                  dur_ns=[3, 3, 10], tensor=["a", "b", "a"], rank=0, source="horovod")
    >>> len(dedupe_fused(ev))
    2
    """
    act = (df["cat"] == "activity").to_numpy()
    if not act.any():
        return df.reset_index(drop=True).copy()
    sub = df.loc[act, ["run_id", "rank", "name", "start_ns"]]
    dup = sub.duplicated(keep="first")
    drop = np.zeros(len(df), dtype=bool)
    drop[np.flatnonzero(act)[dup.to_numpy()]] = True
    return df.loc[~drop].reset_index(drop=True)
