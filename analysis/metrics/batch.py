"""Batch size and learning rate (study 7)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import pandas as pd

from analysis.errors import ScalescopeError
from analysis.metrics._common import require_columns
from analysis.schema import MACHINE_AXES


def scaled_learning_rate(
    base_lr: float, *, base_batch_size: int, batch_size: int, rule: Literal["linear", "sqrt", "none"] = "linear"
) -> float:
    """Learning rate for a (global) batch size from one tuned at another.

    Notes
    -----
    linear: lr = base_lr · B/B0 (Goyal et al. 2017, "Accurate, Large Minibatch SGD");
    sqrt: lr = base_lr · sqrt(B/B0) (Krizhevsky 2014, "One weird trick"); none: base_lr.

    Examples
    --------
    >>> scaled_learning_rate(0.1, base_batch_size=32, batch_size=128)
    0.4
    >>> scaled_learning_rate(0.1, base_batch_size=32, batch_size=128, rule="sqrt")
    0.2
    """
    if base_batch_size <= 0 or batch_size <= 0:
        raise ScalescopeError("batch sizes must be positive")
    ratio = batch_size / base_batch_size
    if rule == "linear":
        return base_lr * ratio
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    if rule == "none":
        return base_lr
    raise ScalescopeError(f"rule must be 'linear', 'sqrt' or 'none', not {rule!r}")


def batch_size_epoch_time(per_run: pd.DataFrame, *, n_ranks: int = 1, by: Sequence[str] = ("config_backend",)) -> pd.DataFrame:
    """Epoch time and throughput against the per-rank batch size at a fixed rank count.

    Returns
    -------
    pandas.DataFrame
        One row per (configuration, ``batch_size``): ``n_runs``, ``epoch_time_s`` (median),
        ``epoch_time_min_s``, ``epoch_time_max_s``, ``throughput_samples_per_s`` (median).
    """
    require_columns(per_run, ("n_ranks", "batch_size", "epoch_time_s", "throughput_samples_per_s", *by),
                    "batch_size_epoch_time")
    t = per_run[per_run["n_ranks"] == n_ranks]
    return (
        t.groupby([*by, "batch_size"], sort=True, dropna=False)
        .agg(n_runs=("epoch_time_s", "size"), epoch_time_s=("epoch_time_s", "median"),
             epoch_time_min_s=("epoch_time_s", "min"), epoch_time_max_s=("epoch_time_s", "max"),
             throughput_samples_per_s=("throughput_samples_per_s", "median"))
        .reset_index()
    )


def batch_by_ranks(per_run: pd.DataFrame, *, by: Sequence[str] = ("config_backend",)) -> pd.DataFrame:
    """Epoch time and time per sample against the per-rank batch size at every rank count
    (the reference's batch study at 1, 2, 4, 8 GPUs).

    Returns
    -------
    pandas.DataFrame
        :func:`batch_size_epoch_time` of each rank count stacked, with ``n_ranks``,
        ``global_batch_size`` (median) and ``time_per_sample_s`` (mean over the runs, one
        rank's time per sample, where ``per_run`` has it).

    Examples
    --------
    >>> pr = pd.DataFrame({"config_backend": "ddp", "n_ranks": [1, 1, 2], "batch_size": [75, 150, 75],
    ...                    "global_batch_size": [75, 150, 150], "epoch_time_s": [4.0, 2.5, 2.2],
    ...                    "throughput_samples_per_s": [250.0, 400.0, 450.0]})
    >>> t = batch_by_ranks(pr)
    >>> list(zip(t["n_ranks"], t["batch_size"], t["epoch_time_s"]))
    [(1, 75, 4.0), (1, 150, 2.5), (2, 75, 2.2)]
    """
    parts = []
    for n in sorted(per_run["n_ranks"].dropna().unique()):
        t = batch_size_epoch_time(per_run, n_ranks=n, by=by)
        one = per_run[per_run["n_ranks"] == n]
        keys = [*by, "batch_size"]
        extra = {"global_batch_size": ("global_batch_size", "median")} if "global_batch_size" in one else {}
        if "time_per_sample_s" in one:
            extra["time_per_sample_s"] = ("time_per_sample_s", "mean")
        if extra:
            t = t.merge(one.groupby(keys, sort=True, dropna=False).agg(**extra).reset_index(), on=keys, how="left")
        parts.append(t.assign(n_ranks=int(n)))
    cols = [*by, "n_ranks"]
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=[*cols, "batch_size"])
    return out[[*cols, *(c for c in out.columns if c not in cols)]]


def validation_curves(epochs: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Validation metric and loss against epochs and against wall time, per run.

    Parameters
    ----------
    epochs
        Per-rank epoch metrics (``RunSet.epochs``).
    runs
        Runs table (``run_id``, ``batch_size``, ``global_batch_size``, ``n_ranks``,
        ``config_backend``, ``learning_rate``).

    Returns
    -------
    pandas.DataFrame
        One row per (run, epoch): run metadata (incl. ``lr_scaling`` and ``repeat``), ``epoch``, ``epoch_time_s`` (slowest rank),
        ``wall_s`` (cumulative training time at the end of the epoch), ``val_metric``,
        ``val_loss``, ``train_loss`` (rank 0's values, the ones a user would log).

    Notes
    -----
    wall_s(e) = sum over epochs up to e of max over ranks of epoch_time_s (evaluation is
    inside the epoch when the training script times it so).
    """
    require_columns(epochs, ("run_id", "rank", "epoch", "epoch_time_s", "val_metric", "val_loss", "train_loss"),
                    "validation_curves")
    e = epochs.assign(run_id=epochs["run_id"].astype(object))
    times = e.groupby(["run_id", "epoch"], sort=True)["epoch_time_s"].max().rename("epoch_time_s")
    first_rank = e.groupby("run_id")["rank"].transform("min")
    vals = e[e["rank"] == first_rank].set_index(["run_id", "epoch"])[["val_metric", "val_loss", "train_loss"]]
    out = pd.concat([times, vals], axis=1).reset_index()
    out["wall_s"] = out.groupby("run_id")["epoch_time_s"].cumsum()
    meta = [c for c in ("run_id", "experiment", *MACHINE_AXES, "gpu_model", "scaling", "config_backend", "n_ranks",
                        "batch_size", "global_batch_size", "learning_rate", "lr_scaling", "repeat") if c in runs.columns]
    meta += [c for c in runs.columns if str(c).startswith("vary_") and c not in meta]
    out = runs[meta].merge(out, on="run_id", how="inner")
    return out


def batch_speedup(per_run: pd.DataFrame, *, reference_batch: int = 75, n_ranks: int = 1,
                  by: Sequence[str] = ("config_backend",)) -> pd.DataFrame:
    """Epoch-time speedup of each per-rank batch size over the reference batch at one rank count.

    Returns
    -------
    pandas.DataFrame
        :func:`batch_size_epoch_time` plus ``reference_epoch_time_s`` and ``speedup``
        (NaN for a configuration without a run at ``reference_batch``).

    Notes
    -----
    speedup(B) = t̄(B_ref) / t̄(B) with t̄ the mean time per sample over repeats (outliers left
    out: the one definition of ``docs/metrics.md``; the time per sample then is a column too)
    when ``per_run`` has ``time_per_sample_s``, else T(B_ref) / T(B) with T the median epoch
    time over repeats. The reference study's B_ref is 75 (its single-GPU batch).

    Examples
    --------
    >>> pr = pd.DataFrame({"config_backend": "none", "n_ranks": 1, "batch_size": [75, 150],
    ...                    "epoch_time_s": [4.0, 2.5], "throughput_samples_per_s": [250.0, 400.0]})
    >>> batch_speedup(pr)["speedup"].tolist()
    [1.0, 1.6]
    """
    t = batch_size_epoch_time(per_run, n_ranks=n_ranks, by=by)
    ref = t[t["batch_size"] == reference_batch].set_index(list(by))["epoch_time_s"]
    keys = t.set_index(list(by)).index
    t["reference_epoch_time_s"] = keys.map(ref).to_numpy(float) if len(ref) else float("nan")
    t["speedup"] = t["reference_epoch_time_s"] / t["epoch_time_s"]
    if "time_per_sample_s" in per_run and per_run["time_per_sample_s"].notna().any():
        from analysis.metrics.scaling import outlier_reasons, unit_time

        pr = per_run[per_run["n_ranks"] == n_ranks].reset_index(drop=True)
        pr["_t"] = unit_time(pr, "strong")
        pr = pr[outlier_reasons(pr, [*by, "batch_size"], pr["_t"]).isna().to_numpy()]
        # merged, not looked up: a group's missing value (no --vary) is a key like any other
        tps = pr.groupby([*by, "batch_size"], dropna=False)["_t"].mean().rename("time_per_sample_s").reset_index()
        t = t.drop(columns=["time_per_sample_s"], errors="ignore").merge(tps, on=[*by, "batch_size"], how="left")
        tref = (t.loc[t["batch_size"] == reference_batch, [*by, "time_per_sample_s"]]
                .rename(columns={"time_per_sample_s": "_tref"}))
        t = t.merge(tref, on=list(by), how="left") if by else t.assign(_tref=tref["_tref"].mean())
        t["speedup"] = t.pop("_tref") / t["time_per_sample_s"]
    return t


def equal_batch_comparison(per_run: pd.DataFrame, *, final: pd.DataFrame | None = None,
                           by: Sequence[str] = ()) -> pd.DataFrame:
    """Runs with the same global batch size reached differently (1 rank x 150 against
    2 ranks x 75): epoch time, throughput and, when given, the final validation loss.

    Parameters
    ----------
    per_run
        :func:`analysis.metrics.scaling.run_summary`.
    final
        Optional :func:`final_losses` (``run_id``, ``final_val_loss``).
    by
        Axes that keep runs apart (:func:`analysis.metrics.grouping.study_axes`): the
        comparison is made within each of their groups, never across.

    Returns
    -------
    pandas.DataFrame
        One row per (``global_batch_size``, ``n_ranks``, ``batch_size``, ``config_backend``,
        ``lr_scaling``) whose global batch was run with at least two rank counts:
        ``n_runs``, ``epoch_time_s`` (median), ``throughput_samples_per_s`` (median),
        ``final_val_loss`` (median; NaN without ``final``), ``relative_epoch_time``
        (epoch time / that of the fewest ranks with the same global batch and LR rule).
    """
    keys = [c for c in (*by, "global_batch_size", "n_ranks", "batch_size", "config_backend", "lr_scaling")
            if c in per_run.columns]
    require_columns(per_run, ("global_batch_size", "n_ranks", "epoch_time_s", "throughput_samples_per_s"),
                    "equal_batch_comparison")
    pr = per_run
    if final is not None:
        pr = pr.merge(final[["run_id", "final_val_loss"]], on="run_id", how="left")
    else:
        pr = pr.assign(final_val_loss=float("nan"))
    multi = pr.groupby([*by, "global_batch_size"], dropna=False)["n_ranks"].transform("nunique") > 1
    out = (pr[multi].groupby(keys, sort=True, dropna=False)
           .agg(n_runs=("epoch_time_s", "size"), epoch_time_s=("epoch_time_s", "median"),
                throughput_samples_per_s=("throughput_samples_per_s", "median"),
                final_val_loss=("final_val_loss", "median"))
           .reset_index())
    if out.empty:
        return out.assign(relative_epoch_time=pd.Series(dtype=float))
    ref_keys = [c for c in (*by, "global_batch_size", "lr_scaling") if c in out.columns]
    fewest = out[out["n_ranks"] == out.groupby(ref_keys, dropna=False)["n_ranks"].transform("min")]
    ref = fewest.groupby(ref_keys, dropna=False)["epoch_time_s"].median()
    out["relative_epoch_time"] = out["epoch_time_s"].to_numpy() / ref.reindex(
        pd.MultiIndex.from_frame(out[ref_keys]) if len(ref_keys) > 1 else out[ref_keys[0]]).to_numpy()
    return out


def final_losses(curves: pd.DataFrame) -> pd.DataFrame:
    """Each run's last validation loss and its total training time (:func:`validation_curves`).

    Returns
    -------
    pandas.DataFrame
        One row per run: ``final_epoch``, ``final_val_loss``, ``train_time_s`` (``wall_s`` at the end).
    """
    require_columns(curves, ("run_id", "epoch", "val_loss", "wall_s"), "final_losses")
    last = curves.sort_values("epoch").groupby("run_id", sort=True).tail(1)
    return last[["run_id", "epoch", "val_loss", "wall_s"]].rename(
        columns={"epoch": "final_epoch", "val_loss": "final_val_loss", "wall_s": "train_time_s"}
    ).sort_values("run_id").reset_index(drop=True)


#: Columns that tell learning-rate configurations apart in :func:`lr_rule_curves`.
LR_KEYS: tuple[str, ...] = ("lr_scaling", "config_backend", "n_ranks", "batch_size", "global_batch_size")


def lr_rule_curves(curves: pd.DataFrame, *, metric: str = "val_loss",
                   by: Sequence[str] = LR_KEYS, complete_only: bool = True) -> pd.DataFrame:
    """Validation loss per epoch for each learning-rate rule (none/linear/sqrt) and
    configuration, repeats combined.

    Returns
    -------
    pandas.DataFrame
        One row per (``by``, ``epoch``): ``n_runs``, ``<metric>_median``, ``<metric>_min``,
        ``<metric>_max`` and ``wall_s_median`` (training time at the end of that epoch,
        median over repeats; the x of the loss-against-time curve).

    Notes
    -----
    Repeats stopped by a time budget (``--time-budget``) reach different epochs. With
    ``complete_only`` (default) a configuration's curve ends at the last epoch every repeat
    reached, so its median time grows with the epoch; otherwise later epochs hold the repeats
    that got there (``n_runs`` drops).
    """
    by = [c for c in by if c in curves.columns]
    require_columns(curves, ("run_id", "epoch", "wall_s", metric), "lr_rule_curves")
    c = curves.dropna(subset=[metric])
    if complete_only and len(c):
        key = pd.Series([str(k) for k in c[by].itertuples(index=False, name=None)] if by else "all", index=c.index)
        last = c.groupby("run_id")["epoch"].transform("max")
        c = c[c["epoch"] <= last.groupby(key).transform("min")]
    return (c.groupby([*by, "epoch"], sort=True, dropna=False)
            .agg(n_runs=("run_id", "nunique"), **{f"{metric}_median": (metric, "median"),
                                                  f"{metric}_min": (metric, "min"),
                                                  f"{metric}_max": (metric, "max")},
                 wall_s_median=("wall_s", "median"))
            .reset_index())


def time_to_target(curves: pd.DataFrame, *, target: float, metric: str = "val_loss",
                   by: Sequence[str] = LR_KEYS) -> pd.DataFrame:
    """Training time until the validation loss first reaches ``target``, per configuration.

    Returns
    -------
    pandas.DataFrame
        One row per ``by`` group: ``target``, ``n_runs``, ``n_reached``,
        ``time_to_target_s`` (median over the repeats that reached it), ``time_to_target_min_s``,
        ``time_to_target_max_s``, ``epochs_to_target`` (median).

    Notes
    -----
    time_to_target = ``wall_s`` at the end of the first epoch with ``metric <= target``
    (:func:`validation_curves`); epochs_to_target = the number of epochs the run had trained
    by then (1: the target was reached in its first epoch), as the reference counts them,
    whether the script numbers its epochs from 0 or from 1. Runs that never reach it count
    in ``n_runs`` only.

    Examples
    --------
    >>> c = pd.DataFrame({"run_id": ["a", "a", "b", "b"], "lr_scaling": "none", "epoch": [0, 1, 0, 1],
    ...                   "wall_s": [1.0, 2.0, 1.5, 3.0], "val_loss": [0.2, 0.05, 0.3, 0.2]})
    >>> time_to_target(c, target=0.1)[["n_runs", "n_reached", "time_to_target_s", "epochs_to_target"]].values.tolist()
    [[2.0, 1.0, 2.0, 2.0]]
    """
    by = [c for c in by if c in curves.columns]
    require_columns(curves, ("run_id", "epoch", "wall_s", metric), "time_to_target")
    c = curves.sort_values(["run_id", "epoch"])
    c = c.assign(_trained=c.groupby("run_id").cumcount() + 1)  # epochs trained, however the script numbers them
    hit = c[c[metric] <= target].groupby("run_id").head(1).set_index("run_id")
    per_run = c.groupby("run_id").head(1)[["run_id", *by]].copy()
    per_run["t"] = per_run["run_id"].map(hit["wall_s"])
    per_run["e"] = per_run["run_id"].map(hit["_trained"])
    groups = per_run.groupby(by, sort=True, dropna=False) if by else [((), per_run)]
    rows = []
    for key, g in groups:
        row = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=False))
        row.update(target=target, n_runs=len(g), n_reached=int(g["t"].notna().sum()),
                   time_to_target_s=g["t"].median(), time_to_target_min_s=g["t"].min(),
                   time_to_target_max_s=g["t"].max(), epochs_to_target=g["e"].median())
        rows.append(row)
    return pd.DataFrame(rows)
