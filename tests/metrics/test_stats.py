"""Known answers for the statistics (intervals, verdicts, outliers, repeats needed) and for
the per-run measures every study shares (partial batches, scaling mode, contention)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from analysis.metrics import compare_groups, scaling_loss, scaling_mode, scaling_table, step_table
from analysis.metrics.measures import cpu_contention, neighbour_cpu, select_baseline, slowest
from analysis.metrics.stats import (
    DISTINGUISHABLE,
    NO_INTERVAL,
    WITHIN_NOISE,
    delta_interval,
    flag_outliers,
    ratio,
    repeats_to_resolve,
    verdict,
)
from analysis.schema import concat, make_events

US = 1000


def test_difference_of_means_is_welchs_interval():
    a, b = np.array([10.0, 12.0, 11.0, 13.0]), np.array([8.0, 9.0, 8.5])
    est, lo, hi = delta_interval(lambda m: np.array([m[0][0] - m[1][0]]), [a[:, None], b[:, None]])
    va, vb = a.var(ddof=1) / 4, b.var(ddof=1) / 3
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    half = st.t.ppf(0.975, df) * np.sqrt(va + vb)
    assert est[0] == pytest.approx(a.mean() - b.mean())
    assert (lo[0], hi[0]) == pytest.approx((a.mean() - b.mean() - half, a.mean() - b.mean() + half))


def test_ratio_interval_includes_the_baselines_variance():
    num = [2.0, 2.2, 1.8]
    den_fixed = [1.0, 1.0, 1.0]
    den_noisy = [0.8, 1.0, 1.2]
    _, lo1, hi1 = ratio(num, den_fixed)
    _, lo2, hi2 = ratio(num, den_noisy)
    assert hi2 - lo2 > hi1 - lo1  # the baseline's spread widens the interval
    # delta method on log r = log mean(num) - log mean(den), r = 2: var(num)/3 / 2² and
    # var(den)/3 / 1², Welch-Satterthwaite degrees of freedom, back-transformed (positive,
    # asymmetric like a ratio's interval)
    v_num, v_den = np.var(num, ddof=1) / 3 / 4, np.var(den_noisy, ddof=1) / 3
    df = (v_num + v_den) ** 2 / (v_num**2 / 2 + v_den**2 / 2)
    half = st.t.ppf(0.975, df) * np.sqrt(v_num + v_den)
    assert (lo2, hi2) == pytest.approx((2 * np.exp(-half), 2 * np.exp(half)), rel=1e-5)
    assert lo2 > 0
    assert ratio([1.0, 2.0], [1.0, 1.0, 1.0])[1] != ratio([1.0, 2.0], [1.0, 1.0, 1.0])[1]  # NaN: fewer than 3
    assert ratio([1.0], [1.0], same=True) == (1.0, 1.0, 1.0)


def test_no_interval_below_three_repeats_on_a_side_that_matters():
    a3, b2 = np.array([[1.0], [1.1], [0.9]]), np.array([[2.0], [2.1]])
    _, lo, hi = delta_interval(lambda m: np.array([m[0][0], m[0][0] / m[1][0]]), [a3, b2])
    assert np.isfinite(lo[0]) and np.isnan(lo[1])  # the first output does not depend on b
    assert verdict(lo[1], hi[1]) == NO_INTERVAL


def test_verdicts():
    assert verdict(0.1, 0.3) == DISTINGUISHABLE
    assert verdict(-0.1, 0.3) == WITHIN_NOISE
    assert verdict(0.9, 0.95, 1.0) == DISTINGUISHABLE
    assert verdict(np.nan, np.nan) == NO_INTERVAL


def test_repeats_to_resolve_five_percent():
    z = st.norm.ppf(0.975) + st.norm.ppf(0.8)
    assert repeats_to_resolve(0.05) == np.ceil(2 * z**2)  # cv equal to the difference: 16
    assert repeats_to_resolve(0.001) == 3  # never fewer than 3
    assert np.isnan(repeats_to_resolve(np.nan))


def test_outlier_flagged_by_name_only_beyond_the_siblings_spread():
    v = pd.Series([1.00, 1.02, 0.99, 1.80], index=["a", "b", "c", "d"])
    out = flag_outliers(v)
    assert out.isna().tolist() == [True, True, True, False]
    assert out["d"].startswith("1.78×")
    # an even spread: nobody is an outlier
    assert flag_outliers(pd.Series([1.0, 1.2, 1.4, 1.6])).isna().all()
    # two repeats: never
    assert flag_outliers(pd.Series([1.0, 3.0])).isna().all()
    # within 10 %: never, however tight the others
    assert flag_outliers(pd.Series([1.0, 1.0, 1.0, 1.08])).isna().all()


def test_slowest_rank_pooled_with_ties():
    assert slowest([{0: 3, 1: 5}, {0: 4, 1: 1}]) == (0, None, 7 / 13)
    rank, tied, share = slowest([{0: 8}, {1: 8}])
    assert rank is pd.NA and tied == "0, 1" and share == 0.5


def _run_steps(run_id, rank, step_us, n_steps, *, epochs=1, data_us=1):
    names, steps, eps, starts, durs = [], [], [], [], []
    t = 0
    k = 0
    for e in range(epochs):
        for _ in range(n_steps):
            d = step_us[k % len(step_us)] if isinstance(step_us, list) else step_us
            for name, s, du in (("step", t, d), ("data", t, data_us), ("forward", t + data_us, d - data_us)):
                names.append(name), steps.append(k), eps.append(e), starts.append(s * US), durs.append(du * US)
            t += d
            k += 1
    return make_events(run_id=run_id, rank=rank, kind="phase", cat="phase", source="t", name=names, step=steps,
                       epoch=eps, start_ns=starts, dur_ns=durs)


def test_partial_batches_are_marked_from_the_epoch_samples():
    # 250 samples per epoch at batch 100: steps of 100, 100 and 50 samples
    ev = _run_steps("r", 0, [10, 10, 5], 3, epochs=2)
    runs = pd.DataFrame({"run_id": ["r"], "n_ranks": [1], "batch_size": [100]})
    epochs = pd.DataFrame({"run_id": "r", "rank": 0, "epoch": [0, 1], "samples": [250, 250]})
    t = step_table(ev, runs=runs, epochs=epochs, warmup=0)
    assert t["samples"].tolist() == [100, 100, 50] * 2
    assert t["full"].tolist() == [True, True, False] * 2


def _loss_case(base_us, one_us, two_us):
    frames, rows = [], []
    for i, us in enumerate(base_us):
        frames.append(_run_steps(f"b{i}", 0, us, 6))
        rows.append({"run_id": f"b{i}", "framework": "none", "config_backend": "none", "n_ranks": 1})
    for i, us in enumerate(one_us):
        frames.append(_run_steps(f"o{i}", 0, us, 6))
        rows.append({"run_id": f"o{i}", "framework": "ddp", "config_backend": "ddp-gloo", "n_ranks": 1})
    for i, us in enumerate(two_us):
        frames += [_run_steps(f"t{i}", 0, us, 6), _run_steps(f"t{i}", 1, us, 6)]
        rows.append({"run_id": f"t{i}", "framework": "ddp", "config_backend": "ddp-gloo", "n_ranks": 2})
    return concat(frames), pd.DataFrame(rows).assign(batch_size=10, n_nodes=1)


def test_loss_intervals_hold_the_baselines_variance_and_efficiency_is_its_own_row():
    ev, runs = _loss_case([10, 11, 9], [10, 10, 10], [20, 21, 19])
    t = scaling_loss(ev, runs, warmup=0).set_index("n_ranks")
    two = t.loc[2]
    assert two["efficiency"] == two["ideal_step_s"] / two["measured_step_s"]
    assert two["efficiency_ci_low"] < two["efficiency"] < two["efficiency_ci_high"]
    assert two["efficiency_verdict"] == DISTINGUISHABLE
    # the baseline's spread enters: gap = G - B with var(G mean) = var(B mean) = (1 µs)²/3,
    # so 4 Welch-Satterthwaite degrees of freedom (a fixed baseline would give 2)
    half = st.t.ppf(0.975, 4) * np.sqrt(2 / 3) * 1e-6
    assert (two["gap_s_ci_high"] - two["gap_s_ci_low"]) / 2 == pytest.approx(half, rel=1e-6)
    ev2, runs2 = _loss_case([10, 10, 10], [10, 10, 10], [20, 21, 19])
    fixed = scaling_loss(ev2, runs2, warmup=0).set_index("n_ranks").loc[2]
    half2 = st.t.ppf(0.975, 2) * np.sqrt(1 / 3) * 1e-6
    assert (fixed["gap_s_ci_high"] - fixed["gap_s_ci_low"]) / 2 == pytest.approx(half2, rel=1e-6)
    # no constant string columns: the notes are attributes
    assert "baseline" not in t.columns and "mode" not in t.columns and t.attrs["baseline"]
    # the Summary's efficiency is the same number
    pr = runs.assign(time_per_sample_s=runs["run_id"].map(
        {r: np.mean(v) * 1e-6 / 10 for r, v in zip(runs["run_id"], [10, 11, 9, 10, 10, 10, 20, 21, 19], strict=True)}))
    s = scaling_table(pr, by=("config_backend", "batch_size")).set_index(["config_backend", "n_ranks"])
    assert s.loc[("ddp-gloo", 2), "efficiency_frac"] == pytest.approx(two["efficiency"], rel=1e-12)


def test_explain_loss_never_names_a_cause_within_noise():
    from analysis.metrics import explain_loss

    # the 2-rank runs are slower only through noise: gap within noise
    ev, runs = _loss_case([10, 11, 9], [10, 11, 9], [9, 13, 10])
    t = scaling_loss(ev, runs, warmup=0)
    (sentence,) = explain_loss(t)
    assert "within run-to-run noise" in sentence


def test_scaling_mode_from_the_samples():
    runs = pd.DataFrame({"run_id": ["a", "b", "c", "d"], "framework": "ddp", "config_backend": ["s", "s", "w", "w"],
                         "batch_size": 10, "n_ranks": [1, 2, 1, 2], "scaling": "strong"})
    epochs = pd.DataFrame({"run_id": ["a", "b", "b", "c", "d", "d"], "rank": [0, 0, 1, 0, 0, 1], "epoch": 0,
                           "samples": [1000, 500, 500, 1000, 1000, 1000]})
    modes, notes = scaling_mode(runs, epochs)
    assert modes == {("s", 10): "strong", ("w", 10): "weak"}
    assert len(notes) == 1 and "w" in notes[0] and "--scaling strong" in notes[0]
    modes, _ = scaling_mode(runs, epochs.iloc[0:0])
    assert set(modes.values()) == {"throughput"}


def test_contention_from_threads_and_from_cpu_share():
    runs = pd.DataFrame({"run_id": ["h", "d"], "framework": ["horovod", "ddp"], "n_ranks": 2, "n_nodes": 1,
                         "threads_per_rank": [1, 1], "host_cpus": [2, 2]})
    c = cpu_contention(runs, None).set_index("run_id")
    assert bool(c.loc["h", "oversubscribed"]) and not bool(c.loc["d", "oversubscribed"])
    assert "2 ranks × 2 threads on 2 cores" in c.loc["h", "evidence"]
    mixed = cpu_contention(runs.assign(threads_mixed=[True, False]), None).set_index("run_id")
    assert "differ between ranks" in mixed.loc["h", "evidence"] and pd.isna(mixed.loc["d", "evidence"])
    samples = pd.DataFrame({"run_id": "d", "host": "h", "cpu_core": [0, 1, pd.NA, pd.NA],
                            "rank": [pd.NA, pd.NA, 0, 1], "cpu_util_pct": [100.0, 100.0, 180.0, 90.0]})
    c = cpu_contention(runs[["run_id", "framework", "n_ranks", "n_nodes"]], samples).set_index("run_id")
    assert bool(c.loc["d", "over_share"]) and c.loc["d", "host_cpus"] == 2


def test_neighbour_cpu_is_the_hosts_busy_cores_less_the_runs_ranks():
    # two sample times on a 4-core host: host 75 % then 50 % busy; the run's two ranks 100 + 50 %
    # then 100 + 100 %: 150 % then 0 % of a core used by others, median 75 %; a second host
    # with no neighbour counts less, the largest host is taken
    rows = []
    for ts, host_pct, r0, r1 in ((1, 75.0, 100.0, 50.0), (2, 50.0, 100.0, 100.0)):
        rows += [{"ts_ns": ts, "host": "a", "cpu_core": c, "rank": pd.NA, "cpu_util_pct": host_pct} for c in range(4)]
        rows += [{"ts_ns": ts, "host": "a", "cpu_core": pd.NA, "rank": pd.NA, "cpu_util_pct": host_pct},
                 {"ts_ns": ts, "host": "a", "cpu_core": pd.NA, "rank": 0, "cpu_util_pct": r0},
                 {"ts_ns": ts, "host": "a", "cpu_core": pd.NA, "rank": 1, "cpu_util_pct": r1},
                 {"ts_ns": ts, "host": "b", "cpu_core": 0, "rank": pd.NA, "cpu_util_pct": 50.0},
                 {"ts_ns": ts, "host": "b", "cpu_core": pd.NA, "rank": pd.NA, "cpu_util_pct": 50.0},
                 {"ts_ns": ts, "host": "b", "cpu_core": pd.NA, "rank": 2, "cpu_util_pct": 60.0}]
    s = pd.DataFrame(rows).assign(run_id="r")
    s["cpu_core"], s["rank"] = s["cpu_core"].astype("Int16"), s["rank"].astype("Int32")
    assert neighbour_cpu(s).to_dict() == {"r": pytest.approx(75.0)}
    assert neighbour_cpu(None).empty and neighbour_cpu(s.drop(columns=["rank"])).empty


def test_one_baseline_rule():
    t = pd.DataFrame({"run_id": list("abcd"), "framework": ["none", "none", "ddp", "ddp"], "n_ranks": [1, 1, 1, 2],
                      "batch_size": [10, 20, 10, 10], "inject": [None, None, None, None]})
    g = t[t["framework"] == "ddp"]
    assert select_baseline(t, g, "none", ["batch_size"])["run_id"].tolist() == ["a"]
    assert select_baseline(t, g, "min", ["batch_size"])["run_id"].tolist() == ["c"]
    assert select_baseline(t, g, {"framework": "none"}, ["batch_size"])["run_id"].tolist() == ["a"]


def test_compare_groups_verdicts():
    pr = pd.DataFrame({"config_backend": "x", "batch_size": 10, "n_ranks": 1, "framework": "ddp",
                       "partition": ["a"] * 3 + ["b"] * 3, "time_per_sample_s": [1.0, 1.1, 0.9, 2.0, 2.1, 1.9]})
    c = compare_groups(pr, axis="partition").set_index("partition")
    assert c.loc["b", "relative_time"] == pytest.approx(2.0)
    assert c.loc["b", "relative_time_verdict"] == DISTINGUISHABLE
    assert pd.isna(c.loc["a", "relative_time_verdict"])  # the reference row


def test_flag_outliers_of_no_runs_is_empty():
    # an empty frame's row-wise join is a frame, not keys: scaling_loss on runs without
    # phase records raised a raw pandas ValueError from here instead of saying why
    out = flag_outliers(pd.Series([], dtype=float), pd.DataFrame({"config_backend": [], "n_ranks": []}))
    assert out.empty
