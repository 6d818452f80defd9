""""Why not ideal?": the gap to ideal split into causes."""

from __future__ import annotations

import pandas as pd

from analysis import metrics as M
from analysis import plots as P
from analysis.errors import ScalescopeError
from analysis.metrics.timesource import explain_source
from analysis.studies._base import (
    Context,
    Section,
    Skip,
    baseline_match,
    baseline_text,
    config_by,
    grouped,
    level,
    thread_notes,
    usable_runs,
)


def _loss(ctx: Context) -> tuple[pd.DataFrame, str]:
    def make():
        runs = usable_runs(ctx)
        pr = ctx.per_run
        measured = pr[pr["time_per_sample_s"].notna()] if "time_per_sample_s" in pr else None
        if measured is not None and measured.empty:
            measured = None
        ev = ctx.all_events() if measured is None else None  # the events only where nothing was measured
        kw = {"by": tuple(c for c in config_by(ctx) if c != "inject"), "match": baseline_match(ctx),
              "epochs": ctx.rs.epochs, "measured": measured, "warmup": ctx.warmup, "confidence": ctx.confidence}
        if ctx.baseline != "min":
            try:
                return M.scaling_loss(ev, runs, **kw), baseline_text(ctx)
            except ScalescopeError as exc:
                if "no baseline runs" not in str(exc) or ctx.baseline == "none":
                    raise Skip(str(exc)) from None
        try:
            return M.scaling_loss(ev, runs, baseline="min", **kw), (
                "each configuration's one-rank run (no baseline without a framework: framework overhead not "
                "separated)")
        except ScalescopeError as exc:
            raise Skip(str(exc)) from None

    return ctx.memo("loss", make)


def study_why(ctx: Context) -> Section:
    sec = Section(intro="With a fixed batch per rank, a step at n ranks should take as long as a step of the one-process "
                  "baseline. The gap between the measured and that ideal step time is split into causes that sum "
                  "to it: the framework's overhead at one rank, exposed gradient synchronisation, waiting for the "
                  "slowest rank, data loading, CPU contention (compute grown where the cores are oversubscribed), "
                  "compute grown against the one-rank run, and the rest (docs/metrics.md, \"Why not ideal?\"). "
                  f"Means per full step over ranks and repeats, warm-up dropped; {level(ctx)} intervals over the repeats of "
                  "every side, the baseline included; a cause is named only when it is distinguishable from noise.")
    loss, base = _loss(ctx)
    sec.notes.append(f"Ideal: {base}; reference for the one-rank overhead: {loss.attrs.get('reference')}. "
                     f"Unit: {loss.attrs.get('unit')}.")
    sec.notes.extend(loss.attrs.get("notes", []))
    sec.notes.extend(thread_notes(ctx))
    sec.notes.extend(explain_source(loss, ctx.event_table("between_steps")))
    sec.notes.extend(M.explain_loss(loss))
    multi = loss[loss["n_ranks"] > 1]
    if multi.empty:
        sec.notes.append("Every configuration ran at one rank only: only the framework overhead can be shown.")
    else:
        sec.figures.append(("why_waterfall", P.plot_scaling_loss(loss)))
    sec.figures.append(("why_lost_speedup", P.plot_lost_speedup(loss)))
    drop = [c for c in loss.columns if c.endswith("_share") or (c.endswith(("_ci_low", "_ci_high"))
                                                               and not c.startswith(("gap_s", "efficiency")))]
    t = loss.drop(columns=drop)
    t = t[[c for c in t.columns if not (t[c].isna().all() and c in ("outliers", "slowest_tied", "contention_evidence",
                                                                     "unreliable", "threads_differ"))]]
    sec.tables.append(("why_not_ideal", t, grouped(config_by(ctx), "Seconds per full step; causes sum to gap_s; "
                                                               "efficiency = ideal_step_s / measured_step_s; X_verdict: "
                                                               "cause X against 0 (efficiency: against 1).")))
    w = ctx.event_table("warmup")
    if len(w):
        dropped = int(w["n_warmup"].sum())
        sec.notes.append(f"Warm-up (rule 'auto': until the step time settles, docs/metrics.md): {dropped} of "
                         f"{int(w['n_steps'].sum())} steps dropped over {len(w)} rank(s), {w['warmup_s'].sum():.3g} s; "
                         "every study drops the same steps.")
        sec.tables.append(("warmup", w, "Steps dropped as warm-up per run and rank."))
    return sec
