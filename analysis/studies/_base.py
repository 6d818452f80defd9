"""What every study shares: :class:`Skip`, :class:`Section`, :class:`Context` (the loaded
experiment) and the intermediate tables and notes several studies use (memoised on the
context)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import pandas as pd

from analysis import metrics as M
from analysis.errors import ScalescopeError
from analysis.metrics.breakdown import WARMUP
from analysis.metrics.stats import CONFIDENCE
from analysis.runset import RunSet

T = TypeVar("T")


class Skip(Exception):
    """A study cannot run on this experiment; the message says why."""


@dataclass
class Section:
    """One study's result: its intro, tables (name, table, caption), figures (name, figure),
    notes, and why it was skipped (None when it ran). The report shows one per study; a
    notebook shows the same object (:func:`analysis.studies.run_study`)."""

    key: str = ""  # key and title come from STUDIES
    title: str = ""
    intro: str = ""
    figures: list[tuple[str, object]] = field(default_factory=list)
    tables: list[tuple[str, pd.DataFrame, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None

    def table(self, name: str) -> pd.DataFrame:
        """The table called ``name`` (KeyError listing the names this section has)."""
        for n, df, _ in self.tables:
            if n == name:
                return df
        raise KeyError(f"study {self.key!r} has no table {name!r}; it has {[n for n, _, _ in self.tables]}"
                       + (f" (skipped: {self.skipped})" if self.skipped else ""))

    def figure(self, name: str):
        """The figure called ``name`` (KeyError listing the names this section has)."""
        for n, fig in self.figures:
            if n == name:
                return fig
        raise KeyError(f"study {self.key!r} has no figure {name!r}; it has {[n for n, _ in self.figures]}"
                       + (f" (skipped: {self.skipped})" if self.skipped else ""))

    @property
    def table_names(self) -> list[str]:
        return [n for n, _, _ in self.tables]

    @property
    def figure_names(self) -> list[str]:
        return [n for n, _ in self.figures]


#: The base case of the scaling studies unless asked otherwise: ``"auto"`` is the one-process
#: run without a framework where the runs have one, else each configuration's run with the
#: fewest ranks (docs/metrics.md, "Reporting rules"); ``"none"`` insists on the former,
#: ``"min"`` takes the latter.
BASELINE = "auto"
BASELINES = ("auto", "none", "min")


#: The tables of the runs' events the studies use: (name, metric, options, takes the
#: warm-up option). The report computes them run by run (:func:`event_tables` through
#: ``RunSet.reduce_tables``), so the events of every run are never in memory at once; each
#: equals the metric of all events.
EVENT_TABLES: tuple[tuple[str, Callable, dict, bool], ...] = (
    ("breakdown_step", M.time_breakdown, {"level": "step"}, True),
    ("breakdown_rank", M.time_breakdown, {"level": "rank"}, True),
    ("sync", M.sync_times, {"keep_warmup": True}, True),
    ("horovod_allreduce", M.horovod_allreduce, {}, True),
    ("ddp_comm_overlap", M.ddp_comm_overlap, {}, True),
    ("gpu_breakdown", M.gpu_time_breakdown, {}, False),
    ("kernel_step_parts", M.kernel_step_parts, {}, False),
    ("between_steps", M.between_steps, {}, False),
    ("warmup", M.warmup_summary, {}, True),
    ("training_start", M.training_start, {}, False),
    ("phase_stragglers", M.phase_stragglers, {}, True),
    ("negotiation", M.negotiation_stragglers, {}, False),
)


def event_tables(events: pd.DataFrame, *, runs: pd.DataFrame, epochs: pd.DataFrame,
                 warmup: int | str | None = WARMUP) -> dict[str, object]:
    """Every table of :data:`EVENT_TABLES` and the step table (``steps``: with the usable
    ``runs`` and their ``epochs``) of one run's events, with the analysis option ``warmup``;
    a metric that fails gives its exception, raised where a study asks for that table."""
    out: dict[str, object] = {}
    steps = ("steps", M.step_table, {"runs": runs, "epochs": epochs}, True)
    for name, metric, options, warm in (*EVENT_TABLES, steps):
        try:
            out[name] = metric(events, **options, **({"warmup": warmup} if warm else {}))
        except Exception as exc:  # raised again by Context.event_table, in the study that needs it
            out[name] = exc
    return out


@dataclass
class Context:
    """The loaded experiment every study reads (:meth:`from_runset`): the RunSet, the tables
    of its events (:data:`EVENT_TABLES`, None when the traces could not be read), the
    analysis options (``warmup``: :data:`analysis.metrics.breakdown.WARMUP`'s rule for the
    steps dropped per rank; ``confidence``: the level of every interval; ``baseline``:
    :data:`BASELINE`), and the intermediate tables studies share (``memo``)."""

    rs: RunSet
    tables: dict[str, object] | None
    events_error: str | None
    per_run: pd.DataFrame
    cache: dict = field(default_factory=dict)
    warmup: int | str | None = WARMUP
    confidence: float = CONFIDENCE
    baseline: str = BASELINE

    @classmethod
    def from_runset(cls, rs: RunSet, *, warmup: int | str | None = WARMUP, confidence: float = CONFIDENCE,
                    baseline: str = BASELINE) -> Context:
        """Read what the studies need from ``rs``: its events (or why they could not be read)
        and the per-run table every study compares (:func:`analysis.metrics.run_summary`)."""
        check_options(warmup=warmup, confidence=confidence, baseline=baseline)
        # the studies' tables of the events, run by run: never every run's events at once
        tables, events_error = None, None
        try:
            tables = rs.reduce_tables(event_tables, runs=rs.usable_runs(), epochs=rs.epochs, warmup=warmup)
        except Exception as exc:
            events_error = f"{type(exc).__name__}: {exc}"
        steps = None if tables is None else tables.get("steps")  # none: no usable run to reduce
        try:
            if steps is None:
                per_run = M.run_summary(rs, steps=False)
            elif isinstance(steps, pd.DataFrame):  # made with the asked warm-up
                per_run = M.run_summary(rs, step_rows=steps)
            else:  # the step table failed on a run: from all events, as before
                per_run = M.run_summary(rs, measured=M.measure_runs(rs.events, rs.usable_runs(), epochs=rs.epochs,
                                                                    samples=rs.samples, warmup=warmup))
        except Exception as exc:
            per_run = pd.DataFrame(columns=[*M.scaling.RUN_META, "epoch_time_s", "throughput_samples_per_s",
                                            "samples_per_epoch"])
            events_error = events_error or f"epoch metrics unreadable: {exc}"
        return cls(rs, tables, events_error, per_run, warmup=warmup, confidence=confidence, baseline=baseline)

    def event_table(self, name: str) -> pd.DataFrame:
        """A table of :data:`EVENT_TABLES` (or ``steps``) of every usable run's events."""
        if self.tables is None:
            raise Skip(f"the run traces could not be read: {self.events_error}")
        if name not in self.tables:
            raise Skip("no run completed with usable traces")
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


