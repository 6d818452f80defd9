"""Tables for people: one formatting layer for the report's HTML tables, the LaTeX export and
notebooks.

Driven by column-name conventions, so new metric columns are formatted without a change here:

* units are suffixes: ``_s`` (seconds; shown in ms, or s when the column's values are 10 s and
  more), ``_ms``, ``_ns``, ``_frac`` (shown in %), ``_pct``, ``_mib``, ``_bytes`` (shown in MiB),
  ``_w``, ``_per_s`` (a rate); statistics may sit before or after the unit
  (``epoch_time_s_median``, ``efficiency_min_frac``);
* an interval on ``X`` is ``X_ci_low`` / ``X_ci_high`` (also ``base_ci_low_unit``), shown as
  ``X [lo, hi]``, and ``X`` is rounded to what the interval supports (two significant digits of
  its half-width); ``X_std`` does the same when there is no interval;
* a verdict is ``X_verdict`` (or ``verdict`` for the row): ``distinguishable``,
  ``within noise`` or ``no interval (n<3)``;
* :data:`NAMES` gives the human name of known columns; any other becomes its words.

Values below 1e-12 of the row's scale (floating residue such as ``5.4e-20``) print as 0, and a
value that looks impossible (an efficiency above 1, a negative overhead) gets a one-line note
saying what it means and whether it is within noise.

``humanize(df)`` gives the display frame (strings; notes in ``.attrs["notes"]``),
``to_html(df)`` and ``to_latex(df, ...)`` the report's and the thesis' renderings.
"""

from __future__ import annotations

import html
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.metrics.gap import CAUSE_LABELS
from instrumentation.progress import printable

__all__ = [
    "LATEX_PREAMBLE",
    "NAMES",
    "Layout",
    "describe",
    "humanize",
    "latex_escape",
    "layout",
    "to_html",
    "to_latex",
]

#: Human names of known columns (full names first, then the name without unit and statistic).
NAMES: dict[str, str] = {
    "config_backend": "Configuration", "source": "Time source", "framework": "Framework", "backend": "Backend", "run_id": "Run",
    "n_ranks": "Ranks", "n_nodes": "Nodes", "n_runs": "Runs", "n_steps": "Steps", "rank": "Rank",
    "batch_size": "Batch size", "global_batch_size": "Global batch", "repeat": "Repeat", "status": "Status",
    "wall": "Wall time", "exit_code": "Exit code", "epoch_time": "Epoch time", "step_time": "Step time",
    "step_mean": "Step time", "speedup": "Speedup", "efficiency": "Efficiency",
    "throughput_samples": "Throughput", "sync_exposed": "Exposed sync", "sync_total": "Sync (total)",
    "sync_per_step": "Sync per step", "exposed_per_step": "Exposed sync per step", "data": "Data loading",
    "forward": "Forward", "backward": "Backward", "optimizer": "Optimizer", "other": "Other",
    "ideal_step": "Ideal step", "measured_step": "Measured step", "gap": "Gap", "framework_s": "Framework",
    "sync": "Sync", "straggler": "Straggler wait", "compute": "Compute", "overhead": "Overhead",
    "baseline_epoch_time": "Baseline epoch time", "relative_epoch_time": "Relative epoch time",
    "placement": "Placement", "comm_path": "Communication path", "comm_warnings": "Warnings",
    "slope_per_rank": "Speedup per added rank", "slope": "Speedup per added rank", "intercept": "Intercept",
    "r2": "R-squared", "confidence": "Confidence", "peak_mem": "Peak memory", "rank0_extra": "Rank 0 extra",
    "cpu_util": "CPU utilisation", "util_gpu": "GPU utilisation", "mem_used": "GPU memory", "power": "Power",
    "rss": "Resident memory", "learning_rate": "Learning rate", "lr_scaling": "LR rule",
    "n_warmup": "Warm-up steps", "warmup": "Warm-up", "wait": "Wait", "n_last": "Times last",
    "last": "Last", "last_rank": "Last rank", "lag": "Lag", "margin": "Margin", "alpha": "Latency alpha",
    "beta": "Bandwidth beta", "n_units": "Units", "unit": "Unit", "n_syncs": "Syncs",
    "syncs_per_epoch": "Syncs per epoch", "sync_per_epoch": "Sync per epoch",
    "exposed_per_epoch": "Exposed sync per epoch", "time_to_target": "Time to target",
    "epochs_to_target": "Epochs to target", "n_reached": "Reached", "update_per_step": "Update per step",
    "compute_per_step": "Compute per step", "update_to_compute_ratio": "Update / compute",
    "sync_pred": "Predicted sync", "steps_per_epoch": "Steps per epoch", "n_buckets": "Buckets",
    "comm": "Communication", "overlap_backward": "Overlap with backward", "exposed": "Exposed",
    "negotiate": "Negotiation", "memcpy": "Fusion copies", "collective": "Collective",
    "allreduce_total": "Allreduce total", "n_activity_rows": "Activity rows", "mode": "Mode",
    "inject": "Injected", "slowest_rank": "Slowest rank", "baseline": "Baseline", "reference": "Reference",
    "partition": "Partition", "cluster": "Cluster", "gpu_model": "GPU model", "new_node": "New node",
    "is_fastest": "Fastest", "fewer_syncs_win": "Fewer syncs win", "verdict": "Verdict",
    "repeats_for_5pct": "Repeats for 5 %", "n_partial_steps": "Partial steps", "n_outliers": "Outlier repeats",
    "contention": "Contention", "contention_evidence": "Contention evidence", "time_per_sample": "Time per sample",
    "relative_time": "Relative time", "slowest_tied": "Slowest ranks tied",
}
#: The causes of the scaling gap (``scaling_loss``'s columns) in the words every figure and
#: sentence uses (:data:`analysis.metrics.gap.CAUSE_LABELS`).
NAMES.update({c: w[:1].upper() + w[1:] for c, w in CAUSE_LABELS.items()})

