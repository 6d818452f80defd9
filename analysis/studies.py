"""The report's studies: each takes the loaded experiment (:class:`Context`) and returns a
:class:`Section` (intro, tables, figures, notes), or raises :class:`Skip` saying why the
experiment cannot support it. :data:`STUDIES` lists them in the report's order;
:mod:`analysis.report` loads the experiment, runs them, exports and renders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis import metrics as M
from analysis import plots as P
from analysis.errors import ScalescopeError
from analysis.metrics.timesource import explain_source
from analysis.runset import RunSet
from analysis.schema import MACHINE_AXES


class Skip(Exception):
    """A study cannot run on this experiment; the message says why."""


@dataclass
class Section:
    """One study in the report."""

    key: str = ""  # key and title come from STUDIES
    title: str = ""
    intro: str = ""
    figures: list[tuple[str, object]] = field(default_factory=list)
    tables: list[tuple[str, pd.DataFrame, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None


@dataclass
class Context:
    """The loaded experiment every study reads (:func:`analysis.report.load`), and the
    intermediate tables studies share (``memo``)."""

    rs: RunSet
    events: pd.DataFrame | None
    events_error: str | None
    per_run: pd.DataFrame
    cache: dict = field(default_factory=dict)

    def need_events(self) -> pd.DataFrame:
        if self.events is None:
            raise Skip(f"the run traces could not be read: {self.events_error}")
        return self.events

    def memo(self, key: str, fn: Callable[[], object]):
        if key not in self.cache:
            self.cache[key] = fn()
        return self.cache[key]


# ---------------------------------------------------------------- shared intermediate tables

def _runs(ctx: Context) -> pd.DataFrame:
    return ctx.rs.usable_runs()


def _breakdown(ctx: Context) -> pd.DataFrame:
    """The step breakdown of the kept full steps (the unit of every study, docs/metrics.md)."""
    def make():
        ev = ctx.need_events()
        b = M.time_breakdown(ev, level="step")
        if b.empty:
            raise Skip("no run has training-phase records (kind 'phase') in its traces")
        st = M.step_table(ev, runs=_runs(ctx), epochs=ctx.rs.epochs)
        full = st.loc[st["full"], ["run_id", "rank", "epoch", "step"]]
        return b.merge(full, on=["run_id", "rank", "epoch", "step"], how="inner")

    return ctx.memo("breakdown", make)


def _breakdown_by_ranks(ctx: Context) -> pd.DataFrame:
    """Step-time shares per configuration (:func:`_config_by`: batch sizes never pooled) and
    rank count."""
    def make():
        runs = _runs(ctx)
        return M.breakdown_by_ranks(_breakdown(ctx), runs, by=tuple(c for c in _config_by(ctx) if c in runs))

    return ctx.memo("breakdown_by_ranks", make)


def _axes(ctx: Context) -> tuple[str, ...]:
    """The placement axes (cluster, partition, GPU model) on which the usable runs differ:
    the scaling studies keep them apart (each with its own baseline)."""
    pr = ctx.per_run
    return tuple(c for c in (*MACHINE_AXES, "gpu_model") if c in pr.columns and pr[c].nunique() >= 2)


def _config_by(ctx: Context) -> tuple[str, ...]:
    """The columns that make a configuration in every scaling study: placement axes on
    which the runs differ, backend, batch size, and an injected delay where runs have one."""
    pr = ctx.per_run
    inject = ("inject",) if "inject" in pr.columns and pr["inject"].notna().any() else ()
    # a swept script option (--vary) makes configurations of its own; inject has its column
    swept = tuple(c for c in pr.columns if str(c).startswith("vary_") and c != "vary_inject"
                  and pr[c].nunique(dropna=True) >= 2)
    return (*_axes(ctx), "config_backend", "batch_size", *inject, *swept)


def _scaling(ctx: Context) -> tuple[pd.DataFrame, str]:
    def make():
        pr = ctx.per_run
        if pr.empty:
            raise Skip("no run has epoch metrics (rank-*.epochs.jsonl)")
        by = _config_by(ctx)
        if (pr["framework"] == "none").any():
            try:
                return M.scaling_table(pr, baseline="none", by=by), _baseline_text(ctx)
            except ScalescopeError:
                pass
        return M.scaling_table(pr, baseline="min", by=by), "each configuration's run with the fewest ranks"

    return ctx.memo("scaling", make)


def _mode(ctx: Context) -> tuple[str, list[str]]:
    """The scaling mode the runs did (one for every study) and the mismatch warnings."""
    def make():
        modes, notes = M.scaling_mode(_runs(ctx), ctx.rs.epochs, by=("config_backend", "batch_size"))
        found = sorted(set(modes.values())) or ["strong"]
        return (found[0] if len(found) == 1 else "mixed (" + ", ".join(found) + ")"), notes

    return ctx.memo("mode", make)


_MODE_WORDS = {
    "strong": "strong scaling (the samples per epoch stay the same in total across rank counts)",
    "weak": "weak scaling (the samples per rank per epoch stay the same across rank counts)",
    "throughput": "fixed iterations (no dataset): compared by throughput",
}


def _reporting_notes(ctx: Context, base: str) -> list[str]:
    """The reporting rules (docs/metrics.md): base case, mode, unit, summarisation, interval."""
    mode, warn = _mode(ctx)
    pr = ctx.per_run
    steps = "time_per_sample_s" in pr.columns and pr["time_per_sample_s"].notna().any()
    unit = ("full steps after warm-up (partial batches left out and counted in n_partial_steps)" if steps
            else "epochs (no step records): epoch time per sample")
    notes = [f"Base case: {base}. Ideal: the base case's time per sample on every rank (speedup n/n0, "
             f"efficiency 1).",
             f"Scaling mode from the runs: {_MODE_WORDS.get(mode, mode)}. Speedup = throughput ratio "
             "X(n)/X(n0) and efficiency = speedup · n0/n in every mode and every study.",
             f"Unit of work: {unit}. Summarised by the mean over repeats of each run's mean (outlier "
             "repeats left out and named); intervals: 95 % delta-method t intervals over the repeats of "
             "both sides, the baseline included (docs/metrics.md, \"Reporting rules\"); fewer than 3 repeats "
             "on a side: no interval, the individual runs are shown."]
    return [*notes, *(f"Warning: {w}" for w in warn)]


def _runs_table(ctx: Context) -> pd.DataFrame:
    """Each run's own speedup and efficiency against the baseline mean (the individual runs
    shown where fewer than 3 repeats allow no interval)."""
    pr = ctx.per_run
    by = _config_by(ctx)
    try:
        pts = M.run_speedups(pr, baseline="none" if (pr["framework"] == "none").any() else "min", by=by)
    except ScalescopeError:
        pts = M.run_speedups(pr, baseline="min", by=by)
    cols = [c for c in ("run_id", *by, "n_ranks", "repeat", "time_per_sample_s", "speedup", "efficiency_frac",
                        "outlier") if c in pts.columns]
    return pts[cols].sort_values([c for c in (*by, "n_ranks", "repeat") if c in pts.columns]).reset_index(drop=True)


def _sync(ctx: Context) -> pd.DataFrame:
    def make():
        s = M.sync_times(ctx.need_events(), keep_warmup=True)
        if s.empty:
            raise Skip("no gradient synchronisation records (no 'sync' phase or DDP comm-hook records)")
        return M.sync_cost(s, runs=_runs(ctx))

    return ctx.memo("sync", make)


def _multi(values: pd.Series, n: int, what: str) -> None:
    if values.nunique() < n:
        raise Skip(f"needs {what}; this experiment has {sorted(values.dropna().unique().tolist())}")


def _baseline_text(ctx: Context) -> str:
    """What the baseline runs were, from ``run.json`` ``baseline_kind``: a true no-framework
    run, or the framework at one process (a script that cannot run without it)."""
    runs = _runs(ctx)
    kinds = set(runs.loc[runs["framework"] == "none", "baseline_kind"].dropna()) if "baseline_kind" in runs else set()
    if "framework_one_process" in kinds:
        return ("the one-process run, which initialised its framework at one process (the script does not honour "
                "SCALESCOPE_FRAMEWORK=none): framework overhead at one rank is not separated from compute"
                + (" in some of them" if len(kinds) > 1 else ""))
    return "the one-process run without a framework"


def _thread_notes(ctx: Context) -> list[str]:
    """The thread-setting mismatches of the runs compared here (:func:`analysis.runset.thread_mismatches`)."""
    from analysis.runset import thread_mismatches

    runs = _runs(ctx)
    return [f"Warning: {w}." for w in thread_mismatches(runs)] if "threads_per_rank" in runs else []


# ---------------------------------------------------------------- studies

def _summary(ctx: Context) -> Section:
    sec = Section(intro="Speedup and efficiency against the base case with their 95 % intervals and verdicts, and the "
                  "share of the step spent in exposed gradient synchronisation and in data loading, per "
                  "configuration and rank count. The same numbers as in \"Why not ideal?\" (one definition, "
                  "docs/metrics.md).")
    table, base = _scaling(ctx)
    by = list(_config_by(ctx))
    cols = [*by, "n_ranks", "n_nodes", "n_runs", "n_outliers", "time_per_sample_s", "throughput_samples_per_s",
            "speedup", "speedup_ci_low", "speedup_ci_high", "efficiency_frac", "efficiency_frac_ci_low",
            "efficiency_frac_ci_high", "efficiency_frac_verdict", "sync_exposed_frac", "data_frac", "repeats_for_5pct",
            "work_source", "unreliable"]
    t = table[[c for c in cols if c in table.columns]]
    t = t.drop(columns=[c for c in ("n_outliers", "unreliable") if c in t and not t[c].fillna(0).astype(bool).any()])
    sec.notes.extend([*_reporting_notes(ctx, base), *M.explain_work(table)])
    sec.notes.extend(_thread_notes(ctx))
    for r in table.dropna(subset=["outliers"]).itertuples() if "outliers" in table else []:
        sec.notes.append(f"Outlier repeat(s) left out of {r.config_backend} at {int(r.n_ranks)} rank(s): {r.outliers}.")
    sec.tables.append(("summary", t, "Speedup and efficiency: means over repeats against the base case; "
                                     "efficiency_frac_verdict: is the loss against ideal distinguishable from "
                                     "run-to-run noise; repeats_for_5pct: repeats per side that would resolve a "
                                     "5 % difference."))
    if "efficiency_frac_ci_low" in table and table["efficiency_frac_ci_low"].isna().any():
        sec.notes.append("Some rows have fewer than 3 repeats on a side: no interval can be given; each run's own "
                         "numbers are listed below instead.")
        sec.tables.append(("summary_runs", _runs_table(ctx), "Each run against the base case's mean."))
    return sec


def _loss(ctx: Context) -> tuple[pd.DataFrame, str]:
    def make():
        ev, runs = ctx.need_events(), _runs(ctx)
        pr = ctx.per_run
        measured = pr[pr["time_per_sample_s"].notna()] if "time_per_sample_s" in pr else None
        if measured is not None and measured.empty:
            measured = None
        kw = {"by": tuple(c for c in _config_by(ctx) if c != "inject"), "epochs": ctx.rs.epochs,
              "measured": measured}
        try:
            return M.scaling_loss(ev, runs, **kw), _baseline_text(ctx)
        except ScalescopeError as exc:
            if "no baseline runs" not in str(exc):
                raise Skip(str(exc)) from None
        try:
            return M.scaling_loss(ev, runs, baseline="min", **kw), (
                "each configuration's one-rank run (no baseline without a framework: framework overhead not "
                "separated)")
        except ScalescopeError as exc:
            raise Skip(str(exc)) from None

    return ctx.memo("loss", make)


def _study_why(ctx: Context) -> Section:
    sec = Section(intro="With a fixed batch per rank, a step at n ranks should take as long as a step of the one-process "
                  "baseline. The gap between the measured and that ideal step time is split into causes that sum "
                  "to it: the framework's overhead at one rank, exposed gradient synchronisation, waiting for the "
                  "slowest rank, data loading, CPU contention (compute grown where the cores are oversubscribed), "
                  "compute grown against the one-rank run, and the rest (docs/metrics.md, \"Why not ideal?\"). "
                  "Means per full step over ranks and repeats, warm-up dropped; 95 % intervals over the repeats of "
                  "every side, the baseline included; a cause is named only when it is distinguishable from noise.")
    loss, base = _loss(ctx)
    sec.notes.append(f"Ideal: {base}; reference for the one-rank overhead: {loss.attrs.get('reference')}. "
                     f"Unit: {loss.attrs.get('unit')}.")
    sec.notes.extend(loss.attrs.get("notes", []))
    sec.notes.extend(_thread_notes(ctx))
    sec.notes.extend(explain_source(loss, M.between_steps(ctx.need_events())))
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
    sec.tables.append(("why_not_ideal", t, "Seconds per full step; causes sum to gap_s; efficiency = "
                                           "ideal_step_s / measured_step_s; X_verdict: cause X against 0 "
                                           "(efficiency: against 1)."))
    w = M.warmup_summary(ctx.need_events())
    if len(w):
        dropped = int(w["n_warmup"].sum())
        sec.notes.append(f"Warm-up (rule 'auto': until the step time settles, docs/metrics.md): {dropped} of "
                         f"{int(w['n_steps'].sum())} steps dropped over {len(w)} rank(s), {w['warmup_s'].sum():.3g} s; "
                         "every study drops the same steps.")
        sec.tables.append(("warmup", w, "Steps dropped as warm-up per run and rank."))
    return sec


def _study_breakdown(ctx: Context) -> Section:
    sec = Section(intro="Shares of data loading, forward, backward, exposed gradient sync, optimizer and other/idle time "
                  "in the step time, measured as unions of intervals (overlaps counted once).")
    b = _breakdown_by_ranks(ctx)
    sec.figures.append(("breakdown", P.plot_breakdown(b)))
    sec.tables.append(("breakdown_by_ranks", b, "Full steps after warm-up, pooled over ranks and repeats, per "
                                                "configuration and batch size; times are per step."))
    per_rank = M.time_breakdown(ctx.need_events(), level="rank")
    sec.tables.append(("breakdown_per_rank", per_rank, "Per run and rank."))
    ev = ctx.need_events()
    hv = M.horovod_allreduce(ev)
    if len(hv):
        sec.figures.append(("horovod_allreduce", P.plot_allreduce_activity(hv)))
        sec.tables.append(("horovod_allreduce", hv, "Horovod timeline activity (fusion duplicates removed on "
                                                     "(name, start)); overlap with rank 0's backward phases."))
    dd = M.ddp_comm_overlap(ev)
    if len(dd):
        sec.tables.append(("ddp_comm_overlap", dd, "DDP bucket allreduces (comm hook) and their overlap with "
                                                   "backward."))
    gpu = M.gpu_time_breakdown(ev)
    if len(gpu):
        sec.figures.append(("gpu_breakdown", P.plot_gpu_breakdown(gpu)))
        sec.tables.append(("gpu_breakdown", gpu, "GPU timeline per rank (HTA's temporal breakdown)."))
        kp = M.kernel_step_parts(ev)
        if len(kp) and kp.groupby("run_id")["rank"].nunique().max() > 1:
            kp = kp.groupby(["run_id", "rank", "source"])[["step_s", "compute_s", "sync_s", "straggler_s",
                                                           "other_s"]].mean().reset_index()
            sec.tables.append(("kernel_step_parts", kp, "The profiled steps on the device from the kernel traces of "
                               "every rank (docs/metrics.md, \"Device timeline\"): exposed transfer (sync_s) apart "
                               "from exposed peer wait (straggler_s); mean per step."))
    else:
        sec.notes.append("No GPU kernel traces (Kineto / nsys) in this experiment: the GPU temporal breakdown "
                         "is not shown.")
    return sec


def _study_sync(ctx: Context) -> Section:
    sec = Section(intro="Time per synchronisation (sync_total: a gradient collective in flight, whether or not "
                  "compute hides it; dotted: sync_exposed, the wait the step pays), synchronisations per epoch "
                  "(batches per rank per epoch) and their product, the sync time per epoch. Ratios are relative "
                  "to the fewest ranks: a sync-per-epoch ratio below 1 means fewer synchronisations outpaced the "
                  "growing cost of each. Warm-up steps dropped; definitions in docs/metrics.md.")
    cost = _sync(ctx)
    axes = [c for c in _axes(ctx) if c in cost.columns]
    scal = M.sync_scaling(cost, by=("config_backend", "batch_size", *axes))
    if axes:
        scal = scal.assign(config=scal[["config_backend", *axes]].astype(str).agg(", ".join, axis=1))
    sec.figures.append(("sync", P.plot_sync(scal, by="config" if axes else "config_backend")))
    sec.tables.append(("sync_scaling", scal, "Repeats pooled."))
    sec.tables.append(("sync_per_run", cost, "Per run."))
    return sec


def _study_scaling(ctx: Context) -> Section:
    sec = Section(intro="Speedup = X(n)/X(n0), the throughput ratio, and efficiency = speedup · n0/n, means over "
                  "repeats with 95 % intervals (bars: the individual repeats' range); the dashed line is a "
                  "least-squares fit of speedup per added rank with its 95 % confidence interval. The epoch time "
                  "is shown as recorded beside the mode's ideal epoch time.")
    table, base = _scaling(ctx)
    sec.notes.extend(_reporting_notes(ctx, base))
    sec.notes.extend(_thread_notes(ctx))
    pr = ctx.per_run
    fw = pr[pr["framework"] != "none"]
    _multi(fw["n_ranks"], 2, "runs at two or more rank counts")
    baseline = "none" if (pr["framework"] == "none").any() else "min"
    axes = _axes(ctx)
    by = _config_by(ctx)
    try:
        points = M.run_speedups(pr, baseline=baseline, by=by)
    except ScalescopeError:
        points = M.run_speedups(pr, baseline="min", by=by)
    points = points[points["outlier"].isna()] if "outlier" in points else points
    # one fit per configuration, batch size included (never pooled over batch sizes)
    fit = M.fit_speedup(points[points["framework"] != "none"], by=tuple(c for c in by if c in points))
    bounds = M.node_boundaries(_runs(ctx), by=axes)
    mode, _ = _mode(ctx)
    t = table if mode in ("strong", "weak") else table.drop(columns=["ideal_epoch_time_s"], errors="ignore")
    sec.figures.append(("scaling", P.plot_scaling(t[t["framework"] != "none"], fit=fit,
                                                  boundaries=bounds, by=(*axes, "config_backend"))))
    sec.tables.append(("scaling", t, "Time per sample (s, one rank), throughput (samples/s), speedup and "
                                     "efficiency with intervals; epoch time as recorded (s)."))
    sec.tables.append(("speedup_fit", fit, "Linear fit of speedup against ranks (Student-t interval)."))
    return sec


def _study_overhead(ctx: Context) -> Section:
    sec = Section(intro="Time per sample of the one-rank Horovod / DDP run against the run without a framework "
                  "(overhead = t(framework, 1 rank) / t(baseline) - 1, means over repeats, 95 % interval over "
                  "both sides' repeats).")
    pr = ctx.per_run
    if not (pr["framework"] == "none").any():
        raise Skip("needs a baseline run without a framework (framework 'none')")
    if not ((pr["framework"] != "none") & (pr["n_ranks"] == 1)).any():
        raise Skip("needs a one-rank run with a framework")
    t = M.framework_overhead(pr, by=tuple(c for c in _config_by(ctx) if c not in ("batch_size", "inject")))
    t = t[t["n_baseline_runs"] > 0]
    if t.empty:
        raise Skip("no one-rank framework run has a baseline with the same batch size")
    sec.notes.append(f"Baseline: {_baseline_text(ctx)}.")
    sec.figures.append(("overhead", P.plot_overhead(t)))
    sec.tables.append(("overhead", t, "overhead_frac_verdict: is the overhead distinguishable from 0 (run-to-run "
                                      "noise)."))
    return sec


def _study_usage(ctx: Context) -> Section:
    sec = Section(intro="Sampled GPU utilisation, memory and power (NVML), or CPU utilisation when no GPU was sampled; "
                  "dashed lines mark where the ranks spill onto another node.")
    try:
        samples = ctx.rs.samples
    except Exception as exc:
        raise Skip(f"the samples could not be read: {exc}") from None
    if samples.empty:
        raise Skip("no NVML or CPU samples (samples-<host>.csv) in the runs")
    rank_devices = ctx.rs.rank_devices
    usage = M.device_usage(samples, rank_devices=rank_devices)
    by_ranks = M.usage_by_ranks(usage, _runs(ctx))
    _own_gpus(ctx, sec, samples, rank_devices)
    sec.figures.append(("device_usage", P.plot_device_usage(by_ranks, boundaries=M.node_boundaries(_runs(ctx)))))
    sec.tables.append(("device_usage", by_ranks, "Means over devices / processes / nodes and runs; *_jump is the "
                                                 "change where a node joins."))
    paths = _comm_paths(_runs(ctx))
    if len(paths):
        sec.tables.append(("comm_path", paths, "The communication path of each backend and rank count (NCCL "
                                               "transports per link class from its logs; Gloo/MPI from the manifest)."))
    return sec


def _own_gpus(ctx: Context, sec: Section, samples: pd.DataFrame, rank_devices: pd.DataFrame) -> None:
    """Per-GPU lines of the largest run, memory before against during training, idle GPUs."""
    if not samples["device"].notna().any():
        sec.notes.append("No GPU was sampled (CPU runs): the per-GPU figures are not shown.")
        return
    idle = M.idle_devices(samples, rank_devices)
    if len(idle):
        sec.tables.append(("idle_gpus", idle, "GPUs the node samplers saw that no rank of the run used (left out "
                                              "of the usage above)."))
    if rank_devices.empty:
        sec.notes.append("The runs record no rank-to-GPU mapping: every sampled GPU is counted.")
    runs = _runs(ctx)
    big = runs.sort_values("n_ranks", kind="stable")["run_id"].iloc[-1]
    lines = M.gpu_timeline(samples, rank_devices if len(rank_devices) else None, run_id=big)
    if len(lines):
        sec.figures.append(("gpu_lines", P.plot_gpu_lines(lines, title=f"Each GPU of {big} over time")))
    try:
        start = M.training_start(ctx.need_events())
    except Skip:
        return
    mem = M.gpu_memory_phases(samples, rank_devices, start)
    if len(mem):
        sec.figures.append(("gpu_memory_phases", P.plot_gpu_memory_phases(mem)))
        sec.tables.append(("gpu_memory_phases", mem, "extra_vs_others_mib: this GPU's peak minus the median peak "
                                                     "of the run's other GPUs (rank 0's GPU often holds more)."))


def _comm_paths(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (config_backend, n_ranks, n_nodes): the runs' comm_path(s) and warnings."""
    if "comm_path" not in runs:
        return pd.DataFrame()
    keys = ["config_backend", "n_ranks", "n_nodes"]
    r = runs[runs["comm_path"].notna()]

    def join(s: pd.Series) -> str | None:
        return "; ".join(sorted({str(x) for x in s.dropna()})) or None

    return r.groupby(keys, dropna=False, sort=True).agg(comm_path=("comm_path", join),
                                                       comm_warnings=("comm_warnings", join)).reset_index()


