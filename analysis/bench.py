"""Analysis of ``scalescope bench-allreduce`` results: alpha-beta per link class, the ring
and two-level allreduce models, and their error against a sweep's measured synchronisation.

>>> from analysis import bench
>>> tables = bench.summarize("runs/EXP/bench", experiment="runs/EXP")   # doctest: +SKIP
>>> tables["fit"], tables["prediction"], tables["error"]                 # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from analysis import atomic
from analysis.errors import ReadError, ScalescopeError
from analysis.metrics import model as M

#: Rank counts predicted besides the measured ones.
PREDICT_RANKS = (2, 4, 8, 16, 32, 64)
#: Ranks per node assumed for the multi-node predictions (a common GPU node).
RANKS_PER_NODE = 8


def read_bench(bench_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """``<bench_dir>/allreduce.csv`` as a frame (a clear error when it is missing or empty)."""
    f = Path(bench_dir) / "allreduce.csv"
    if not f.is_file():
        raise ReadError(f, "not found: run `scalescope bench-allreduce --out DIR` first")
    df = pd.read_csv(f)
    missing = {"backend", "link_class", "n_ranks", "bytes", "time_s"} - set(df.columns)
    if missing:
        raise ReadError(f, f"missing columns {sorted(missing)}: not a bench-allreduce result")
    if df.empty:
        raise ReadError(f, "holds no timing (every launch failed? see bench.json)")
    return df


def predictions(fit: pd.DataFrame, *, nbytes: float, n_ranks=PREDICT_RANKS,
                ranks_per_node: int = RANKS_PER_NODE) -> pd.DataFrame:
    """Per backend, the allreduce time of ``nbytes`` by each model of
    :data:`analysis.metrics.model.ALLREDUCE_MODELS` (one-shot, ring, tree, two-level).

    Returns
    -------
    pandas.DataFrame
        ``backend``, ``n_ranks``, ``n_nodes``, ``ranks_per_node``, ``model``, ``pred_s``,
        ``note`` (why a prediction is missing, e.g. no inter-node fit).
    """
    out = []
    for backend, links in fit.groupby("backend", sort=True):
        for model in M.ALLREDUCE_MODELS:
            p = M.allreduce_time(links, n_ranks=n_ranks, nbytes=nbytes, ranks_per_node=ranks_per_node, model=model)
            p.insert(0, "backend", backend)
            out.append(p)
    return pd.concat(out, ignore_index=True)


def summarize(bench_dir: str | os.PathLike[str], *, experiment: str | os.PathLike[str] | None = None,
              write: bool = True) -> dict[str, pd.DataFrame]:
    """Fit, predictions and (with ``experiment``) the error against measured sync.

    Writes ``fit.csv``, ``prediction.csv`` and ``model_error.csv`` into ``bench_dir`` when
    ``write``. ``error`` is empty without an experiment (or when its runs hold no sync
    records); ``held_out`` marks runs at rank counts the bench did not measure.
    """
    import json

    bench_dir = Path(bench_dir)
    df = read_bench(bench_dir)
    fit = M.fit_link_alpha_beta(df)
    info = {}
    if (bench_dir / "bench.json").is_file():
        info = json.loads((bench_dir / "bench.json").read_text())
    grad = next((s["bytes"] for s in info.get("sizes", []) if "gradient" in s["label"]), None)
    nbytes = float(grad) if grad else float(df["bytes"].median())
    pred = predictions(fit, nbytes=nbytes)
    error = pd.DataFrame()
    if experiment is not None:
        error = _error(fit, experiment, fit_ranks=sorted(int(n) for n in df["n_ranks"].unique()))
    if write:  # each through a temporary file renamed into place (analysis.atomic)
        for name, frame in (("fit.csv", fit), ("prediction.csv", pred), ("model_error.csv", error)):
            with atomic.replacing(bench_dir / name) as tmp:
                frame.to_csv(tmp, index=False)
    return {"fit": fit, "prediction": pred, "error": error}


def _error(fit: pd.DataFrame, experiment: str | os.PathLike[str], *, fit_ranks: list[int]) -> pd.DataFrame:
    from analysis import metrics
    from analysis.runset import RunSet

    rs = RunSet.from_dirs(experiment)
    syncs = metrics.sync_times(rs.events)
    if syncs.empty:
        raise ScalescopeError(f"{experiment}: no synchronisation records to compare the models with")
    runs = rs.usable_runs()
    cost = metrics.sync_cost(syncs, runs=runs)
    return M.sync_prediction_error(fit, cost, runs, fit_rank_counts=fit_ranks)


def print_tables(tables: dict[str, pd.DataFrame]) -> None:
    """The tables as text (for the command line; backend and label names come from the
    benchmark's files: control characters shown escaped)."""
    from instrumentation.progress import printable

    lines = []
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.float_format", "{:.4g}".format):
        fit = tables["fit"]
        cols = ["backend", "link_class", "alpha_s", "alpha_ci_low_s", "alpha_ci_high_s", "beta_bytes_per_s",
                "beta_ci_low_bytes_per_s", "beta_ci_high_bytes_per_s", "n_points", "rank_counts", "rel_rmse_frac"]
        lines += ["alpha-beta fit per link class (95 % CIs):", fit[[c for c in cols if c in fit.columns]].to_string(index=False)]
        lines += ["\npredicted allreduce time of the gradient (ring vs two-level, 8 ranks per node beyond 8):",
                  tables["prediction"].to_string(index=False)]
        if len(tables["error"]):
            lines += ["\nmodel error against the sweep's measured sync per step (held_out: rank count not benchmarked):",
                      tables["error"].to_string(index=False)]
    print(printable("\n".join(lines)))
