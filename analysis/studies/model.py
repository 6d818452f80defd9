"""Study 9: the alpha-beta allreduce what-if model."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import metrics as M
from analysis import plots as P
from analysis.errors import ScalescopeError
from analysis.studies._base import (
    Context,
    Section,
    Skip,
    sync_cost,
    usable_runs,
)


def study_model(ctx: Context) -> Section:
    sec = Section(intro="t(N) = 2(N-1)·alpha + 2(N-1)/N · bytes/beta fitted to the measured sync_total per step; "
                  "predictions at unmeasured rank counts assume constant compute per sample.")
    cost, per_run, runs, group = _one_group(ctx)
    try:
        w = M.what_if(cost, per_run, runs)
    except ScalescopeError as exc:
        raise Skip(str(exc)) from None
    if group:
        sec.notes.append(f"Modelled: {group} (one group of the grouping rule; the others are not pooled into it).")
    cfg = w["config"].iloc[0]
    sec.figures.append(("model", P.plot_model(w["measured"], w["prediction"], measured_speedup=w["measured_speedup"])))
    sec.tables.append(("model_fit", w["fit"], f"{cfg.config_backend}; bytes per sync = n_params × 4 = "
                                              f"{cfg.bytes_per_sync:.0f}."))
    sec.tables.append(("model_prediction", w["prediction"], "Predicted at measured and unmeasured rank counts."))
    _latency_note(sec, w["fit"].iloc[0], w["measured"])
    _models_side_by_side(sec, w)
    _bench_models(ctx, sec)
    return sec


def _one_group(ctx: Context) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, str]:
    """The sync costs, runs summary and runs of the one group (the axes the runs differ on,
    :func:`analysis.metrics.grouping.study_axes`) with the most multi-rank runs: the model is
    fitted to one experiment, partition and swept value, never to a pool of them."""
    cost, pr, runs = sync_cost(ctx), ctx.per_run, usable_runs(ctx)
    axes = [c for c in M.study_axes(pr) if c in runs.columns]
    if not axes:
        return cost, pr, runs, ""
    key = runs[["run_id", *axes]].astype(object).where(runs[["run_id", *axes]].notna(), "–")
    key = key.assign(_g=key[axes].astype(str).agg(" · ".join, axis=1))[["run_id", "_g"]]
    multi = runs.loc[runs["n_ranks"] > 1, "run_id"]
    counts = key[key["run_id"].isin(multi)]["_g"].value_counts()
    if counts.empty:
        return cost, pr, runs, ""
    ids = set(key.loc[key["_g"] == counts.index[0], "run_id"].astype(str))

    def keep(df: pd.DataFrame) -> pd.DataFrame:
        return df[df["run_id"].astype(str).isin(ids)]

    return keep(cost), keep(pr), keep(runs), f"{', '.join(axes)} = {counts.index[0]}"


def _latency_note(sec: Section, fit, measured) -> None:
    """Say when the fit had too few points to estimate the latency (alpha fixed at 0)."""
    counts = sorted(int(n) for n in measured.loc[measured["n_ranks"] >= 2, "n_ranks"].unique())
    if bool(fit["alpha_fixed"]):
        sec.notes.append(f"Too few points to estimate the latency: the sync times come from one rank count >= 2 "
                         f"({', '.join(map(str, counts))}), which fixes only one combination of alpha and beta. "
                         "alpha is set to 0 and beta fitted, so every prediction is an optimistic (latency-free) "
                         "bound; runs at two or more rank counts >= 2 (e.g. --np 2,4) estimate alpha.")
    elif fit["n_points"] < 3:
        sec.notes.append(f"The fit has {int(fit['n_points'])} points: alpha and beta are determined but carry no "
                         "standard error (3 or more points give one).")


def _models_side_by_side(sec: Section, w: dict) -> None:
    """The fitted alpha and beta put into the one-shot, ring, tree and two-level models (one
    node: the two-level model is the ring; bench-allreduce fits an inter-node link too)."""
    f = w["fit"].iloc[0]
    links = pd.DataFrame({"link_class": ["intra-node"], "alpha_s": [f["alpha_s"]],
                          "beta_bytes_per_s": [f["beta_bytes_per_s"]]})
    grid = sorted({int(n) for n in w["prediction"]["n_ranks"]})
    models = M.allreduce_models(links, n_ranks=grid, nbytes=float(f["bytes_per_sync"]))
    sec.figures.append(("allreduce_models", P.plot_allreduce_models(models, measured=w["measured"])))
    sec.tables.append(("allreduce_models_fit", models, "The fitted alpha and beta in each allreduce model "
                                                       "(docs/metrics.md, \"Allreduce models\"); one node, so "
                                                       "two-level = ring."))


def _bench_models(ctx: Context, sec: Section) -> None:
    """Tables of ``scalescope bench-allreduce --out <experiment>/bench`` when it was run."""
    from analysis import bench
    from analysis.metrics.model import sync_prediction_error

    paths = ctx.rs.runs["path"].dropna()
    dirs = sorted({Path(p).parent / "bench" for p in paths if (Path(p).parent / "bench" / "allreduce.csv").is_file()})
    if not dirs:
        sec.notes.append("No allreduce micro-benchmark (run `scalescope bench-allreduce --out <experiment>/bench`) "
                         "for the ring and two-level models.")
        return
    tables = bench.summarize(dirs[0], write=False)
    df = bench.read_bench(dirs[0])
    sec.tables.append(("allreduce_fit", tables["fit"], "bench-allreduce: alpha and beta per backend and link class "
                                                       "(95 % CIs)."))
    sec.tables.append(("allreduce_models", tables["prediction"], "Gradient allreduce time by the one-shot, flat "
                                                                 "ring, tree and two-level models."))
    few = tables["fit"][tables["fit"]["n_points"] < 3]
    for r in few.itertuples():
        sec.notes.append(f"bench-allreduce {r.backend} {r.link_class}: {r.n_points} point(s), too few for an interval "
                         "on alpha and beta (3 or more sizes × rank counts give one).")
    try:
        err = sync_prediction_error(tables["fit"], sync_cost(ctx), usable_runs(ctx),
                                    fit_rank_counts=sorted(int(n) for n in df["n_ranks"].unique()))
    except Skip:
        return
    if len(err):
        sec.tables.append(("allreduce_model_error", err, "Measured sync per step against the model "
                                                        "(model = the one used); held_out = rank count not benchmarked."))
