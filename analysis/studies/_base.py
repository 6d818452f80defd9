"""What every study shares: :class:`Skip`, :class:`Section`, :class:`Context` (the loaded
experiment) and the intermediate tables and notes several studies use (memoised on the
context)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from analysis import metrics as M
from analysis.errors import ScalescopeError
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


#: The tables of the runs' events the studies use: (name, metric, options). The report
#: computes them run by run (:func:`event_tables` through ``RunSet.reduce_tables``), so the
#: events of every run are never in memory at once; each equals the metric of all events.
EVENT_TABLES: tuple[tuple[str, Callable, dict], ...] = (
    ("breakdown_step", M.time_breakdown, {"level": "step"}),
    ("breakdown_rank", M.time_breakdown, {"level": "rank"}),
    ("sync", M.sync_times, {"keep_warmup": True}),
    ("horovod_allreduce", M.horovod_allreduce, {}),
    ("ddp_comm_overlap", M.ddp_comm_overlap, {}),
    ("gpu_breakdown", M.gpu_time_breakdown, {}),
    ("kernel_step_parts", M.kernel_step_parts, {}),
    ("between_steps", M.between_steps, {}),
    ("warmup", M.warmup_summary, {}),
    ("training_start", M.training_start, {}),
    ("phase_stragglers", M.phase_stragglers, {}),
    ("negotiation", M.negotiation_stragglers, {}),
)


def event_tables(events: pd.DataFrame, *, runs: pd.DataFrame, epochs: pd.DataFrame) -> dict[str, object]:
    """Every table of :data:`EVENT_TABLES` and the step table (``steps``: with the usable
    ``runs`` and their ``epochs``) of one run's events; a metric that fails gives its
    exception, raised where a study asks for that table."""
    out: dict[str, object] = {}
    for name, metric, options in (*EVENT_TABLES, ("steps", M.step_table, {"runs": runs, "epochs": epochs})):
        try:
            out[name] = metric(events, **options)
        except Exception as exc:  # raised again by Context.event_table, in the study that needs it
            out[name] = exc
    return out


@dataclass
class Context:
    """The loaded experiment every study reads (:func:`analysis.report.load`): the RunSet,
    the tables of its events (:data:`EVENT_TABLES`, None when the traces could not be read)
    and the intermediate tables studies share (``memo``)."""

    rs: RunSet
    tables: dict[str, object] | None
    events_error: str | None
    per_run: pd.DataFrame
    cache: dict = field(default_factory=dict)

    def event_table(self, name: str) -> pd.DataFrame:
        """A table of :data:`EVENT_TABLES` (or ``steps``) of every usable run's events."""
        if self.tables is None:
            raise Skip(f"the run traces could not be read: {self.events_error}")
        table = self.tables[name]
        if isinstance(table, BaseException):
            raise table
        return table

    def all_events(self) -> pd.DataFrame:
        """Every usable run's events at once (the RunSet's): only where a study has no
        table of :data:`EVENT_TABLES` to go on."""
        if self.tables is None:
            raise Skip(f"the run traces could not be read: {self.events_error}")
        return self.rs.events

    def memo(self, key: str, fn: Callable[[], object]):
        if key not in self.cache:
            self.cache[key] = fn()
        return self.cache[key]


def usable_runs(ctx: Context) -> pd.DataFrame:
    return ctx.rs.usable_runs()


def full_step_breakdown(ctx: Context) -> pd.DataFrame:
    """The step breakdown of the kept full steps (the unit of every study, docs/metrics.md)."""
    def make():
        b = ctx.event_table("breakdown_step")
        if b.empty:
            raise Skip("no run has training-phase records (kind 'phase') in its traces")
        st = ctx.event_table("steps")
        full = st.loc[st["full"], ["run_id", "rank", "epoch", "step"]]
        return b.merge(full, on=["run_id", "rank", "epoch", "step"], how="inner")

    return ctx.memo("breakdown", make)


def breakdown_by_ranks(ctx: Context) -> pd.DataFrame:
    """Step-time shares per configuration (:func:`config_by`: batch sizes never pooled) and
    rank count."""
    def make():
        runs = usable_runs(ctx)
        return M.breakdown_by_ranks(full_step_breakdown(ctx), runs, by=tuple(c for c in config_by(ctx) if c in runs))

    return ctx.memo("breakdown_by_ranks", make)


def placement_axes(ctx: Context) -> tuple[str, ...]:
    """The placement axes (cluster, partition, GPU model) on which the usable runs differ:
    the scaling studies keep them apart (each with its own baseline)."""
    pr = ctx.per_run
    return tuple(c for c in (*MACHINE_AXES, "gpu_model") if c in pr.columns and pr[c].nunique() >= 2)


def config_by(ctx: Context) -> tuple[str, ...]:
    """The columns that make a configuration in every scaling study: placement axes on
    which the runs differ, backend, batch size, and an injected delay where runs have one."""
    pr = ctx.per_run
    inject = ("inject",) if "inject" in pr.columns and pr["inject"].notna().any() else ()
    # a swept script option (--vary) makes configurations of its own; inject has its column
    swept = tuple(c for c in pr.columns if str(c).startswith("vary_") and c != "vary_inject"
                  and pr[c].nunique(dropna=True) >= 2)
    return (*placement_axes(ctx), "config_backend", "batch_size", *inject, *swept)


