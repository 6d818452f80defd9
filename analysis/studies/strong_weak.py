"""Study 12: strong and weak scaling."""

from __future__ import annotations

import pandas as pd

from analysis import metrics as M
from analysis import plots as P
from analysis.errors import ScalescopeError
from analysis.studies._base import (
    MODE_WORDS,
    Context,
    Section,
    Skip,
    runs_mode,
    usable_runs,
)


def study_strong_weak(ctx: Context) -> Section:
    sec = Section(intro="Strong scaling keeps the dataset fixed, so the ideal epoch time falls as T(n0)·n0/n; weak "
                  "scaling (scalescope sweep --scaling weak) grows the dataset with the ranks, so the ideal epoch "
                  "time stays T(n0). Speedup (the throughput ratio) and efficiency are the same numbers as in the "
                  "Summary in both modes; only the ideal epoch time differs.")
    pr = ctx.per_run
    mode, warn = runs_mode(ctx)
    sec.notes.extend(f"Warning: {w}" for w in warn)
    if "scaling" in pr.columns:
        modes, _ = M.scaling_mode(usable_runs(ctx), ctx.rs.epochs, by=("config_backend", "batch_size"))
        done = pd.Series([modes.get((b, s)) for b, s in zip(pr["config_backend"], pr["batch_size"], strict=True)],
                         index=pr.index)
        # every study uses the mode the runs did: the detected one where it is strong or weak
        pr = pr.assign(scaling=done.where(done.isin(["strong", "weak"]), pr["scaling"]))
    if "scaling" not in pr.columns or (pr["scaling"] == "weak").sum() == 0:
        raise Skip("no weak-scaling runs (scalescope sweep --scaling weak); the runs did "
                   + MODE_WORDS.get(mode, mode))
    try:
        t = M.strong_weak_table(pr)
    except ScalescopeError as exc:
        raise Skip(str(exc)) from None
    sec.figures.append(("strong_weak", P.plot_strong_weak(t[t["framework"] != "none"])))
    sec.tables.append(("strong_weak", t, "Epoch time, each mode's ideal, speedup and efficiency."))
    return sec
