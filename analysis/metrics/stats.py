"""Run-to-run uncertainty: intervals, verdicts, outlier repeats, repeats needed.

Every comparison scalescope reports is between *sides* (the baseline's runs, a
configuration's runs at n ranks, its one-rank runs...). A side is summarised by the mean
over its runs of each run's own mean over its kept steps. Its uncertainty is the run-to-run
spread of those run means, which already holds the step-to-step spread inside each run
(the variance of a two-level mean, runs then steps: Var = s²_runs/k + s²_steps/(k·m), and
the sample variance of the run means estimates exactly that). A derived number (a ratio
such as efficiency, a difference such as a cause of the gap) gets a delta-method interval
with Welch-Satterthwaite degrees of freedom and Student's t, the small-sample form of
Kalibera & Jones' effect-size intervals for ratios of means ("Quantifying performance
changes with effect size confidence intervals", 2012). ``docs/metrics.md`` ("Reporting
rules") says how the report uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats as _st

#: Fewer repeats than this on a side that matters: no interval, the runs are shown instead.
MIN_REPEATS = 3
#: Confidence of every interval.
CONFIDENCE = 0.95
#: The relative difference the report says how many repeats would resolve.
RESOLVE_FRAC = 0.05
#: Verdict words (``X_verdict`` columns).
DISTINGUISHABLE = "distinguishable"
WITHIN_NOISE = "within noise"
NO_INTERVAL = f"no interval (n<{MIN_REPEATS})"
#: A repeat is an outlier when it is this far from its siblings' median, relative...
OUTLIER_REL = 0.10
#: ... and this many robust standard deviations (1.4826 · MAD) of the group.
OUTLIER_MADS = 5.0


def side_stats(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Mean vector, covariance of the mean (cov / k) and number of runs of one side.

    ``values``: one row per run, one column per quantity (the run's mean per step).
    """
    v = np.atleast_2d(np.asarray(values, dtype=float))
    k = v.shape[0]
    mean = v.mean(axis=0)
    if k < 2:
        return mean, np.full((v.shape[1], v.shape[1]), np.nan), k
    return mean, np.atleast_2d(np.cov(v, rowvar=False, ddof=1)) / k, k


