"""What-if model (study 9): an alpha-beta ring-allreduce model fitted to measured sync
times, predictions at rank counts that were not measured, and the pipeline bubble."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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
        One row per measurement: rank count ``x`` and sync time ``y`` (s): ``sync_total``
        per synchronisation (``docs/metrics.md``), e.g. each run's ``sync_mean_s`` from
        :func:`analysis.metrics.sync.sync_cost` renamed, or
        :func:`analysis.metrics.sync.sync_times` joined with ``n_ranks`` and
        ``y="sync_total_s"``. Rows with N < 2 are ignored (no communication).
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

    config, pts, alpha_s = _sync_points(cost, config)
    n_params = runs["n_params"].dropna()
    if n_params.empty:
        raise ScalescopeError("the manifests do not give n_params (needed for the bytes per synchronisation)")
    nbytes = float(n_params.iloc[0]) * 4
    measured = pts[["n_ranks", "sync_mean_s"]].rename(columns={"sync_mean_s": "sync_s"}).reset_index(drop=True)
    fit = fit_alpha_beta(measured, bytes_per_sync=nbytes, alpha_s=alpha_s)
    cfg = per_run[per_run["config_backend"] == config]
    batch = int(cfg["batch_size"].median())
    ref = _reference_runs(per_run, cfg, batch)
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


def _sync_points(cost: pd.DataFrame, config: str | None) -> tuple[str, pd.DataFrame, float | None]:
    """The configuration to model (default the one with the most multi-rank runs), its sync
    costs at two or more ranks, and the latency to fix (0, warned, with one rank count only;
    else None: fitted)."""
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
                      stacklevel=3)
        alpha_s = 0.0
    return config, pts, alpha_s


def _reference_runs(per_run: pd.DataFrame, cfg: pd.DataFrame, batch: int) -> pd.DataFrame:
    """The runs giving the compute per sample: the one-rank runs without a framework (at
    ``batch`` when there are such), else the configuration's runs with the fewest ranks."""
    base = per_run[(per_run["framework"] == "none") & (per_run["n_ranks"] == 1)]
    if not base.empty and (base["batch_size"] == batch).any():
        base = base[base["batch_size"] == batch]
    return base if not base.empty else cfg[cfg["n_ranks"] == cfg["n_ranks"].min()]


# ---------------------------------------------------------------------------------------
# Allreduce micro-benchmark: alpha-beta per link class, ring and two-level models
# ---------------------------------------------------------------------------------------

#: ``link_class`` values of ``scalescope bench-allreduce`` (instrumentation/bench_allreduce.py).
LINK_CLASSES = ("intra-node", "inter-node")
#: Backend label -> the transport family its allreduce runs on (to match sweep configs to fits).
_CONTROLLER = {"ddp-gloo": "gloo", "horovod-gloo": "gloo", "ddp-mpi": "mpi", "horovod-mpi": "mpi",
               "ddp-nccl": "nccl", "gloo": "gloo", "mpi": "mpi", "nccl": "nccl"}