#: Column kinds: the unit a suffix names, its display unit and the factor from one to the other.
_UNITS: tuple[tuple[str, str, str, float], ...] = (
    # suffix, kind, display unit, factor
    ("_bytes_per_s", "rate", "MiB/s", 1 / 2**20),
    ("_samples_per_s", "rate", "samples/s", 1.0),
    ("_per_s", "rate", "/s", 1.0),
    ("_frac", "pct", "%", 100.0),
    ("_pct", "pct", "%", 1.0),
    ("_mib", "mib", "MiB", 1.0),
    ("_bytes", "mib", "MiB", 1 / 2**20),
    ("_ms", "time", "ms", 1.0),
    ("_ns", "time", "ms", 1e-6),
    ("_s", "time", "ms", 1e3),
    ("_w", "power", "W", 1.0),
)
#: Fractions whose column names carry no ``_frac`` ("Why not ideal?"'s ``efficiency``): shown in %
#: like the Summary's ``efficiency_frac``, so one quantity has one unit in every table.
_FRACTIONS = frozenset({"efficiency"})
_STATS: dict[str, str] = {"median": "median", "mean": "mean", "min": "min", "max": "max", "std": "std",
                          "stderr": "std. error", "sum": "sum", "q25": "25th pct.", "q75": "75th pct.",
                          "jump": "change at a new node"}
#: Per report table, the columns a table for people keeps before any other (the rest of a
#: table too wide for the page stays in its CSV).
MAIN_COLUMNS: dict[str, tuple[str, ...]] = {
    "why_not_ideal": ("measured_step_s", "gap_s", "sync_s", "straggler_s", "compute_s", "efficiency"),
    "summary": ("time_per_sample_s", "speedup", "efficiency_frac", "efficiency_frac_verdict"),
    "scaling": ("epoch_time_s_median", "speedup", "efficiency_frac"),
}
#: Statistics that a table for people leaves to the CSV when the column they describe is shown.
_SPREAD = ("min", "max", "std", "stderr", "q25", "q75")
_IDENTITY = ("run_id", "config_backend", "framework", "backend", "cluster", "partition", "gpu_model", "mode",
             "inject", "unit", "lr_scaling", "batch_size", "global_batch_size", "n_ranks", "n_nodes", "rank",
             "repeat", "status", "last_rank", "source")
_BOOKKEEPING = ("n_steps", "n_runs", "confidence", "baseline_n_ranks", "n_points", "n_rank_counts",
                "n_activity_rows", "n_fusion_duplicates", "alpha_fixed", "new_node", "experiment")
_VERDICTS = ("distinguishable", "within noise", "no interval (n<3)")
#: Names of columns that count something: whole numbers print without decimals.
_COUNTING = re.compile(r"(^|_)(n|rank|ranks|size|count|steps|epochs?|repeat)(_|$)")
#: Text cells longer than this wrap in LaTeX (a parbox of about this many characters).
_WRAP_CHARS = 26


@dataclass(frozen=True)
class ColumnSpec:
    """What a column name says: its human name, the statistic, the kind, the display unit and
    the factor from the stored to the displayed value."""

    name: str
    base: str
    header: str
    stat: str | None
    kind: str  # time, pct, mib, rate, power, count, number, text, bool, verdict
    unit: str
    factor: float


