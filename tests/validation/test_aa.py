"""A/A test: the same configuration under two labels, repeats interleaved in time, must come
out "within noise" in the comparison the report makes (``compare_groups``), and in every
study's own tables.

``--vary seed=0,00`` runs the example twice per repeat with ``--seed 0`` and ``--seed 00``:
the same number, so the same data, model and configuration, under two labels. The false
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
    rs = runset(sweep(root / "aa", "--np", "1", "--backend", "ddp-gloo", "--repeats", "3", "--vary", "seed=0,00",
                      data=root / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rs, M.run_summary(rs)


def test_repeats_are_interleaved(aa):
    rs, _ = aa
    runs = rs.runs.sort_values("start_time")
    assert runs["vary_seed"].tolist() == ["0", "00"] * 3


def test_the_two_labels_are_not_distinguishable(aa):
    _, pr = aa
    cmp = M.compare_groups(pr, axis="vary_seed", keys=("config_backend", "batch_size", "n_ranks"))
    other = cmp[~cmp["reference"]].iloc[0]
    assert other["n_runs"] == 3
    assert other["relative_time_ci_low"] <= 1 <= other["relative_time_ci_high"], other
    assert other["relative_time_verdict"] == WITHIN_NOISE
    assert other["repeats_for_5pct"] >= 3