def scaling_and_base(ctx: Context) -> tuple[pd.DataFrame, str]:
    def make():
        pr = ctx.per_run
        if pr.empty:
            raise Skip("no run has epoch metrics (rank-*.epochs.jsonl)")
        by = config_by(ctx)
        if (pr["framework"] == "none").any():
            try:
                return M.scaling_table(pr, baseline="none", by=by), baseline_text(ctx)
            except ScalescopeError:
                pass
        return M.scaling_table(pr, baseline="min", by=by), "each configuration's run with the fewest ranks"

    return ctx.memo("scaling", make)


def runs_mode(ctx: Context) -> tuple[str, list[str]]:
    """The scaling mode the runs did (one for every study) and the mismatch warnings."""
    def make():
        modes, notes = M.scaling_mode(usable_runs(ctx), ctx.rs.epochs, by=("config_backend", "batch_size"))
        found = sorted(set(modes.values())) or ["strong"]
        return (found[0] if len(found) == 1 else "mixed (" + ", ".join(found) + ")"), notes

    return ctx.memo("mode", make)


MODE_WORDS = {
    "strong": "strong scaling (the samples per epoch stay the same in total across rank counts)",
    "weak": "weak scaling (the samples per rank per epoch stay the same across rank counts)",
    "throughput": "fixed iterations (no dataset): compared by throughput",
}


def reporting_notes(ctx: Context, base: str) -> list[str]:
    """The reporting rules (docs/metrics.md): base case, mode, unit, summarisation, interval."""
    mode, warn = runs_mode(ctx)
    pr = ctx.per_run
    steps = "time_per_sample_s" in pr.columns and pr["time_per_sample_s"].notna().any()
    unit = ("full steps after warm-up (partial batches left out and counted in n_partial_steps)" if steps
            else "epochs (no step records): epoch time per sample")
    notes = [f"Base case: {base}. Ideal: the base case's time per sample on every rank (speedup n/n0, "
             f"efficiency 1).",
             f"Scaling mode from the runs: {MODE_WORDS.get(mode, mode)}. Speedup = throughput ratio "
             "X(n)/X(n0) and efficiency = speedup · n0/n in every mode and every study.",
             f"Unit of work: {unit}. Summarised by the mean over repeats of each run's mean (outlier "
             "repeats left out and named); intervals: 95 % delta-method t intervals over the repeats of "
             "both sides, the baseline included (docs/metrics.md, \"Reporting rules\"); fewer than 3 repeats "
             "on a side: no interval, the individual runs are shown."]
    return [*notes, *(f"Warning: {w}" for w in warn)]


def sync_cost(ctx: Context) -> pd.DataFrame:
    def make():
        s = ctx.event_table("sync")
        if s.empty:
            raise Skip("no gradient synchronisation records (no 'sync' phase or DDP comm-hook records)")
        return M.sync_cost(s, runs=usable_runs(ctx))

    return ctx.memo("sync", make)


def need_distinct(values: pd.Series, n: int, what: str) -> None:
    if values.nunique() < n:
        raise Skip(f"needs {what}; this experiment has {sorted(values.dropna().unique().tolist())}")


def baseline_text(ctx: Context) -> str:
    """What the baseline runs were, from ``run.json`` ``baseline_kind``: a true no-framework
    run, or the framework at one process (a script that cannot run without it)."""
    runs = usable_runs(ctx)
    kinds = set(runs.loc[runs["framework"] == "none", "baseline_kind"].dropna()) if "baseline_kind" in runs else set()
    if "framework_one_process" in kinds:
        return ("the one-process run, which initialised its framework at one process (the script does not honour "
                "SCALESCOPE_FRAMEWORK=none): framework overhead at one rank is not separated from compute"
                + (" in some of them" if len(kinds) > 1 else ""))
    return "the one-process run without a framework"


def thread_notes(ctx: Context) -> list[str]:
    """The thread-setting mismatches of the runs compared here (:func:`analysis.runset.thread_mismatches`)."""
    from analysis.runset import thread_mismatches

    runs = usable_runs(ctx)
    return [f"Warning: {w}." for w in thread_mismatches(runs)] if "threads_per_rank" in runs else []


def comm_paths(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (config_backend, n_ranks, n_nodes): the runs' comm_path(s) and warnings."""
    if "comm_path" not in runs:
        return pd.DataFrame()
    keys = ["config_backend", "n_ranks", "n_nodes"]
    r = runs[runs["comm_path"].notna()]

    def join(s: pd.Series) -> str | None:
        return "; ".join(sorted({str(x) for x in s.dropna()})) or None

    return r.groupby(keys, dropna=False, sort=True).agg(comm_path=("comm_path", join),
                                                       comm_warnings=("comm_warnings", join)).reset_index()