def describe(name: str) -> ColumnSpec:
    """Parse a column name by the conventions in the module docstring."""
    if name == "verdict" or name.endswith("_verdict"):
        base = name.removesuffix("_verdict")
        head = "Verdict" if name == "verdict" else f"{describe(base).header}: verdict"
        return ColumnSpec(name, base, head, None, "verdict", "", 1.0)
    rest, stats, kind, unit, factor = name, [], "number", "", 1.0
    for _ in range(4):  # units and statistics in either order (cpu_util_pct_mean_jump)
        hit = next(((s, k, u, f) for s, k, u, f in _UNITS if rest.endswith(s) and len(rest) > len(s)), None)
        if hit and kind == "number":
            rest, kind, unit, factor = rest[: -len(hit[0])], hit[1], hit[2], hit[3]
            continue
        tail = rest.rsplit("_", 1)
        if len(tail) == 2 and tail[1] in _STATS and tail[0]:
            rest = tail[0]
            stats.append(tail[1])
            continue
        break
    stat = next((x for x in stats if x not in ("median", "mean")), stats[0] if stats else None)
    if rest in _FRACTIONS and kind == "number":  # a fraction without its suffix: shown as every _frac is
        kind, unit, factor = "pct", "%", 100.0
    if name.startswith("n_") and kind == "number":
        kind = "count"
    head = NAMES.get(name) or NAMES.get(rest) or _words(rest)
    if stat:
        head = f"{head} ({_STATS[stat]})"
    return ColumnSpec(name, rest, head, stat, kind, unit, factor)


def _words(base: str) -> str:
    w = base.replace("_", " ").strip()
    return (w[:1].upper() + w[1:]) if w else base


# ---------------------------------------------------------------- numbers

def _is_num(v: object) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _missing(v: object) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, (float, np.floating)) and np.isnan(v))


def _decimals(values: np.ndarray, *, sig: int = 3, cap: int = 6) -> int:
    """Decimals that give ``sig`` significant digits to the column's typical value."""
    nz = np.abs(values[np.isfinite(values) & (values != 0)])
    typical = float(np.median(nz)) if len(nz) else 0.0
    if not np.isfinite(typical) or typical == 0:
        return 0
    mag = math.floor(math.log10(typical))
    return int(min(cap, max(0, sig - 1 - mag)))


def _from_uncertainty(half_width: float) -> int | None:
    """Decimals an uncertainty supports: its first significant digit, or its first two when
    they are 10-29 (0.3 -> 1 decimal, 0.12 -> 2, 3.5 -> 0)."""
    if not np.isfinite(half_width) or half_width <= 0:
        return None
    mag = math.floor(math.log10(half_width))
    lead = half_width / 10.0**mag
    return int(min(6, max(0, -mag + (1 if lead < 3 else 0))))


def _fmt(v: float, dec: int) -> str:
    if not np.isfinite(v):
        return "inf" if v > 0 else ("-inf" if v < 0 else "–")
    s = f"{v:,.{dec}f}"
    return "0" if float(s.replace(",", "")) == 0 and dec == 0 else ("0" if re.fullmatch(r"-?0\.?0*", s) else s)


# ---------------------------------------------------------------- layout

@dataclass
class Column:
    """One displayed column: its header, unit and formatted cells (intervals apart)."""

    source: str
    header: str
    unit: str
    cells: list[str]
    intervals: list[str | None]
    numeric: bool
    priority: int  # 0 identity (kept), 1 main, 2 other, 3 bookkeeping (dropped first)


@dataclass
class Layout:
    """A table for people: the columns shown, what every row shares and the notes under it."""

    columns: list[Column]
    shared: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def n_rows(self) -> int:
        return len(self.columns[0].cells) if self.columns else 0


def _interval_cols(df: pd.DataFrame, name: str, spec: ColumnSpec) -> tuple[str, str] | None:
    for lo, hi in ((f"{name}_ci_low", f"{name}_ci_high"),
                   (f"{spec.base}_ci_low{name[len(spec.base):]}", f"{spec.base}_ci_high{name[len(spec.base):]}"),
                   (f"{spec.base.split('_per_')[0]}_ci_low", f"{spec.base.split('_per_')[0]}_ci_high")):
        if lo in df.columns and hi in df.columns and lo != name:
            return lo, hi
    return None


