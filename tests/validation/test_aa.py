"""A/A test: the same configuration under two labels, repeats interleaved in time, must come
out "within noise" in the comparison the report makes (``compare_groups``), and in every
study's own tables.

``--vary seed=0,00`` runs the example twice per repeat with ``--seed 0`` and ``--seed 00``:
the same number, so the same data, model and configuration (the runs table reads both as
seed 0), under two labels, the runs' names (``..._seed0_r1``, ``..._seed00_r1``). The false
alarm rate of a 95 % interval is 5 % by construction; ``benchmarks/README.md`` ("Validating
the statistics") records the runs.
"""

from __future__ import annotations

import warnings

import pytest
from validation._sweeps import runset, sweep

from analysis import metrics as M
from analysis.metrics.stats import WITHIN_NOISE

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def aa(tmp_path_factory):
    root = tmp_path_factory.mktemp("aa")
    rs = runset(sweep(root / "aa", "--np", "1", "--backend", "ddp-gloo", "--repeats", "4", "--vary", "seed=0,00",
                      data=root / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pr = M.run_summary(rs)
    return rs, pr.assign(label=pr["run_id"].str.extract(r"_(seed0+)_")[0])


def test_repeats_are_interleaved(aa):
    rs, _ = aa
    runs = rs.runs.sort_values("start_time")
    assert runs["run_id"].str.extract(r"_(seed0+)_r")[0].tolist() == ["seed0", "seed00"] * 4


def test_the_two_labels_are_not_distinguishable(aa):
    _, pr = aa
    cmp = M.compare_groups(pr, axis="label", keys=("config_backend", "batch_size", "n_ranks"))
    other = cmp[~cmp["reference"]].iloc[0]
    runs = pr[["run_id", "time_per_sample_s", "n_steps", "outlier"]].to_string()
    # four repeats a label: one outlier repeat (a neighbour's load) still leaves an interval
    assert other["n_runs"] >= 3, runs
    assert other["relative_time_ci_low"] <= 1 <= other["relative_time_ci_high"], (other.to_dict(), runs)
    assert other["relative_time_verdict"] == WITHIN_NOISE
    assert other["repeats_for_5pct"] >= 3
    print(cmp.to_string(), runs, sep="\n")  # for benchmarks/README.md
