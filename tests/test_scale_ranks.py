"""analysis.scale on a RunSet splits the work per (run, rank file): a run of many ranks keeps
every worker busy, and the tables, warnings and damage are still those of serial pandas."""

from __future__ import annotations

import json
import shutil
import warnings

import pandas as pd
import pytest

from analysis import metrics as M
from analysis import parallel
from analysis.errors import RecoveryWarning
from analysis.runset import RunSet, _load

SWEEP_IDS = ["horovod-gloo_np2_bs75_r1", "ddp-gloo_np2_bs75_r1", "horovod-gloo_np1_bs75_r1", "baseline_np1_bs75_r1"]
#: Clock offsets of the widened runs: every rank but 0 is moved (the cross-rank correction).
OFFSETS = {"1": -162899, "2": 5_000_123, "3": -777}


def _widen(src, dst, *, devices=(0, 1, 0, 1)):
    """A 4-rank copy of a 2-rank run directory: ranks 2 and 3 are ranks 0 and 1 again (their
    clock record renamed) on a second host; each rank gets a GPU and a clock offset, so that
    its comm-hook records are GPU rows and its times are moved onto rank 0's clock."""
    shutil.copytree(src, dst)
    for new, old in ((2, 0), (3, 1)):
        text = (src / f"rank-{old:05d}.trace.json").read_text()
        clock = f'"tid":0,"args":{{"rank":{old},"local_rank":{old},'
        assert text.count(clock) == 1 and '"name":"scalescope_clock"' in text.split(clock)[0].rsplit("\n", 1)[1]
        text = text.replace(clock, clock.replace(f'"rank":{old},', f'"rank":{new},'))
        (dst / f"rank-{new:05d}.trace.json").write_text(text)
    manifest = json.loads((src / "run.json").read_text())
    manifest["run_id"] = dst.name
    ranks = manifest["ranks"]
    ranks += [{**ranks[0], "rank": 2, "host": "vm2", "local_rank": 0}, {**ranks[1], "rank": 3, "host": "vm2"}]
    for r, dev in zip(ranks, devices, strict=True):
        r["device"] = dev
    manifest["clock"]["offsets_ns"] = dict(OFFSETS)
    (dst / "run.json").write_text(json.dumps(manifest))
    return dst


@pytest.fixture(scope="module")
def dirs(repo_root, tmp_path_factory):
    """The sample sweep (four of its runs) and two 4-rank runs, DDP and Horovod (with its
    timeline), made from the sweep's 2-rank runs."""
    sweep = repo_root / "data" / "sample_sweep"
    tmp = tmp_path_factory.mktemp("wide")
    ddp4 = _widen(sweep / "ddp-gloo_np2_bs75_r1", tmp / "ddp-gloo_np4_wide")
    hvd4 = _widen(sweep / "horovod-gloo_np2_bs75_r1", tmp / "horovod-gloo_np4_wide")
    assert (hvd4 / "horovod_timeline.json").exists()
    return [sweep, ddp4, hvd4], [*SWEEP_IDS, ddp4.name, hvd4.name]


def _runset(dirs, **engine):
    paths, ids = dirs
    return RunSet.from_dirs(paths, **engine).filter(run_id=ids)


