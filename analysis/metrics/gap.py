"""Why not ideal? The scaling gap split into causes that add up (study 0).

One step of a data-parallel run at ``n`` ranks with a fixed per-rank batch should take as
long as one step of the one-process baseline. :func:`scaling_loss` measures how much longer
it takes and splits that gap into named causes; ``docs/metrics.md`` ("Why not ideal?")
defines every term and says how the split was validated by injecting known delays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd

from analysis.errors import ScalescopeError
from analysis.metrics._common import require_columns
from analysis.metrics.breakdown import WARMUP, time_breakdown
from analysis.schema import MACHINE_AXES

#: The causes, in the order figures stack them; they sum to ``gap_s``.
CAUSES: tuple[str, ...] = ("framework_s", "sync_s", "straggler_s", "data_s", "compute_s", "other_s")
#: Words for the causes in sentences and legends.
CAUSE_LABELS: dict[str, str] = {
    "framework_s": "framework overhead at one rank",
    "sync_s": "exposed synchronisation",
    "straggler_s": "waiting for the slowest rank",
    "data_s": "data loading",
    "compute_s": "compute (forward, backward, optimizer)",
    "other_s": "other / idle",
}
_PARTS = ("step_s", "data_s", "compute_s", "exposed_s", "straggler_s", "other_s")
# MACHINE_AXES (analysis.schema): when the runs differ in one, it joins ``by`` (and a
# ``"none"`` baseline must share it).


def rank_step_parts(events: pd.DataFrame, *, warmup: int | str | None = WARMUP) -> pd.DataFrame:
    """Per (run, rank, step): the step split into data, compute, exposed sync and other,
    with the time this rank waited for the slowest rank.

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
    Steps are matched across ranks by (epoch, step) number. Durations, not end times, are
    compared, so clock offsets between ranks do not matter: after a synchronisation every
    rank starts its next step together, and a rank with more work before the next one makes
    the others wait in it. ``busy_s`` comes from the breakdown's exclusive sets, so a sync
    wait nested in ``backward`` (DDP) is not counted as work.
    """
    b = time_breakdown(events, level="step", warmup=warmup)
    out = pd.DataFrame({
        "run_id": b["run_id"].astype(object), "rank": b["rank"], "epoch": b["epoch"], "step": b["step"],
        "step_s": b["step_time_s"], "data_s": b["data_s"],
        "compute_s": b["forward_s"] + b["backward_s"] + b["optimizer_s"],
        "exposed_s": b["sync_exposed_s"], "other_s": b["other_s"],
        "busy_s": b["data_s"] + b["forward_s"] + b["backward_s"],
    })
    if out.empty:
        return out.assign(wait_s=pd.Series(dtype=float), straggler_s=pd.Series(dtype=float),
                          is_slowest=pd.Series(dtype=bool))
    mx = out.groupby(["run_id", "epoch", "step"], dropna=False, observed=True)["busy_s"].transform("max")
    n = out.groupby(["run_id", "epoch", "step"], dropna=False, observed=True)["rank"].transform("size")
    out["wait_s"] = np.where(n > 1, mx - out["busy_s"], 0.0)
    out["straggler_s"] = np.minimum(out["wait_s"], out["exposed_s"])
    out["is_slowest"] = (out["busy_s"] == mx) & (n > 1)
    return out


def _per_run(parts: pd.DataFrame) -> pd.DataFrame:
    """Mean per step on each rank, then mean over ranks: one row per run."""
    per_rank = parts.groupby(["run_id", "rank"], observed=True)[list(_PARTS)].mean()
    out = per_rank.groupby("run_id").mean()
    slow = parts[parts["is_slowest"]].groupby(["run_id", "rank"], observed=True).size()
    out["slowest_rank"] = (slow.groupby("run_id").idxmax().map(lambda t: t[1])
                           .reindex(out.index) if len(slow) else np.nan)
    out["n_steps"] = parts.groupby("run_id").size().reindex(out.index)
    return out.reset_index()


def _select(table: pd.DataFrame, selector: Mapping[str, object]) -> pd.DataFrame:
    mask = pd.Series(True, index=table.index)
    for col, val in selector.items():
        if col not in table:
            raise ScalescopeError(f"baseline selects on {col!r}, which the runs table lacks")
        mask &= table[col].isin(list(val)) if isinstance(val, (list, tuple, set)) else table[col] == val
    return table[mask.fillna(False).astype(bool)]


def _bootstrap(values: np.ndarray, *, n_boot: int, confidence: float, rng: np.random.Generator) -> np.ndarray:
    """Percentile interval of the mean over repeats (rows), per column; NaN with one repeat."""
    m = values.shape[0]
    if m < 2:
        return np.full((2, values.shape[1]), np.nan)
    idx = rng.integers(0, m, size=(n_boot, m))
    means = values[idx].mean(axis=1)
    lo = (1 - confidence) / 2
    return np.quantile(means, [lo, 1 - lo], axis=0)


def scaling_loss(
    events: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    by: Sequence[str] = ("config_backend", "batch_size"),
    baseline: str | Mapping[str, object] = "none",
    match: Sequence[str] = ("batch_size",),
    mode: Literal["strong", "weak"] = "strong",
    warmup: int | str | None = WARMUP,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Why not ideal: per configuration and rank count, the step-time gap to the ideal
    split into causes that sum to it.

    Parameters
    ----------
    events
        Event frame of the runs (our phases, comm-hook records, Horovod timelines).
    runs
        Runs table (``RunSet.usable_runs()``): ``run_id``, ``framework``, ``n_ranks`` and
        the ``by`` and ``match`` columns; an ``inject`` column marks runs with an injected
        delay, which are never used as references.
    by
        Columns that define a configuration; ``cluster`` and ``partition`` are added when
        the runs differ in them (each machine against its own ``"none"`` baseline, unless a
        mapping picks one), and ``inject`` when the runs have it.
    baseline
        ``"none"`` (default): the one-process runs without a framework that share the
        ``match`` columns; a mapping ``{column: value}`` picks the baseline runs explicitly
        (e.g. across experiments); ``"min"``: the configuration's own one-rank run (no
        framework overhead is separated then).
    match
        Columns a ``"none"`` baseline must share with the configuration.
    mode
        ``"strong"`` (the dataset is split over the ranks) or ``"weak"`` (it grows with
        them). With a fixed per-rank batch both have the same per-step ideal, the
        baseline's step time; they differ in the epoch: ``ideal_epoch_s`` is the
        baseline's epoch time divided by ``n`` (strong) or equal to it (weak).
    warmup
        Warm-up steps dropped on every rank (:func:`~analysis.metrics.breakdown.warmup_count`).
    n_boot, confidence, seed
        Bootstrap over the repeats of each (configuration, n): percentile interval of the
        mean, for every column with a ``_ci_low``/``_ci_high`` pair.

    Returns
    -------
    pandas.DataFrame
        One row per configuration and ``n_ranks``: ``mode``, ``n_runs``, ``n_steps``,
        ``ideal_step_s``, ``measured_step_s``, ``gap_s``, the causes ``framework_s``,
        ``sync_s``, ``straggler_s``, ``data_s``, ``compute_s``, ``other_s`` (s per step,
        summing to ``gap_s``), ``efficiency`` (ideal / measured), each with
        ``_ci_low``/``_ci_high``; ``*_share`` of each cause in the gap; ``slowest_rank``
        (the rank most often last to finish its work); ``baseline`` and ``reference`` (which
        runs the ideal and the one-rank framework figures come from).

    Notes
    -----
    Per run, every quantity is the mean per step on each rank, then the mean over ranks
    (warm-up dropped). With B the baseline (mean over its repeats), R the configuration's
    one-rank framework run (its uninjected repeats), and the run at ``n`` ranks:

    * ``ideal_step_s`` = B.step, ``gap_s`` = step - B.step, ``efficiency`` = B.step / step;
    * ``framework_s`` = R.step - B.step (the one-rank overhead; 0 without R);
    * ``data_s`` = data - R.data; ``compute_s`` = compute - R.compute;
      ``other_s`` = other - R.other;
    * ``straggler_s`` = straggler - R.straggler (the part of the exposed sync spent waiting
      for the slowest rank: per step ``min(wait, exposed)``, see :func:`rank_step_parts`);
    * ``sync_s`` = (exposed - straggler) - (R.exposed - R.straggler).

    Since step = data + compute + exposed + other for every run, the causes sum to
    ``gap_s`` exactly. Without R (no one-rank run of the configuration), R = B.
    """
    require_columns(runs, ("run_id", "framework", "n_ranks", *by, *match), "scaling_loss")
    if mode not in ("strong", "weak"):
        raise ScalescopeError(f"mode must be 'strong' or 'weak', not {mode!r}")
    # machines are configurations of their own, each against its own baseline
    axes = [c for c in MACHINE_AXES if c in runs and c not in by and runs[c].nunique(dropna=True) > 1]
    by = [*by, *axes] + (["inject"] if "inject" in runs and "inject" not in by else [])
    if baseline == "none":
        match = [*match, *(c for c in axes if c not in match)]
    parts = rank_step_parts(events, warmup=warmup)
    if parts.empty:
        raise ScalescopeError("no run has training-phase records (kind 'phase') to split the step time")
    per_run = _per_run(parts)
    meta = runs[list(dict.fromkeys(["run_id", "framework", "n_ranks", *by, *match]))].copy()
    meta["run_id"] = meta["run_id"].astype(object)
    if "inject" not in meta:
        meta["inject"] = None
    table = meta.merge(per_run, on="run_id", how="inner")
    clean = table[table["inject"].isna()]
    rng = np.random.default_rng(seed)
    rows = []
    fw = table[table["framework"] != "none"]
    for key, group in fw.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        cfg = dict(zip(by, key, strict=True))
        same = {c: v for c, v in cfg.items() if c != "inject"}
        one = _select(clean[clean["framework"] != "none"], same)
        one = one[one["n_ranks"] == 1]
        if isinstance(baseline, Mapping):
            base, base_note = _select(clean, baseline), f"selected: {dict(baseline)}"
        elif baseline == "none":
            base = clean[(clean["framework"] == "none") & (clean["n_ranks"] == 1)]
            base = _select(base, {c: cfg[c] for c in match if c in cfg})
            base_note = "one process without a framework" + (f", same {', '.join(match)}" if match else "")
        elif baseline == "min":
            base, base_note = one, "the configuration's own one-rank run"
        else:
            raise ScalescopeError(f"baseline must be 'none', 'min' or a mapping of run columns, not {baseline!r}")
        if base.empty:
            raise ScalescopeError(
                "no baseline runs for " + ", ".join(f"{c}={v}" for c, v in cfg.items())
                + " (a one-process run without a framework, e.g. the sweep's --baseline); "
                "pass baseline='min' to use the configuration's one-rank run")
        b = base[list(_PARTS)].mean()
        r = one[list(_PARTS)].mean() if len(one) else b
        ref_note = (f"{len(one)} one-rank run(s) of the configuration" if len(one)
                    else "none: framework overhead not separated (no one-rank run)")
        for n, g in group.groupby("n_ranks", sort=True):
            v = pd.DataFrame({
                "measured_step_s": g["step_s"],
                "gap_s": g["step_s"] - b["step_s"],
                "framework_s": r["step_s"] - b["step_s"],
                "sync_s": (g["exposed_s"] - g["straggler_s"]) - (r["exposed_s"] - r["straggler_s"]),
                "straggler_s": g["straggler_s"] - r["straggler_s"],
                "data_s": g["data_s"] - r["data_s"],
                "compute_s": g["compute_s"] - r["compute_s"],
                "other_s": g["other_s"] - r["other_s"],
                "efficiency": b["step_s"] / g["step_s"],
            })
            mean = v.mean()
            ci = _bootstrap(v.to_numpy(float), n_boot=n_boot, confidence=confidence, rng=rng)
            row = {**cfg, "n_ranks": int(n), "mode": mode, "n_runs": len(g), "n_steps": int(g["n_steps"].sum()),
                   "ideal_step_s": float(b["step_s"])}
            for i, col in enumerate(v.columns):
                row[col] = float(mean[col])
                row[f"{col}_ci_low"], row[f"{col}_ci_high"] = float(ci[0, i]), float(ci[1, i])
            gap = row["gap_s"]
            for c in CAUSES:
                row[c[:-2] + "_share"] = row[c] / gap if gap > 0 else np.nan
            slow = g["slowest_rank"].dropna()
            row["slowest_rank"] = int(slow.mode().iloc[0]) if len(slow) else pd.NA
            row["baseline"] = base_note
            row["reference"] = ref_note
            rows.append(row)
    if not rows:
        raise ScalescopeError("no run with a framework (Horovod or DDP) to explain")
    out = pd.DataFrame(rows)
    out["slowest_rank"] = out["slowest_rank"].astype("Int32")
    out["ideal_epoch_rule"] = "baseline epoch / n" if mode == "strong" else "baseline epoch"
    return out