def _with_comm_path(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    paths = _comm_paths(runs)
    if paths.empty:
        return table
    keys = [k for k in ("config_backend", "n_ranks", "n_nodes") if k in table.columns]
    paths = paths.astype({k: table[k].dtype for k in keys if k != "config_backend"}, errors="ignore")
    return table.merge(paths[[*keys, "comm_path"]].drop_duplicates(keys), on=keys, how="left")


def _study_backends(ctx: Context) -> Section:
    sec = Section(intro="The same configurations with different communication backends / frameworks, within a node and "
                  "across nodes.")
    pr = ctx.per_run
    fw = pr[pr["framework"] != "none"]
    _multi(fw["config_backend"], 2, "two or more backends")
    try:
        sync = _sync(ctx)
    except Skip:
        sync = None
    t = _with_comm_path(M.backend_comparison(fw, sync=sync), _runs(ctx))
    shared = t.groupby(["batch_size", "n_ranks", "n_nodes"], dropna=False)["config_backend"].transform("nunique")
    if (shared < 2).all():
        raise Skip("no configuration (batch size, ranks, nodes) was run with two backends")
    sec.figures.append(("backends", P.plot_backends(t)))
    sec.tables.append(("backends", t, "relative_time = time per sample / the fastest backend's on the same "
                                      "configuration, with its 95 % interval; relative_time_verdict: is the "
                                      "difference from the fastest distinguishable from noise; comm_path = "
                                      "what the backend's communication used (NCCL logs, or the manifest)."))
    return sec


def _study_batch(ctx: Context) -> Section:
    sec = Section(intro="Epoch time against the batch size on one device, and the validation metric against epochs and "
                  "against training time.")
    pr = ctx.per_run
    t = M.batch_size_epoch_time(pr, n_ranks=1)
    got = False
    if t["batch_size"].nunique() >= 2:
        sec.figures.append(("batch_size", P.plot_batch_size(t)))
        sec.tables.append(("batch_size", t, "One rank."))
        one = pr[pr["n_ranks"] == 1]
        cmp = M.compare_groups(one, axis="batch_size", keys=("config_backend", "n_ranks"))
        if len(cmp):
            sec.tables.append(("batch_size_compare", cmp, "Time per sample of each batch size against the "
                                                          "smallest, one rank: ratio, 95 % interval, verdict."))
        got = True
    else:
        sec.notes.append("Only one batch size was run on one rank: no epoch-time curve.")
    epochs = ctx.rs.epochs
    if len(epochs) and epochs["val_metric"].notna().any():
        curves = M.validation_curves(epochs, _runs(ctx))
        curves = curves[curves["val_metric"].notna()]
        sec.figures.append(("validation_epochs", P.plot_validation(curves, x="epoch")))
        sec.figures.append(("validation_time", P.plot_validation(curves, x="wall_s")))
        got = True
    if not got:
        raise Skip("needs two batch sizes at one rank or validation metrics")
    lr = _runs(ctx)[["run_id", "batch_size", "global_batch_size", "learning_rate", "lr_scaling"]]
    if lr["learning_rate"].notna().any():
        sec.tables.append(("learning_rates", lr, "Learning rate used by each run and its scaling rule."))
    _batch_reference(ctx, sec)
    return sec


def _batch_reference(ctx: Context, sec: Section) -> None:
    """The reference study's batch figures: speedup over batch 75 at one rank, the same global
    batch on 1 and on N ranks, and validation MSE per learning-rate rule with repeats combined."""
    pr = ctx.per_run
    sp = M.batch_speedup(pr, reference_batch=REFERENCE_BATCH)
    if sp["speedup"].notna().any() and sp["batch_size"].nunique() >= 2:
        sec.figures.append(("batch_speedup", P.plot_batch_speedup(sp)))
        sec.tables.append(("batch_speedup", sp, f"Speedup = time per sample at batch {REFERENCE_BATCH} / at the "
                                                "batch (means over repeats), one rank; epoch times as recorded."))
    epochs = ctx.rs.epochs
    if not (len(epochs) and epochs["val_loss"].notna().any()):
        sec.notes.append("No validation loss recorded: no learning-rate curves.")
        return
    curves = M.validation_curves(epochs, _runs(ctx))
    curves = curves[curves["val_loss"].notna()]
    eq = M.equal_batch_comparison(pr, final=M.final_losses(curves))
    if len(eq):
        sec.figures.append(("equal_batch", P.plot_equal_batch(eq)))
        sec.tables.append(("equal_batch", eq, "The same global batch reached with different rank counts "
                                              "(e.g. 1 rank × 150 against 2 ranks × 75)."))
    lr = M.lr_rule_curves(curves)
    sec.figures.append(("lr_loss_epochs", P.plot_lr_curves(lr, x="epoch")))
    budget = _time_budget(_runs(ctx))
    sec.figures.append(("lr_loss_time", P.plot_lr_curves(lr, x="wall_s", budget_s=budget)))
    target = float(curves.groupby("run_id")["val_loss"].min().max())
    ttt = M.time_to_target(curves, target=target)
    sec.tables.append(("time_to_target", ttt, f"Training time until the validation MSE first reaches {target:.4g} "
                                              "(the worst run's best value, so every run reaches it)."))
    if budget is not None:
        sec.notes.append(f"The runs had a fixed time budget of {budget:g} s of training (--time-budget).")


#: The reference study's single-GPU batch size (speedups over batch size are relative to it).
REFERENCE_BATCH = 75


def _time_budget(runs: pd.DataFrame) -> float | None:
    vals = runs["time_budget_s"].dropna() if "time_budget_s" in runs.columns else pd.Series(dtype=float)
    return float(vals.max()) if len(vals) else None


def _study_memory(ctx: Context) -> Section:
    sec = Section(intro="Forward+backward against optimizer time per step per rank count, and each rank's peak memory "
                  "(rank 0 often holds more).")
    got = False
    try:
        cu = M.compute_update_breakdown(_breakdown(ctx), _runs(ctx))
        sec.figures.append(("compute_update", P.plot_compute_update(cu)))
        sec.tables.append(("compute_update", cu, "Per step, pooled over ranks and repeats."))
        got = True
    except Skip as exc:
        sec.notes.append(f"Compute against update: {exc}")
    epochs = ctx.rs.epochs
    if len(epochs) and epochs["peak_mem_mib"].notna().any():
        pm = M.peak_memory(epochs[epochs["peak_mem_mib"].notna()], _runs(ctx))
        sec.figures.append(("peak_memory", P.plot_memory(pm)))
        sec.tables.append(("peak_memory", pm, "rank0_extra_mib = rank 0's peak minus the other ranks' median."))
        got = True
    if not got:
        raise Skip("no phase traces and no peak-memory metrics")
    return sec


def _study_model(ctx: Context) -> Section:
    sec = Section(intro="t(N) = 2(N-1)·alpha + 2(N-1)/N · bytes/beta fitted to the measured sync_total per step; "
                  "predictions at unmeasured rank counts assume constant compute per sample.")
    try:
        w = M.what_if(_sync(ctx), ctx.per_run, _runs(ctx))
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
        err = sync_prediction_error(tables["fit"], _sync(ctx), _runs(ctx),
                                    fit_rank_counts=sorted(int(n) for n in df["n_ranks"].unique()))
    except Skip:
        return
    if len(err):
        sec.tables.append(("allreduce_model_error", err, "Measured sync per step against the model "
                                                        "(model = the one used); held_out = rank count not benchmarked."))


def _study_stragglers(ctx: Context) -> Section:
    sec = Section(intro="Per step, which rank finished its data+forward+backward work last and how long the others "
                  "waited; and, from Horovod's negotiation ticks, which rank reported each tensor ready last.")
    ev = ctx.need_events()
    multi = _runs(ctx)
    multi_ids = set(multi.loc[multi["n_ranks"] > 1, "run_id"])
    got = False
    ph = ev[ev["run_id"].astype(object).isin(multi_ids)]
    per_step = M.phase_stragglers(ph)
    if len(per_step):
        summ = M.straggler_summary(per_step)
        sec.figures.append(("stragglers", P.plot_stragglers(summ)))
        sec.tables.append(("stragglers", summ, "wait = slowest rank's busy time - own busy time, per step."))
        got = True
    neg = M.negotiation_stragglers(ev)
    if len(neg):
        sec.figures.append(("negotiation", P.plot_negotiation(neg)))
        counts = neg.groupby(["run_id", "last_rank"]).agg(n_last=("tensor", "size"), lag_mean_s=("lag_s", "mean"),
                                                         margin_mean_s=("margin_s", "mean")).reset_index()
        sec.tables.append(("negotiation_last_rank", counts, "How often each rank was the last one ready."))
        got = True
    if not got:
        raise Skip("needs multi-rank runs with phase traces or Horovod negotiation ticks")
    return sec


def _placement_axis(pr: pd.DataFrame) -> str:
    for col in ("partition", "cluster", "gpu_model"):
        if col in pr.columns and pr[col].nunique() >= 2:
            return col
    raise Skip("needs runs on two or more clusters or partitions (SLURM's partition, or "
               "scalescope sweep --label partition=...)")


def _study_clusters(ctx: Context) -> Section:
    sec = Section(intro="The same workload on several clusters or partitions: speedup of each against one "
                  "baseline (the first partition's one-process run without a framework, as the reference study "
                  "measured every partition against one baseline), the fitted speedup per added rank with its "
                  "95 % interval, and where each partition's ranks spill onto another node.")
    pr = ctx.per_run
    axis = _placement_axis(pr)
    first = sorted(pr[axis].dropna().unique())[0]
    base = {axis: first, "framework": "none"}
    if not ((pr[axis] == first) & (pr["framework"] == "none")).any():
        base = {axis: first, "n_ranks": int(pr.loc[pr[axis] == first, "n_ranks"].min())}
        sec.notes.append(f"{axis} {first} has no run without a framework: its fewest-rank runs are the baseline.")
    by = (axis, "config_backend", "batch_size")
    try:
        table = M.scaling_table(pr, baseline=base, by=by)
        points = M.run_speedups(pr, baseline=base, by=by)
    except ScalescopeError as exc:
        raise Skip(str(exc)) from None
    sec.notes.append(f"Baseline: {', '.join(f'{k}={v}' for k, v in base.items())}.")
    fw = table[table["framework"] != "none"]
    fit = M.fit_speedup(points[points["framework"] != "none"], by=(axis, "config_backend"))
    bounds = M.node_boundaries(_runs(ctx), by=(axis,))
    sec.figures.append(("clusters_scaling", P.plot_scaling(fw, fit=fit, boundaries=bounds,
                                                           by=(axis, "config_backend"),
                                                           title=f"Speedup per {axis} against one baseline")))
    sec.figures.append(("clusters_slopes", P.plot_speedup_slopes(fit, by=(axis, "config_backend"))))
    sec.tables.append(("clusters_slopes", fit, "Speedup per added rank (least squares, Student-t interval)."))
    sec.tables.append(("clusters_scaling", table, f"Against one baseline ({first})."))
    what = [c for c in (*MACHINE_AXES, "gpu_model", "gpus_per_node", "gpus_on_node", "nodes", "labels")
            if c in pr.columns]
    sec.tables.append(("clusters_what_differs", pr[[axis, *[c for c in what if c != axis]]].drop_duplicates()
                       .sort_values(axis).reset_index(drop=True), f"What each {axis} is, as recorded."))
    cmp = M.compare_groups(pr, axis=axis, keys=("config_backend", "batch_size", "n_ranks"))
    if len(cmp):
        sec.tables.append(("clusters_compare", cmp, f"Time per sample of each {axis} against {first} on the same "
                                                    "configuration: ratio, 95 % interval, verdict."))
    try:
        own = M.scaling_table(pr, baseline="none", by=by)
        sec.tables.append(("clusters_own_baseline", own, f"Each {axis} against its own one-process run."))
    except ScalescopeError as exc:
        sec.notes.append(f"Each {axis} against its own baseline: {exc}")
    _clusters_usage(ctx, sec, axis)
    return sec


def _clusters_usage(ctx: Context, sec: Section, axis: str) -> None:
    """Device usage per partition (the runs' own GPUs), as the reference study explained each
    partition's scaling with its GPU usage."""
    try:
        samples = ctx.rs.samples
    except Exception as exc:
        sec.notes.append(f"Device usage per {axis}: the samples could not be read ({exc}).")
        return
    if samples.empty:
        return
    usage = M.device_usage(samples, rank_devices=ctx.rs.rank_devices)
    by_ranks = M.usage_by_ranks(usage, _runs(ctx), by=(axis,))
    if len(by_ranks):
        sec.figures.append(("clusters_usage", P.plot_device_usage(by_ranks, by=axis,
                                                                  title=f"Device usage per {axis}")))
        sec.tables.append(("clusters_usage", by_ranks, f"Sampled usage per {axis} and rank count."))


def _study_strong_weak(ctx: Context) -> Section:
    sec = Section(intro="Strong scaling keeps the dataset fixed, so the ideal epoch time falls as T(n0)·n0/n; weak "
                  "scaling (scalescope sweep --scaling weak) grows the dataset with the ranks, so the ideal epoch "
                  "time stays T(n0). Speedup (the throughput ratio) and efficiency are the same numbers as in the "
                  "Summary in both modes; only the ideal epoch time differs.")
    pr = ctx.per_run
    mode, warn = _mode(ctx)
    sec.notes.extend(f"Warning: {w}" for w in warn)
    if "scaling" in pr.columns:
        modes, _ = M.scaling_mode(_runs(ctx), ctx.rs.epochs, by=("config_backend", "batch_size"))
        done = pd.Series([modes.get((b, s)) for b, s in zip(pr["config_backend"], pr["batch_size"], strict=True)],
                         index=pr.index)
        # every study uses the mode the runs did: the detected one where it is strong or weak
        pr = pr.assign(scaling=done.where(done.isin(["strong", "weak"]), pr["scaling"]))
    if "scaling" not in pr.columns or (pr["scaling"] == "weak").sum() == 0:
        raise Skip("no weak-scaling runs (scalescope sweep --scaling weak); the runs did "
                   + _MODE_WORDS.get(mode, mode))
    try:
        t = M.strong_weak_table(pr)
    except ScalescopeError as exc:
        raise Skip(str(exc)) from None
    sec.figures.append(("strong_weak", P.plot_strong_weak(t[t["framework"] != "none"])))
    sec.tables.append(("strong_weak", t, "Epoch time, each mode's ideal, speedup and efficiency."))
    return sec


def _study_input_size(ctx: Context) -> Section:
    sec = Section(intro="Throughput against an input size swept with --vary or searched with --find-max, and the "
                  "largest size that fits in memory: runs that ran out of memory are marked at their size.")
    runs = ctx.rs.runs
    axes = M.size_axes(runs)
    if not axes:
        raise Skip("no numeric --vary / --find-max axis with two or more values")
    for size in axes:
        t = M.input_size_table(runs, ctx.per_run, size=size)
        name = size.removeprefix("vary_")
        lim = M.memory_limit(t, find_max=[r for r in M.find_max_records(runs) if r.get("name") == name])
        sec.figures.append((f"input_size_{name}", P.plot_input_size(t, limit=lim, size_label=f"--{name}")))
        sec.tables.append((f"input_size_{name}", t, "Throughput per size; n_oom: runs that ran out of memory."))
        sec.tables.append((f"memory_limit_{name}", lim, "Largest size that fitted, smallest that did not."))
    return sec


#: The report's studies in order: (key, title, function); a function raises Skip to say why
#: its study cannot run on this experiment.
STUDIES: tuple[tuple[str, str, Callable[[Context], Section]], ...] = (
    ("summary", "Summary", _summary),
    ("why", "Why not ideal?", _study_why),
    ("breakdown", "1. Time breakdown of a training step", _study_breakdown),
    ("sync", "2. Synchronisation cost against ranks", _study_sync),
    ("scaling", "3. Scaling: speedup and efficiency", _study_scaling),
    ("overhead", "4. Framework overhead at one rank", _study_overhead),
    ("usage", "5. Device usage against ranks", _study_usage),
    ("backends", "6. Backend comparison", _study_backends),
    ("batch", "7. Batch size and learning rate", _study_batch),
    ("memory", "8. Compute against weight update, and memory per rank", _study_memory),
    ("model", "9. What-if: alpha-beta ring-allreduce model", _study_model),
    ("stragglers", "10. Stragglers", _study_stragglers),
    ("clusters", "11. Clusters and partitions", _study_clusters),
    ("strong_weak", "12. Strong and weak scaling", _study_strong_weak),
    ("input_size", "13. Input size and the memory limit", _study_input_size),
)