@pytest.fixture(scope="module")
def client():
    """A LocalCluster of two worker processes."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


def _studies(rs):
    """The per-rank studies and the others, given a RunSet (computed on its engine)."""
    return {
        "step_times": M.step_times(rs),
        "time_breakdown": M.time_breakdown(rs),
        "time_breakdown_step": M.time_breakdown(rs, level="step"),
        "time_breakdown_run": M.time_breakdown(rs, level="run"),
        "sync_times": M.sync_times(rs),
        "gpu_time_breakdown": M.gpu_time_breakdown(rs),
        "device_usage": M.device_usage(rs),
    }


@pytest.fixture(scope="module")
def serial(dirs):
    """The studies of serial pandas: every table loaded in this process, then reduced."""
    rs = _runset(dirs, workers=1)
    ev, samples, devices = rs.events, rs.samples, rs.rank_devices
    tables = {
        "step_times": M.step_times(ev),
        "time_breakdown": M.time_breakdown(ev),
        "time_breakdown_step": M.time_breakdown(ev, level="step"),
        "time_breakdown_run": M.time_breakdown(ev, level="run"),
        "sync_times": M.sync_times(ev),
        "gpu_time_breakdown": M.gpu_time_breakdown(ev),
        "device_usage": M.device_usage(samples, rank_devices=devices),
    }
    return tables, ev, samples


def test_the_fixture_exercises_ranks_offsets_timeline_and_gpu_rows(dirs, serial):
    tables, ev, _ = serial
    wide = ev[ev["run_id"].astype(str).isin(dirs[1][-2:])]
    assert wide.groupby("run_id", observed=True)["rank"].nunique().tolist() == [4, 4]
    assert (wide["source"].astype(str) == "horovod").any()  # the Horovod timeline
    # rank 2 is rank 0's trace again, moved by its clock offset
    r0 = wide[(wide["rank"] == 0) & (wide["source"].astype(str) == "scalescope_trace")]
    r2 = wide[wide["rank"] == 2]
    assert (r2["start_ns"].to_numpy() - r0["start_ns"].to_numpy() == OFFSETS["2"]).all()
    gpu = tables["gpu_time_breakdown"]
    assert gpu.groupby("run_id")["rank"].apply(list).to_dict() == {name: [0, 1, 2, 3] for name in dirs[1][-2:]}
    st = tables["step_times"]
    assert len(st[st["run_id"] == "horovod-gloo_np4_wide"]) > 100 and len(tables["sync_times"]) > 200


def _assert_same(got, want):
    for name in want:
        pd.testing.assert_frame_equal(got[name], want[name], obj=name)


@pytest.mark.parametrize("workers", [1, 2])
def test_rank_split_studies_equal_serial_pandas(dirs, serial, workers):
    rs = _runset(dirs, workers=workers)
    _assert_same(_studies(rs), serial[0])
    assert rs.loaded("events") is None  # never gathered here
    pd.testing.assert_frame_equal(rs.events, serial[1])
    pd.testing.assert_frame_equal(rs.samples, serial[2])


def test_rank_split_studies_on_dask_equal_serial_pandas(dirs, serial, client):
    rs = _runset(dirs, client=client)
    _assert_same(_studies(rs), serial[0])
    pd.testing.assert_frame_equal(_load.load_table(rs, "events"), serial[1])  # rs.events is a Dask frame
    pd.testing.assert_frame_equal(rs.samples, serial[2])


@pytest.fixture
def counted(monkeypatch):
    """The items of every :func:`analysis.parallel.run_tasks` call, by label."""
    calls: list[tuple[str, int]] = []
    real = parallel.run_tasks

    def run_tasks(func, items, **kw):
        items = list(items)
        calls.append((kw.get("label"), len(items)))
        return real(func, items, **kw)

    monkeypatch.setattr(parallel, "run_tasks", run_tasks)
    return calls


def test_one_run_of_four_ranks_is_four_tasks(dirs, serial, counted):
    paths, ids = dirs
    one = RunSet.from_dirs([paths[2]], workers=2)  # Horovod, 4 ranks and a timeline
    assert len(one.usable_runs()) == 1
    want = serial[0]
    by_run = {name: t[t["run_id"] == ids[-1]].reset_index(drop=True) for name, t in want.items()
              if name in ("step_times", "time_breakdown", "sync_times")}
    pd.testing.assert_frame_equal(M.step_times(one), by_run["step_times"])
    pd.testing.assert_frame_equal(M.time_breakdown(one), by_run["time_breakdown"])
    pd.testing.assert_frame_equal(M.sync_times(one), by_run["sync_times"])
    # a task per rank trace for step_times; time_breakdown and sync_times decide warm-up per
    # run (every rank drops the same steps), so the run is one task unless warm-up is off
    assert counted == [("step_times", 5), ("time_breakdown", 1), ("sync_times", 1)]
    counted.clear()
    # without warm-up, a task per rank trace, the timeline read beside rank 0's trace
    pd.testing.assert_frame_equal(M.time_breakdown(one, warmup=0),
                                  M.time_breakdown(_serial_events(one), warmup=0))
    assert counted[0] == ("time_breakdown", 4)
    counted.clear()
    _load.load_table(one, "events")
    assert counted == [("reading ranks", 5)]
    counted.clear()
    M.time_breakdown(one, level="run")  # adds a run's ranks up: one task for the run
    assert counted == [("time_breakdown", 1)]


def test_one_run_of_many_ranks_is_worth_a_pool(dirs, monkeypatch):
    """``workers=None`` counts rank files, not runs: one big run of four ranks uses the pool."""
    paths, _ = dirs
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 1)  # the sample runs are small
    assert _load.in_tasks(RunSet.from_dirs([paths[2]]))
    assert not _load.in_tasks(RunSet.from_dirs([paths[0] / "baseline_np1_bs75_r1"]))  # one rank file


def _serial_events(rs):
    """``rs``'s events read here, one run after the other, whatever its engine."""
    return RunSet(rs.runs, workers=1, include_failed=rs.include_failed).events


