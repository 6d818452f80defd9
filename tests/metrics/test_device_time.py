"""Device time in the breakdown (source ``events``): the device view of a step with known
device spans, a host-bound step, a ``loss.item()`` after the step, the source column, and
every CPU-only table unchanged."""

from __future__ import annotations

import functools
import io
from pathlib import Path

import _cpu_tables
import numpy as np
import pandas as pd
import pytest

import analysis.metrics as M
from analysis.errors import ScalescopeError
from analysis.schema import make_events

MS = 1_000_000
DATA = Path(__file__).resolve().parents[1] / "data" / "cpu_tables"


def _rows(kind: str, spans: list[tuple], *, run: str = "g", rank: int = 0, cat: str | None = None) -> pd.DataFrame:
    names, starts, durs, steps = zip(*[(n, int(s * MS), int((e - s) * MS), st) for n, s, e, st in spans], strict=True)
    return make_events(run_id=run, rank=rank, kind=kind, cat=cat or kind, source="scalescope_trace",
                       name=list(names), start_ns=list(starts), dur_ns=list(durs), step=list(steps), epoch=0,
                       device=0 if kind == "device_phase" else None)


def _ddp_step(k: int, *, t: float, run: str = "g", rank: int = 0) -> list[pd.DataFrame]:
    """One DDP-over-NCCL step as the host and the device see it (ms from ``t``): the host
    launches everything in 1.4 ms and then blocks in ``loss.item()`` after the step; the
    device computes forward 3 ms, backward 5 ms, waits 3 ms for the allreduce (nested in
    backward, as DDP's final callback is), and updates for 1 ms."""
    host = _rows("phase", [("step", t, t + 1.4, k), ("data", t, t + 1.0, k), ("forward", t + 1.0, t + 1.1, k),
                           ("backward", t + 1.1, t + 1.3, k), ("sync", t + 1.25, t + 1.3, k),
                           ("optimizer", t + 1.3, t + 1.4, k)], run=run, rank=rank)
    dev = _rows("device_phase", [("step", t + 0.05, t + 13.0, k), ("forward", t + 1.0, t + 4.0, k),
                                 ("backward", t + 4.0, t + 12.0, k), ("sync", t + 9.0, t + 12.0, k),
                                 ("optimizer", t + 12.0, t + 13.0, k)], run=run, rank=rank, cat="device")
    return [host, dev]


def _events(n_steps: int = 6, **kw) -> pd.DataFrame:
    # each step starts after the previous one's loss.item() returned (13 ms + 0.2 ms later)
    parts = [p for k in range(n_steps) for p in _ddp_step(k, t=13.2 * k, **kw)]
    return pd.concat(parts, ignore_index=True).sort_values("start_ns", kind="stable").reset_index(drop=True)


def test_device_view_splits_the_step_by_the_devices_timeline():
    ev = _events()
    dev = M.time_breakdown(ev, level="step", warmup=0)
    assert set(dev["source"]) == {"events"}
    row = dev.iloc[2]
    assert row["step_time_s"] == pytest.approx(12.95e-3)
    assert row["forward_s"] == pytest.approx(3e-3)
    assert row["sync_exposed_s"] == pytest.approx(3e-3)  # the allreduce the device waited for
    assert row["backward_s"] == pytest.approx(5e-3)  # backward less the nested wait
    assert row["optimizer_s"] == pytest.approx(1e-3)
    assert row["data_s"] == pytest.approx(0.95e-3)  # the device idle while the host loaded data
    assert row["other_s"] == pytest.approx(0.0, abs=1e-12)
    fracs = dev[[c for c in dev.columns if c.endswith("_frac")]].sum(axis=1)
    assert np.allclose(fracs, 1.0)
    # the host's view of the same steps: the device's work leaves the step window
    host = M.time_breakdown(ev, level="step", warmup=0, source="host")
    assert set(host["source"]) == {"host"}
    assert host.iloc[2]["step_time_s"] == pytest.approx(1.4e-3)
    assert host.iloc[2]["sync_exposed_s"] == pytest.approx(0.05e-3)


def test_host_bound_time_is_the_devices_idle_rest():
    # the device finishes forward early and idles 2 ms before backward is launched
    ev = _events()
    dev_fwd = (ev["kind"] == "device_phase") & (ev["name"] == "forward")
    ev.loc[dev_fwd, "dur_ns"] -= 2 * MS
    b = M.time_breakdown(ev, level="step", warmup=0).iloc[2]
    assert b["forward_s"] == pytest.approx(1e-3)
    assert b["other_s"] == pytest.approx(2e-3)  # host-bound: no device phase ran


