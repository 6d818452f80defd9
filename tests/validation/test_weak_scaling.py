"""A weak-scaling script (fixed work per rank, no dataset, like Horovod's synthetic
benchmark): the report compares it by throughput, and its efficiency is the throughput ratio
X(n) / (n X(1)) measured independently from the step records, the same number in every
study."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from validation._sweeps import runset, sweep

from analysis import metrics as M
from analysis import report

pytestmark = pytest.mark.slow
SCRIPT = ["python", "tests/validation/weak_synthetic.py", "--steps", "24"]


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    root = tmp_path_factory.mktemp("weak")
    return sweep(root / "weak", "--np", "1,2", "--backend", "ddp-gloo", "--baseline", "--repeats", "3",
                 script=SCRIPT)


@pytest.fixture(scope="module")
def tables(exp):
    rs = runset(exp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pr = M.run_summary(rs)
        summary = M.scaling_table(pr, baseline="none")
        loss = M.scaling_loss(rs.events, rs.usable_runs(), epochs=rs.epochs, samples=rs.samples)
    return rs, pr, summary, loss


def test_mode_is_throughput(tables):
    rs, *_ = tables
    modes, notes = M.scaling_mode(rs.usable_runs(), rs.epochs)
    assert set(modes.values()) == {"throughput"} and notes == []


def _wall_throughput(rs, run_id):
    """Samples per second over the kept steps, from the step windows' wall clock (first kept
    step start to last step end over all ranks), not from mean step times."""
    steps = M.step_table(rs.filter(run_id=run_id).events, runs=rs.usable_runs())
    kept = steps[~steps["warmup"]]
    w = M.step_times(rs.filter(run_id=run_id).events)
    w = w.merge(kept[["rank", "epoch", "step"]].astype(object).assign(keep=True).astype({"rank": "Int32",
                "epoch": "Int32", "step": "Int32"}), on=["rank", "epoch", "step"], how="inner")
    n = rs.usable_runs().set_index("run_id").loc[run_id, "n_ranks"]
    per_rank = len(w) / n
    span = (w.groupby("rank")["step_end_ns"].max() - w.groupby("rank")["step_start_ns"].min()).max() / 1e9
    return n * per_rank * 64 / span


def test_efficiency_is_the_throughput_ratio_in_every_study(tables):
    rs, _, summary, loss = tables
    runs = rs.usable_runs()
    x = {rid: _wall_throughput(rs, rid) for rid in runs["run_id"]}
    x1 = np.mean([x[r] for r in runs.loc[runs["framework"] == "none", "run_id"]])
    x2 = np.mean([x[r] for r in runs.loc[(runs["framework"] == "ddp") & (runs["n_ranks"] == 2), "run_id"]])
    ratio = x2 / (2 * x1)
    s = summary.set_index(["config_backend", "n_ranks"]).loc[("ddp-gloo", 2)]
    w = loss.set_index(["config_backend", "n_ranks"]).loc[("ddp-gloo", 2)]
    assert s["efficiency_frac"] == pytest.approx(w["efficiency"], rel=1e-12)
    assert s["speedup"] == pytest.approx(w["speedup"], rel=1e-12)
    # the wall-clock throughput ratio includes the gaps between steps: near, not equal
    assert s["efficiency_frac"] == pytest.approx(ratio, rel=0.15), (s["efficiency_frac"], ratio)


def test_report_gives_one_efficiency(exp, tmp_path):
    import pandas as pd

    report.build_report(exp, tmp_path / "rep", static=False)
    summary = pd.read_csv(tmp_path / "rep" / "export" / "summary.csv").set_index(["config_backend", "n_ranks"])
    scaling = pd.read_csv(tmp_path / "rep" / "export" / "scaling.csv").set_index(["config_backend", "n_ranks"])
    why = pd.read_csv(tmp_path / "rep" / "export" / "why_not_ideal.csv").set_index(["config_backend", "n_ranks"])
    for n in (1, 2):
        e = why.loc[("ddp-gloo", n), "efficiency"]
        assert summary.loc[("ddp-gloo", n), "efficiency_frac"] == pytest.approx(e, rel=1e-9)
        assert scaling.loc[("ddp-gloo", n), "efficiency_frac"] == pytest.approx(e, rel=1e-9)
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "fixed iterations (no dataset): compared by throughput" in html
