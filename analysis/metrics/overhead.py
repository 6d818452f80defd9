"""Framework overhead: a one-rank Horovod or DDP run against the run without a framework
(study 4; the reference work measured about 17 % for Horovod)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics._common import require_columns


def framework_overhead(
    per_run: pd.DataFrame,
    *,
    baseline_framework: str = "none",
    match: Sequence[str] = ("batch_size",),
    by: Sequence[str] = ("config_backend",),
) -> pd.DataFrame:
    """Extra epoch time of a framework at one rank, relative to the baseline.

    Parameters
    ----------
    per_run
        One row per run with ``framework``, ``n_ranks``, ``epoch_time_s`` and the ``by``
        and ``match`` columns (e.g. :func:`analysis.metrics.scaling.run_summary`).
    baseline_framework
        ``framework`` value of the baseline runs.
    match
        Columns the baseline must share with the framework run (same batch size).
    by
        Columns naming the framework configuration.

    Returns
    -------
    pandas.DataFrame
        One row per configuration (and ``match`` values): ``n_runs``, ``epoch_time_s``
        (median over repeats), ``baseline_epoch_time_s`` (median), ``overhead_s``,
        ``overhead_frac`` and ``overhead_pct``.

    Notes
    -----
    overhead_frac = T_framework(1 rank) / T_baseline - 1, with T the median epoch time over
    repeats; overhead_pct = 100 · overhead_frac.

    Examples
    --------
    >>> pr = pd.DataFrame({"framework": ["none", "horovod"], "config_backend": ["none", "horovod-gloo"],
    ...                    "n_ranks": [1, 1], "batch_size": [10, 10], "epoch_time_s": [10.0, 11.7]})
    >>> round(float(framework_overhead(pr)["overhead_pct"].iloc[0]), 6)
    17.0
    """
    require_columns(per_run, ("framework", "n_ranks", "epoch_time_s", *match, *by), "framework_overhead")
    one = per_run[per_run["n_ranks"] == 1]
    base = one[one["framework"] == baseline_framework]
    fw = one[one["framework"] != baseline_framework]
    keys = list(dict.fromkeys([*by, *match]))
    rows = []
    for key, g in fw.groupby(keys, sort=True, dropna=False):
        row = dict(zip(keys, key, strict=False))
        b = base
        for col in match:
            b = b[b[col] == row[col]]
        t = float(g["epoch_time_s"].median())
        t0 = float(b["epoch_time_s"].median()) if len(b) else np.nan
        row.update(n_runs=len(g), epoch_time_s=t, baseline_epoch_time_s=t0, overhead_s=t - t0,
                   overhead_frac=t / t0 - 1, overhead_pct=100 * (t / t0 - 1))
        rows.append(row)
    return pd.DataFrame(rows, columns=[*keys, "n_runs", "epoch_time_s", "baseline_epoch_time_s", "overhead_s",
                                       "overhead_frac", "overhead_pct"])
