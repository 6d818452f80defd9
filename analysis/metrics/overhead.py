"""Framework overhead: a one-rank Horovod or DDP run against the run without a framework
(study 4; the reference work measured about 17 % for Horovod)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics._common import require_columns
from analysis.metrics.stats import CONFIDENCE, pooled_repeats, ratio, verdict


def framework_overhead(
    per_run: pd.DataFrame,
    *,
    baseline_framework: str = "none",
    match: Sequence[str] = ("batch_size",),
    by: Sequence[str] = ("config_backend",),
    confidence: float = CONFIDENCE,
) -> pd.DataFrame:
    """Extra time per sample of a framework at one rank, relative to the baseline.

    Parameters
    ----------
    per_run
        One row per run with ``framework``, ``n_ranks``, the ``by`` and ``match`` columns and
        ``time_per_sample_s`` (:func:`analysis.metrics.scaling.run_summary`), or else
        ``epoch_time_s``.
    baseline_framework
        ``framework`` value of the baseline runs.
    match
        Columns the baseline must share with the framework run (same batch size).
    by
        Columns naming the framework configuration.
    confidence
        Level of the interval.

    Returns
    -------
    pandas.DataFrame
        One row per configuration (and ``match`` values): ``n_runs``, ``n_baseline_runs``
        (outliers left out), ``time_per_sample_s`` and ``baseline_time_per_sample_s`` (means
        over repeats; NaN without step measures), ``epoch_time_s`` and
        ``baseline_epoch_time_s`` (as recorded, means), ``overhead_frac`` with
        ``overhead_frac_ci_low``/``overhead_frac_ci_high``, ``overhead_pct``,
        ``overhead_frac_verdict`` (against 0) and ``repeats_for_5pct``.

    Notes
    -----
    overhead_frac = t̄_framework / t̄_baseline - 1 with t̄ the mean time per sample over the
    repeats (one rank, outliers left out; :func:`analysis.metrics.scaling.run_speedups`'s t,
    so it equals 1/efficiency - 1 of the one-rank row of the scaling table and
    ``framework_s / ideal_step_s`` of "Why not ideal?"); overhead_pct = 100 · overhead_frac.

    Examples
    --------
    >>> pr = pd.DataFrame({"framework": ["none", "horovod"], "config_backend": ["none", "horovod-gloo"],
    ...                    "n_ranks": [1, 1], "batch_size": [10, 10], "epoch_time_s": [10.0, 11.7]})
    >>> round(float(framework_overhead(pr)["overhead_pct"].iloc[0]), 6)
    17.0
    """
    require_columns(per_run, ("framework", "n_ranks", *match, *by), "framework_overhead")
    if "time_per_sample_s" not in per_run:
        require_columns(per_run, ("epoch_time_s",), "framework_overhead")
    one = _kept_one_rank_runs(per_run, [*by, *match])
    base = one[one["framework"] == baseline_framework]
    fw = one[one["framework"] != baseline_framework]
    keys = list(dict.fromkeys([*by, *match]))
    rows = []
    has_t = "time_per_sample_s" in per_run
    for key, g in fw.groupby(keys, sort=True, dropna=False):
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=False))
        b = base
        for col in match:  # a missing value (no --vary, no partition) is matched by a missing one
            b = b[b[col].isna()] if pd.isna(row[col]) else b[b[col] == row[col]]
        row.update(_overhead_measures(g, b, has_t=has_t))
        rows.append(row)
    return pd.DataFrame(rows, columns=[*keys, *_MEASURES])


#: The columns of :func:`framework_overhead` after the configuration's.
_MEASURES = ("n_runs", "n_baseline_runs", "time_per_sample_s", "baseline_time_per_sample_s", "epoch_time_s",
             "baseline_epoch_time_s", "overhead_frac", "overhead_frac_ci_low", "overhead_frac_ci_high",
             "overhead_pct", "overhead_frac_verdict", "repeats_for_5pct")


def _kept_one_rank_runs(per_run: pd.DataFrame, groups: Sequence[str]) -> pd.DataFrame:
    """The one-rank runs with their time per sample ``_t``, the repeats that are outliers
    within ``groups`` left out."""
    from analysis.metrics.scaling import outlier_reasons, unit_time

    pr = per_run.reset_index(drop=True)
    pr["_t"] = unit_time(pr.assign(throughput_samples_per_s=np.nan) if "throughput_samples_per_s" not in pr
                          else pr, "strong")
    pr["_out"] = outlier_reasons(pr, groups, pr["_t"]).to_numpy()
    return pr[(pr["n_ranks"] == 1) & pr["_out"].isna()]


def _overhead_measures(g: pd.DataFrame, b: pd.DataFrame, *, has_t: bool) -> dict:
    """The overhead of one configuration's runs ``g`` over its baseline runs ``b`` (may be
    empty: NaN overhead)."""
    r, lo, hi = ratio(g["_t"], b["_t"]) if len(b) else (np.nan, np.nan, np.nan)
    return dict(
        n_runs=len(g), n_baseline_runs=len(b),
        time_per_sample_s=float(g["time_per_sample_s"].mean()) if has_t else np.nan,
        baseline_time_per_sample_s=float(b["time_per_sample_s"].mean()) if has_t and len(b) else np.nan,
        epoch_time_s=float(g["epoch_time_s"].mean()) if "epoch_time_s" in g else np.nan,
        baseline_epoch_time_s=float(b["epoch_time_s"].mean()) if "epoch_time_s" in b and len(b) else np.nan,
        overhead_frac=r - 1, overhead_frac_ci_low=lo - 1, overhead_frac_ci_high=hi - 1,
        overhead_pct=100 * (r - 1), overhead_frac_verdict=verdict(lo - 1, hi - 1),
        repeats_for_5pct=pooled_repeats(g["_t"], b["_t"]),
    )
