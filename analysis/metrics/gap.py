"""Why not ideal? The scaling gap split into causes that add up (study 0).

One step of a data-parallel run at ``n`` ranks with a fixed per-rank batch should take as
long as one step of the one-process baseline. :func:`scaling_loss` measures how much longer
it takes and splits that gap into named causes; ``docs/metrics.md`` ("Why not ideal?")
defines every term and says how the split was validated by injecting known delays.

The split
---------
Per run, every part is the mean over its kept full steps of the mean over its ranks
(:func:`analysis.metrics.measures.run_measures`). Each side is the mean over its runs that
are not outliers (:func:`analysis.metrics.stats.flag_outliers`). With B the baseline, R the
configuration's one-rank framework runs (uninjected) and G its runs at ``n`` ranks:

* ``ideal_step_s`` = B.step, ``gap_s`` = G.step - B.step, ``efficiency`` = B.step / G.step,
  every run's parts first brought to G's work per step (times G's samples per rank per step
  over its own: the counted work, so a step that holds fewer samples is not taken as faster);
* ``framework_s`` = R.step - B.step (the one-rank overhead; 0 without R);
* ``data_s`` = G.data - R.data; ``compute_s`` = G.compute - R.compute;
  ``other_s`` = G.other - R.other;
* ``straggler_s`` = G.straggler - R.straggler (the part of the exposed sync spent
  waiting for the slowest rank: per step ``min(wait, exposed)``, see
  :func:`rank_step_parts`);
* ``sync_s`` = (G.exposed - G.straggler) - (R.exposed - R.straggler);
* ``contention_s``: ``compute_s`` when most of G's runs show CPU contention
  (:func:`analysis.metrics.measures.cpu_contention`: ranks × threads above the cores,
  or a rank's CPU above its share) and compute grew; ``compute_s`` is then 0.

Since step = data + compute + exposed + other for every run, the causes sum to ``gap_s``
exactly. Without R (no one-rank run of the configuration), R = B. Intervals:
:func:`analysis.metrics.stats.delta_interval` over the runs of B, R and G (B and R's
run-to-run variance included); none where a side has fewer than 3 runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd

from analysis.errors import ScalescopeError
from analysis.metrics._common import require_columns
from analysis.metrics.breakdown import WARMUP
from analysis.metrics.grouping import VARYING_AXES
from analysis.metrics.measures import (
    measure_runs,
    scaling_mode,
    select_baseline,
    slowest,
    step_table,
    threads_differ,
    unreliable,
    work_source,
)
from analysis.metrics.stats import (
    CONFIDENCE,
    WITHIN_NOISE,
    delta_interval,
    repeats_to_resolve,
    run_cv,
    verdict,
)
from analysis.metrics.timesource import SOURCE_LABELS, Source, one_source
from analysis.schema import MACHINE_AXES

#: The causes, in the order figures stack them; they sum to ``gap_s``.
CAUSES: tuple[str, ...] = ("framework_s", "sync_s", "straggler_s", "data_s", "contention_s", "compute_s",
                           "other_s")
#: ``other_s`` on device time: the device sat idle waiting for the host.
DEVICE_OTHER_LABEL = "the device idle, waiting for the host (host-bound: launches, Python, blocking calls)"
#: Words for the causes in sentences and legends.
CAUSE_LABELS: dict[str, str] = {
    "framework_s": "framework overhead at one rank",
    "sync_s": "exposed synchronisation",
    "straggler_s": "waiting for the slowest rank",
    "data_s": "data loading",
    "contention_s": "CPU contention",
    "compute_s": "compute (forward, backward, optimizer)",
    "other_s": "other / idle",
}
_PARTS = ("step_s", "data_s", "compute_s", "exposed_s", "straggler_s", "other_s")
# MACHINE_AXES (analysis.schema): when the runs differ in one, it joins ``by`` (and a
# ``"none"`` baseline must share it).
#: ``attrs["unit"]`` of :func:`scaling_loss`.
_UNIT = "full steps (partial batches left out, counted in n_partial_steps)"
#: ``attrs["notes"]`` of :func:`scaling_loss` without epoch metrics.
_NO_EPOCHS = "No epoch metrics given: every step counted as a full batch."
#: A value below this fraction of the measured step is floating-point residue: shown as 0.
RESIDUE = 1e-12


def rank_step_parts(events: pd.DataFrame, *, warmup: int | str | None = WARMUP) -> pd.DataFrame:
    """Per (run, rank, step): the step split into data, compute, exposed sync and other,
    with the time this rank waited for the slowest rank (warm-up steps left out).

    Returns
    -------
    pandas.DataFrame
        ``run_id``, ``rank``, ``epoch``, ``step``, ``step_s``, ``data_s``, ``compute_s``
        (forward + backward + optimizer), ``exposed_s`` (``sync_exposed``), ``other_s``,
        ``busy_s`` (data + forward + backward: the work before the synchronisation),
        ``wait_s`` (slowest rank's ``busy_s`` in that step minus this rank's),
        ``straggler_s`` (``min(wait_s, exposed_s)``: the part of the exposed wait spent
        waiting for the slowest rank), ``is_slowest``.

    Notes
    -----
    :func:`analysis.metrics.measures.step_table` without its warm-up rows. Steps are
    matched across ranks by (epoch, step) number. Durations, not end times, are compared,
    so clock offsets between ranks do not matter: after a synchronisation every rank starts
    its next step together, and a rank with more work before the next one makes the others
    wait in it. ``busy_s`` comes from the breakdown's exclusive sets, so a sync wait nested
    in ``backward`` (DDP) is not counted as work.
    """
    t = step_table(events, warmup=warmup)
    cols = ["run_id", "rank", "epoch", "step", "step_s", "data_s", "compute_s", "exposed_s", "other_s", "busy_s",
            "wait_s", "straggler_s", "is_slowest"]
    return t.loc[~t["warmup"], cols].reset_index(drop=True)


def scaling_loss(
    events: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    by: Sequence[str] = ("config_backend", "batch_size"),
    baseline: str | Mapping[str, object] = "none",
    match: Sequence[str] = ("batch_size",),
    mode: Literal["auto", "strong", "weak"] = "auto",
    warmup: int | str | None = WARMUP,
    epochs: pd.DataFrame | None = None,
    samples: pd.DataFrame | None = None,
    measured: pd.DataFrame | None = None,
    confidence: float = CONFIDENCE,
    source: Source = "auto",
) -> pd.DataFrame:
    """Why not ideal: per configuration and rank count, the step-time gap to the ideal split
    into causes that sum to it, each with an interval and a verdict (``docs/metrics.md``).

    Parameters
    ----------
    events
        Event frame of the runs (our phases, comm-hook records, Horovod timelines).
    runs
        Runs table (``RunSet.usable_runs()``): ``run_id``, ``framework``, ``n_ranks``, the ``by``
        and ``match`` columns; runs with an injected delay (``inject``) are never references.
    by
        Columns that define a configuration; ``cluster`` and ``partition`` are added when the runs
        differ in them (each machine against its own ``"none"`` baseline, unless a mapping picks
        one), and ``inject`` when the runs have it.
    baseline
        ``"none"``: the one-process runs without a framework that share the ``match`` columns;
        ``"min"``: the configuration's own runs at its fewest ranks (no framework overhead
        separated); a mapping ``{column: value}`` picks them (e.g. across experiments).
        :func:`analysis.metrics.measures.select_baseline` is the one rule.
    match
        Columns a ``"none"`` baseline must share with the configuration.
    mode
        ``"auto"`` (:func:`analysis.metrics.measures.scaling_mode`), ``"strong"`` or ``"weak"``:
        only recorded in ``attrs["mode"]`` (per step with a fixed per-rank batch, all is the same).
    warmup
        Warm-up rule (:func:`~analysis.metrics.breakdown.warmup_count`).
    epochs, samples
        ``RunSet.epochs`` (samples per epoch tell partial batches from full ones; without them every
        step counts as full, ``attrs["notes"]`` says so) and ``RunSet.samples`` (CPU contention).
    measured
        :func:`analysis.metrics.measures.measure_runs` already computed (the report does it once);
        ``events``, ``epochs``, ``samples``, ``warmup`` and ``source`` are then not used.
    confidence
        Level of every interval (:mod:`analysis.metrics.stats`).
    source
        ``"auto"``, ``"host"`` or ``"events"`` (:mod:`analysis.metrics.timesource`).

    Returns
    -------
    pandas.DataFrame
        One row per configuration and ``n_ranks``: ``n_runs`` (repeats used), ``n_outliers``
        (repeats left out, named in ``outliers``), ``n_steps`` (full steps compared),
        ``n_partial_steps`` (partial-batch steps left out), ``ideal_step_s``, ``measured_step_s``,
        ``gap_s``, the :data:`CAUSES` (s per full step, summing to ``gap_s``), ``efficiency``
        (ideal / measured), ``speedup`` (efficiency · n / n0), ``time_per_sample_s``,
        ``throughput_samples_per_s``; each with ``_ci_low`` / ``_ci_high``; ``X_verdict`` for the
        gap, each cause (against 0) and the efficiency (against 1); ``*_share`` of each cause in
        the gap; ``slowest_rank`` (NA on a tie), ``slowest_tied`` (the tied ranks),
        ``slowest_share``; ``repeats_for_5pct``; ``contention_evidence``; ``source``.
        ``attrs``: ``baseline``, ``reference``, ``mode``, ``unit``, ``notes``.
    """
    require_columns(runs, ("run_id", "framework", "n_ranks", *by, *match), "scaling_loss")
    if mode not in ("auto", "strong", "weak"):
        raise ScalescopeError(f"mode must be 'auto', 'strong' or 'weak', not {mode!r}")
    by, match = _loss_axes(runs, by, match, baseline)
    notes = [] if epochs is not None or measured is not None else [_NO_EPOCHS]
    table = _loss_table(events, runs, measured, by=by, match=match, epochs=epochs, samples=samples, warmup=warmup,
                        source=source)
    run_mode, mode_notes = _run_mode(runs, epochs, by, mode)
    rows, base_notes, ref_notes = _loss_rows(table, by, match, baseline, confidence)
    out = pd.DataFrame(rows)
    out["slowest_rank"] = out["slowest_rank"].astype("Int32")
    out.attrs.update(baseline="; ".join(sorted(base_notes)), reference="; ".join(sorted(ref_notes)),
                     mode=run_mode, unit=_UNIT, notes=[*notes, *mode_notes])
    return out


def _loss_axes(runs: pd.DataFrame, by: Sequence[str], match: Sequence[str],
               baseline: str | Mapping[str, object]) -> tuple[list[str], Sequence[str]]:
    """``by`` with the machine axes the runs differ in (each machine against its own
    baseline) and ``inject`` when a run has one; ``match`` with those axes for a ``"none"``
    baseline."""
    axes = [c for c in MACHINE_AXES if c in runs and c not in by and runs[c].nunique(dropna=True) > 1]
    injected = "inject" in runs and runs["inject"].notna().any()
    by = [*by, *axes] + (["inject"] if injected and "inject" not in by else [])
    if baseline == "none":  # the one grouping rule (analysis.metrics.grouping): each axis its own baseline
        match = [*match, *(c for c in by if (c in VARYING_AXES or str(c).startswith("vary_")) and c not in match)]
    return by, match


def _loss_table(events: pd.DataFrame, runs: pd.DataFrame, measured: pd.DataFrame | None, *, by: Sequence[str],
                match: Sequence[str], epochs: pd.DataFrame | None, samples: pd.DataFrame | None,
                warmup: int | str | None, source: Source = "auto") -> pd.DataFrame:
    """The per-run measures (``measured``, else measured here) with the runs' ``by`` and
    ``match`` columns and an ``inject`` column."""
    if measured is None:
        measured = measure_runs(events, runs, epochs=epochs, samples=samples, warmup=warmup, by=by, source=source)
    if measured.empty:
        raise ScalescopeError("no run has training-phase records (kind 'phase') to split the step time")
    cols = list(dict.fromkeys(["run_id", "framework", "n_ranks", *by, *match, "threads_per_rank"]))
    table = measured.copy()
    for c in cols:
        if c not in table and c in runs:
            table = table.merge(runs[["run_id", c]].assign(run_id=runs["run_id"].astype(object)), on="run_id")
    if "inject" not in table:
        table["inject"] = None
    return table


def _run_mode(runs: pd.DataFrame, epochs: pd.DataFrame | None, by: Sequence[str], mode: str) -> tuple[str, list[str]]:
    """The scaling mode for ``attrs["mode"]`` (the one asked, else the one the runs did, or
    ``mixed: ...``) and the notes of :func:`analysis.metrics.measures.scaling_mode`."""
    modes, notes = scaling_mode(runs, epochs, by=[c for c in by if c != "inject"])
    found = sorted(set(modes.values()))
    return (mode if mode != "auto" else (found[0] if len(found) == 1 else "mixed: " + ", ".join(found))), notes


def _loss_rows(table: pd.DataFrame, by: Sequence[str], match: Sequence[str], baseline: str | Mapping[str, object],
               confidence: float) -> tuple[list[dict], set[str], set[str]]:
    """The rows of every configuration with a framework and rank count, and the words
    saying which baselines and one-rank references they used."""
    used = table[table["outlier"].isna()] if "outlier" in table else table
    clean = used[used["inject"].isna()]
    rows: list[dict] = []
    base_notes: set[str] = set()
    ref_notes: set[str] = set()
    for key, group in table[table["framework"] != "none"].groupby(by, sort=True, dropna=False):
        cfg = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True))
        base, ref, base_note, ref_note = _references(cfg, group, used, clean, baseline, match)
        base_notes.add(base_note)
        ref_notes.add(ref_note)
        for n, g_all in group.groupby("n_ranks", sort=True):
            g = g_all[g_all["outlier"].isna()] if "outlier" in g_all else g_all
            if not g.empty:
                rows.append(_loss_row(cfg, int(n), g, g_all, base, ref, confidence))
    if not rows:
        raise ScalescopeError("no run with a framework (Horovod or DDP) to explain")
    return rows, base_notes, ref_notes


def _references(cfg: dict, group: pd.DataFrame, used: pd.DataFrame, clean: pd.DataFrame,
                baseline: str | Mapping[str, object], match: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame, str, str]:
    """One configuration's baseline runs B and one-rank reference runs R (B when it has
    none; with ``baseline="min"``, B itself), and the words saying what each is.

    ``group``: the configuration's rows; ``used``: the rows that are not outliers;
    ``clean``: those without an injected delay."""
    same = {c: v for c, v in cfg.items() if c != "inject"}
    gclean = _select(used[used["framework"] != "none"], same)
    gclean = gclean[gclean["inject"].isna()]
    one = gclean[gclean["n_ranks"] == 1]
    base = select_baseline(clean, gclean if len(gclean) else group, baseline, match, placement=MACHINE_AXES)
    if isinstance(baseline, Mapping):
        base_note = f"selected: {dict(baseline)}"
    elif baseline == "none":
        base_note = "one process without a framework" + (f", same {', '.join(match)}" if match else "")
    else:
        base_note = "the configuration's own runs at its fewest ranks"
        one = base
    if base.empty:
        raise ScalescopeError(
            "no baseline runs for " + ", ".join(f"{c}={v}" for c, v in cfg.items())
            + " (a one-process run without a framework, e.g. the sweep's --baseline); "
            "pass baseline='min' to use the configuration's one-rank run")
    ref_note = (f"{len(one)} one-rank run(s) of the configuration" if len(one)
                else "none: framework overhead not separated (no one-rank run)")
    return base, (one if len(one) else base), base_note, ref_note


def _ids(frame: pd.DataFrame) -> frozenset:
    return frozenset(frame["run_id"].astype(str))


def _loss_row(cfg: dict, n: int, g: pd.DataFrame, g_all: pd.DataFrame, base: pd.DataFrame, ref: pd.DataFrame,
              confidence: float) -> dict:
    parts = list(_PARTS)
    # sides are independent run sets; the same runs on two roles are one side
    sides: list[pd.DataFrame] = []
    where: dict[frozenset, int] = {}
    role = {}
    for name, frame in (("B", base), ("R", ref), ("G", g)):
        ids = _ids(frame)
        if ids not in where:
            where[ids] = len(sides)
            sides.append(frame)
        role[name] = where[ids]
    b = _work(g) if "samples_per_step" in g else np.nan
    if not np.isfinite(b):
        b = float(np.nanmean(g["batch_size"].astype(float))) if "batch_size" in g else np.nan
    n0 = float(base["n_ranks"].astype(float).mean())
    source = _source_of(base, ref, g)
    # CPU contention slows host work; device compute it cannot slow (a slower launch shows
    # as the device idle, other_s), so on device time compute stays compute
    cont, evidence = _contention(g, ref if _ids(ref) != _ids(base) else None) if source == "host" else (False, None)
    cols = ["measured_step_s", "ideal_step_s", "gap_s", *CAUSES, "efficiency", "speedup", "time_per_sample_s",
            "throughput_samples_per_s"]

    def fn(means: Sequence[np.ndarray]) -> np.ndarray:
        B, R, G = (dict(zip(parts, means[role[k]], strict=True)) for k in ("B", "R", "G"))
        compute = G["compute_s"] - R["compute_s"]
        contention = compute if cont and compute > 0 else 0.0
        vals = {
            "measured_step_s": G["step_s"], "ideal_step_s": B["step_s"], "gap_s": G["step_s"] - B["step_s"],
            "framework_s": R["step_s"] - B["step_s"],
            "sync_s": (G["exposed_s"] - G["straggler_s"]) - (R["exposed_s"] - R["straggler_s"]),
            "straggler_s": G["straggler_s"] - R["straggler_s"], "data_s": G["data_s"] - R["data_s"],
            "contention_s": contention, "compute_s": compute - contention, "other_s": G["other_s"] - R["other_s"],
            "efficiency": B["step_s"] / G["step_s"], "speedup": B["step_s"] / G["step_s"] * n / n0,
            "time_per_sample_s": G["step_s"] / b, "throughput_samples_per_s": n * b / G["step_s"],
        }
        return np.array([vals[c] for c in cols])

    values = [_per_work(s, parts, b) for s in sides]
    ratios = [c in ("efficiency", "speedup", "time_per_sample_s", "throughput_samples_per_s") for c in cols]
    est, lo, hi = delta_interval(fn, values, confidence=confidence, log=ratios)
    row = {**cfg, "n_ranks": n, "n_runs": len(g), "n_outliers": len(g_all) - len(g),
           "outliers": "; ".join(f"{r}: {why}" for r, why in g_all.loc[g_all["outlier"].notna(),
                                                                     ["run_id", "outlier"]].itertuples(index=False))
           or None if "outlier" in g_all else None,
           "n_steps": int(g["n_steps"].sum()), "n_partial_steps": int(g["n_partial_steps"].sum())}
    tiny = RESIDUE * abs(est[0])
    for i, c in enumerate(cols):
        v, a, z = (0.0 if abs(x) < tiny else float(x) for x in (est[i], lo[i], hi[i]))
        row[c], row[f"{c}_ci_low"], row[f"{c}_ci_high"] = v, (a if np.isfinite(lo[i]) else np.nan), \
            (z if np.isfinite(hi[i]) else np.nan)
    for c in ("gap_s", *CAUSES):
        row[f"{c}_verdict"] = verdict(row[f"{c}_ci_low"], row[f"{c}_ci_high"])
    row["efficiency_verdict"] = verdict(row["efficiency_ci_low"], row["efficiency_ci_high"], 1.0)
    gap = row["gap_s"]
    for c in CAUSES:
        row[c[:-2] + "_share"] = row[c] / gap if gap > 0 else np.nan
    rank, tied, share = slowest(g["slowest_counts"]) if "slowest_counts" in g else (pd.NA, None, np.nan)
    row.update(slowest_rank=rank, slowest_tied=tied, slowest_share=share)
    cvs = [c for c in (run_cv(g["step_s"]), run_cv(base["step_s"])) if np.isfinite(c)]
    row["repeats_for_5pct"] = repeats_to_resolve(float(np.sqrt(np.mean(np.square(cvs))))) if cvs else np.nan
    row["contention_evidence"] = evidence if cont and row["contention_s"] > 0 else None
    sides = [("the baseline", base)] + [(name, f) for name, f in (("the one-rank runs", ref),
                                                                   (f"the runs at {n} ranks", g_all))
                                         if _ids(f) != _ids(base)]
    row["unreliable"] = unreliable(sides)
    if row["unreliable"]:  # as in the Summary: no efficiency or speedup from disturbed sides
        for c in ("efficiency", "speedup"):
            row[c] = row[f"{c}_ci_low"] = row[f"{c}_ci_high"] = np.nan
        row["efficiency_verdict"] = None
    row["work_source"] = work_source([g, base])
    row["threads_differ"] = threads_differ([("the baseline", base), (f"the runs at {n} ranks", g)])
    row["source"] = source
    return row


def _source_of(*sides: pd.DataFrame) -> str:
    """Where a row's time came from: the runs' one ``source``, or ``mixed``."""
    return one_source([v for side in sides if "source" in side for v in side["source"]])


def _work(frame: pd.DataFrame) -> float:
    """One rank's samples per step of a side (mean of its runs' ``samples_per_step``; NaN unknown)."""
    with np.errstate(all="ignore"):
        v = frame["samples_per_step"].astype(float)
        return float(v.mean()) if v.notna().any() else np.nan


def _per_work(frame: pd.DataFrame, parts: list[str], b: float) -> np.ndarray:
    """The runs' parts in seconds per step of ``b`` samples per rank: each run's parts times
    ``b`` over its own samples per step, so a baseline whose step holds more work (gradient
    accumulation divided by the world size) is compared per sample; unchanged where the work
    is unknown or the same."""
    values = frame[parts].astype(float).to_numpy()
    if "samples_per_step" not in frame or not np.isfinite(b):
        return values
    own = frame["samples_per_step"].astype(float).to_numpy()
    scale = np.where(np.isfinite(own) & (own > 0), b / np.where(own > 0, own, 1.0), 1.0)
    return values * scale[:, None]


def _joined_evidence(per_run: pd.Series) -> str | None:
    """The runs' contention evidence as one text: each fact once, and of the ranks seen above
    their CPU share only the highest ("a rank at 146 % CPU against its share of 100 %")."""
    pieces = list(dict.fromkeys(p.strip() for text in per_run for p in str(text).split(";") if p.strip()))
    above = [p for p in pieces if p.startswith("a rank at ")]
    if len(above) > 1:
        top = max(above, key=lambda p: float(p.split()[3]) if p.split()[3].replace(".", "", 1).isdigit() else 0.0)
        pieces = [p for p in pieces if p not in above or p == top]
    return "; ".join(pieces) or None


def _contention(g: pd.DataFrame, one: pd.DataFrame | None) -> tuple[bool, str | None]:
    """Do most runs of ``g`` show CPU contention? By their own evidence (ranks × threads above
    the cores, a rank above its share), or by demand: each rank of the configuration's
    one-rank runs (``one``) used c % CPU, and ranks_per_host · c exceeds the host's cores by
    more than 10 %."""
    if "contention" in g and g["contention"].fillna(False).astype(bool).mean() > 0.5:
        return True, _joined_evidence(g["contention_evidence"].dropna())
    if one is None or "rank_cpu_pct" not in g or "host_cpus" not in g or "rank_cpu_pct" not in one:
        return False, None
    def med(col: pd.Series) -> float:
        v = pd.to_numeric(col, errors="coerce").astype(float).dropna()
        return float(v.median()) if len(v) else np.nan

    c, cpus, per_host = med(one["rank_cpu_pct"]), med(g["host_cpus"]), med(g["ranks_per_host"])
    if not (np.isfinite(c) and np.isfinite(cpus) and np.isfinite(per_host)) or per_host < 2:
        return False, None
    if per_host * c > 1.1 * 100 * cpus:
        return True, (f"each rank used {c:.0f} % CPU at one rank: {per_host:.0f} ranks need {per_host * c:.0f} % "
                      f"of the host's {100 * cpus:.0f} %")
    return False, None


def _select(table: pd.DataFrame, selector: Mapping[str, object]) -> pd.DataFrame:
    mask = pd.Series(True, index=table.index)
    for col, val in selector.items():
        if col not in table:
            raise ScalescopeError(f"baseline selects on {col!r}, which the runs table lacks")
        if val is None or (isinstance(val, float) and np.isnan(val)):
            mask &= table[col].isna()
        else:
            mask &= table[col].isin(list(val)) if isinstance(val, (list, tuple, set)) else table[col] == val
    return table[mask.fillna(False).astype(bool)]


def _above_ideal(d: dict) -> str:
    """For an efficiency above 1 that is not within noise: its likely causes, the common ones
    first, each with the evidence the row has."""
    if not d["efficiency"] > 1 or d.get("efficiency_verdict") == WITHIN_NOISE:
        return ""
    causes = []
    if d.get("work_source") in ("batch_size", "mixed"):
        causes.append("the work per step taken from the configured batch size, not counted (a script that "
                      "accumulates gradients or picks its own batch processes a different number of samples per step)")
    causes.append("a baseline slower than it should be (a neighbour process during its repeats: compare their "
                  "neighbour CPU)")
    causes.append("a per-rank working set that now fits in cache (a real superlinear speedup)")
    return "; above 1 (faster than ideal), likely causes: " + "; ".join(causes)


def _ms(seconds: float) -> str:
    """Milliseconds with three significant digits (0.0123 ms, 1.23 ms, 123 ms)."""
    v = 1e3 * seconds
    return f"{v:.3g} ms" if v != 0 else "0 ms"


def explain_loss(loss: pd.DataFrame, *, label: Sequence[str] = ("config_backend", "batch_size", *MACHINE_AXES),
                 top: int = 3) -> list[str]:
    """One sentence per row of :func:`scaling_loss` (rank counts above one).

    E.g. "At 2 ranks horovod-gloo (batch 75) reaches 0.46 of ideal (95 % interval
    0.41-0.52); of the 12.3 ms lost per step, 70 % is exposed synchronisation, 20 % is
    waiting for rank 1." Causes are listed largest first, those adding at least 5 % to the
    loss and distinguishable from run-to-run noise (``X_verdict``); a cause whose interval
    holds 0 is never named: the sentence says which are within noise. With fewer than 3
    repeats there is no interval and the sentence says the shares are untested. When some
    causes are negative (faster than the reference there), the shares are of the time the
    positive causes add, and the sentence says so and how much the others won back.
    """
    require_columns(loss, ("n_ranks", "efficiency", "gap_s", *CAUSES), "explain_loss")
    out = []
    for d in loss[loss["n_ranks"] > 1].to_dict("records"):
        name = str(d.get("config_backend", "the configuration"))
        cols = [*label, *(c for c in d if str(c).startswith("vary_") and c not in label)]
        extra = [(f"batch {d[c]}" if c == "batch_size" else f"{str(c).removeprefix('vary_')} {d[c]}") for c in cols
                 if c != "config_backend" and c in d and pd.notna(d[c])]
        if pd.notna(d.get("inject")) and d.get("inject"):
            extra.append(f"injected {d['inject']}")
        who = name + (f" ({', '.join(extra)})" if extra else "")
        if isinstance(d.get("unreliable"), str):
            out.append(f"At {int(d['n_ranks'])} ranks {who}: no efficiency is given, the comparison is unreliable "
                       f"({d['unreliable']}); rerun on a quiet machine.")
            continue
        head = f"At {int(d['n_ranks'])} ranks {who} reaches {d['efficiency']:.2f} of ideal"
        lo, hi = d.get("efficiency_ci_low"), d.get("efficiency_ci_high")
        tested = lo is not None and pd.notna(lo) and pd.notna(hi)
        if tested:
            head += f" (95 % interval {lo:.2f}-{hi:.2f})"
        elif "efficiency_ci_low" in d:
            n = int(d.get("n_runs", 0))
            head += (f" (no interval: {n} repeat(s), fewer than 3)" if n < 3 else
                     f" (no interval: {n} repeats here, but a run it is compared with, the baseline or the "
                     "one-rank run, has fewer than 3 usable repeats)")
        gap = d["gap_s"]
        if not gap > 0:
            out.append(head + "; its steps are no slower than the baseline's" + _above_ideal(d) + ".")
            continue
        if d.get("gap_s_verdict") == WITHIN_NOISE:
            out.append(f"{head}; the {_ms(gap)} per step it loses is within run-to-run noise.")
            continue

        def known(c: str, d: dict = d) -> bool:
            return d.get(f"{c}_verdict") != WITHIN_NOISE

        labels = _labels(d)
        added = sum(d[c] for c in CAUSES if d[c] > 0)
        causes = sorted(((d[c] / added, c) for c in CAUSES if d[c] > 0 and d[c] / added >= 0.05 and known(c)),
                        reverse=True)[:top]
        noise = [labels[c] for c in CAUSES if d[c] > 0 and d[c] / added >= 0.05 and not known(c)]
        words = []
        for share, c in causes:
            w = labels[c]
            if c == "straggler_s":
                if pd.notna(d.get("slowest_rank")):
                    w = f"waiting for rank {int(d['slowest_rank'])}"
                elif d.get("slowest_tied"):
                    w = f"waiting for the slowest rank (ranks {d['slowest_tied']} equally often)"
            if c == "contention_s" and d.get("contention_evidence"):
                w += f" ({d['contention_evidence']})"
            words.append(f"{100 * share:.0f} % is {w}")
        tail = ", ".join(words) if words else "no single cause distinguishable from noise reaches 5 %"
        if noise:
            tail += f"; {', '.join(noise)} within noise"
        if not tested and "efficiency_ci_low" in d:
            tail += " (shares untested against noise)"
        if isinstance(d.get("threads_differ"), str):
            tail += f"; the runs compared ran different threads ({d['threads_differ']}), so compute per step differs"
        back = [c for c in CAUSES if d[c] < 0 and -d[c] >= 0.05 * gap]
        if back:
            won = ", ".join(f"{_ms(-d[c])} in {labels[c]}" for c in back)
            out.append(f"{head}; it loses {_ms(gap)} per step: the causes that add time add {_ms(added)}, of which "
                       f"{tail}; {won} won back.{_source_words(d)}")
        else:
            out.append(f"{head}; of the {_ms(gap)} lost per step, {tail}.{_source_words(d)}")
    return out


def _labels(d: dict) -> dict[str, str]:
    """The cause words for one row: on device time, ``other_s`` is the device idle waiting
    for the host (launches, Python, blocking calls): the run is host-bound there."""
    if d.get("source") in ("events", "kernels"):
        return {**CAUSE_LABELS, "other_s": DEVICE_OTHER_LABEL}
    return CAUSE_LABELS


def _source_words(d: dict) -> str:
    """What the sentence adds about its source: nothing for host time on a CPU run (where
    host time is the whole truth); device time named; host time of a GPU run flagged."""
    src = d.get("source")
    if src in ("events", "kernels"):
        return f" Times are {SOURCE_LABELS[src]}."
    if src == "mixed":
        return f" Times are {SOURCE_LABELS['mixed']}: compare with care."
    if pd.notna(d.get("gpu_model")) and d.get("gpu_model"):
        return (" Times are host time on a GPU run (no CUDA events recorded): a phase that holds a blocking "
                "call absorbs the device's backlog, so the split between causes is uncertain.")
    return ""