def test_source_auto_mixes_runs_and_events_requires_them():
    ev = pd.concat([_events(run="gpu"), _events(run="cpu").query("kind == 'phase'")], ignore_index=True)
    b = M.time_breakdown(ev, level="run", warmup=0)
    assert dict(zip(b["run_id"], b["source"], strict=True)) == {"cpu": "host", "gpu": "events"}
    with pytest.raises(ScalescopeError, match=r"cpu.*no device-timed steps"):
        M.time_breakdown(ev, source="events")
    steps = M.step_table(ev, warmup=0)
    assert set(steps.loc[steps["run_id"] == "gpu", "source"]) == {"events"}
    # the device steps are the ones the step table counts and times
    assert steps.loc[steps["run_id"] == "gpu", "step_s"].median() == pytest.approx(12.95e-3)


def test_straggler_on_device_time_is_the_rank_with_more_device_work():
    # two ranks: rank 1's device backward takes 2 ms longer; rank 0's stream waits for it in
    # its allreduce (5 ms: 2 for rank 1, 3 of transfer); both finish together
    parts = []
    for k in range(6):
        t = 15.2 * k
        for rank, sync_start in ((0, 9.0), (1, 11.0)):
            parts.append(_rows("phase", [("step", t, t + 1.4, k), ("data", t, t + 1.0, k),
                                         ("forward", t + 1.0, t + 1.1, k), ("backward", t + 1.1, t + 1.3, k),
                                         ("optimizer", t + 1.3, t + 1.4, k)], rank=rank))
            parts.append(_rows("device_phase", [("step", t + 0.05, t + 15.0, k), ("forward", t + 1.0, t + 4.0, k),
                                                ("backward", t + 4.0, t + 14.0, k),
                                                ("sync", t + sync_start, t + 14.0, k),
                                                ("optimizer", t + 14.0, t + 15.0, k)], rank=rank, cat="device"))
    ev = pd.concat(parts, ignore_index=True)
    steps = M.rank_step_parts(ev, warmup=0)
    assert set(steps.loc[steps["is_slowest"], "rank"]) == {1}
    r0 = steps[steps["rank"] == 0]
    assert r0["exposed_s"].median() == pytest.approx(5e-3)
    assert r0["straggler_s"].median() == pytest.approx(2e-3)
    assert steps.loc[steps["rank"] == 1, "straggler_s"].max() == 0
    # matched across ranks by step: rank 1 arrives last, rank 0 waits 2 ms, both transfer 3 ms
    arr = M.event_arrivals(ev)
    assert len(arr) == 12 and (arr["last_rank"] == 1).all() and (arr["match"] == "step").all()
    assert arr.loc[arr["rank"] == 0, "wait_s"].tolist() == pytest.approx([2e-3] * 6)
    assert arr.loc[arr["rank"] == 1, "wait_s"].tolist() == [0.0] * 6
    assert arr["transfer_s"].tolist() == pytest.approx([3e-3] * 12)


