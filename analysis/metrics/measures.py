"""One definition of each headline quantity (``docs/metrics.md``, "Definitions").

Every study of the report takes its step time, time per sample, throughput, speedup,
efficiency, overhead and shares from the per-run table of :func:`run_measures`, summarised
over repeats by :func:`analysis.metrics.stats` (mean over the runs that are not flagged as
outliers). The unit of work is the *full* step: a step whose batch is smaller than the
configured batch (the last of an epoch when a rank's shard does not divide by the batch) is
counted and reported but never compared with a full one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.errors import ScalescopeError
from analysis.metrics._common import plain, require_columns
from analysis.metrics.breakdown import WARMUP, step_times, time_breakdown, warmup_steps
from analysis.metrics.stats import flag_outliers
from analysis.metrics.timesource import Source, event_arrivals, run_sources, timed_view
from analysis.schema import MACHINE_AXES

#: Per-step parts (s) every run measure is a mean of.
PARTS: tuple[str, ...] = ("step_s", "data_s", "compute_s", "exposed_s", "straggler_s", "other_s", "sync_total_s")
#: Columns that make two runs repeats of one configuration (with ``n_ranks``), where present.
CONFIG_COLUMNS: tuple[str, ...] = (*MACHINE_AXES, "gpu_model", "config_backend", "batch_size", "inject")
#: Tolerance when telling strong from weak scaling by the samples per epoch.
MODE_TOL = 0.05


def step_table(events: pd.DataFrame, *, runs: pd.DataFrame | None = None, epochs: pd.DataFrame | None = None,
               warmup: int | str | None = WARMUP, source: Source = "auto") -> pd.DataFrame:
    """Every step of every rank: its parts, whether warm-up dropped it, its samples.

    Returns
    -------
    pandas.DataFrame
        One row per (run_id, rank, epoch, step): ``source`` (``host`` or ``events``, see
        :mod:`analysis.metrics.timesource`), ``step_s``, ``data_s``, ``compute_s``
        (forward + backward + optimizer), ``exposed_s`` (``sync_exposed``), ``other_s``,
        ``sync_total_s``, ``busy_s`` (data + forward + backward), ``wait_s`` (the slowest
        rank's ``busy_s`` in that step minus this rank's; on device time of a run on one
        host, the peer wait at the step's synchronisation, ``event_arrivals``), ``straggler_s``
        (``min(wait_s, exposed_s)``), ``is_slowest`` (there: the last arriver), ``warmup`` (the warm-up rule drops it),
        ``samples`` (this rank's samples in the step; NaN when unknown), ``full`` (a full
        batch; True when unknown) and ``samples_source`` (``counted``: counted by the
        instrumentation, or given by the script and what the configured batch predicts;
        ``batch_size``; or None).

    Notes
    -----
    The samples of a step are counted where the rank's epoch metrics say so
    (``samples_source: counted``: the instrumentation saw every step's batch, accumulated
    micro-batches included); the run's configured ``batch_size`` is the fallback. With s
    samples in an epoch and batch b, the epoch's first ⌊s/b⌋ steps are full and the next one
    holds the remaining s mod b (a partial batch). b is the configured batch when the counted
    s is what it predicts (⌈s/b⌉ steps), else the counted batch per step (the largest s/steps
    over the rank's epochs that divides evenly, else ⌈s/steps⌉): a script that accumulates
    gradients over k micro-batches processes k · micro-batch per step. A rank-epoch whose
    step count does not match ⌈s/b⌉ (a run stopped mid-epoch) has only its last step marked
    partial, when s mod b > 0.
    """
    b = time_breakdown(events, level="step", warmup=0, source=source)
    out = pd.DataFrame({
        "run_id": b["run_id"].astype(object), "rank": b["rank"], "epoch": b["epoch"], "step": b["step"],
        "source": b["source"], "step_s": b["step_time_s"], "data_s": b["data_s"],
        "compute_s": b["forward_s"] + b["backward_s"] + b["optimizer_s"],
        "exposed_s": b["sync_exposed_s"], "other_s": b["other_s"], "sync_total_s": b["sync_total_s"],
        "busy_s": b["data_s"] + b["forward_s"] + b["backward_s"],
    })
    if out.empty:
        for col, dt in (("wait_s", float), ("straggler_s", float), ("is_slowest", bool), ("warmup", bool),
                        ("samples", float), ("full", bool), ("samples_source", object)):
            out[col] = pd.Series(dtype=dt)
        return out
    keys = ["run_id", "epoch", "step"]
    mx = out.groupby(keys, dropna=False, observed=True)["busy_s"].transform("max")
    n = out.groupby(keys, dropna=False, observed=True)["rank"].transform("size")
    out["wait_s"] = np.where(n > 1, mx - out["busy_s"], 0.0)
    out["straggler_s"] = 0.0
    out["is_slowest"] = ((out["busy_s"] == mx) & (n > 1)).to_numpy(bool)
    _arrival_waits(out, events)
    out["straggler_s"] = np.minimum(out["wait_s"], out["exposed_s"])
    w = step_times(timed_view(events, run_sources(events, source)))
    w = w.assign(warmup=warmup_steps(w, warmup), run_id=w["run_id"].astype(object))
    k4 = ["run_id", "rank", "epoch", "step"]
    flag = w[[*k4, "warmup"]].astype({c: object for c in k4}).drop_duplicates(k4)
    out = out.astype({c: object for c in k4[1:]}).merge(flag, on=k4, how="left")
    out["warmup"] = out["warmup"].fillna(False).astype(bool)
    out = out.astype({"rank": "Int32", "epoch": "Int32", "step": "Int32"})
    out = out.sort_values(["run_id", "rank", "epoch", "step"], kind="stable").reset_index(drop=True)
    out["samples"], out["full"], out["samples_source"] = _step_samples(out, runs, epochs)
    return out


def _arrival_waits(out: pd.DataFrame, events: pd.DataFrame) -> None:
    """On device time, a step's wait and slowest rank come from the arrivals at its
    synchronisation (:func:`analysis.metrics.timesource.event_arrivals`: the last arriver,
    each rank's peer wait), in place, for the runs whose ranks share one host (one clock);
    elsewhere the busy-time difference stands (offset-free across hosts)."""
    timed = out["source"] == "events"
    if not timed.any() or "host" not in events:
        return
    arr = event_arrivals(events)
    if arr.empty:
        return
    hosts = events[plain(events["kind"]) == "device_phase"].groupby(plain(events["run_id"]))["host"].nunique()
    arr = arr[arr["run_id"].map(hosts).fillna(0).to_numpy() <= 1]
    key = arr["run_id"].astype(str) + "/" + arr["rank"].astype(str) + "/" + arr["seq"].astype(str)
    mine = out["run_id"].astype(str) + "/" + out["rank"].astype(str) + "/" + out["step"].astype(str)
    hit = mine.map(pd.Series(arr.index, index=key.to_numpy())) if key.is_unique else pd.Series(np.nan, out.index)
    use = (timed & hit.notna()).to_numpy()
    if use.any():
        rows = arr.loc[hit[use].astype(int).to_numpy()]
        out.loc[use, "wait_s"] = rows["wait_s"].to_numpy()
        out.loc[use, "is_slowest"] = (rows["last_rank"].to_numpy() == rows["rank"].to_numpy()) & \
            (rows["n_ranks"].to_numpy() > 1)


def _step_samples(steps: pd.DataFrame, runs: pd.DataFrame | None,
                  epochs: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step: its samples, whether it is full, and where its batch comes from
    (``counted``: the rank's counted samples per step; ``batch_size``: the configured
    batch; None when neither is known). See :func:`step_table`."""
    n = len(steps)
    b = np.full(n, np.nan)
    if runs is not None and "batch_size" in runs:
        batch = runs.assign(run_id=runs["run_id"].astype(object)).set_index("run_id")["batch_size"]
        b = steps["run_id"].map(batch[~batch.index.duplicated()]).astype(float).to_numpy()
    source = np.where(np.isfinite(b), "batch_size", None).astype(object)
    if epochs is None or epochs.empty or "samples" not in epochs:
        return b.copy(), np.ones(n, dtype=bool), source
    keys = ["run_id", "rank", "epoch"]
    e = epochs.assign(run_id=epochs["run_id"].astype(object))
    e = e.dropna(subset=["samples"]).drop_duplicates(keys)
    src = e["samples_source"] if "samples_source" in e else pd.Series(None, index=e.index, dtype=object)
    e = e.assign(_counted=(src == "counted").to_numpy(), _given=(src == "given").to_numpy())
    e = e[[*keys, "samples", "_counted", "_given"]]
    grp = steps.groupby(keys, dropna=False, observed=True, sort=False)
    pos = grp.cumcount().to_numpy()
    count = grp["step"].transform("size").to_numpy()
    m = steps[keys].astype(object).merge(e.astype({"rank": object, "epoch": object}), on=keys, how="left")
    s = m["samples"].astype(float).to_numpy()
    counted = m["_counted"].fillna(False).astype(bool).to_numpy() & np.isfinite(s) & (count > 0)
    cfg_ok = np.isfinite(b) & (b > 0)
    # counted samples that the configured batch does not explain (gradient accumulation, a
    # batch the script chose itself): the batch per step is the counted one
    explained = cfg_ok & (np.ceil(s / np.where(cfg_ok, b, 1)) == count)
    use_counted = counted & ~explained
    per_step = _counted_batch(steps, s, count, use_counted)
    b = np.where(use_counted, per_step, b)
    # the script's own count (epoch_end(samples=)) confirms the configured batch where it explains it
    given = m["_given"].fillna(False).astype(bool).to_numpy() & explained
    source = np.where(counted | given, "counted", source).astype(object)
    ok = np.isfinite(s) & np.isfinite(b) & (b > 0)
    # unknown samples or batch: no full-step count (inf), computed without inf · 0 (a RuntimeWarning
    # that reached notebook 08's output)
    whole = np.floor(np.where(ok, s, 0) / np.where(ok, b, 1))
    nfull = np.where(ok, whole, np.inf)
    rem = np.where(ok, np.where(ok, s, 0) - whole * np.where(ok, b, 0), 0)
    exact = ok & (count == nfull + (rem > 0))
    partial = np.where(exact, pos >= nfull, ok & (rem > 0) & (pos == count - 1))
    samples = np.where(partial, np.where(exact, np.where(pos == nfull, rem, 0), rem), b)
    return samples, ~partial, source


def _counted_batch(steps: pd.DataFrame, s: np.ndarray, count: np.ndarray, use: np.ndarray) -> np.ndarray:
    """The samples of a full step from counted epoch samples ``s`` over ``count`` steps: per
    (run, rank) the largest ``s / count`` over its epochs that divide evenly (every step
    full), else ``ceil(s / count)``."""
    whole = np.where(use & (count > 0), s / np.where(count > 0, count, 1), np.nan)
    even = np.where(np.isfinite(whole) & (whole == np.floor(whole)), whole, np.nan)
    key = steps["run_id"].astype(str) + "\0" + steps["rank"].astype(str)
    best = pd.Series(even).groupby(key.to_numpy()).transform("max").to_numpy()
    return np.where(np.isfinite(best), best, np.ceil(whole))


def run_measures(steps: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per run: the mean of each part over its kept full steps, and the derived rates.

    Parameters
    ----------
    steps
        :func:`step_table`.
    runs
        Runs table (``run_id``, ``n_ranks``, ``batch_size``).

    Returns
    -------
    pandas.DataFrame
        One row per run: ``source`` (where its time came from), ``n_steps`` (kept full steps), ``n_partial_steps`` (partial steps
        left out), ``n_warmup_steps`` (dropped as warm-up), the :data:`PARTS` (s per step),
        ``samples_per_step`` (b: one rank's samples per kept step, mean over the steps of the
        mean over ranks; counted where :func:`step_table` counted them, else the configured
        ``batch_size``), ``work_source`` (``counted``, ``batch_size`` or ``mixed``),
        ``global_batch_size`` (n_ranks · b), ``time_per_sample_s`` (= step_s / b: one rank's
        time per sample), ``throughput_samples_per_s`` (= n_ranks · b / step_s), ``data_frac`` and
        ``sync_exposed_frac`` (of step_s), and the pooled slowest-rank counts
        ``slowest_counts`` (``{rank: steps it was slowest}``).

    Notes
    -----
    Per step (epoch, step) the parts are averaged over ranks, then over the run's kept
    full steps; a run's step time is therefore the mean over its full steps of the mean over
    its ranks.
    """
    require_columns(runs, ("run_id", "n_ranks", "batch_size"), "run_measures")
    kept = steps[~steps["warmup"] & steps["full"]]
    keys = ["run_id", "epoch", "step"]
    cols = [*PARTS, "samples"] if "samples" in kept else list(PARTS)
    per_key = kept.groupby(keys, dropna=False, observed=True)[cols].mean().reset_index()
    out = per_key.groupby("run_id")[cols].mean()
    out["n_steps"] = per_key.groupby("run_id").size()
    out["work_source"] = _work_source(kept)
    part = steps[~steps["warmup"] & ~steps["full"]].drop_duplicates(keys).groupby("run_id").size()
    warm = steps[steps["warmup"]].drop_duplicates(keys).groupby("run_id").size()
    out["source"] = steps.drop_duplicates("run_id").set_index("run_id")["source"].reindex(out.index)
    out["n_partial_steps"] = part.reindex(out.index).fillna(0).astype(int)
    out["n_warmup_steps"] = warm.reindex(out.index).fillna(0).astype(int)
    slow = kept[kept["is_slowest"]].groupby(["run_id", "rank"], observed=True).size()
    out["slowest_counts"] = [
        {int(k): int(v) for k, v in slow.loc[r].items()} if r in slow.index.get_level_values(0) else {}
        for r in out.index]
    out = out.reset_index()
    meta = runs[["run_id", "n_ranks", "batch_size"]].assign(run_id=runs["run_id"].astype(object))
    m = out.merge(meta, on="run_id", how="left")
    b = m["samples"].astype(float) if "samples" in m else m["batch_size"].astype(float)
    out["samples_per_step"] = b.to_numpy()
    out["global_batch_size"] = (m["n_ranks"].astype(float) * b).to_numpy()
    out["time_per_sample_s"] = (m["step_s"] / b).to_numpy()
    out["throughput_samples_per_s"] = (m["n_ranks"].astype(float) * b / m["step_s"]).to_numpy()
    out["data_frac"] = out["data_s"] / out["step_s"]
    out["sync_exposed_frac"] = out["exposed_s"] / out["step_s"]
    cols = ["run_id", "source", "n_steps", "n_partial_steps", "n_warmup_steps", *PARTS, "samples_per_step",
            "work_source", "global_batch_size", "time_per_sample_s", "throughput_samples_per_s", "data_frac",
            "sync_exposed_frac", "slowest_counts"]
    return out[cols]


def _work_source(kept: pd.DataFrame) -> pd.Series:
    """Per run: ``counted`` when every kept step's samples were counted, ``batch_size`` when
    they all come from the configured batch, ``mixed`` otherwise, None when unknown."""
    if "samples_source" not in kept or kept.empty:
        return pd.Series(dtype=object)

    def one(src: pd.Series) -> object:
        found = set(src.dropna())
        return None if not found else found.pop() if len(found) == 1 else "mixed"

    return kept.groupby("run_id", observed=True)["samples_source"].agg(one)


def whole(values: pd.Series) -> pd.Series:
    """``values`` as integers (``Int64``) when every known one is whole (a global batch), else as they are."""
    v = pd.to_numeric(values, errors="coerce").astype(float)
    known = v.dropna()
    return v.round().astype("Int64") if len(known) and (known == known.round()).all() else values


def config_columns(runs: pd.DataFrame, extra: Sequence[str] = ()) -> list[str]:
    """The :data:`CONFIG_COLUMNS`, every ``vary_*`` and ``label_*`` column (a swept script
    option makes configurations too) and ``extra`` that the runs table has: the repeat
    grouping."""
    swept = [c for c in runs.columns if str(c).startswith(("vary_", "label_"))]
    return [c for c in dict.fromkeys([*CONFIG_COLUMNS, *swept, *extra]) if c in runs.columns]


def outliers(per_run: pd.DataFrame, *, value: str = "time_per_sample_s",
             extra: Sequence[str] = ()) -> pd.Series:
    """:func:`analysis.metrics.stats.flag_outliers` over the repeats of each configuration
    and rank count (:func:`config_columns`): the reason per run, or None."""
    cols = list(dict.fromkeys([*config_columns(per_run, extra), "n_ranks"]))
    return flag_outliers(per_run[value], per_run[cols].astype(object).fillna("-"))


def slowest(counts: Sequence[dict]) -> tuple[object, str | None, float]:
    """Pool ``{rank: n}`` counts over runs: (the rank, or NA on a tie; the tied ranks as text;
    the share of the pooled steps the top rank(s) were slowest)."""
    total: dict[int, int] = {}
    for c in counts:
        for k, v in (c or {}).items():
            total[k] = total.get(k, 0) + v
    if not total:
        return pd.NA, None, np.nan
    top = max(total.values())
    who = sorted(k for k, v in total.items() if v == top)
    share = top / sum(total.values())
    if len(who) == 1:
        return who[0], None, share
    return pd.NA, ", ".join(str(k) for k in who), share


def scaling_mode(runs: pd.DataFrame, epochs: pd.DataFrame | None, *,
                 by: Sequence[str] = ("config_backend", "batch_size")) -> tuple[dict, list[str]]:
    """The scaling mode each configuration's runs did, and warnings where the recorded
    ``scaling`` (the sweep's ``--scaling``) disagrees.

    Returns
    -------
    (modes, warnings)
        ``modes``: ``{configuration key tuple: "strong" | "weak" | "throughput"}`` (the key
        is the values of ``by``); ``warnings``: sentences.

    Notes
    -----
    With s(n) a run's samples per rank per epoch (median over its ranks and epochs): the
    same s across rank counts (within 5 %) is weak scaling; the same n·s is strong; runs
    without samples per epoch, or without a dataset (no ``dataset_size`` and no epoch that
    the script closed with counted or given samples: fixed iterations) are compared by
    throughput ("throughput"). One rank count only: the recorded mode.
    """
    by = [c for c in by if c in runs.columns]
    modes: dict = {}
    notes: list[str] = []
    r = runs.assign(run_id=runs["run_id"].astype(object))
    per_rank = pd.Series(dtype=float)
    dataset_epochs: set = set()
    if epochs is not None and len(epochs) and "samples" in epochs:
        e = epochs.assign(run_id=epochs["run_id"].astype(object))
        per_rank = e.groupby("run_id")["samples"].median()
        if "samples_source" in e:  # epochs the script closed, their samples counted or given
            real = e["samples_source"].isin(["counted", "given"]) & (
                ~e["implicit"].fillna(False).astype(bool) if "implicit" in e else True)
            dataset_epochs = set(e.loc[real, "run_id"])
    r = r.assign(_s=r["run_id"].map(per_rank).astype(float), _epochs=r["run_id"].isin(dataset_epochs))
    fw = r[r["framework"] != "none"] if "framework" in r else r
    for key, g in fw.groupby(by, sort=True, dropna=False) if by else [((), fw)]:
        key = key if isinstance(key, tuple) else (key,)
        recorded = sorted(set(g["scaling"].dropna().astype(str))) if "scaling" in g else []
        s = g.groupby("n_ranks")["_s"].median().dropna()
        # no dataset: none recorded and no epoch with counted samples (fixed iterations)
        no_dataset = "dataset_size" in g and g["dataset_size"].isna().all() and not g["_epochs"].all()
        if g["_s"].isna().all() or no_dataset:  # fixed iterations: samples counted, no dataset
            mode = "throughput"
        elif len(s) < 2:
            mode = recorded[0] if len(recorded) == 1 else "strong"
        elif s.max() <= (1 + MODE_TOL) * s.min():
            mode = "weak"
        else:
            tot = s * s.index.to_numpy(float)
            mode = "strong" if tot.max() <= (1 + MODE_TOL) * tot.min() else "throughput"
        modes[key] = mode
        if recorded and mode in ("strong", "weak") and recorded != [mode]:
            name = ", ".join(f"{c}={v}" for c, v in zip(by, key, strict=True))
            notes.append(f"{name}: the runs did {mode} scaling (samples per rank per epoch "
                         f"{', '.join(f'{int(v)} at {int(n)}' for n, v in s.items())}) but the sweep recorded "
                         f"--scaling {'/'.join(recorded)}; the report uses {mode}.")
    return modes, notes


def cpu_contention(runs: pd.DataFrame, samples: pd.DataFrame | None) -> pd.DataFrame:
    """Per run: is the CPU oversubscribed? The evidence for a "CPU contention" cause.

    Returns
    -------
    pandas.DataFrame
        One row per run: ``host_cpus`` (cores of the busiest host: the runs table's
        ``host_cpus``, else the CPU samples' cores), ``ranks_per_host``,
        ``threads_per_rank`` (the runs table's, else NA), ``framework_threads`` (1 for
        Horovod's background thread), ``rank_cpu_pct`` (median over ranks of each rank's
        median sampled CPU, 100 % = one core), ``share_pct`` (100 · host_cpus /
        ranks_per_host), ``oversubscribed`` (ranks × (threads + framework threads) >
        cores), ``over_share`` (a rank's CPU above 110 % of its share), ``contention`` (either)
        and ``evidence`` (a sentence, None without contention; it says so when the runs
        table's ``threads_mixed`` marks ranks with different thread settings).
    """
    r = runs.assign(run_id=runs["run_id"].astype(object))
    rows = []
    cores_seen: dict = {}
    rank_cpu: dict = {}
    if samples is not None and len(samples) and "cpu_util_pct" in samples:
        s = samples.assign(run_id=samples["run_id"].astype(object))
        if "cpu_core" in s:
            c = s[s["cpu_core"].notna()]
            cores_seen = c.groupby(["run_id", "host"], observed=True)["cpu_core"].nunique().groupby("run_id").max() \
                .to_dict()
        if "rank" in s:
            rk = s[s["rank"].notna() & s["cpu_util_pct"].notna()]
            med = rk.groupby(["run_id", "rank"], observed=True)["cpu_util_pct"].median()
            rank_cpu = {rid: g.droplevel(0) for rid, g in med.groupby(level=0)}
    for row in r.itertuples(index=False):
        d = row._asdict()
        n = int(d.get("n_ranks") or 1)
        nodes = int(d.get("n_nodes") or 1) if pd.notna(d.get("n_nodes")) else 1
        per_host = int(np.ceil(n / max(nodes, 1)))
        cpus = d.get("host_cpus")
        cpus = int(cpus) if cpus is not None and pd.notna(cpus) else cores_seen.get(d["run_id"])
        threads = d.get("threads_per_rank")
        threads = int(threads) if threads is not None and pd.notna(threads) else None
        fw_threads = 1 if d.get("framework") == "horovod" else 0
        cpu = rank_cpu.get(d["run_id"])
        rank_pct = float(cpu.median()) if cpu is not None and len(cpu) else np.nan
        max_pct = float(cpu.max()) if cpu is not None and len(cpu) else np.nan
        share = 100.0 * cpus / per_host if cpus else np.nan
        over = bool(cpus and threads is not None and per_host * (threads + fw_threads) > cpus)
        above = bool(np.isfinite(share) and np.isfinite(max_pct) and max_pct > 1.1 * share)
        ev = []
        if over:
            ev.append(f"{per_host} ranks × {threads + fw_threads} threads on {cpus} cores")
        if above:
            ev.append(f"a rank at {max_pct:.0f} % CPU against its share of {share:.0f} %")
        mixed = d.get("threads_mixed")
        if ev and mixed is not None and pd.notna(mixed) and bool(mixed):
            ev.append("thread settings differ between ranks (the most is counted)")
        rows.append({"run_id": d["run_id"], "host_cpus": cpus, "ranks_per_host": per_host,
                     "threads_per_rank": threads, "framework_threads": fw_threads, "rank_cpu_pct": rank_pct,
                     "share_pct": share, "oversubscribed": over, "over_share": above,
                     "contention": over or above, "evidence": "; ".join(ev) or None})
    out = pd.DataFrame(rows, columns=["run_id", "host_cpus", "ranks_per_host", "threads_per_rank",
                                      "framework_threads", "rank_cpu_pct", "share_pct", "oversubscribed",
                                      "over_share", "contention", "evidence"])
    for col in ("host_cpus", "threads_per_rank"):
        out[col] = out[col].astype("Int64")
    return out


#: Other processes' CPU (100 = one core) above which an outlier's reason names them.
NEIGHBOUR_PCT = 50.0


def neighbour_cpu(samples: pd.DataFrame | None) -> pd.Series:
    """Per run: the CPU that processes other than its ranks used on its hosts while it ran.

    At each sample time, a host's busy CPU (its average ``cpu_util_pct`` times the cores its
    per-core samples show) less the sum of the run's ranks' ``cpu_util_pct`` on that host,
    clipped at 0; the median over the run's sample times, the largest over its hosts. 100 % is
    one core. Returns a Series indexed by ``run_id`` (runs without host and rank CPU samples are
    absent).
    """
    if samples is None or not len(samples) or not {"cpu_util_pct", "cpu_core", "rank"} <= set(samples.columns):
        return pd.Series(dtype=float, name="neighbour_cpu_pct")
    s = samples[samples["cpu_util_pct"].notna()].assign(run_id=lambda d: d["run_id"].astype(object),
                                                        host=lambda d: d["host"].astype(object))
    keys = ["run_id", "host", "ts_ns"]
    cores = s[s["cpu_core"].notna()].groupby(["run_id", "host"])["cpu_core"].nunique().rename("cores")
    host = s[s["cpu_core"].isna() & s["rank"].isna()].groupby(keys)["cpu_util_pct"].mean().rename("host_pct")
    ranks = s[s["rank"].notna()].groupby(keys)["cpu_util_pct"].sum().rename("ranks_pct")
    both = pd.concat([host, ranks], axis=1, join="inner").join(cores, on=["run_id", "host"], how="inner")
    if both.empty:
        return pd.Series(dtype=float, name="neighbour_cpu_pct")
    other = (both["host_pct"] * both["cores"] - both["ranks_pct"]).clip(lower=0)
    return other.groupby(level=["run_id", "host"]).median().groupby(level="run_id").max().rename("neighbour_cpu_pct")


def measure_runs(events: pd.DataFrame, runs: pd.DataFrame, *, epochs: pd.DataFrame | None = None,
                 samples: pd.DataFrame | None = None, warmup: int | str | None = WARMUP,
                 by: Sequence[str] = (), source: Source = "auto", steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """The one per-run table every study compares: runs metadata, :func:`run_measures`,
    ``outlier`` (why the run is left out of its configuration's mean, else None) and the
    :func:`cpu_contention` evidence (``contention``, ``contention_evidence``,
    ``rank_cpu_pct``, ``host_cpus``, ``ranks_per_host``) and :func:`neighbour_cpu`
    (``neighbour_cpu_pct``; from :data:`NEIGHBOUR_PCT` up the run is ``disturbed``, named
    with the evidence, and left out as an ``outlier`` where its configuration and rank count
    has an undisturbed repeat; ``n_repeats`` and ``n_disturbed`` count them).

    ``by``: extra columns that make runs different configurations (for the outlier test).
    ``source``: host or device time (:mod:`analysis.metrics.timesource`; default: device
    time where it was recorded). ``steps``: :func:`step_table` of the events (with these
    ``runs``, ``epochs``, ``warmup`` and ``source``) already computed, e.g. run by run
    (``RunSet.reduce_tables``); ``events`` is then not used.
    """
    require_columns(runs, ("run_id", "n_ranks", "batch_size"), "measure_runs")
    if steps is None:
        steps = step_table(events, runs=runs, epochs=epochs, warmup=warmup, source=source)
    m = run_measures(steps, runs)
    meta = runs.assign(run_id=runs["run_id"].astype(object))
    out = meta.merge(m, on="run_id", how="inner", suffixes=("_configured", ""))
    if "global_batch_size_configured" in out:  # the counted one, the configured where nothing was counted
        out["global_batch_size"] = whole(out["global_batch_size"].fillna(out.pop("global_batch_size_configured")))
    out["neighbour_cpu_pct"] = out["run_id"].map(neighbour_cpu(samples)).astype(float)
    c = cpu_contention(meta, samples)[["run_id", "contention", "evidence", "rank_cpu_pct", "host_cpus",
                                       "ranks_per_host", "threads_per_rank", "framework_threads"]]
    busy = _disturbing(out.merge(c, on="run_id", how="left", suffixes=("_run", "")))
    out = _disturbed(out, busy, extra=by)
    c = c.drop(columns=["threads_per_rank", "framework_threads"])
    out = out.merge(c.rename(columns={"evidence": "contention_evidence"}), on="run_id", how="left")
    return out.reset_index(drop=True)


def _disturbing(m: pd.DataFrame) -> np.ndarray:
    """Per run: did other processes take cores it needed? Their CPU (``neighbour_cpu_pct``)
    at least :data:`NEIGHBOUR_PCT` and, where the host's cores and the run's threads are
    known, more than the cores the run left free (cores - ranks per host × (threads per rank
    + framework threads))."""
    other = m["neighbour_cpu_pct"].astype(float).to_numpy()
    cores = pd.to_numeric(m["host_cpus"], errors="coerce").to_numpy(float)
    threads = pd.to_numeric(m["threads_per_rank"], errors="coerce").to_numpy(float)
    demand = m["ranks_per_host"].to_numpy(float) * (threads + m["framework_threads"].to_numpy(float))
    free = np.where(np.isfinite(cores) & np.isfinite(demand), cores - demand, -np.inf)
    return np.nan_to_num(other, nan=0.0) >= np.maximum(NEIGHBOUR_PCT, 100.0 * free + 1e-9)


def _disturbed(out: pd.DataFrame, busy: np.ndarray, *, extra: Sequence[str]) -> pd.DataFrame:
    """``disturbed`` (the evidence, else None), ``n_repeats`` and ``n_disturbed`` (of the
    run's configuration and rank count) and ``outlier``: a run whose own CPU samples show
    other processes taking cores it needed (``busy``, :func:`_disturbing`) is disturbed
    whatever its siblings did, and left out where its configuration and rank count has an
    undisturbed repeat; the statistical test (:func:`outliers`) runs on the others."""
    out["disturbed"] = None
    out.loc[busy, "disturbed"] = [f"the CPU samples show other processes using {pct / 100:.1f} cores while it ran"
                                  for pct in out.loc[busy, "neighbour_cpu_pct"]]
    cols = list(dict.fromkeys([*config_columns(out, extra), "n_ranks"]))
    key = out[cols].astype(object).fillna("-").astype(str).agg("\x1f".join, axis=1)
    out["n_repeats"] = key.map(key.value_counts()).astype(int)
    out["n_disturbed"] = key.map(pd.Series(busy, index=out.index).groupby(key).sum()).astype(int)
    leave = busy & (out["n_disturbed"] < out["n_repeats"]).to_numpy(bool)
    out["outlier"] = None
    if (~leave).any():
        out.loc[~leave, "outlier"] = outliers(out[~leave], extra=extra)
    stat = busy & ~leave & out["outlier"].notna().to_numpy(bool)
    out.loc[stat, "outlier"] = out.loc[stat, "outlier"] + "; " + out.loc[stat, "disturbed"]
    out.loc[leave, "outlier"] = "disturbed: " + out.loc[leave, "disturbed"]
    return out


def unreliable(sides: Sequence[tuple[str, pd.DataFrame]]) -> str | None:
    """Why a comparison cannot be trusted, or None: a side (``(name, its runs from
    measure_runs)``) half or more of whose repeats were disturbed (``n_disturbed`` of
    ``n_repeats``): no more undisturbed repeats than disturbed ones."""
    why = []
    for name, frame in sides:
        if "n_disturbed" not in frame or frame.empty:
            continue
        k, m = (pd.to_numeric(frame[c], errors="coerce").max() for c in ("n_disturbed", "n_repeats"))
        if not (np.isfinite(k) and np.isfinite(m)):  # runs without step measures (epochs only)
            continue
        k, m = int(k), int(m)
        if k and 2 * k >= m:
            cores = float(frame["neighbour_cpu_pct"].max()) / 100
            why.append(f"{name}: {k} of {m} repeat(s) ran beside other processes (their CPU samples show up to "
                       f"{cores:.1f} cores used by others), too few undisturbed repeats")
    return "; ".join(why) or None


def work_source(frames: Sequence[pd.DataFrame]) -> str | None:
    """Where the work per step of the runs in ``frames`` comes from: ``counted``,
    ``batch_size`` (the configured batch), ``mixed``, or None when unknown."""
    found = set()
    for f in frames:
        if "work_source" in f:
            found |= set(f["work_source"].dropna())
    return None if not found else found.pop() if len(found) == 1 else "mixed"


def threads_differ(sides: Sequence[tuple[str, pd.DataFrame]]) -> str | None:
    """When the compared sides (``(name, runs)``) ran different torch threads per rank
    (``threads_per_rank``): the threads of each, e.g. "1 thread(s) per rank at 2 ranks,
    2 in the baseline"; else None."""
    seen = []
    for name, frame in sides:
        if "threads_per_rank" in frame:
            vals = sorted({int(v) for v in frame["threads_per_rank"].dropna()})
            if vals:
                seen.append((name, vals))
    if len({tuple(v) for _, v in seen}) < 2:
        return None
    return ", ".join(f"{'/'.join(map(str, v))} thread(s) per rank in {name}" for name, v in seen)


def select_baseline(table: pd.DataFrame, group: pd.DataFrame, baseline: object, match: Sequence[str], *,
                    placement: Sequence[str] = ()) -> pd.DataFrame:
    """The baseline rows of one configuration (``group``: its rows), one rule for every study.

    ``"none"``: the runs without a framework at their fewest ranks (one process), without an
    injected delay, sharing each ``match`` column with the group (where the group has one
    value of it); ``"min"``: the group's own runs at its fewest rank count; a mapping
    ``{column: value}``: the rows with those values, sharing the ``match`` columns the
    mapping does not name, except the ``placement`` axes (one baseline for every partition).
    A group's missing value (no ``--vary`` value, no partition) is matched by a missing one.
    """
    def same(cand: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
        # a value the group lacks (no --vary, no partition) is a value too: the baseline lacks it
        # as well, so runs of another experiment or swept value never stand in for it
        for col in cols:
            if col not in group or col not in cand:
                continue
            vals = group[col].drop_duplicates()
            if len(vals) == 1:
                cand = cand[cand[col].isna()] if pd.isna(vals.iloc[0]) else cand[cand[col] == vals.iloc[0]]
        return cand

    if isinstance(baseline, dict) or hasattr(baseline, "items"):
        mask = pd.Series(True, index=table.index)
        for col, val in baseline.items():
            if col not in table:
                raise ScalescopeError(f"baseline selects on {col!r}, which the runs table lacks")
            mask &= table[col].isin(list(val)) if isinstance(val, (list, tuple, set)) else table[col] == val
        cand = table[mask.fillna(False).astype(bool)]
        return same(cand, [c for c in match if c not in baseline and c not in placement])
    if baseline == "min":
        return group[group["n_ranks"] == group["n_ranks"].min()]
    if baseline == "none":
        cand = table[table["framework"] == "none"]
        if "inject" in cand:
            cand = cand[cand["inject"].isna()]
        cand = same(cand, match)
        return cand[cand["n_ranks"] == cand["n_ranks"].min()] if len(cand) else cand
    raise ScalescopeError(f"baseline must be 'none', 'min' or a mapping of run columns, not {baseline!r}")