def _row_scale(df: pd.DataFrame, specs: dict[str, ColumnSpec]) -> dict[str, np.ndarray]:
    """Per kind, the largest magnitude in each row (residue is judged against it)."""
    out: dict[str, np.ndarray] = {}
    for kind in {s.kind for s in specs.values()}:
        cols = [c for c, s in specs.items() if s.kind == kind and pd.api.types.is_numeric_dtype(df[c])
                and not pd.api.types.is_bool_dtype(df[c])]
        if cols:
            vals = np.abs(df[cols].apply(pd.to_numeric, errors="coerce").to_numpy(float) * 1.0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # rows with no value of this kind
                out[kind] = np.nan_to_num(np.nanmax(np.where(np.isfinite(vals), vals, np.nan), axis=1))
    return out


def _numeric_column(df: pd.DataFrame, name: str, spec: ColumnSpec, scale: np.ndarray,
                    time_unit: str | None) -> tuple[list[str], list[str | None], str]:
    raw = pd.to_numeric(df[name], errors="coerce").to_numpy(float)
    raw = np.where(np.abs(raw) < 1e-12 * scale, 0.0, raw)  # floating residue
    unit, factor = spec.unit, spec.factor
    if spec.kind == "time" and (time_unit == "s" or (time_unit is None and spec.unit == "ms" and len(raw)
                                                     and np.nanmedian(np.abs(raw * factor)) >= 1e4)):
        unit, factor = "s", factor / 1e3
    vals = raw * factor
    finite = vals[np.isfinite(vals)]
    integral = spec.kind == "count" or (spec.kind == "number" and (
        pd.api.types.is_integer_dtype(df[name])
        or (bool(_COUNTING.search(name)) and bool(np.all(finite == np.round(finite))))))
    dec = 0 if integral else (1 if spec.kind == "pct" else _decimals(vals))
    nz = np.abs(vals[np.isfinite(vals) & (vals != 0)])
    with np.errstate(over="ignore"):
        per_cell = not integral and spec.kind != "pct" and len(nz) > 1 and nz.max() / nz.min() > 1e3
    ci = _interval_cols(df, name, spec)
    spread = f"{name}_std" if f"{name}_std" in df.columns else None
    cells: list[str] = []
    intervals: list[str | None] = []
    for i, v in enumerate(vals):
        if not np.isfinite(v) and np.isnan(v):
            cells.append("–")
            intervals.append(None)
            continue
        d, iv = dec, None
        if ci is not None:
            lo, hi = (float(pd.to_numeric(df[c].iloc[i], errors="coerce")) * factor for c in ci)
            if np.isfinite(lo) and np.isfinite(hi):
                u = _from_uncertainty((hi - lo) / 2)
                d = dec if u is None else u
                iv = f"[{_fmt(lo, d)}, {_fmt(hi, d)}]"
        elif spread is not None:
            sd = float(pd.to_numeric(df[spread].iloc[i], errors="coerce")) * factor
            u = _from_uncertainty(sd)
            d = dec if u is None else u
        if per_cell and iv is None and spread is None and v != 0:  # a wide range: 3 significant digits each
            d = int(min(6, max(0, 2 - math.floor(math.log10(abs(float(v)))))))
        cells.append(_fmt(float(v), d))
        intervals.append(iv)
    return cells, intervals, unit


def _text_cell(v: object) -> str:
    if _missing(v):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (list, tuple, dict)):
        return ", ".join(map(str, v)) if not isinstance(v, dict) else ", ".join(f"{k}={x}" for k, x in v.items())
    return " ".join(str(v).split())  # newlines and tabs never reach a cell


def _priority(name: str, spec: ColumnSpec, main: Sequence[str]) -> int:
    if name in _IDENTITY or name in main:
        return 0
    if name in _BOOKKEEPING or name.endswith(("_share", "_jump", "_naive_s")) or spec.kind == "verdict":
        return 3
    if spec.base in ("epoch_time", "step_time", "step_mean", "speedup", "efficiency", "gap", "measured_step",
                     "overhead", "throughput_samples", "slope_per_rank", "sync_per_step", "peak_mem"):
        return 1
    return 2


def _skip(df: pd.DataFrame, name: str, spec: ColumnSpec, specs: dict[str, ColumnSpec]) -> bool:
    """Columns a table for people leaves to the CSV: interval bounds (folded into their value),
    spreads of a shown column, columns that are all missing."""
    if "_ci_low" in name or "_ci_high" in name:
        owner = name.replace("_ci_low", "").replace("_ci_high", "")
        return owner in df.columns or any(_interval_cols(df, c, s) for c, s in specs.items() if c != name)
    if spec.stat in _SPREAD:
        return any(s.base == spec.base and s.stat in (None, "median", "mean") and c != name
                   for c, s in specs.items())
    return bool(df[name].isna().all())


def layout(df: pd.DataFrame, *, columns: Sequence[str] | None = None, main: Sequence[str] = (),
           time_unit: str | None = None) -> Layout:
    """The people's version of ``df``: columns chosen and ordered (identity columns first), values
    in display units and rounded, intervals beside their values, what every row shares apart, and
    the notes on numbers that look impossible.

    Parameters
    ----------
    columns
        Show only these (in this order); default: every column a reader needs.
    main
        Columns never left out for width (besides the identity columns).
    time_unit
        ``"ms"`` or ``"s"`` for every time column; default ms, s for columns of 10 s and more.
    """
    df = df.reset_index(drop=True)
    df.columns = _unique_names(df.columns)
    specs = {str(c): describe(str(c)) for c in df.columns}
    names = [c for c in (columns or specs) if c in specs and (columns or not _skip(df, c, specs[c], specs))]
    if not columns:
        names = sorted(names, key=lambda c: (c not in _IDENTITY, names.index(c)))
    scale = _row_scale(df, specs)
    out = Layout(columns=[])
    for name in names:
        spec = specs[name]
        numeric = spec.kind not in ("verdict", "text") and pd.api.types.is_numeric_dtype(df[name]) \
            and not pd.api.types.is_bool_dtype(df[name])
        if numeric:
            with np.errstate(all="ignore"):  # extreme values format as they are (inf, 1e308)
                cells, ivs, unit = _numeric_column(df, name, spec, scale.get(spec.kind, np.zeros(len(df))),
                                                   time_unit)
        else:
            cells, ivs, unit = [_text_cell(v) for v in df[name]], [None] * len(df), ""
        col = Column(name, spec.header, unit, cells, ivs, numeric, _priority(name, spec, main))
        if len(df) > 1 and len(set(zip(cells, ivs, strict=True))) == 1 and not columns and name not in main:
            out.shared.append((_header_text(col), cells[0] + (f" {ivs[0]}" if ivs[0] else "")))
            continue
        out.columns.append(col)
    seen: set[tuple] = set()
    for col in list(out.columns):  # overhead_frac and overhead_pct show the same numbers
        key = (col.header, col.unit, tuple(col.cells), tuple(col.intervals))
        if key in seen:
            out.columns.remove(col)
        seen.add(key)
    _demote_redundant(out.columns)
    out.notes = _notes(df, specs)
    return out