def delta_interval(
    fn: Callable[[Sequence[np.ndarray]], np.ndarray],
    sides: Sequence[np.ndarray],
    *,
    confidence: float = CONFIDENCE,
    min_repeats: int = MIN_REPEATS,
    log: bool | Sequence[bool] = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimate and interval of ``fn(side means)`` for every output of ``fn``.

    Parameters
    ----------
    fn
        Maps the list of side mean vectors to a 1-d array of outputs.
    sides
        Per side, its runs' values (runs × quantities); sides are independent run sets.
    log
        Outputs that are positive ratios (efficiency, speedup, a relative time): their
        interval is taken on the log scale and transformed back, so it stays positive and
        is asymmetric as a ratio's is (True for every output, or one flag per output).

    Returns
    -------
    (estimate, low, high)
        Arrays over the outputs. ``low``/``high`` are NaN for an output that depends on a
        side with fewer than ``min_repeats`` runs.

    Notes
    -----
    First-order (delta method) variance Σ_i g_iᵀ C_i g_i with g_i the gradient of the output
    in side i's means (central differences) and C_i the covariance of side i's mean; degrees
    of freedom by Welch-Satterthwaite, ν = (Σ v_i)² / Σ v_i²/(k_i-1); interval
    estimate ± t_{(1+c)/2, ν} · √Σ v_i. A side whose runs are all equal adds nothing.
    """
    stats = [side_stats(s) for s in sides]
    means = [m for m, _, _ in stats]
    raw = np.atleast_1d(np.asarray(fn(means), dtype=float))
    logs = np.broadcast_to(np.asarray(log, dtype=bool), raw.shape) & (raw > 0)
    if logs.any():
        fn = _on_log_scale(fn, logs)
    est = np.atleast_1d(np.asarray(fn(means), dtype=float))
    var_parts = np.zeros((len(sides), est.size))
    depends = np.zeros((len(sides), est.size), dtype=bool)
    for i, (m, cov, _k) in enumerate(stats):
        grads = _gradients(fn, means, i, est.size)
        depends[i] = np.abs(grads).max(axis=0) > 0 if m.size else False
        if np.isnan(cov).any():
            var_parts[i] = np.where(depends[i], np.nan, 0.0)
        else:
            var_parts[i] = np.einsum("jq,jk,kq->q", grads, cov, grads)
    ks = np.array([k for _, _, k in stats])
    low = np.full(est.size, np.nan)
    high = np.full(est.size, np.nan)
    for q in range(est.size):
        used = depends[:, q]
        if (ks[used] < min_repeats).any() or np.isnan(var_parts[used, q]).any() or not np.isfinite(est[q]):
            continue
        low[q], high[q] = _t_interval(est[q], np.clip(var_parts[used, q], 0, None), ks[used], confidence)
    if logs.any():
        est, low, high = (np.where(logs, np.exp(x), x) for x in (est, low, high))
    return est, low, high


def _on_log_scale(fn: Callable[[Sequence[np.ndarray]], np.ndarray],
                  logs: np.ndarray) -> Callable[[Sequence[np.ndarray]], np.ndarray]:
    """``fn`` with the outputs flagged in ``logs`` replaced by their logarithm."""
    def wrapped(m):
        v = np.atleast_1d(np.asarray(fn(m), dtype=float))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(logs, np.log(np.where(logs, v, 1.0)), v)

    return wrapped


def _gradients(fn: Callable[[Sequence[np.ndarray]], np.ndarray], means: Sequence[np.ndarray], i: int,
               n_out: int) -> np.ndarray:
    """Gradient (side ``i``'s quantities × outputs) of ``fn`` in side ``i``'s means, by
    central differences with a step of 1e-6 relative."""
    m = means[i]
    grads = np.zeros((m.size, n_out))
    for j in range(m.size):
        h = 1e-6 * max(abs(m[j]), 1e-9)
        up = [x.copy() for x in means]
        dn = [x.copy() for x in means]
        up[i][j] += h
        dn[i][j] -= h
        grads[j] = (np.atleast_1d(fn(up)) - np.atleast_1d(fn(dn))) / (2 * h)
    return grads


def _t_interval(est: float, v: np.ndarray, ks: np.ndarray, confidence: float) -> tuple[float, float]:
    """Student's t interval of ``est`` from the variance parts ``v`` of the sides it uses
    (``ks`` runs each), Welch-Satterthwaite degrees of freedom; a point when ``v`` is all 0."""
    total = float(v.sum())
    if total <= 0:
        return est, est
    df = total**2 / float((v**2 / (ks - 1)).sum())
    half = float(_st.t.ppf((1 + confidence) / 2, df)) * np.sqrt(total)
    return est - half, est + half


def verdict(low: float, high: float, null: float = 0.0) -> str:
    """``"distinguishable"`` when the interval excludes ``null``, ``"within noise"`` when it
    holds it, ``"no interval (n<3)"`` when there is no interval."""
    if low is None or high is None or not (np.isfinite(low) and np.isfinite(high)):
        return NO_INTERVAL
    return DISTINGUISHABLE if (low > null or high < null) else WITHIN_NOISE


def verdicts(low: pd.Series | np.ndarray, high: pd.Series | np.ndarray, null: float = 0.0) -> list[str]:
    """:func:`verdict` element-wise."""
    return [verdict(a, b, null) for a, b in zip(np.asarray(low, float), np.asarray(high, float), strict=True)]


def repeats_to_resolve(cv: float, *, rel: float = RESOLVE_FRAC, power: float = 0.8,
                       confidence: float = CONFIDENCE) -> float:
    """Repeats per side that resolve a relative difference ``rel`` between two sides whose
    run means vary with coefficient of variation ``cv`` (two-sided test, given power).

    n = ⌈2 (z_{(1+c)/2} + z_power)² cv² / rel²⌉, at least :data:`MIN_REPEATS`; NaN when the
    variation is unknown (fewer than 2 runs).
    """
    if cv is None or not np.isfinite(cv):
        return np.nan
    z = _st.norm.ppf((1 + confidence) / 2) + _st.norm.ppf(power)
    return float(max(MIN_REPEATS, int(np.ceil(2 * z**2 * cv**2 / rel**2))))


def run_cv(values: np.ndarray) -> float:
    """Coefficient of variation of run means (ddof 1); NaN below 2 runs."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size < 2 or v.mean() == 0:
        return np.nan
    return float(v.std(ddof=1) / abs(v.mean()))


def flag_outliers(values: pd.Series, groups: pd.DataFrame | None = None) -> pd.Series:
    """Which repeats differ from their siblings far beyond the siblings' spread.

    Parameters
    ----------
    values
        One value per run (e.g. time per sample), indexed like ``groups``.
    groups
        Columns that make runs repeats of each other (configuration and rank count).

    Returns
    -------
    pandas.Series
        Per run, ``None`` or the reason it is an outlier (e.g. "1.62× the median of its 4
        repeats").

    Notes
    -----
    Needs at least 3 repeats. With m the group's median and MAD the median absolute
    deviation, a run x is an outlier when |x - m| > 10 % of m and > 5 · 1.4826 · MAD: far from
    the others relative to the value and to their own spread. At most a minority of a group
    is flagged (the median decides which side is normal).
    """
    out = pd.Series([None] * len(values), index=values.index, dtype=object)
    if values.empty:  # (an empty frame's row-wise join is a frame, not keys)
        return out
    keys = (groups.astype(str).agg("|".join, axis=1) if groups is not None and len(groups.columns)
            else pd.Series("all", index=values.index))
    for _, idx in values.groupby(keys, sort=False).groups.items():
        v = values.loc[idx].astype(float)
        v = v[np.isfinite(v)]
        if len(v) < MIN_REPEATS:
            continue
        m = float(v.median())
        dev = (v - m).abs()
        mad = float(dev.median())
        bad = (dev > OUTLIER_REL * abs(m)) & (dev > OUTLIER_MADS * 1.4826 * mad)
        if 0 < bad.sum() < len(v) / 2:
            for i in v.index[bad]:
                out.loc[i] = f"{v.loc[i] / m:.2f}× the median of its {len(v)} repeats"
    return out


def ratio(num: Sequence[float], den: Sequence[float], *, confidence: float = CONFIDENCE,
          same: bool = False) -> tuple[float, float, float]:
    """mean(num) / mean(den) over two independent sets of runs, with its interval
    (:func:`delta_interval`); ``same``: they are the same runs (exactly 1, no spread)."""
    if same:
        return 1.0, 1.0, 1.0
    est, lo, hi = delta_interval(lambda m: np.array([m[0][0] / m[1][0]]),
                                 [np.asarray(num, float)[:, None], np.asarray(den, float)[:, None]],
                                 confidence=confidence, log=True)
    return float(est[0]), float(lo[0]), float(hi[0])


def pooled_repeats(*samples: Sequence[float]) -> float:
    """:func:`repeats_to_resolve` for the root-mean-square CV of the given sides' runs."""
    cvs = [c for c in (run_cv(s) for s in samples) if np.isfinite(c)]
    return repeats_to_resolve(float(np.sqrt(np.mean(np.square(cvs))))) if cvs else np.nan
