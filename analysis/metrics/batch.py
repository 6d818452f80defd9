"""Batch size and learning rate (study 7)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import pandas as pd

from analysis.errors import ScalescopeError
from analysis.metrics._common import require_columns


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
        One row per (run, epoch): run metadata, ``epoch``, ``epoch_time_s`` (slowest rank),
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
    meta = [c for c in ("run_id", "config_backend", "n_ranks", "batch_size", "global_batch_size", "learning_rate")
            if c in runs.columns]
    out = runs[meta].merge(out, on="run_id", how="inner")
    return out