#: Identity columns a run name already says (``horovod-gloo_np2_bs75_r1``), and those the
#: configuration already says (``horovod-gloo``): first to go when a table is too wide.
_IN_RUN_ID = ("config_backend", "framework", "backend", "n_ranks", "n_nodes", "batch_size", "repeat")
_IN_CONFIG = ("framework", "backend")


def _demote_redundant(columns: list[Column]) -> None:
    shown = {c.source for c in columns}
    redundant = _IN_RUN_ID if "run_id" in shown else (_IN_CONFIG if "config_backend" in shown else ())
    for c in columns:
        if c.source in redundant and c.priority == 0:
            c.priority = 3


def _unique_names(cols: pd.Index) -> list[str]:
    """Column names as strings, a repeated name numbered (``a``, ``a (2)``)."""
    seen: dict[str, int] = {}
    out = []
    for c in map(str, cols):
        seen[c] = seen.get(c, 0) + 1
        out.append(c if seen[c] == 1 else f"{c} ({seen[c]})")
    return out


def _header_text(col: Column) -> str:
    return f"{col.header} [{col.unit}]" if col.unit else col.header


# ---------------------------------------------------------------- notes on odd numbers

_IMPOSSIBLE: tuple[tuple[str, str, float, str], ...] = (
    # base name, comparison, threshold, what it means
    ("efficiency", ">", 1.0, "Efficiency above 100 %: faster than ideal scaling of its baseline. Likely causes, "
                             "the common ones first: a baseline slowed by other processes (see its runs' neighbour "
                             "CPU), work per step miscounted (the configured batch size where the script processes "
                             "more or fewer samples per step: see the work source), or a per-rank working set that "
                             "fits in cache (a real superlinear speedup)"),
    ("overhead", "<", 0.0, "Negative overhead: the framework's run was faster than the run without one"),
    ("speedup", "<", 0.0, "Negative speedup: a sign error in the input times"),
)


def _noise(df: pd.DataFrame, i: int, name: str, spec: ColumnSpec, threshold: float) -> str:
    for vcol in (f"{name}_verdict", f"{spec.base}_verdict", "verdict"):
        if vcol in df.columns and isinstance(df[vcol].iloc[i], str) and df[vcol].iloc[i] in _VERDICTS:
            v = df[vcol].iloc[i]
            return "no interval to tell (fewer than 3 repeats)" if v.startswith("no interval") else v
    ci = _interval_cols(df, name, spec)
    if ci is not None:
        lo, hi = (float(pd.to_numeric(df[c].iloc[i], errors="coerce")) for c in ci)
        if np.isfinite(lo) and np.isfinite(hi):
            return "within noise" if lo <= threshold <= hi else "distinguishable"
    for lo_c, hi_c in ((f"{spec.base}_min{name[len(spec.base):]}", f"{spec.base}_max{name[len(spec.base):]}"),
                       (f"{name}_min", f"{name}_max")):
        if lo_c in df.columns and hi_c in df.columns and "n_runs" in df.columns:
            n = pd.to_numeric(df["n_runs"].iloc[i], errors="coerce")
            if np.isfinite(n) and n >= 3:
                lo, hi = float(df[lo_c].iloc[i]), float(df[hi_c].iloc[i])
                return "within the spread of repeats" if lo <= threshold <= hi else "outside the spread of repeats"
    return "no interval to tell whether it is noise (fewer than 3 repeats)"


def _row_name(df: pd.DataFrame, i: int) -> str:
    parts = []
    for c in ("run_id", "config_backend", "partition", "batch_size", "n_ranks", "rank"):
        if c in df.columns and not _missing(df[c].iloc[i]):
            v = df[c].iloc[i]
            parts.append({"batch_size": f"bs {v}", "n_ranks": f"{v} ranks", "rank": f"rank {v}"}.get(c, str(v)))
    return " ".join(parts) or f"row {i + 1}"


