"""Study 9: the alpha-beta allreduce what-if model."""

from __future__ import annotations

from pathlib import Path

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
    try:
        w = M.what_if(sync_cost(ctx), ctx.per_run, usable_runs(ctx))
    except ScalescopeError as exc:
        raise Skip(str(exc)) from None
    cfg = w["config"].iloc[0]
    sec.figures.append(("model", P.plot_model(w["measured"], w["prediction"], measured_speedup=w["measured_speedup"])))
    sec.tables.append(("model_fit", w["fit"], f"{cfg.config_backend}; bytes per sync = n_params × 4 = "
                                              f"{cfg.bytes_per_sync:.0f}."))
    sec.tables.append(("model_prediction", w["prediction"], "Predicted at measured and unmeasured rank counts."))
    _bench_models(ctx, sec)
    return sec


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
    sec.tables.append(("allreduce_models", tables["prediction"], "Gradient allreduce time by the flat ring and the "
                                                                 "two-level model (model = the one used)."))
    try:
        err = sync_prediction_error(tables["fit"], sync_cost(ctx), usable_runs(ctx),
                                    fit_rank_counts=sorted(int(n) for n in df["n_ranks"].unique()))
    except Skip:
        return
    if len(err):
        sec.tables.append(("allreduce_model_error", err, "Measured sync per step against the model "
                                                        "(model = the one used); held_out = rank count not benchmarked."))