def test_a_blocking_call_after_step_end_is_found():
    # every step: the host leaves the step at 1.4 ms and starts the next one at 13.2 ms,
    # after the device finished the step at 13.0 ms: loss.item() after optimizer.step()
    b = M.between_steps(_events())
    assert len(b) == 1
    row = b.iloc[0]
    assert row["n_steps"] == 5 and row["n_blocked"] == 5 and row["blocked_frac"] == 1.0
    assert row["blocked_wait_s"] == pytest.approx(11.6e-3)
    assert row["host_step_s"] == pytest.approx(1.4e-3) and row["device_step_s"] == pytest.approx(12.95e-3)
    # a host-bound loop (the device done before the host leaves the step) never blocks
    ev = _events()
    dev = ev["kind"] == "device_phase"
    ev.loc[dev, "dur_ns"] = (ev.loc[dev, "dur_ns"] // 20).astype("int64")
    ev.loc[dev, "start_ns"] = ev.loc[dev, "start_ns"] - (ev.loc[dev, "start_ns"] % (13.2 * MS)).astype("int64") // 20
    assert M.between_steps(ev)["n_blocked"].sum() == 0


@pytest.mark.parametrize("name", ["breakdown_rank", "breakdown_step", "step_table", "scaling_loss"])
def test_cpu_runs_are_unchanged(name):
    """The bundled CPU experiment's tables, recomputed, equal those computed before device
    time existed (commit 4b09f86; ``tests/_cpu_tables.py`` wrote them)."""
    if not _cpu_tables.EXPERIMENT.is_dir():
        pytest.skip("data/sample_sweep is not in this checkout")
    df = _recomputed()[name]
    assert set(df["source"]) == {"host"}
    before = pd.read_csv(DATA / f"{name}.csv")
    recomputed = pd.read_csv(io.StringIO(df.drop(columns="source").to_csv(index=False)))
    # every column that existed then holds the same numbers (columns added since, such as
    # the counted-work source of issue 34, are new information, not changed numbers)
    assert set(before.columns) <= set(recomputed.columns), set(before.columns) - set(recomputed.columns)
    pd.testing.assert_frame_equal(recomputed[list(before.columns)], before, check_exact=False, rtol=1e-12, atol=0)



@functools.lru_cache(maxsize=1)
def _recomputed() -> dict:
    return _cpu_tables.tables()


def test_why_not_ideal_on_device_time_names_its_source():
    """A baseline, a one-rank and a two-rank DDP configuration, 3 repeats each, timed by
    events: the two-rank runs wait 2 ms more in the allreduce on the device (their host sync
    stays 0.05 ms); "Why not ideal?" finds that as exposed sync, and says device time."""
    parts, runs = [], []
    for fw, n, extra_sync in (("none", 1, 0.0), ("ddp", 1, 0.0), ("ddp", 2, 2.0)):
        for rep in range(3):
            run = f"{fw}{n}r{rep}"
            runs.append({"run_id": run, "framework": fw, "n_ranks": n, "config_backend": f"{fw}-nccl",
                         "batch_size": 75, "inject": None})
            for rank in range(n):
                for k in range(8):
                    t = 20.0 * k + 0.01 * rep
                    host, dev = _ddp_step(k, t=t, run=run, rank=rank)
                    if fw == "none":
                        dev = dev[dev["name"] != "sync"]
                        host = host[host["name"] != "sync"]
                    if extra_sync:
                        later = dev["name"].isin(["optimizer"])
                        dev.loc[later, "start_ns"] += int(extra_sync * MS)
                        dev.loc[dev["name"].isin(["sync", "backward", "step"]), "dur_ns"] += int(extra_sync * MS)
                    parts += [host, dev]
    ev = pd.concat(parts, ignore_index=True)
    loss = M.scaling_loss(ev, pd.DataFrame(runs), warmup=0)
    two = loss[loss["n_ranks"] == 2].iloc[0]
    assert two["source"] == "events"
    assert two["gap_s"] == pytest.approx(2e-3, rel=1e-6)
    assert two["sync_s"] == pytest.approx(2e-3, rel=1e-6)
    assert two["framework_s"] == pytest.approx(0.0, abs=1e-9)  # DDP's sync at one rank: the ideal has none
    sentence = next(s for s in M.explain_loss(loss) if s.startswith("At 2 ranks"))
    assert "exposed synchronisation" in sentence and "device time (CUDA events" in sentence
    # the host saw none of it: its phases took as long at two ranks as at one
    host = M.scaling_loss(ev, pd.DataFrame(runs), warmup=0, source="host")
    assert host[host["n_ranks"] == 2].iloc[0]["source"] == "host"
    assert host[host["n_ranks"] == 2].iloc[0]["gap_s"] == pytest.approx(0.0, abs=1e-9)


def test_the_last_arriver_is_the_straggler_even_with_equal_work():
    """Both ranks compute 8 ms, but rank 1's device starts each step 2 ms late (its host
    launched late): busy times are equal, so only the arrivals at the allreduce show that
    rank 0 waits 2 ms for rank 1 (one host: one clock)."""
    parts = []
    for k in range(6):
        t = 20.0 * k
        for rank, late in ((0, 0.0), (1, 2.0)):
            parts.append(_rows("phase", [("step", t, t + 1.4, k), ("forward", t, t + 0.1, k),
                                         ("backward", t + 0.1, t + 0.3, k), ("optimizer", t + 1.3, t + 1.4, k)],
                               rank=rank))
            parts.append(_rows("device_phase", [("step", t, t + 16.0, k), ("forward", t + late, t + late + 3.0, k),
                                                ("backward", t + late + 3.0, t + 15.0, k),
                                                ("sync", t + late + 8.0, t + 15.0, k),
                                                ("optimizer", t + 15.0, t + 16.0, k)], rank=rank, cat="device"))
    steps = M.rank_step_parts(pd.concat(parts, ignore_index=True), warmup=0)
    assert set(steps.loc[steps["is_slowest"], "rank"]) == {1}
    assert steps.loc[steps["rank"] == 0, "straggler_s"].tolist() == pytest.approx([2e-3] * 6)
    assert steps.loc[steps["rank"] == 1, "straggler_s"].tolist() == [0.0] * 6