def _notes(df: pd.DataFrame, specs: dict[str, ColumnSpec]) -> list[str]:
    """One note per rule: on the base's relative column (%) when there is one, else its first."""
    notes = []
    for base, op, thr, meaning in _IMPOSSIBLE:
        cands = [n for n, sp in specs.items() if sp.base == base and sp.stat in (None, "median", "mean")
                 and "_ci_" not in n and pd.api.types.is_numeric_dtype(df[n]) and not pd.api.types.is_bool_dtype(df[n])]
        cands.sort(key=lambda n: specs[n].kind != "pct")
        for name in cands[:1]:
            spec = specs[name]
            raw = pd.to_numeric(df[name], errors="coerce").to_numpy(float)
            t = thr * (100.0 if spec.kind == "pct" and spec.factor == 1.0 else 1.0)
            hits = np.flatnonzero((raw > t + 1e-9) if op == ">" else (raw < t - 1e-9))
            if not len(hits):
                continue
            shown = []
            for i in hits[:3]:
                val = raw[i] * spec.factor
                txt = _fmt(val, 1 if spec.kind == "pct" else 2) + (f" {spec.unit}" if spec.unit else "")
                shown.append(f"{_row_name(df, i)}: {txt}, {_noise(df, i, name, spec, thr)}")
            more = f" and {len(hits) - 3} more" if len(hits) > 3 else ""
            notes.append(f"{meaning}. {'; '.join(shown)}{more}.")
    return notes


# ---------------------------------------------------------------- display frame and HTML

def humanize(df: pd.DataFrame, *, columns: Sequence[str] | None = None, main: Sequence[str] = (),
             time_unit: str | None = None) -> pd.DataFrame:
    """A display frame of ``df`` for people (notebooks): human headers with units, values in
    display units rounded to what their uncertainty supports, intervals as ``X [lo, hi]``.
    ``.attrs["notes"]`` holds the notes on odd numbers, ``.attrs["shared"]`` what every row
    shares (left out of the columns)."""
    lay = layout(df, columns=columns, main=main, time_unit=time_unit)
    data = {_header_text(c): [v if iv is None else f"{v} {iv}" for v, iv in zip(c.cells, c.intervals, strict=True)]
            for c in lay.columns}
    out = pd.DataFrame(data, index=range(lay.n_rows))
    out.attrs["notes"] = list(lay.notes)
    out.attrs["shared"] = [f"{h}: {v}" for h, v in lay.shared]
    return out


def _minus(s: str) -> str:
    return "−" + s[1:] if s.startswith("-") and len(s) > 1 and (s[1].isdigit() or s[1] == "0") else s


def _h(text: str) -> str:
    """Text for HTML: control characters, bidi overrides and lone surrogates escaped as on the
    terminal (:func:`instrumentation.progress.printable`, the one filter), then HTML-escaped."""
    return html.escape(printable(text))


def to_html(df: pd.DataFrame, **kw) -> str:
    """The table as HTML (escaped): human headers, numbers right-aligned, what every row shares
    and the notes on odd numbers under it."""
    lay = layout(df, **kw)
    head = "".join(f"<th>{_h(c.header)}" + (f" <span class=\"unit\">[{_h(c.unit)}]</span>"
                                                     if c.unit else "") + "</th>" for c in lay.columns)
    rows = []
    for i in range(lay.n_rows):
        cells = []
        for c in lay.columns:
            v = _h(_minus(c.cells[i]) if c.numeric else c.cells[i])
            iv = c.intervals[i]
            if iv:
                v += f" <span class=\"ci\">{_h(iv)}</span>"
            cells.append(f"<td class=\"num\">{v}</td>" if c.numeric else f"<td>{v}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    parts = [f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"]
    if lay.shared:
        parts.append("<p class=\"table-note\">Every row: " + _h("; ".join(f"{h} {v}" for h, v in lay.shared))
                     + ".</p>")
    parts.extend(f"<p class=\"table-note odd\">Note: {_h(n)}</p>" for n in lay.notes)
    return "".join(parts)


# ---------------------------------------------------------------- LaTeX

#: The preamble every exported ``.tex`` table compiles under (docs/export.md).
LATEX_PREAMBLE = "\\usepackage{booktabs}\n\\usepackage{graphicx}\n"
#: Text width of a default ``article`` page (10 pt) and the \\small font's mean character width.
_TEXTWIDTH_PT = 345.0
_CHAR_PT = 4.3
_COLSEP_PT = 12.0

_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#",
                  "^": r"\^{}", "_": r"\_", "~": r"\textasciitilde{}", "%": r"\%", "<": r"\textless{}",
                  ">": r"\textgreater{}", "|": r"\textbar{}", '"': "''", "−": "$-$", "×": r"$\times$",
                  "·": r"$\cdot$", "→": r"$\rightarrow$", "←": r"$\leftarrow$", "≤": r"$\le$", "≥": r"$\ge$",
                  "±": r"$\pm$", "µ": r"$\mu$", "α": r"$\alpha$", "β": r"$\beta$", "–": "--", "—": "---",
                  "…": r"\ldots{}", "’": "'", "‘": "`", "“": "``", "”": "''", "°": r"$^\circ$"}


