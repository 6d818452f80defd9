"""What-if model (study 9): an alpha-beta ring-allreduce model fitted to measured sync
times, predictions at rank counts that were not measured, and the pipeline bubble."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
from scipy import optimize

from analysis.errors import ScalescopeError
from analysis.metrics._common import require_columns


def _design(n: np.ndarray, nbytes: float) -> np.ndarray:
    n = np.asarray(n, dtype=float)
    return np.column_stack([2 * (n - 1), 2 * (n - 1) / n * nbytes])


def fit_alpha_beta(points: pd.DataFrame, *, bytes_per_sync: float, x: str = "n_ranks", y: str = "sync_s") -> pd.DataFrame:
    """Fit t(N) = 2(N-1)·alpha + 2(N-1)/N · bytes/beta to measured synchronisation times.

    Parameters
    ----------
    points
        One row per measurement: rank count ``x`` and sync time ``y`` (s), e.g. each run's
        ``sync_mean_s`` from :func:`analysis.metrics.sync.sync_cost` renamed, or
        :func:`analysis.metrics.sync.sync_times` joined with ``n_ranks``. Rows with N < 2
        are ignored (no communication).
    bytes_per_sync
        Bytes reduced per synchronisation (gradient size: ``n_params`` × 4 for float32).

    Returns
    -------
    pandas.DataFrame
        One row: ``alpha_s`` (latency per message), ``alpha_stderr_s``,
        ``beta_bytes_per_s`` (bandwidth), ``beta_stderr_bytes_per_s``, ``n_points``,
        ``n_rank_counts``, ``rmse_s``, ``bytes_per_sync``.

    Notes
    -----
    Ring allreduce (Patarasuk & Yuan 2009; Thakur et al. 2005): 2(N-1) steps, each
    sending bytes/N. The model is linear in alpha and c = 1/beta; both are fitted by
    non-negative least squares (``scipy.optimize.nnls``). Standard errors come from the
    ordinary least-squares covariance s²(XᵀX)⁻¹ with s² = RSS/(m-2), and
    se(beta) = se(c)/c² (delta method); they are NaN with fewer than 3 points, fewer than
    two distinct rank counts or a parameter at its bound. beta is ``inf`` when the fit
    puts no cost on bytes.
    """
    require_columns(points, (x, y), "fit_alpha_beta")
    if bytes_per_sync <= 0:
        raise ScalescopeError("bytes_per_sync must be positive")
    p = points[[x, y]].dropna()
    p = p[p[x] >= 2]
    n = p[x].to_numpy(float)
    t = p[y].to_numpy(float)
    m = len(n)
    if m == 0 or len(np.unique(n)) < 2:
        raise ScalescopeError(
            f"the alpha-beta model needs sync times at two or more rank counts >= 2; got {sorted(set(n.tolist()))}")
    X = _design(n, bytes_per_sync)
    scale = np.abs(X).max(axis=0)
    coef_scaled, _ = optimize.nnls(X / scale, t)
    alpha, c = coef_scaled / scale
    resid = t - X @ np.array([alpha, c])
    rss = float((resid**2).sum())
    alpha_se = c_se = np.nan
    if m >= 3 and alpha > 0 and c > 0:
        cov = rss / (m - 2) * np.linalg.inv(X.T @ X)
        alpha_se, c_se = float(np.sqrt(cov[0, 0])), float(np.sqrt(cov[1, 1]))
    beta = 1 / c if c > 0 else np.inf
    beta_se = c_se / c**2 if c > 0 else np.nan
    return pd.DataFrame([{
        "alpha_s": float(alpha), "alpha_stderr_s": alpha_se, "beta_bytes_per_s": float(beta),
        "beta_stderr_bytes_per_s": float(beta_se), "n_points": m, "n_rank_counts": len(np.unique(n)),
        "rmse_s": float(np.sqrt(rss / m)), "bytes_per_sync": float(bytes_per_sync),
    }])


def predict_sync(fit: pd.DataFrame, n_ranks: Iterable[int]) -> pd.DataFrame:
    """Sync time per step predicted by a :func:`fit_alpha_beta` result.

    Returns
    -------
    pandas.DataFrame
        ``n_ranks``, ``sync_pred_s`` (= 2(N-1)·alpha + 2(N-1)/N · bytes/beta; 0 at N = 1).
    """
    f = fit.iloc[0]
    n = np.asarray(list(n_ranks), dtype=float)
    c = 0.0 if np.isinf(f["beta_bytes_per_s"]) else 1 / f["beta_bytes_per_s"]
    pred = _design(n, f["bytes_per_sync"]) @ np.array([f["alpha_s"], c])
    return pd.DataFrame({"n_ranks": n.astype(int), "sync_pred_s": pred})


def predict_scaling(
    fit: pd.DataFrame,
    *,
    n_ranks: Iterable[int],
    compute_per_sample_s: float,
    batch_size: int,
    dataset_size: int,
    baseline_epoch_time_s: float | None = None,
) -> pd.DataFrame:
    """Predicted epoch time, speedup and efficiency at any rank count.

    Parameters
    ----------
    fit
        :func:`fit_alpha_beta` result.
    n_ranks
        Rank counts to predict.
    compute_per_sample_s
        Compute time per sample (held constant), e.g. the baseline's epoch time divided by
        the dataset size.
    batch_size
        Per-rank batch size.
    dataset_size
        Samples per epoch (split over the ranks).
    baseline_epoch_time_s
        Epoch time the speedup is relative to; default: the model at one rank without
        synchronisation, ceil(D/B) · B · compute_per_sample_s.

    Returns
    -------
    pandas.DataFrame
        ``n_ranks``, ``steps_per_epoch``, ``compute_per_step_s``, ``sync_pred_s``,
        ``step_time_s``, ``epoch_time_s``, ``speedup``, ``efficiency_frac``.

    Notes
    -----
    steps(N) = ceil(D / (B·N)); step(N) = B · compute_per_sample + t_sync(N);
    T(N) = steps(N) · step(N); speedup = T0/T(N); efficiency = speedup / N.
    """
    sync = predict_sync(fit, n_ranks)
    n = sync["n_ranks"].to_numpy(float)
    steps = np.ceil(dataset_size / (batch_size * n))
    compute = batch_size * compute_per_sample_s
    step = compute + sync["sync_pred_s"].to_numpy(float)
    epoch = steps * step
    t0 = baseline_epoch_time_s if baseline_epoch_time_s is not None else np.ceil(dataset_size / batch_size) * compute
    out = sync.copy()
    out.insert(1, "steps_per_epoch", steps.astype(int))
    out.insert(2, "compute_per_step_s", compute)
    out["step_time_s"] = step
    out["epoch_time_s"] = epoch
    out["speedup"] = t0 / epoch
    out["efficiency_frac"] = out["speedup"] / n
    return out


def pipeline_bubble(n_stages: int, n_microbatches: int) -> float:
    """Idle fraction of a GPipe-style pipeline: (N-1)/(N+K-1).

    Notes
    -----
    N stages and K micro-batches per batch (Huang et al. 2019, GPipe).

    Examples
    --------
    >>> pipeline_bubble(4, 8)
    0.2727272727272727
    """
    if n_stages < 1 or n_microbatches < 1:
        raise ScalescopeError("n_stages and n_microbatches must be at least 1")
    return (n_stages - 1) / (n_stages + n_microbatches - 1)
