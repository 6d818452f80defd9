"""Injection at three magnitudes: rank 1 sleeps 10, 20 or 40 ms in its data loading every
step (``--inject data:MS@1``), clean and injected 2-rank DDP runs interleaved in time, 4
repeats each (so that one outlier repeat, flagged and left out, still leaves an interval). Per step and averaged over the two ranks, rank 1 spends MS more in ``data`` and
rank 0 waits MS longer for it (``straggler``): the recovered cause, data + waiting against
the clean runs, must grow linearly with MS and each must fall inside its 95 % interval."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from validation._sweeps import runset, sweep

from analysis import metrics as M
from analysis.metrics.stats import DISTINGUISHABLE, delta_interval

pytestmark = pytest.mark.slow
MAGNITUDES_MS = (10, 20, 40)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = tmp_path_factory.mktemp("magnitudes")
    refs = sweep(root / "refs", "--np", "1", "--backend", "ddp-gloo", "--baseline", "--repeats", "4",
                 data=root / "cache")
    two = sweep(root / "two", "--np", "2", "--backend", "ddp-gloo", "--repeats", "4", "--vary",
                "inject=none," + ",".join(f"data:{ms}@1" for ms in MAGNITUDES_MS), data=root / "cache")
    rs = runset(refs, two)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = M.measure_runs(rs.events, rs.usable_runs(), epochs=rs.epochs, samples=rs.samples)
        loss = M.scaling_loss(rs.events, rs.usable_runs(), measured=m, epochs=rs.epochs)
    return m, loss


def _added(m, ms, parts=("data_s", "straggler_s")):
    """What the injection added per step against the clean 2-rank runs (the sum of
    ``parts``), with its interval."""
    two = m[(m["n_ranks"] == 2) & m["outlier"].isna()]
    clean = two[two["inject"].isna()]
    hit = two[two["inject"] == f"data:{ms}@1"]
    assert len(clean) >= 3 and len(hit) >= 3, (len(clean), len(hit))
    v = lambda g: g[list(parts)].sum(axis=1).to_numpy(float)[:, None]  # noqa: E731
    est, lo, hi = delta_interval(lambda s: np.array([s[0][0] - s[1][0]]), [v(hit), v(clean)])
    print(f"data:{ms}@1: {'+'.join(parts)} {1e3 * est[0]:.1f} ms ({1e3 * lo[0]:.1f} to {1e3 * hi[0]:.1f}), "
          f"{len(hit)} and {len(clean)} runs")  # for benchmarks/README.md
    return float(est[0]), float(lo[0]), float(hi[0])


def _recovered(m, ms):
    return _added(m, ms)


def _sleep_overshoot(ms: float, n: int = 20) -> float:
    """How much longer than asked a ``time.sleep`` of ``ms`` takes on this machine now (the
    largest of ``n``): the injection is such a sleep, so the step time it adds is the delay
    plus this, never less than the delay."""
    import time

    over = []
    for _ in range(n):
        t0 = time.perf_counter()
        time.sleep(ms / 1e3)
        over.append(time.perf_counter() - t0 - ms / 1e3)
    return max(over)


@pytest.mark.parametrize("ms", MAGNITUDES_MS)
def test_each_injected_delay_falls_inside_its_interval(measured, ms):
    m, _ = measured
    # the sleep overshoots by the machine's scheduling delay (measured here, not assumed)
    over = _sleep_overshoot(ms)
    # the step grows by the delay at most. On a quiet machine by the delay itself (10.2 ms,
    # 7.8-12.6, for 10); on a CPU-contended one by less, for real: the clean step carries the
    # delays of ranks waiting for a core (with a busy loop beside, 13.6 ms steps holding 7.8 ms
    # of exposed synchronisation), and in the injected runs part of that waiting happens
    # under rank 1's sleep (the step grew 6.8, 16.6, 35.4 ms for 10, 20, 40)
    est, lo, hi = _added(m, ms, parts=("step_s",))
    assert lo <= ms / 1e3 + over, (ms, est, lo, hi)
    # the recovered cause (data + waiting: 9.3, 19.6, 39.6 ms in that contended run) cannot
    # exceed the delay, and is consistent with at
    # least 85 % of it: judged with its interval (both sides' run-to-run noise), not by the
    # point estimate alone (on a loaded machine 10 ms came out at 7.3 ms, 4.2 to 10.3). Some
    # of rank 0's wait may be counted as exposed synchronisation, hence not 100 %.
    cause, clo, chi = _recovered(m, ms)
    assert clo <= ms / 1e3 + over and chi >= 0.85 * ms / 1e3, (ms, cause, clo, chi)


def test_recovered_cause_grows_linearly(measured):
    m, _ = measured
    x = np.array(MAGNITUDES_MS, float) / 1e3
    y = np.array([_recovered(m, ms)[0] for ms in MAGNITUDES_MS])
    slope, intercept = np.polyfit(x, y, 1)
    assert 0.85 <= slope <= 1.15, (slope, intercept, y)
    assert abs(intercept) <= 0.005, (slope, intercept, y)


def test_scaling_loss_names_data_and_waiting_as_distinguishable(measured):
    _, loss = measured
    row = loss[(loss["n_ranks"] == 2) & (loss["inject"] == "data:40@1")].iloc[0]
    assert row["data_s_verdict"] == DISTINGUISHABLE and row["straggler_s_verdict"] == DISTINGUISHABLE
    assert row["slowest_rank"] == 1
    (sentence,) = [s for s in M.explain_loss(loss) if "data:40@1" in s]
    assert "data loading" in sentence and "waiting for rank 1" in sentence
