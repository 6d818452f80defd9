"""The CUDA-event ring (instrumentation.device) with a fake event class: deterministic device
times, events that complete a few polls late, a pool that runs dry, sampling, and the
trace the analysis reads back (kind ``device_phase``)."""

from __future__ import annotations

import time

import pytest

import analysis
import instrumentation as ssi
from instrumentation import device, phases


class FakeCuda:
    """A stream whose device clock runs behind the host by the work queued on it.

    ``queue(ms)`` adds work; an event recorded now is reached when the queued work is done
    (device time = max(host time, end of queued work)); ``query()`` is True once ``late``
    more events have been recorded after it (the device runs that far behind), or after a
    ``synchronize()``; ``elapsed_time`` is exact.
    """

    device = 0

    def __init__(self, *, late: int = 20):
        self.late = late
        self.tail_ms = 0.0
        self.syncs = 0
        self.records = 0
        self.synced_upto = 0

    @staticmethod
    def host_ms() -> float:
        return time.perf_counter_ns() / 1e6

    def queue(self, ms: float) -> None:
        self.tail_ms = max(self.tail_ms, self.host_ms()) + ms

    def event(self) -> FakeEvent:
        return FakeEvent(self)

    def record(self, ev: FakeEvent) -> None:
        self.records += 1
        self.tail_ms = max(self.tail_ms, self.host_ms())
        ev.t_ms, ev.at = self.tail_ms, self.records

    def synchronize(self) -> None:
        self.syncs += 1
        self.synced_upto = self.records


class FakeEvent:
    def __init__(self, api: FakeCuda):
        self.api, self.t_ms, self.at = api, None, 0

    def query(self) -> bool:
        return self.at <= self.api.synced_upto or self.api.records - self.at >= self.api.late

    def elapsed_time(self, other: FakeEvent) -> float:
        assert self.t_ms is not None and other.t_ms is not None, "elapsed_time of an unrecorded event"
        return other.t_ms - self.t_ms


def _loop(api: FakeCuda, steps: int, *, fwd_ms: float = 2.0, bwd_ms: float = 4.0) -> None:
    for _ in range(steps):
        with ssi.phase("forward"):
            api.queue(fwd_ms)
        with ssi.phase("backward"):
            api.queue(bwd_ms)
        with ssi.phase("optimizer"):
            api.queue(0.5)
        ssi.step_end()


@pytest.fixture
def run_with_fake(tmp_path, fresh_state):
    def start(api: FakeCuda, **kw):
        run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
        phases.S.dev_factory = lambda: device.DeviceTimer(api, run.recorder.add, **kw)
        return run
    return start


def test_device_spans_follow_the_stream_not_the_host(run_with_fake):
    api = FakeCuda(late=20)  # about three steps behind
    run = run_with_fake(api, lag=2, pool=64)
    _loop(api, 12)
    ssi.finish()
    assert api.syncs == 2  # one at start (the anchor), one at finish: never in the loop
    ev = analysis.read(run.trace_path, format="scalescope_trace")
    dev = ev[ev["kind"] == "device_phase"]
    host = ev[ev["kind"] == "phase"]
    assert set(dev["name"]) == {"forward", "backward", "optimizer", "step"}
    assert (dev["device"] == 0).all() and (dev["cat"] == "device").all()
    assert len(dev[dev["name"] == "step"]) == 12
    # the host spans take microseconds; on the device forward and backward take their queued work
    fwd = dev[dev["name"] == "forward"]["dur_ns"] / 1e6
    bwd = dev[dev["name"] == "backward"]["dur_ns"] / 1e6
    assert fwd.median() == pytest.approx(2.0, abs=0.3)
    assert bwd.median() == pytest.approx(4.0, abs=0.3)
    assert host[host["name"] == "backward"]["dur_ns"].median() / 1e6 < 1.0
    # the device lags the host: each device span starts no earlier than its host span
    d = dev.set_index(["name", "step"])["start_ns"]
    h = host[host["step"].notna()].set_index(["name", "step"])["start_ns"]
    common = d.index.intersection(h.index)
    assert len(common) >= 36
    assert (d[common] >= h[common] - 50_000).all()  # µs of timer resolution aside
    # device step period = sum of its work (the device never idles: work queued back to back)
    steps = dev[dev["name"] == "step"].sort_values("step")
    period = steps["start_ns"].diff().dropna() / 1e6
    assert period.iloc[3:].median() == pytest.approx(6.5, abs=0.5)


def test_resolution_is_lazy_and_never_blocks(fresh_state, tmp_path):
    out: list = []
    api = FakeCuda(late=10**9)  # the device never reports completion inside the loop
    timer = device.DeviceTimer(api, out.append, lag=2, pool=40, first=5)
    phases.S.reset()
    for _ in range(30):
        m0 = timer.mark()
        api.queue(1.0)
        timer.span("phase", "forward", m0, timer.mark(), 0, 0)
        timer.close_step(1_000_000)
    assert out == []  # nothing resolved, nothing waited for
    assert timer.n_untimed > 0  # the pool ran dry: steps left untimed, counted
    assert api.syncs == 1
    summary = timer.finish()
    assert api.syncs == 2
    assert len(out) == summary["spans"] == timer.n_timed  # one span per timed step
    assert summary["steps_untimed"] == timer.n_untimed
    assert len(timer.free) == timer.pool  # every event went back to the pool


def test_sampling_keeps_the_cost_within_budget(fresh_state):
    out: list = []
    api = FakeCuda(late=0)
    # nothing resolved before the period is chosen (lag), so the cost is the records' alone
    timer = device.DeviceTimer(api, out.append, lag=100, pool=256, first=10, budget=0.01)
    timer.record_cost_ns = 5_000.0  # 5 µs per event record
    for _ in range(50):
        m0 = timer.mark()
        timer.span("phase", "step", m0, timer.mark(), 0, 0)
        timer.close_step(200_000)  # a 0.2 ms step: 2 records = 10 µs = 5 % -> every 5th step
    assert timer.every == 5
    assert timer.n_timed == 10 + len([k for k in range(10, 50) if k % 5 == 0])
    fixed = device.DeviceTimer(FakeCuda(late=0), [].append, lag=0, every=3, first=0)
    for _ in range(9):
        m0 = fixed.mark()
        fixed.span("phase", "step", m0, fixed.mark(), 0, 0)
        fixed.close_step(1)
    assert fixed.n_timed == 3  # steps 0, 3 and 6 of 9


def test_a_failing_event_means_host_only_with_one_warning(run_with_fake):
    class Broken(FakeCuda):
        def record(self, ev):
            raise RuntimeError("CUDA error: an illegal memory access")

    api = Broken()
    run = run_with_fake(api)
    with pytest.warns(ssi.InstrumentationWarning, match="CUDA event timing failed"):
        _loop(api, 3)
    ssi.finish()
    ev = analysis.read(run.trace_path, format="scalescope_trace")
    assert (ev["kind"] == "device_phase").sum() == 0
    assert (ev[ev["kind"] == "phase"]["name"] == "step").sum() == 3


def test_no_cuda_no_timer(fresh_state, tmp_path):
    # without CUDA (this machine's torch is a CPU build) no timer is made
    run = ssi.init(run_dir=tmp_path / "plain", framework="none", sample_interval_s=0)
    assert phases.S.dev is None
    _loop(FakeCuda(), 2)
    assert phases.S.dev is None
    ssi.finish()
    ev = analysis.read(run.trace_path, format="scalescope_trace")
    assert (ev["kind"] == "device_phase").sum() == 0
