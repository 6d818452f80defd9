"""Validation by injection: real 2-rank runs with a known delay, recovered by scaling_loss.

The references (the baseline and the one-rank runs of DDP and Horovod over Gloo) come from
one sweep; the 2-rank runs from a second whose ``--vary inject=none,data:40@1,backward:30``
and ``--repeats 2`` interleave clean and injected runs in time (clean, data, backward, clean,
data, backward), so a load that comes and goes on the machine falls on both sides of each
comparison. Same data and batch size everywhere (12 steps per rank and epoch at 2 ranks).
``docs/metrics.md`` ("Validation by injection") and ``benchmarks/README.md`` give the numbers.
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from _helpers import HVD_MISSING
from _noise import mean_and_error

from analysis import metrics as M
from analysis.metrics.breakdown import step_times
from analysis.metrics.gap import CAUSES
from analysis.runset import RunSet

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow
BACKENDS = ["ddp-gloo"] + ([] if HVD_MISSING else ["horovod-gloo"])


def _sweep(out, data, *options):
    p = subprocess.run(
        [sys.executable, "-m", "instrumentation.sweep", "--batch-size", "50", "--backend", ",".join(BACKENDS),
         "--timeout", "180", "--out", str(out), *options, "--", "python", "examples/strain_stress.py",
         "--epochs", "1", "--samples", "1600", "--data-dir", str(data), "--device", "cpu"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    root = tmp_path_factory.mktemp("inject")
    return [_sweep(root / "references", root / "cache", "--np", "1", "--baseline"),
            _sweep(root / "two_ranks", root / "cache", "--np", "2", "--repeats", "2",
                   "--vary", "inject=none,data:40@1,backward:30")]


@pytest.fixture(scope="module")
def loss(sweeps):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rs = RunSet.from_dirs(sweeps)
        table = M.scaling_loss(rs.events, rs.usable_runs())
    return table, rs


def _noise(rs, backend, inject) -> float:
    """Standard error of the mean step time of the 2-rank runs of one configuration, from
    the spread of their steps (tests/_noise.py): the noise of the comparison on this
    machine, now."""
    runs = rs.usable_runs()
    runs = runs[(runs["config_backend"] == backend) & (runs["n_ranks"] == 2)]
    runs = runs[runs["inject"].isna()] if inject is None else runs[runs["inject"] == inject]
    st = step_times(rs.filter(run_id=list(runs["run_id"])).events)
    per_step = st.groupby(["run_id", "epoch", "step"])["step_time_s"].max()  # the ranks wait for each other
    return mean_and_error(per_step)[1]


def _tolerance(rs, backend, inject) -> float:
    """Three standard errors of the difference between the clean and the injected runs."""
    return 3 * math.hypot(_noise(rs, backend, None), _noise(rs, backend, inject))


def _row(table, backend, inject):
    t = table[(table["config_backend"] == backend) & (table["n_ranks"] == 2)]
    t = t[t["inject"].isna()] if inject is None else t[t["inject"] == inject]
    assert len(t) == 1 and t["n_runs"].iloc[0] == 2, t
    return t.iloc[0]


def test_injection_is_recorded_in_the_runs_table(loss):
    _, rs = loss
    assert set(rs.runs["inject"].dropna()) == {"data:40@1", "backward:30"}
    assert rs.runs["inject"].isna().sum() == 1 + len(BACKENDS) + 2 * len(BACKENDS)  # references, clean 2-rank


def test_causes_sum_to_the_gap_within_one_percent(loss):
    table, _ = loss
    total = table[list(CAUSES)].sum(axis=1)
    assert ((total - table["gap_s"]).abs() <= 0.01 * table["gap_s"].abs() + 1e-12).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_delay_on_rank_1_is_data_and_waiting_not_sync(loss, backend):
    table, rs = loss
    clean, slow = _row(table, backend, None), _row(table, backend, "data:40@1")
    tol = _tolerance(rs, backend, "data:40@1")  # the machine's noise, measured in these runs
    added = slow["measured_step_s"] - clean["measured_step_s"]
    d_data = slow["data_s"] - clean["data_s"]
    d_wait = slow["straggler_s"] - clean["straggler_s"]
    d_sync = slow["sync_s"] - clean["sync_s"]
    # both ranks take longer per step (up to 40 ms; less where the sleep frees a core)
    assert added > 0.020 - tol, (added, tol)
    assert d_data + d_wait >= 0.8 * added - tol, (added, d_data, d_wait, d_sync, tol)
    # rank 0's wait for rank 1 (half of the mean over two ranks) is waiting, not sync
    assert d_wait >= 0.3 * added - tol and d_wait > d_sync - tol, (added, d_wait, d_sync, tol)
    assert slow["slowest_rank"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_delay_grows_compute(loss, backend):
    table, rs = loss
    clean, slow = _row(table, backend, None), _row(table, backend, "backward:30")
    tol = _tolerance(rs, backend, "backward:30")
    added = slow["measured_step_s"] - clean["measured_step_s"]
    # where the ranks' threads oversubscribe the cores (Horovod's background thread beside
    # torch's on 2 cores), grown compute is attributed to CPU contention, a cause of its own:
    # the sleep in backward is compute grown either way
    grown = lambda r: r["compute_s"] + r.get("contention_s", 0.0)  # noqa: E731
    d_compute = grown(slow) - grown(clean)
    assert d_compute >= 0.8 * 0.030 - tol, (added, d_compute, tol)
    assert d_compute >= 0.7 * added - tol, (added, d_compute, tol)


def test_fresh_ddp_run_has_exposed_sync_and_partial_overlap(loss):
    _, rs = loss
    runs = rs.usable_runs()
    (run_id,) = runs.loc[(runs["config_backend"] == "ddp-gloo") & (runs["n_ranks"] == 2) & runs["inject"].isna()
                         & (runs["repeat"] == 1), "run_id"]
    ev = rs.filter(run_id=run_id).events
    b = M.time_breakdown(ev, level="rank")
    assert len(b) == 2 and (b["sync_exposed_s"] > 0).all()
    assert (b["sync_total_s"] >= b["sync_exposed_s"]).all()
    o = M.ddp_comm_overlap(ev)
    assert len(o) == 2 and (o["overlap_backward_frac"] < 1).all()