def fit_link_alpha_beta(bench: pd.DataFrame, *, by: Sequence[str] = ("backend", "link_class"),
                        level: float = 0.95) -> pd.DataFrame:
    """Fit the ring model t(N, m) = 2(N-1)·alpha + 2(N-1)/N · m/beta to allreduce timings.

    Parameters
    ----------
    bench
        ``allreduce.csv`` of ``scalescope bench-allreduce``: ``n_ranks``, ``bytes``,
        ``time_s`` and the ``by`` columns (one row per timed repeat).
    by
        One fit per group (default: backend and link class, ``intra-node``/``inter-node``).
    level
        Confidence level of the intervals.

    Returns
    -------
    pandas.DataFrame
        One row per group: the ``by`` columns, ``launcher_backend`` (when present),
        ``alpha_s`` with ``alpha_ci_low_s``/``alpha_ci_high_s``, ``beta_bytes_per_s`` with
        ``beta_ci_low_bytes_per_s``/``beta_ci_high_bytes_per_s``, ``n_points`` (sizes x rank
        counts fitted), ``rank_counts`` (text), ``min_bytes``, ``max_bytes``, ``rel_rmse_frac``
        (root mean square of the relative residuals).

    Notes
    -----
    Each (rank count, size) enters once, as its median time; rank counts below 2 carry no
    communication and are left out. The model is linear in alpha and c = 1/beta, fitted by
    non-negative least squares on relative errors (rows weighted by 1/t, so a 4-byte
    latency counts as much as a 256 MiB transfer). Intervals: the weighted least-squares
    covariance s²(XᵀWX)⁻¹ with s² = RSS_w/(m-2) and Student's t with m-2 degrees of
    freedom; beta's interval is 1/c's (an upper bound of ``inf`` when c's interval reaches
    0). Hockney's alpha-beta model (Hockney 1994) applied to the ring allreduce (Thakur et
    al. 2005).
    """
    from scipy import stats

    require_columns(bench, ("n_ranks", "bytes", "time_s", *by), "fit_link_alpha_beta")
    b = bench[bench["n_ranks"] >= 2]
    keys = [*by, "launcher_backend"] if "launcher_backend" in b.columns and "launcher_backend" not in by else list(by)
    med = b.groupby([*keys, "n_ranks", "bytes"], observed=True, as_index=False)["time_s"].median()
    rows = []
    for key, g in med.groupby(keys, observed=True, sort=True):
        n = g["n_ranks"].to_numpy(float)
        m = g["bytes"].to_numpy(float)
        t = g["time_s"].to_numpy(float)
        X = np.column_stack([2 * (n - 1), 2 * (n - 1) / n * m])
        w = 1 / np.maximum(t, 1e-12)
        Xw, tw = X * w[:, None], t * w
        scale = np.abs(Xw).max(axis=0)
        scale[scale == 0] = 1
        coef, _ = optimize.nnls(Xw / scale, tw)
        alpha, c = coef / scale
        resid = tw - Xw @ np.array([alpha, c])
        k = len(t)
        a_lo = a_hi = c_lo = c_hi = np.nan
        if k >= 3:
            s2 = float(resid @ resid) / (k - 2)
            cov = s2 * np.linalg.pinv(Xw.T @ Xw)
            q = stats.t.ppf(0.5 + level / 2, k - 2)
            a_se, c_se = np.sqrt(np.maximum(np.diag(cov), 0))
            a_lo, a_hi = max(alpha - q * a_se, 0.0), alpha + q * a_se
            c_lo, c_hi = max(c - q * c_se, 0.0), c + q * c_se
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        row.update({
            "alpha_s": float(alpha), "alpha_ci_low_s": float(a_lo), "alpha_ci_high_s": float(a_hi),
            "beta_bytes_per_s": float(1 / c) if c > 0 else np.inf,
            "beta_ci_low_bytes_per_s": float(1 / c_hi) if c_hi > 0 else np.nan,
            "beta_ci_high_bytes_per_s": (float(1 / c_lo) if c_lo > 0 else np.inf) if not np.isnan(c_lo) else np.nan,
            "n_points": k, "rank_counts": ",".join(str(int(x)) for x in sorted(set(n))),
            "min_bytes": int(m.min()), "max_bytes": int(m.max()),
            "rel_rmse_frac": float(np.sqrt(np.mean(resid**2))),
        })
        rows.append(row)
    if not rows:
        raise ScalescopeError("no allreduce timing at 2 or more ranks to fit (bench-allreduce --np must include N >= 2)")
    return pd.DataFrame(rows)


#: The allreduce models :func:`allreduce_time` predicts with (``docs/metrics.md``, "Allreduce models").
ALLREDUCE_MODELS: tuple[str, ...] = ("one-shot", "ring", "tree", "two-level")

#: Single-link models: t(N, alpha, m/beta).
_FLAT = {
    "ring": lambda n, a, mb: 2 * (n - 1) * a + 2 * (n - 1) / n * mb,
    "one-shot": lambda n, a, mb: 2 * a + 2 * (n - 1) * mb,
    "tree": lambda n, a, mb: 2 * np.ceil(np.log2(n)) * (a + mb),
}


def allreduce_models(links: pd.DataFrame, *, n_ranks: Iterable[int], nbytes: float,
                     ranks_per_node: int | None = None) -> pd.DataFrame:
    """:func:`allreduce_time` by every model of :data:`ALLREDUCE_MODELS`, stacked.

    Examples
    --------
    >>> links = pd.DataFrame({"link_class": ["intra-node"], "alpha_s": [1e-5], "beta_bytes_per_s": [1e9]})
    >>> t = allreduce_models(links, n_ranks=[8], nbytes=1e6)
    >>> t.set_index("model")["pred_s"].round(6).to_dict()
    {'one-shot': 0.01402, 'ring': 0.00189, 'tree': 0.00606, 'two-level': 0.00189}
    """
    n_ranks = list(n_ranks)
    return pd.concat([allreduce_time(links, n_ranks=n_ranks, nbytes=nbytes, ranks_per_node=ranks_per_node, model=m)
                      for m in ALLREDUCE_MODELS], ignore_index=True)


