"""The sweep mode that holds the global batch fixed (``--global-batch-size``)."""

from __future__ import annotations

import pytest

from instrumentation import sweep
from instrumentation.sweep import RunSpec, plan_runs


def test_per_rank_batch_is_the_global_batch_over_the_ranks():
    plan = plan_runs(nps=[1, 2, 4], backends=["ddp-gloo"], baseline=True, global_batches=[120, 240])
    got = [(s.run_id, s.np, s.batch_size) for s in plan]
    assert got[:4] == [("baseline_np1_gbs120_r1", 1, 120), ("ddp-gloo_np1_gbs120_r1", 1, 120),
                       ("ddp-gloo_np2_gbs120_r1", 2, 60), ("ddp-gloo_np4_gbs120_r1", 4, 30)]
    assert {s.np * s.batch_size for s in plan if s.global_batch == 240} == {240}


def test_the_mode_is_recorded_and_read_back():
    spec = plan_runs(nps=[2], backends=["ddp-gloo"], global_batches=[150])[0]
    cfg = spec.config(experiment="e")
    assert cfg["batch_mode"] == "global" and cfg["global_batch_size"] == 150 and cfg["batch_size"] == 75
    assert RunSpec.from_config(cfg) == spec
    per_rank = plan_runs(nps=[2], backends=["ddp-gloo"], batch_sizes=[75])[0]
    assert "batch_mode" not in per_rank.config(experiment="e")
    assert RunSpec.from_config(per_rank.config(experiment="e")) == per_rank


@pytest.mark.parametrize(("nps", "g", "words"), [([1, 2, 4], 150, "150 does not divide by 4"),
                                                 ([3], 100, "100 does not divide by 3")])
def test_a_global_batch_the_ranks_do_not_divide_is_refused(nps, g, words):
    with pytest.raises(ValueError, match=words):
        plan_runs(nps=nps, backends=["ddp-gloo"], global_batches=[g])


def test_the_two_batch_options_exclude_each_other(tmp_path, capsys):
    rc = sweep.main(["--np", "1,2", "--batch-size", "75", "--global-batch-size", "150", "--backend", "ddp-gloo",
                     "--out", str(tmp_path / "e"), "--dry-run", "--", "python", "train.py"])
    assert rc == 2
    assert "--batch-size and --global-batch-size exclude each other" in capsys.readouterr().err


@pytest.mark.slow
def test_a_real_fixed_global_batch_sweep_end_to_end(tmp_path):
    """The example at 1 and 2 ranks with the global batch fixed at 60 and 120: each run trained
    with G / ranks per rank (its manifest's batch), and the analysis groups by the global batch,
    so the 2-rank runs are compared with the baseline of the same global batch."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from analysis import metrics as M
    from analysis.runset import RunSet

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "gbs"
    proc = subprocess.run(
        [sys.executable, "-m", "instrumentation.sweep", "--np", "1,2", "--global-batch-size", "60,120",
         "--backend", "ddp-gloo", "--baseline", "--threads", "1", "--timeout", "180", "--out", str(out), "--",
         "python", "examples/strain_stress.py", "--epochs", "1", "--samples", "600", "--data-dir",
         str(tmp_path / "data"), "--device", "cpu"],
        capture_output=True, text=True, cwd=root, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = json.loads((out / "experiment.json").read_text())["runs"]
    assert sorted(r["run_id"] for r in runs) == sorted(
        [f"baseline_np1_gbs{g}_r1" for g in (60, 120)] + [f"ddp-gloo_np{n}_gbs{g}_r1" for n in (1, 2) for g in (60, 120)])
    rs = RunSet.from_dirs([out])
    r = rs.runs.set_index("run_id")
    assert (r["batch_mode"] == "global").all()
    assert r.loc["ddp-gloo_np2_gbs120_r1", "batch_size"] == 60 and r.loc["ddp-gloo_np2_gbs120_r1", "global_batch_size"] == 120
    pr = M.run_summary(rs)
    by = M.config_by(pr)
    assert by == ("config_backend", "global_batch_size")
    sp = M.run_speedups(pr, baseline="none", by=by, match=M.baseline_match(by))
    two = sp[sp["run_id"] == "ddp-gloo_np2_gbs120_r1"]
    base = pr.set_index("run_id").loc["baseline_np1_gbs120_r1", "time_per_sample_s"]
    assert two["efficiency_frac"].item() == pytest.approx(base / two["time_per_sample_s"].item())
    t = M.batch_by_ranks(pr, by=("config_backend",))
    assert set(t.loc[t["n_ranks"] == 2, "batch_size"]) == {30, 60}