def check_options(*, warmup: object, confidence: object, baseline: object) -> None:
    """ScalescopeError naming the option when an analysis option has no meaning."""
    if not (warmup is None or warmup == "auto" or (isinstance(warmup, int) and not isinstance(warmup, bool)
                                                   and warmup >= 0)):
        raise ScalescopeError(f"warmup: {warmup!r} is not 'auto' or a number of steps >= 0")
    if not (isinstance(confidence, float) and 0 < confidence < 1):
        raise ScalescopeError(f"confidence: {confidence!r} is not a level between 0 and 1 (e.g. 0.95)")
    if baseline not in BASELINES:
        raise ScalescopeError(f"baseline: {baseline!r} is not one of {', '.join(BASELINES)}")


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
    """The axes besides the configuration on which the usable runs differ (experiment,
    cluster, partition, GPU model, scaling mode, batch mode, ``--vary`` values;
    :func:`analysis.metrics.grouping.study_axes`): every study keeps them apart, each with its
    own baseline."""
    return M.study_axes(ctx.per_run)


def config_by(ctx: Context) -> tuple[str, ...]:
    """The columns that make a configuration in every study (the one grouping rule,
    :func:`analysis.metrics.grouping.config_by`): :func:`placement_axes`, backend, batch,
    and an injected delay where runs have one."""
    return M.config_by(ctx.per_run)


def baseline_match(ctx: Context) -> tuple[str, ...]:
    """The columns a baseline without a framework shares with its configuration."""
    return M.baseline_match(config_by(ctx))


def grouped(by: tuple[str, ...] | list[str], caption: str) -> str:
    """``caption`` followed by what the table grouped by (every table says it)."""
    return f"{caption} {M.grouped_by(by)}"


def scaling_and_base(ctx: Context) -> tuple[pd.DataFrame, str]:
    def make():
        pr = ctx.per_run
        if pr.empty:
            raise Skip("no run has epoch metrics (rank-*.epochs.jsonl)")
        by = config_by(ctx)
        table, used = with_baseline(ctx, lambda b: M.scaling_table(pr, baseline=b, by=by, match=baseline_match(ctx),
                                                                     confidence=ctx.confidence))
        return table, (baseline_text(ctx) if used == "none" else "each configuration's run with the fewest ranks")

    return ctx.memo("scaling", make)


def level(ctx: Context) -> str:
    """The confidence level of the intervals, as the texts say it ("95 %")."""
    return f"{ctx.confidence * 100:g} %"


def with_baseline(ctx: Context, compute: Callable[[str], T]) -> tuple[T, str]:
    """``compute(baseline)`` against the base case ``ctx.baseline`` asks for, and which one
    (``"none"`` or ``"min"``): ``"auto"`` takes the run without a framework where the runs
    have one and falls back to each configuration's fewest ranks where that fails; a base
    case asked for explicitly that the runs do not have skips the study saying why."""
    pr = ctx.per_run
    if ctx.baseline == "auto":
        order = ["none", "min"] if (pr["framework"] == "none").any() else ["min"]
    else:
        order = [ctx.baseline]
    for b in order[:-1]:
        try:
            return compute(b), b
        except ScalescopeError:
            pass
    if ctx.baseline == "auto":
        return compute(order[-1]), order[-1]
    try:
        return compute(order[-1]), order[-1]
    except ScalescopeError as exc:
        raise Skip(f"baseline {ctx.baseline!r}: {exc}") from None


def runs_mode(ctx: Context) -> tuple[str, list[str]]:
    """The scaling mode the runs did (one for every study) and the mismatch warnings."""
    def make():
        runs = usable_runs(ctx)
        modes, notes = M.scaling_mode(runs, ctx.rs.epochs, by=[c for c in config_by(ctx) if c in runs and c != "inject"])
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
             "repeats left out and named); intervals: " f"{level(ctx)} delta-method t intervals over the repeats of "
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