def _link(links: pd.DataFrame, link_class: str) -> tuple[float, float] | None:
    row = links[links["link_class"] == link_class]
    if row.empty:
        return None
    r = row.iloc[0]
    return float(r["alpha_s"]), float(r["beta_bytes_per_s"])


def allreduce_time(links: pd.DataFrame, *, n_ranks: Iterable[int], nbytes: float, ranks_per_node: int | None = None,
                   model: str = "auto") -> pd.DataFrame:
    """Allreduce time predicted from :func:`fit_link_alpha_beta` parameters of one backend.

    Parameters
    ----------
    links
        Fit rows of one backend (``link_class``, ``alpha_s``, ``beta_bytes_per_s``).
    n_ranks
        Rank counts to predict.
    nbytes
        Message size (bytes; the gradient size for one synchronisation).
    ranks_per_node
        L, ranks per node; ``None`` = all ranks on one node.
    model
        ``"ring"`` (flat ring over all ranks; across nodes every step waits for the
        inter-node link), ``"two-level"`` (hierarchical), ``"one-shot"`` (reduce to one rank
        and broadcast back, whole messages), ``"tree"`` (binomial-tree reduce and broadcast),
        or ``"auto"``: two-level when the ranks span nodes, ring inside one node (where the
        two coincide).

    Returns
    -------
    pandas.DataFrame
        ``n_ranks``, ``n_nodes``, ``ranks_per_node``, ``model`` (the one used), ``pred_s``
        (NaN with ``note`` saying which link fit is missing), ``note``.

    Notes
    -----
    With K = N/L nodes: ring t = 2(N-1)·alpha + 2(N-1)/N · m/beta with the intra-node link
    when K = 1, else the inter-node link. Two-level (reduce-scatter inside each node, ring
    allreduce of the node's 1/L share across nodes, allgather inside each node, as
    Horovod's hierarchical allreduce and NCCL's intra/inter split do):
    t = 2(L-1)·alpha_i + 2(L-1)/L · m/beta_i + 2(K-1)·alpha_e + 2(K-1)/K · (m/L)/beta_e.
    At K = 1 it is the intra-node ring; at L = 1 the inter-node ring.
    One-shot (2 steps of whole messages; the root's link carries N-1 of them each way):
    t = 2·alpha + 2(N-1) · m/beta. Tree (binomial reduce then broadcast, Thakur et al. 2005,
    not pipelined): t = 2⌈log2 N⌉ · (alpha + m/beta). Both use the intra-node link inside one
    node, else the inter-node link. Ring and tree trade the same way: the one-shot and the
    tree pay fewer latencies, the ring moves fewer bytes per link (2(N-1)/N · m).

    Examples
    --------
    >>> links = pd.DataFrame({"link_class": ["intra-node", "inter-node"], "alpha_s": [1e-6, 1e-5],
    ...                       "beta_bytes_per_s": [1e10, 1e9]})
    >>> allreduce_time(links, n_ranks=[8], nbytes=1e8, ranks_per_node=4)[["model", "pred_s"]].round(6).values.tolist()
    [['two-level', 0.040026]]
    """
    if model not in ("auto", *ALLREDUCE_MODELS):
        raise ScalescopeError(f"model must be 'auto' or one of {', '.join(ALLREDUCE_MODELS)}, not {model!r}")
    intra, inter = _link(links, "intra-node"), _link(links, "inter-node")
    out = []
    for n in n_ranks:
        n = int(n)
        L = min(n, int(ranks_per_node)) if ranks_per_node else n
        K = max(1, -(-n // L))
        used = model if model != "auto" else ("two-level" if K > 1 else "ring")
        note, pred = "", np.nan
        if n < 2:
            pred = 0.0
        elif used in _FLAT:
            link = intra if K == 1 else inter
            if link is None:
                note = f"no {'intra' if K == 1 else 'inter'}-node fit"
            else:
                pred = _FLAT[used](n, link[0], nbytes / link[1])
        else:
            need = [(name, lk) for name, lk, used_ in (("intra-node", intra, L > 1), ("inter-node", inter, K > 1))
                    if used_]
            missing = [name for name, lk in need if lk is None]
            if missing:
                note = "no " + " and ".join(missing) + " fit"
            else:
                pred = 0.0
                if L > 1:
                    pred += 2 * (L - 1) * intra[0] + 2 * (L - 1) / L * nbytes / intra[1]
                if K > 1:
                    pred += 2 * (K - 1) * inter[0] + 2 * (K - 1) / K * (nbytes / L) / inter[1]
        out.append({"n_ranks": n, "n_nodes": K, "ranks_per_node": L, "model": used, "pred_s": pred, "note": note})
    return pd.DataFrame(out)


def sync_prediction_error(links: pd.DataFrame, cost: pd.DataFrame, runs: pd.DataFrame, *,
                          fit_rank_counts: Iterable[int] = (), model: str = "auto") -> pd.DataFrame:
    """Measured synchronisation time per run against the allreduce model's prediction.

    Parameters
    ----------
    links
        :func:`fit_link_alpha_beta` of a bench-allreduce (all backends).
    cost
        :func:`analysis.metrics.sync.sync_cost` (``run_id``, ``config_backend``, ``n_ranks``,
        ``sync_median_s``).
    runs
        ``RunSet.runs`` (``n_params``; ``n_nodes`` when known).
    fit_rank_counts
        Rank counts the bench fitted; a run at any other count is ``held_out``.
    model
        Passed to :func:`allreduce_time`.

    Returns
    -------
    pandas.DataFrame
        One row per run with N >= 2 whose backend has a fit: ``run_id``,
        ``config_backend``, ``bench_backend``, ``n_ranks``, ``n_nodes``, ``model``,
        ``bytes_per_sync``, ``sync_measured_s`` (the median sync_total per step),
        ``sync_min_measured_s`` (its minimum: a step where no rank was waited for; NaN when
        ``cost`` lacks ``sync_min_s``), ``sync_pred_s``, ``error_frac`` ((pred -
        measured)/measured), ``held_out`` (bool).

    Notes
    -----
    One synchronisation is modelled as one allreduce of the whole gradient
    (``n_params`` x 4 bytes, float32), as the fused/bucketed allreduce of a small model is.
    A fit is matched to a run by the backend label (``launcher_backend``), else by the
    transport family (Gloo, MPI, NCCL).
    """
    require_columns(cost, ("run_id", "config_backend", "n_ranks", "sync_median_s"), "sync_prediction_error")
    held = {int(x) for x in fit_rank_counts}
    runs_i = runs if "run_id" not in runs.columns else runs.set_index("run_id")
    rows = []
    for r in cost[cost["n_ranks"] >= 2].itertuples(index=False):
        label = str(r.config_backend).split("_")[0] if r.config_backend is not None else ""
        fits = links[links.get("launcher_backend", pd.Series(index=links.index, dtype=object)) == label]
        if fits.empty:
            fam = _CONTROLLER.get(label, label.split("-")[-1])
            fits = links[links["backend"].map(lambda b, fam=fam: _CONTROLLER.get(str(b), str(b)) == fam)]
        if fits.empty or r.run_id not in runs_i.index:
            continue
        meta = runs_i.loc[r.run_id]
        n_params = meta.get("n_params")
        if n_params is None or pd.isna(n_params):
            continue
        n_nodes = meta.get("n_nodes")
        n_nodes = int(n_nodes) if n_nodes is not None and not pd.isna(n_nodes) else 1
        nbytes = float(n_params) * 4
        bench_backend = str(fits["backend"].iloc[0])
        fits = fits[fits["backend"] == bench_backend]
        pred = allreduce_time(fits, n_ranks=[int(r.n_ranks)], nbytes=nbytes,
                              ranks_per_node=-(-int(r.n_ranks) // n_nodes), model=model).iloc[0]
        meas = float(r.sync_median_s)
        rows.append({"run_id": r.run_id, "config_backend": r.config_backend, "bench_backend": bench_backend,
                     "n_ranks": int(r.n_ranks), "n_nodes": n_nodes, "model": pred["model"], "bytes_per_sync": nbytes,
                     "sync_measured_s": meas, "sync_min_measured_s": float(getattr(r, "sync_min_s", np.nan)),
                     "sync_pred_s": float(pred["pred_s"]),
                     "error_frac": (float(pred["pred_s"]) - meas) / meas if meas > 0 else np.nan,
                     "held_out": int(r.n_ranks) not in held})
    return pd.DataFrame(rows, columns=["run_id", "config_backend", "bench_backend", "n_ranks", "n_nodes", "model",
                                       "bytes_per_sync", "sync_measured_s", "sync_min_measured_s", "sync_pred_s",
                                       "error_frac", "held_out"])
