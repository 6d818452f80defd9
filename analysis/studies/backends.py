"""Study 6: the backend comparison."""

from __future__ import annotations

import pandas as pd

from analysis import metrics as M
from analysis import plots as P
from analysis.studies._base import (
    Context,
    Section,
    Skip,
    comm_paths,
    need_distinct,
    sync_cost,
    usable_runs,
)


def _with_comm_path(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    paths = comm_paths(runs)
    if paths.empty:
        return table
    keys = [k for k in ("config_backend", "n_ranks", "n_nodes") if k in table.columns]
    paths = paths.astype({k: table[k].dtype for k in keys if k != "config_backend"}, errors="ignore")
    return table.merge(paths[[*keys, "comm_path"]].drop_duplicates(keys), on=keys, how="left")


def study_backends(ctx: Context) -> Section:
    sec = Section(intro="The same configurations with different communication backends / frameworks, within a node and "
                  "across nodes.")
    pr = ctx.per_run
    fw = pr[pr["framework"] != "none"]
    need_distinct(fw["config_backend"], 2, "two or more backends")
    try:
        sync = sync_cost(ctx)
    except Skip:
        sync = None
    t = _with_comm_path(M.backend_comparison(fw, sync=sync), usable_runs(ctx))
    shared = t.groupby(["batch_size", "n_ranks", "n_nodes"], dropna=False)["config_backend"].transform("nunique")
    if (shared < 2).all():
        raise Skip("no configuration (batch size, ranks, nodes) was run with two backends")
    sec.figures.append(("backends", P.plot_backends(t)))
    sec.tables.append(("backends", t, "relative_time = time per sample / the fastest backend's on the same "
                                      "configuration, with its 95 % interval; relative_time_verdict: is the "
                                      "difference from the fastest distinguishable from noise; comm_path = "
                                      "what the backend's communication used (NCCL logs, or the manifest)."))
    return sec