def latex_escape(text: object, *, breakable: bool = False) -> str:
    """``text`` as LaTeX that prints it literally: every special character escaped, control
    characters dropped, characters pdflatex cannot print by default replaced. With ``breakable``,
    a line may break after ``_`` and ``/`` (long identifiers in captions and notes)."""
    out = []
    for ch in str(text):
        if ch in _LATEX_SPECIAL:
            out.append(_LATEX_SPECIAL[ch])
            if breakable and ch == "_":
                out.append(r"\allowbreak{}")
        elif ch in "\n\r\t\v\f":
            out.append(" ")
        elif ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0:
            continue
        elif ord(ch) < 0x80 or (0xC0 <= ord(ch) <= 0xFF and ch not in "×÷"):
            out.append(ch)
            if breakable and ch == "/":
                out.append(r"\allowbreak{}")
        else:
            out.append(_latex_other(ch))
    return "".join(out)


#: Combining accents -> the LaTeX accent command that prints them under the plain preamble.
_ACCENTS = {"\u0300": "`", "\u0301": "'", "\u0302": "^", "\u0303": "~", "\u0304": "=", "\u0306": "u",
            "\u0307": ".", "\u0308": '"', "\u030a": "r", "\u030b": "H", "\u030c": "v", "\u0323": "d",
            "\u0327": "c", "\u0328": "k", "\u0331": "b"}
_LETTERS = {"ł": r"\l{}", "Ł": r"\L{}", "œ": r"\oe{}", "Œ": r"\OE{}", "ı": r"\i{}", "ȷ": r"\j{}",
            "đ": "d", "Đ": "D"}


def _latex_other(ch: str) -> str:
    """A character outside what :data:`LATEX_PREAMBLE` prints as is: a Latin letter with
    accents as LaTeX accent commands (``ő`` -> ``\\H{o}``), anything else (CJK, Cyrillic,
    emoji) as its code point ``[U+4E2D]``, so that labels stay distinct and the file still
    compiles; :func:`latex_unprintable` names them for a warning."""
    import unicodedata

    if ch in _LETTERS:
        return _LETTERS[ch]
    base, *marks = unicodedata.normalize("NFD", ch)
    if base.isascii() and base.isalpha() and marks and all(m in _ACCENTS for m in marks):
        out = base
        for m in marks:
            out = f"\\{_ACCENTS[m]}{{{out}}}"
        return out
    return "{[}" + "+".join(f"U+{ord(c):04X}" for c in ch) + "{]}"


def latex_unprintable(texts: Sequence[object]) -> list[str]:
    """The characters of ``texts`` that :func:`latex_escape` writes as code points
    (``[U+4E2D]``: what pdflatex cannot print under :data:`LATEX_PREAMBLE`), in order."""
    seen: dict[str, None] = {}
    for text in texts:
        for ch in str(text):
            if ord(ch) >= 0xA0 and ch not in _LATEX_SPECIAL and not (0xC0 <= ord(ch) <= 0xFF and ch not in "×÷") \
                    and _latex_other(ch).startswith("{[}"):
                seen.setdefault(ch)
    return list(seen)


def latex_label(name: str) -> str:
    """A ``\\label`` key from any name: letters, digits, ``:``, ``.`` and ``-`` only."""
    return "tab:" + (re.sub(r"[^A-Za-z0-9.\-]+", "-", str(name)).strip("-") or "table")


def _stack(lines: Sequence[str], align: str = "c", pos: str = "b") -> str:
    """Lines stacked in one cell (core LaTeX: a nested tabular), aligned on the last line
    (``pos="b"``, headers) or the first (``"t"``, a value over its interval)."""
    lines = [ln for ln in lines if ln]
    if len(lines) <= 1:
        return lines[0] if lines else ""
    return f"\\begin{{tabular}}[{pos}]{{@{{}}{align}@{{}}}}" + r"\\ ".join(f"{{}}{ln}" for ln in lines) + r"\end{tabular}"


def _wrap(words: str, width: int) -> list[str]:
    lines, cur = [], ""
    for w in words.split():
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    return [*lines, cur] if cur else lines


def _col_chars(c: Column) -> tuple[int, int]:
    """(data width, header word width) in characters."""
    data = max((max(len(v), len(iv or "")) for v, iv in zip(c.cells, c.intervals, strict=True)), default=1)
    if not c.numeric:
        data = min(data, _WRAP_CHARS)
    word = max((len(w) for w in f"{c.header} [{c.unit}]".split()), default=1)
    return data, word


def _width_pt(cols: Sequence[Column]) -> float:
    return sum(max(*_col_chars(c), 6) * _CHAR_PT + _COLSEP_PT for c in cols)


def fit_columns(lay: Layout, *, width_pt: float = _TEXTWIDTH_PT) -> tuple[list[Column], list[Column]]:
    """The columns that fit ``width_pt`` (estimated), dropping bookkeeping, then other, then main
    columns from the right; identity columns always stay. Returns (kept, left out)."""
    kept = list(lay.columns)
    dropped: list[Column] = []
    for prio in (3, 2, 1):
        while _width_pt(kept) > width_pt:
            cand = [c for c in kept if c.priority == prio]
            if not cand or (len(kept) <= 2):
                break
            kept.remove(cand[-1])
            dropped.append(cand[-1])
    return kept, dropped


