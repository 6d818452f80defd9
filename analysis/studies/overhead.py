"""Study 4: the framework overhead at one rank."""

from __future__ import annotations

from analysis import metrics as M
from analysis import plots as P
from analysis.studies._base import (
    Context,
    Section,
    Skip,
    baseline_text,
    config_by,
)


def study_overhead(ctx: Context) -> Section:
    sec = Section(intro="Time per sample of the one-rank Horovod / DDP run against the run without a framework "
                  "(overhead = t(framework, 1 rank) / t(baseline) - 1, means over repeats, 95 % interval over "
                  "both sides' repeats).")
    pr = ctx.per_run
    if not (pr["framework"] == "none").any():
        raise Skip("needs a baseline run without a framework (framework 'none')")
    if not ((pr["framework"] != "none") & (pr["n_ranks"] == 1)).any():
        raise Skip("needs a one-rank run with a framework")
    t = M.framework_overhead(pr, by=tuple(c for c in config_by(ctx) if c not in ("batch_size", "inject")))
    t = t[t["n_baseline_runs"] > 0]
    if t.empty:
        raise Skip("no one-rank framework run has a baseline with the same batch size")
    sec.notes.append(f"Baseline: {baseline_text(ctx)}.")
    sec.figures.append(("overhead", P.plot_overhead(t)))
    sec.tables.append(("overhead", t, "overhead_frac_verdict: is the overhead distinguishable from 0 (run-to-run "
                                      "noise)."))
    return sec
