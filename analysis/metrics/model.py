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


def fit_alpha_beta(points: pd.DataFrame, *, bytes_per_sync: float, x: str = "n_ranks", y: str = "sync_s",
                   alpha_s: float | None = None) -> pd.DataFrame:
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
    alpha_s
        Fix the latency instead of fitting it; then only the bandwidth is fitted, which one
        rank count >= 2 suffices for (e.g. ``alpha_s=0`` gives the latency-free, optimistic
        bound when only 1- and 2-rank runs exist).

    Returns
    -------
    pandas.DataFrame
        One row: ``alpha_s`` (latency per message), ``alpha_stderr_s``,
        ``beta_bytes_per_s`` (bandwidth), ``beta_stderr_bytes_per_s``, ``n_points``,
        ``n_rank_counts``, ``rmse_s``, ``bytes_per_sync``, ``alpha_fixed`` (bool).

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
    X = _design(n, bytes_per_sync)
    if alpha_s is not None:
        if m == 0:
            raise ScalescopeError("the alpha-beta model needs at least one sync time at a rank count >= 2")
        alpha = float(alpha_s)
        rest = t - X[:, 0] * alpha
        c = max(0.0, float((X[:, 1] @ rest) / (X[:, 1] @ X[:, 1])))
    elif m == 0 or len(np.unique(n)) < 2:
        raise ScalescopeError(
            f"the alpha-beta model needs sync times at two or more rank counts >= 2; got {sorted(set(n.tolist()))}"
            " (or fix the latency with alpha_s=...)")
    else:
        scale = np.abs(X).max(axis=0)
        coef_scaled, _ = optimize.nnls(X / scale, t)
        alpha, c = coef_scaled / scale
    resid = t - X @ np.array([alpha, c])
    rss = float((resid**2).sum())
    alpha_se = c_se = np.nan
    if alpha_s is None and m >= 3 and alpha > 0 and c > 0:
        cov = rss / (m - 2) * np.linalg.inv(X.T @ X)
        alpha_se, c_se = float(np.sqrt(cov[0, 0])), float(np.sqrt(cov[1, 1]))
    beta = 1 / c if c > 0 else np.inf
    beta_se = c_se / c**2 if c > 0 else np.nan
    return pd.DataFrame([{
        "alpha_s": float(alpha), "alpha_stderr_s": alpha_se, "beta_bytes_per_s": float(beta),
        "beta_stderr_bytes_per_s": float(beta_se), "n_points": m, "n_rank_counts": len(np.unique(n)),
        "rmse_s": float(np.sqrt(rss / m)), "bytes_per_sync": float(bytes_per_sync),
        "alpha_fixed": alpha_s is not None,
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


def what_if(cost: pd.DataFrame, per_run: pd.DataFrame, runs: pd.DataFrame, *, config: str | None = None,
            max_factor: int = 4) -> dict[str, pd.DataFrame]:
    """Fit the alpha-beta model to one configuration of an experiment and predict its scaling.

    Parameters
    ----------
    cost
        Per-run sync cost from :func:`analysis.metrics.sync.sync_cost` (``config_backend``,
        ``n_ranks``, ``sync_mean_s``).
    per_run
        :func:`analysis.metrics.scaling.run_summary` of the same RunSet (epoch times, samples).
    runs
        ``RunSet.runs`` (for ``n_params``).
    config
        The ``config_backend`` to model; default the one with the most multi-rank runs.
    max_factor
        Predict at powers of two up to ``max_factor`` times the largest measured rank count.

    Returns
    -------
    dict of pandas.DataFrame
        ``measured`` (``n_ranks``, ``sync_s``), ``fit`` (:func:`fit_alpha_beta`),
        ``prediction`` (:func:`predict_scaling`), ``measured_speedup`` (``n_ranks``,
        ``speedup`` from the run summary, relative to the baseline used for the prediction),
        and ``config`` (one row naming the configuration, batch size and bytes per sync).

    Notes
    -----
    With sync times at only one rank count >= 2 (e.g. 1- and 2-GPU runs) alpha and beta
    cannot both be fitted: the latency is then fixed at 0 (``alpha_fixed``; a
    :class:`UserWarning` says so), which makes the predictions an optimistic bound.
    Bytes per synchronisation = ``n_params`` × 4 (float32 gradients). Compute per sample is
    the reference run's epoch time over its samples per epoch, where the reference is the
    one-rank run without a framework at the configuration's median batch size when there is
    one, else the configuration's run with the fewest ranks.

    Raises
    ------
    ScalescopeError
        When fewer than two rank counts >= 2 were measured or ``n_params`` is unknown.
    """
    import math

    pts = cost[cost["n_ranks"] >= 2]
    if config is None:
        if pts.empty:
            raise ScalescopeError("what-if needs sync times of runs with two or more ranks")
        config = str(pts["config_backend"].value_counts().index[0])
    pts = pts[pts["config_backend"] == config]
    alpha_s = None
    if pts["n_ranks"].nunique() < 2:
        import warnings

        warnings.warn(f"{config}: sync times at one rank count only ({sorted(pts['n_ranks'].unique().tolist())}): "
                      "latency fixed at 0, bandwidth fitted; predictions are an optimistic bound", UserWarning,
                      stacklevel=2)
        alpha_s = 0.0
    n_params = runs["n_params"].dropna()
    if n_params.empty:
        raise ScalescopeError("the manifests do not give n_params (needed for the bytes per synchronisation)")
    nbytes = float(n_params.iloc[0]) * 4
    measured = pts[["n_ranks", "sync_mean_s"]].rename(columns={"sync_mean_s": "sync_s"}).reset_index(drop=True)
    fit = fit_alpha_beta(measured, bytes_per_sync=nbytes, alpha_s=alpha_s)
    cfg = per_run[per_run["config_backend"] == config]
    batch = int(cfg["batch_size"].median())
    base = per_run[(per_run["framework"] == "none") & (per_run["n_ranks"] == 1)]
    if not base.empty and (base["batch_size"] == batch).any():
        base = base[base["batch_size"] == batch]
    ref = base if not base.empty else cfg[cfg["n_ranks"] == cfg["n_ranks"].min()]
    dataset = int(ref["samples_per_epoch"].median())
    ref_time = float(ref["epoch_time_s"].median())
    n_max = int(pts["n_ranks"].max())
    grid = sorted({1, *(int(n) for n in pts["n_ranks"]),
                   *(2**k for k in range(int(math.log2(max_factor * n_max)) + 1))})
    pred = predict_scaling(fit, n_ranks=grid, compute_per_sample_s=ref_time / dataset, batch_size=batch,
                           dataset_size=dataset, baseline_epoch_time_s=ref_time)
    ms = cfg.groupby("n_ranks", as_index=False)["epoch_time_s"].median()
    ms["speedup"] = ref_time / ms["epoch_time_s"]
    info = pd.DataFrame({"config_backend": [config], "batch_size": [batch], "bytes_per_sync": [nbytes]})
    return {"measured": measured, "fit": fit, "prediction": pred,
            "measured_speedup": ms[["n_ranks", "speedup"]], "config": info}