def _caught(func):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out = func()
    return out, [(w.category, str(w.message)) for w in got]


@pytest.fixture
def damaged(dirs, tmp_path):
    """The 4-rank runs and a 2-rank run, damaged: a 0-byte rank trace in the DDP run (its
    events are lost), a cut-off trace (warns) and a missing rank file (warns) in the Horovod
    run, whose events stay."""
    paths, _ = dirs
    out = [shutil.copytree(p, tmp_path / p.name) for p in (*paths[1:], paths[0] / "ddp-gloo_np2_bs75_r2")]
    (out[0] / "rank-00002.trace.json").write_bytes(b"")
    trace = out[1] / "rank-00001.trace.json"
    trace.write_bytes(trace.read_bytes()[:-300])
    (out[1] / "rank-00003.trace.json").unlink()
    return out


@pytest.mark.parametrize("engine", ["workers", "client"])
def test_damage_reaches_damaged_with_the_warnings_of_serial_reading(damaged, engine, request):
    kw = {"workers": 2} if engine == "workers" else {"client": request.getfixturevalue("client")}
    serial = RunSet.from_dirs(damaged, workers=1)
    par = RunSet.from_dirs(damaged, **kw)
    want, want_warn = _caught(lambda: serial.events)
    got, got_warn = _caught(lambda: _load.load_table(par, "events"))
    pd.testing.assert_frame_equal(got, want)
    assert got_warn == want_warn
    messages = [m for _, m in want_warn]
    assert any("not terminated" in m for m in messages) and any("no trace for rank(s) [3]" in m for m in messages)
    assert sum("rank-00002.trace.json" in m for m in messages) == 1  # the damage, once
    assert "ddp-gloo_np4_wide" not in set(got["run_id"].astype(str))
    assert {"horovod-gloo_np4_wide", "ddp-gloo_np2_bs75_r2"} <= set(got["run_id"].astype(str))
    pd.testing.assert_frame_equal(par.damaged, serial.damaged)
    assert par.damaged["path"].astype(str).str.endswith("rank-00002.trace.json").tolist() == [True]


def _whole_step_times(events):
    return M.step_times(events)


def _whole_time_breakdown(events):
    return M.time_breakdown(events)


def _whole_sync_times(events):
    return M.sync_times(events)