def explain_loss(loss: pd.DataFrame, *, label: Sequence[str] = ("config_backend", "batch_size", *MACHINE_AXES),
                 top: int = 3) -> list[str]:
    """One sentence per row of :func:`scaling_loss` (rank counts above one).

    E.g. "At 2 ranks horovod-gloo (batch 75) reaches 0.46 of ideal; of the 12.3 ms lost per
    step, 70 % is exposed synchronisation, 20 % is waiting for rank 1." Causes are listed
    largest first, those adding at least 5 % to the loss. When some causes are negative
    (the configuration is faster than its reference there), the shares are of the time the
    positive causes add, and the sentence says how much the others won back.
    """
    require_columns(loss, ("n_ranks", "efficiency", "gap_s", *CAUSES), "explain_loss")
    out = []
    for r in loss[loss["n_ranks"] > 1].itertuples(index=False):
        d = r._asdict()
        name = str(d.get("config_backend", "the configuration"))
        extra = [(f"batch {d[c]}" if c == "batch_size" else f"{c} {d[c]}") for c in label
                 if c != "config_backend" and c in d and pd.notna(d[c])]
        if pd.notna(d.get("inject")) and d.get("inject"):
            extra.append(f"injected {d['inject']}")
        who = name + (f" ({', '.join(extra)})" if extra else "")
        head = f"At {int(d['n_ranks'])} ranks {who} reaches {d['efficiency']:.2f} of ideal"
        gap = d["gap_s"]
        if not gap > 0:
            out.append(head + "; its steps are no slower than the baseline's.")
            continue
        added = sum(d[c] for c in CAUSES if d[c] > 0)
        causes = sorted(((d[c] / added, c) for c in CAUSES if d[c] / added >= 0.05), reverse=True)[:top]
        words = []
        for share, c in causes:
            w = CAUSE_LABELS[c]
            if c == "straggler_s" and pd.notna(d.get("slowest_rank")):
                w = f"waiting for rank {int(d['slowest_rank'])}"
            words.append(f"{100 * share:.0f} % is {w}")
        tail = ", ".join(words) if words else "no single cause reaches 5 %"
        back = [c for c in CAUSES if d[c] < 0 and -d[c] >= 0.05 * gap]
        if back:
            won = ", ".join(f"{-1e3 * d[c]:.1f} ms in {CAUSE_LABELS[c]}" for c in back)
            tail += f" (shares of the {1e3 * added:.1f} ms the causes add; {won} won back)"
        out.append(f"{head}; of the {1e3 * gap:.1f} ms lost per step, {tail}.")
    return out
