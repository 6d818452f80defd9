"""Work counted, not assumed (issue 34): the samples each step processed decide time per
sample, throughput, speedup and efficiency; a repeat disturbed by other processes is flagged
from its own CPU samples, and a side with too few undisturbed repeats makes the comparison
unreliable instead of a headline number."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.metrics import (
    explain_loss,
    explain_work,
    measure_runs,
    scaling_loss,
    scaling_mode,
    scaling_table,
)
from analysis.schema import concat, make_events

US = 1000  # ns


def _steps(run_id, rank, step_us, n_steps):
    names, steps, starts, durs = [], [], [], []
    for k in range(n_steps):
        for name, s, d in (("step", k * step_us, step_us), ("data", k * step_us, 1),
                           ("forward", k * step_us + 1, step_us - 1)):
            names.append(name), steps.append(k), starts.append(s * US), durs.append(d * US)
    return make_events(run_id=run_id, rank=rank, kind="phase", cat="phase", source="t", name=names, step=steps,
                       epoch=0, start_ns=starts, dur_ns=durs)


def _accumulation_case(repeats=3):
    """A script that accumulates 8 micro-batches of 4 at one rank and 8 // 2 at two (its
    configured batch is the micro-batch, 4): 32 samples per step at one rank, 16 per rank at
    two. One step: 32 µs at one rank (1 µs/sample), 20 µs at two (1.25 µs/sample)."""
    frames, runs, epochs = [], [], []
    for r in range(repeats):
        for rid, fw, n, us, per_step in ((f"b{r}", "none", 1, 32, 32), (f"t{r}", "ddp", 2, 20, 16)):
            for rank in range(n):
                frames.append(_steps(rid, rank, us, 10))
                epochs.append({"run_id": rid, "rank": rank, "epoch": 0, "samples": 10 * per_step, "steps": 10,
                               "samples_source": "counted", "epoch_time_s": 10 * us * 1e-6})
            runs.append({"run_id": rid, "framework": fw, "config_backend": "none" if fw == "none" else "ddp-gloo",
                         "n_ranks": n, "n_nodes": 1, "batch_size": 4, "global_batch_size": 4 * n})
    return concat(frames), pd.DataFrame(runs), pd.DataFrame(epochs)


def test_accumulation_divided_by_the_world_size_is_counted():
    ev, runs, epochs = _accumulation_case()
    m = measure_runs(ev, runs, epochs=epochs, warmup=0).set_index("run_id")
    assert m.loc["b0", "samples_per_step"] == 32 and m.loc["t0", "samples_per_step"] == 16
    assert (m["work_source"] == "counted").all()
    # global_batch_size is the counted one (32 at both), not batch_size · world_size (4 and 8)
    assert m.loc["b0", "global_batch_size"] == 32 and m.loc["t0", "global_batch_size"] == 32
    assert m.loc["t0", "time_per_sample_s"] == pytest.approx(1.25e-6)
    assert m.loc["t0", "throughput_samples_per_s"] == pytest.approx(32 / 20e-6)
    # by hand from the counted samples and epoch times: (320 / 200 µs) / (320 / 320 µs) / 2
    by_hand = (320 / 200e-6) / (320 / 320e-6) / 2
    loss = scaling_loss(ev, runs, epochs=epochs, warmup=0).set_index("n_ranks").loc[2]
    assert loss["efficiency"] == pytest.approx(by_hand) == pytest.approx(0.8)
    assert loss["speedup"] == pytest.approx(1.6)
    # the ideal step holds the same work as the measured one: 16 samples at the baseline's 1 µs
    assert loss["ideal_step_s"] == pytest.approx(16e-6) and loss["measured_step_s"] == pytest.approx(20e-6)
    assert loss["work_source"] == "counted"
    pr = m.reset_index()
    table = scaling_table(pr, by=("config_backend", "batch_size")).set_index(["config_backend", "n_ranks"])
    assert table.loc[("ddp-gloo", 2), "efficiency_frac"] == pytest.approx(by_hand)
    assert table.loc[("ddp-gloo", 2), "work_source"] == "counted"
    assert any("counted per rank" in n for n in explain_work(table.reset_index()))


def test_the_configured_batch_is_the_fallback_and_says_so():
    ev, runs, epochs = _accumulation_case()
    m = measure_runs(ev, runs, epochs=epochs.drop(columns=["samples_source"]), warmup=0).set_index("run_id")
    # nothing counted: the configured micro-batch, and the efficiency it implies (1.6, above ideal)
    assert (m["work_source"] == "batch_size").all() and m.loc["t0", "samples_per_step"] == 4
    loss = scaling_loss(ev, runs, epochs=epochs.drop(columns=["samples_source"]), warmup=0)
    row = loss.set_index("n_ranks").loc[2]
    assert row["efficiency"] == pytest.approx(1.6)
    (sentence,) = explain_loss(loss)
    assert "above 1 (faster than ideal), likely causes" in sentence
    assert "configured batch size, not counted" in sentence and "cache" in sentence


def test_a_partial_last_batch_still_comes_from_the_configured_batch():
    # 250 counted samples in 3 steps at batch 100: 100, 100, 50, as before counting
    ev = concat([_steps("r", 0, 10, 3)])
    runs = pd.DataFrame({"run_id": ["r"], "n_ranks": [1], "batch_size": [100]})
    epochs = pd.DataFrame({"run_id": "r", "rank": 0, "epoch": [0], "samples": [250], "samples_source": "counted"})
    m = measure_runs(ev, runs, epochs=epochs, warmup=0)
    assert m["samples_per_step"].tolist() == [100] and m["n_partial_steps"].tolist() == [1]
    assert m["work_source"].tolist() == ["counted"]


def _cpu(run_id, ts, *, other_cores):
    """CPU samples of a 2-core host where the run's one rank uses one core and other
    processes ``other_cores``."""
    rows = []
    for t in ts:
        host = 100.0 * min(2.0, 1 + other_cores) / 2
        rows += [{"run_id": run_id, "host": "h", "ts_ns": t, "cpu_core": c, "rank": pd.NA, "cpu_util_pct": host}
                 for c in range(2)]
        rows += [{"run_id": run_id, "host": "h", "ts_ns": t, "cpu_core": pd.NA, "rank": pd.NA, "cpu_util_pct": host},
                 {"run_id": run_id, "host": "h", "ts_ns": t, "cpu_core": pd.NA, "rank": 0, "cpu_util_pct": 100.0}]
    return rows


def _disturbed_case(disturbed_base: int):
    frames, runs, samples = [], [], []
    base_us = [40] * disturbed_base + [20] * (3 - disturbed_base)  # disturbed repeats are slow
    for i, us in enumerate(base_us):
        frames.append(_steps(f"b{i}", 0, us, 8))
        runs.append({"run_id": f"b{i}", "framework": "none", "config_backend": "none", "n_ranks": 1})
        samples += _cpu(f"b{i}", range(5), other_cores=1.0 if i < disturbed_base else 0.0)
    for i, us in enumerate([22, 23, 22]):
        frames += [_steps(f"t{i}", 0, us, 8), _steps(f"t{i}", 1, us, 8)]
        runs.append({"run_id": f"t{i}", "framework": "ddp", "config_backend": "ddp-gloo", "n_ranks": 2})
        samples += _cpu(f"t{i}", range(5), other_cores=0.0)
    s = pd.DataFrame(samples)
    s["cpu_core"], s["rank"] = s["cpu_core"].astype("Int16"), s["rank"].astype("Int32")
    return concat(frames), pd.DataFrame(runs).assign(batch_size=10, n_nodes=1), s


def test_a_baseline_disturbed_in_most_repeats_is_flagged_and_never_the_headline():
    ev, runs, samples = _disturbed_case(2)
    m = measure_runs(ev, runs, samples=samples, warmup=0).set_index("run_id")
    assert m.loc[["b0", "b1"], "disturbed"].str.contains("other processes using 1.0 cores").all()
    assert m.loc["b2", "disturbed"] is None and m.loc["t0", "disturbed"] is None
    # the clean repeat is used, the disturbed ones are left out by name
    assert m.loc[["b0", "b1"], "outlier"].str.startswith("disturbed: ").all() and m.loc["b2", "outlier"] is None
    loss = scaling_loss(ev, runs, samples=samples, warmup=0)
    row = loss.set_index("n_ranks").loc[2]
    assert "the baseline: 2 of 3 repeat(s) ran beside other processes" in row["unreliable"]
    assert np.isnan(row["efficiency"]) and np.isnan(row["speedup"])  # as in the Summary: no number
    (sentence,) = explain_loss(loss)
    assert "no efficiency is given, the comparison is unreliable" in sentence and "of ideal" not in sentence
    table = scaling_table(m.reset_index(), by=("config_backend", "batch_size")).set_index(["config_backend", "n_ranks"])
    assert np.isnan(table.loc[("ddp-gloo", 2), "efficiency_frac"])
    assert "2 of 3" in table.loc[("ddp-gloo", 2), "unreliable"]


def test_one_disturbed_repeat_is_left_out_whatever_its_siblings_did():
    ev, runs, samples = _disturbed_case(1)
    # the disturbed repeat is as fast as its siblings here: its own samples still flag it
    ev = concat([e for rid, e in ev.groupby("run_id", observed=True) if rid != "b0"] + [_steps("b0", 0, 20, 8)])
    m = measure_runs(ev, runs, samples=samples, warmup=0).set_index("run_id")
    assert m.loc["b0", "outlier"].startswith("disturbed: the CPU samples show other processes")
    row = scaling_loss(ev, runs, samples=samples, warmup=0).set_index("n_ranks").loc[2]
    assert row["unreliable"] is None and row["efficiency"] == pytest.approx(20 / 22.333, rel=1e-3)


def test_threads_that_differ_between_the_compared_runs_are_named():
    ev, runs, epochs = _accumulation_case()
    runs = runs.assign(threads_per_rank=np.where(runs["n_ranks"] == 1, 2, 1))
    (sentence,) = explain_loss(scaling_loss(ev, runs, epochs=epochs, warmup=0))
    assert "reaches 0.80 of ideal" in sentence
    assert "different threads (2 thread(s) per rank in the baseline, 1 thread(s) per rank in the runs at 2 ranks)" \
        in sentence
    # the report passes its per-run table, which carries no threads: they come from the runs table
    measured = measure_runs(ev, runs, epochs=epochs, warmup=0).drop(columns=["threads_per_rank"])
    (again,) = explain_loss(scaling_loss(ev, runs, epochs=epochs, measured=measured))
    assert again == sentence


def test_scaling_mode_from_counted_epochs_without_a_dataset_size():
    runs = pd.DataFrame({"run_id": ["a", "b"], "framework": "ddp", "config_backend": "s", "batch_size": 8,
                         "n_ranks": [1, 2], "scaling": "strong", "dataset_size": [None, None]})
    epochs = pd.DataFrame({"run_id": ["a", "b", "b"], "rank": [0, 0, 1], "epoch": 1,
                           "samples": [9980, 4990, 4990], "samples_source": "counted", "implicit": pd.NA})
    assert scaling_mode(runs, epochs)[0] == {("s", 8): "strong"}
    # steps closed only by finish() (no epochs of its own): fixed iterations, by throughput
    assert scaling_mode(runs, epochs.assign(implicit=True))[0] == {("s", 8): "throughput"}


def test_other_load_on_cores_the_run_did_not_need_is_no_disturbance():
    ev, runs, samples = _disturbed_case(2)
    # 8 cores and one thread per rank: the neighbour's core was free for the taking
    m = measure_runs(ev, runs.assign(host_cpus=8, threads_per_rank=1), samples=samples, warmup=0)
    assert m["disturbed"].isna().all() and (m["n_disturbed"] == 0).all()
    # 2 cores, the baseline's 2 threads: the neighbour took one it needed
    m = measure_runs(ev, runs.assign(host_cpus=2, threads_per_rank=np.where(runs["n_ranks"] == 1, 2, 1)),
                     samples=samples, warmup=0).set_index("run_id")
    assert m.loc[["b0", "b1"], "disturbed"].notna().all() and m.loc["b2", "disturbed"] is None


def test_steps_of_an_epoch_without_samples_raise_no_runtime_warning():
    """A rank-epoch without samples (or a run without a batch size) gave inf · 0 in numpy, a
    RuntimeWarning printed into notebook 08's output."""
    import warnings

    ev = concat([_steps("r", 0, 10, 3), _steps("q", 0, 10, 3)])
    runs = pd.DataFrame({"run_id": ["r", "q"], "n_ranks": [1, 1], "batch_size": [100, None]})
    epochs = pd.DataFrame({"run_id": ["r", "q"], "rank": 0, "epoch": 0, "samples": [250, 300],
                           "samples_source": "counted"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = measure_runs(ev, runs, epochs=epochs.iloc[:1], warmup=0).set_index("run_id")
        n = measure_runs(ev, runs, epochs=epochs, warmup=0).set_index("run_id")
    assert m.loc["r", "samples_per_step"] == 100 and np.isnan(m.loc["q", "samples_per_step"])
    assert n.loc["q", "samples_per_step"] == 100  # no batch size configured: the counted one