@pytest.mark.parametrize("study", ["step_times", "time_breakdown", "sync_times"])
def test_damaged_rank_split_gives_the_tables_and_warnings_of_whole_runs(damaged, study):
    metric = getattr(M, study)
    serial = RunSet.from_dirs(damaged, workers=1)
    want = metric(serial.events)
    # the per-run tasks of before: each run read whole, its warnings in run_id order (a
    # metric that declares no mapping is reduced run by run)
    whole = RunSet.from_dirs(damaged, workers=2)
    undeclared = globals()[f"_whole_{study}"]
    # step_times is per rank; the others decide warm-up per run (every rank drops the same steps)
    assert not hasattr(undeclared, "mapping")
    assert metric.mapping.unit_of({}) == ("rank" if study == "step_times" else "run")
    assert metric.mapping.unit_of({"warmup": 0}) == "rank"
    by_run, by_run_warn = _caught(lambda: _load.per_run(whole, undeclared))
    split = RunSet.from_dirs(damaged, workers=2)
    got, got_warn = _caught(lambda: metric(split))
    pd.testing.assert_frame_equal(by_run, want)
    pd.testing.assert_frame_equal(got, want)
    assert got_warn == by_run_warn and len(got_warn) == 3
    pd.testing.assert_frame_equal(split.damaged, serial.damaged)


def test_a_run_whose_files_share_a_rank_is_reduced_whole(dirs, tmp_path, counted):
    """Two trace files of one rank cannot be reduced apart: that run goes back to one task."""
    paths, _ = dirs
    run = shutil.copytree(paths[1], tmp_path / paths[1].name)
    shutil.copy(run / "rank-00001.trace.json", run / "rank-00004.trace.json")
    rs = RunSet.from_dirs([run], workers=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        want = M.step_times(_serial_events(rs))
        got = M.step_times(rs)
    pd.testing.assert_frame_equal(got, want)
    assert counted == [("step_times", 5), ("step_times", 1)]


@M.maps_over(unit="rank")
def _trace_rows(events):
    """A per-rank metric the engine has never heard of: rows of each rank's own trace (the
    Horovod timeline's rows left out, as ``timeline_rank=None`` promises)."""
    own = events[events["source"].astype(str) != "horovod"]
    own = own.assign(run_id=own["run_id"].astype(str))
    return own.groupby(["run_id", "rank"], observed=True).size().rename("n_rows").reset_index()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_new_per_rank_metric_needs_only_its_declaration(dirs, serial, workers, counted):
    """Issue 26: declaring a metric per rank is all it takes for a RunSet to map it over its
    rank files; nothing in the engine names it."""
    rs = _runset(dirs, workers=workers)
    got = _trace_rows(rs)
    pd.testing.assert_frame_equal(got, _trace_rows(serial[1]))
    assert rs.loaded("events") is None  # reduced rank file by rank file, never gathered here
    if workers > 1:
        (label, n_tasks), = counted
        assert label == "_trace_rows" and n_tasks > len(rs.usable_runs())  # one task per rank file


def _event_count(events):
    return {"n": pd.DataFrame({"n": [len(events)]})}


@pytest.mark.parametrize("how", ["reduce_tables", "per_rank_metric"])
def test_damage_after_reducing_run_by_run_never_loads_every_runs_events(damaged, how):
    """The report reduces the runs one by one and then shows ``damaged``: the damage found
    while reducing is the events' damage, so asking for it loads no events (it did: every
    run's events joined in the report process, its peak memory)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        want = RunSet.from_dirs(damaged, workers=1).damaged
        rs = RunSet.from_dirs(damaged, workers=2)
        if how == "reduce_tables":
            rs.reduce_tables(_event_count)
        else:
            M.step_times(rs)
        got = rs.damaged
        assert rs.loaded("events") is None
        sub = rs.filter(n_ranks=lambda n: n > 0)  # a subset knows its runs' damage too
        assert len(sub.damaged) == len(got) and sub.loaded("events") is None
    pd.testing.assert_frame_equal(got, want)
    assert any(str(p).endswith("rank-00002.trace.json") for p in got["path"])
