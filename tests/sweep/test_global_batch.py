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