def _latex_header(c: Column) -> str:
    width = max(_col_chars(c)[0], 8)
    lines = _wrap(c.header, width)
    if c.unit:
        lines.append(f"[{c.unit}]")
    return _stack([latex_escape(ln) for ln in lines], "r" if c.numeric else "l")


def _latex_cell(c: Column, i: int) -> str:
    v, iv = c.cells[i], c.intervals[i]
    if c.numeric:
        num = latex_escape(v).replace("-", "$-$", 1) if v.startswith("-") else latex_escape(v)
        if iv:
            lo_hi = latex_escape(iv).replace("[-", "[$-$").replace(", -", ", $-$")
            return _stack([num, "{\\scriptsize " + lo_hi + "}"], "r", pos="t")
        return num
    if len(v) > _WRAP_CHARS:
        return f"\\parbox[t]{{{_WRAP_CHARS // 2}em}}{{\\raggedright {latex_escape(v, breakable=True)}}}"
    return latex_escape(v)


def caption_headers(caption: str, kept: Sequence[Column], dropped: Sequence[Column], *,
                    csv_name: str | None = None) -> str:
    """``caption`` with each column name it mentions (``efficiency_frac_verdict``) replaced by
    the header the table prints ("Efficiency verdict"), or, for a column left out of the
    table, the header with where it is ("... (in summary.csv)")."""
    names = {c.source: c.header for c in kept}
    where = f" (in {csv_name})" if csv_name else " (not shown)"
    names.update({c.source: c.header + where for c in dropped if c.source not in names})
    for name in sorted(names, key=len, reverse=True):
        caption = re.sub(rf"(?<![\w]){re.escape(str(name))}(?![\w])", lambda _m, n=name: names[n], caption)
    return caption


def to_latex(df: pd.DataFrame, *, caption: str | None = None, label: str | None = None, csv_name: str | None = None,
             width_pt: float = _TEXTWIDTH_PT, **kw) -> str:
    """A LaTeX ``table`` float of ``df`` for ``\\input`` under :data:`LATEX_PREAMBLE`: the columns
    a reader needs that fit a default article page (the rest named in a note as being in
    ``csv_name``), human headers with units, numbers rounded, intervals under their values, a
    ``\\label``, everything escaped. A table still too wide is scaled down to the text width."""
    lay = layout(df, **kw)
    kept, dropped = fit_columns(lay, width_pt=width_pt)
    spec = "".join("r" if c.numeric else "l" for c in kept) or "l"
    lines = ["\\begin{table}[htbp]", "% scalescope table; preamble: \\usepackage{booktabs} \\usepackage{graphicx}",
             "\\centering", "\\small", "\\sloppy"]
    if caption:
        caption = caption_headers(caption, kept, dropped, csv_name=csv_name)
        lines.append(f"\\caption{{{latex_escape(caption, breakable=True)}}}")
    lines.append(f"\\label{{{latex_label(label or csv_name or 'table')}}}")
    lines.append("\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{%")
    lines.append(f"\\begin{{tabular}}{{@{{}}{spec}@{{}}}}")
    lines.append("\\toprule")
    lines.append(" & ".join(_latex_header(c) for c in kept) + r" \\")
    lines.append("\\midrule")
    for i in range(lay.n_rows):
        lines.append(" & ".join(_latex_cell(c, i) for c in kept) + r" \\")
    if not lay.n_rows:
        lines.append(f"\\multicolumn{{{max(1, len(kept))}}}{{l}}{{(no rows)}} \\\\")
    lines += ["\\bottomrule", "\\end{tabular}}"]
    notes = []
    if lay.shared:
        notes.append("Every row: " + "; ".join(f"{h} {v}" for h, v in lay.shared) + ".")
    if dropped:
        where = f" are in {csv_name}" if csv_name else " are left out"
        notes.append("Columns " + ", ".join(c.source for c in dropped) + f"{where}.")
    notes.extend(f"Note: {n}" for n in lay.notes)
    odd = latex_unprintable([caption or "", *(c.header for c in kept), *(c.unit or "" for c in kept),
                             *(x for c in kept for x in c.cells), *notes])
    if odd:
        shown = " ".join(f"{ch} [U+{ord(ch):04X}]" for ch in odd[:8]) + (" ..." if len(odd) > 8 else "")
        warnings.warn(f"LaTeX table {label or csv_name or ''}: {len(odd)} character(s) the plain preamble cannot "
                      f"print ({shown}) are written as their code points; the CSV keeps them", UserWarning,
                      stacklevel=2)
        where = f" ({csv_name} keeps them)" if csv_name else ""
        notes.append(f"Characters the plain preamble cannot print are written as their code points, [U+4E2D]{where}.")
    if notes:
        lines.append("\\par\\smallskip\\footnotesize")
        lines.extend(latex_escape(n, breakable=True) + "\\par" for n in notes)
    lines.append("\\end{table}")
    return "\n".join(lines) + "\n"
