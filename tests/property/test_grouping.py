"""The one grouping rule (analysis.metrics.grouping) on synthetic run tables: however many
experiments, partitions, modes and --vary values a report reads, no ratio divides one group's
runs by another group's baseline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import metrics as M

hyp = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")


def _runs(groups: list[dict], n_ranks: tuple[int, ...], repeats: int) -> pd.DataFrame:
    """Each group: a baseline at one rank and ddp-gloo at every rank count, its time per
    sample t0 · (1 + slowdown · (n - 1)): never faster than its own baseline."""
    rows = []
    for g in groups:
        for r in range(1, repeats + 1):
            jitter = 1 + 0.01 * r
            rows.append({**g["axes"], "framework": "none", "config_backend": "baseline", "n_ranks": 1,
                         "repeat": r, "time_per_sample_s": g["t0"] * jitter})
            for n in n_ranks:
                rows.append({**g["axes"], "framework": "ddp", "config_backend": "ddp-gloo", "n_ranks": n,
                             "repeat": r, "time_per_sample_s": g["t0"] * jitter * (1 + g["slow"] * (n - 1))})
    pr = pd.DataFrame(rows)
    pr["run_id"] = [f"run{i}" for i in range(len(pr))]
    pr["group"] = pr["experiment"].astype(str) + "/" + pr["vary_lr"].astype(str) + "/" + pr["scaling"] + "/" + pr["batch_size"].astype(str)
    return pr


_group = st.fixed_dictionaries({
    "experiment": st.sampled_from(["alpha", "beta", "weak", "lr"]),
    "partition": st.sampled_from(["alpha", "beta"]),
    "scaling": st.sampled_from(["strong", "weak"]),
    "vary_lr": st.sampled_from([None, "sqrt", "linear"]),
    "batch_size": st.sampled_from([75, 150]),
    "t0": st.floats(1e-5, 1e-2),
    "slow": st.floats(0.0, 2.0),
})


@hyp.settings(max_examples=25, deadline=None)
@hyp.given(st.lists(_group, min_size=1, max_size=5, unique_by=lambda g: (g["experiment"], g["vary_lr"],
                                                                       g["scaling"], g["batch_size"])),
           st.sampled_from([(1, 2), (2, 4), (1, 2, 4)]))
def test_no_ratio_pools_groups(groups, n_ranks):
    # one partition per experiment and one mode per experiment, as a sweep records them
    part = {g["experiment"]: g["partition"] for g in groups}
    for g in groups:
        g["axes"] = {"experiment": g["experiment"], "partition": part[g["experiment"]], "scaling": g["scaling"],
                     "vary_lr": g["vary_lr"], "batch_size": g["batch_size"]}
    pr = _runs(groups, n_ranks, repeats=2)
    by = M.config_by(pr)
    sp = M.run_speedups(pr, baseline="none", by=by, match=M.baseline_match(by))
    # a run against its own group's baseline mean: at most the repeats' jitter (1.02 / 1.01) above 1
    assert (sp["efficiency_frac"] <= 1.02 / 1.01 + 1e-9).all(), sp.loc[sp["efficiency_frac"] > 1.01, [*by, "n_ranks"]]
    # every baseline comes from the configuration's own group
    group_of = pr.set_index(pr.index)["group"]
    for _, row in sp.iterrows():
        ids = [int(i) for i in str(row["_base_ids"]).split(",") if i]
        assert {group_of[i] for i in ids} == {row["group"]}
    table = M.scaling_table(pr, baseline="none", by=by, match=M.baseline_match(by))
    assert (table["efficiency_frac"].dropna() <= 1 + 1e-9).all()


def test_pooling_is_what_the_rule_prevents():
    """The same table grouped only by backend and batch (the old rule) pools a slow experiment's
    baseline into a fast one's: efficiencies far above 1. The rule gives at most 1."""
    fast = {"axes": {"experiment": "a", "partition": "alpha", "scaling": "strong", "vary_lr": None,
                     "batch_size": 75}, "t0": 1e-4, "slow": 0.5}
    slow = {"axes": {"experiment": "b", "partition": "alpha", "scaling": "strong", "vary_lr": "sqrt",
                     "batch_size": 75}, "t0": 5e-3, "slow": 0.5}
    pr = _runs([fast, slow], (2,), repeats=1)
    old = M.run_speedups(pr, baseline="none", by=("config_backend", "batch_size"))
    assert old["efficiency_frac"].max() > 5
    by = M.config_by(pr)
    assert by == ("experiment", "vary_lr", "config_backend", "batch_size")
    new = M.run_speedups(pr, baseline="none", by=by, match=M.baseline_match(by))
    assert np.isclose(new["efficiency_frac"].max(), 1.0)


def test_a_missing_value_is_matched_by_a_missing_one():
    """A run without --vary and its baseline: the baseline of a swept value never stands in."""
    pr = pd.DataFrame({"run_id": ["b0", "b1", "f"], "framework": ["none", "none", "ddp"],
                       "config_backend": ["baseline", "baseline", "ddp-gloo"], "n_ranks": [1, 1, 2],
                       "batch_size": 75, "vary_lr": [None, "sqrt", None], "time_per_sample_s": [1.0, 9.0, 2.0]})
    base = M.select_baseline(pr, pr.iloc[[2]], "none", ["batch_size", "vary_lr"])
    assert base["run_id"].tolist() == ["b0"]


def test_global_batch_mode_groups_by_the_global_batch():
    pr = pd.DataFrame({"run_id": ["b", "d1", "d2"], "framework": ["none", "ddp", "ddp"],
                       "config_backend": ["baseline", "ddp-gloo", "ddp-gloo"], "n_ranks": [1, 1, 2],
                       "batch_size": [120, 120, 60], "global_batch_size": 120, "batch_mode": "global",
                       "time_per_sample_s": [1.0, 1.1, 1.5]})
    by = M.config_by(pr)
    assert by == ("config_backend", "global_batch_size")
    t = M.scaling_table(pr, baseline="none", by=by, match=M.baseline_match(by))
    assert t.loc[t["n_ranks"] == 2, "efficiency_frac"].item() == pytest.approx(1 / 1.5)
    assert "grouped by" in M.grouped_by(by).lower()
