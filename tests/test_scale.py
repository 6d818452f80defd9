"""analysis.scale: the process pool and Dask give the frames, warnings, errors and metric
tables of serial reading, in the same order."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest

import analysis
from analysis import scale
from analysis.errors import ReadError, RecoveryWarning
from analysis.metrics import gpu_time_breakdown, horovod_allreduce

# read_files and reduce_files are deprecated aliases (issue 32.3); their results are still checked here
pytestmark = pytest.mark.filterwarnings("ignore:analysis.scale:DeprecationWarning")


@pytest.fixture
def files(data_dir):
    """One file of each JSON and table format, each (run_id, rank) in one file only."""
    return [
        data_dir / "kineto" / "tiny_rank1.pt.trace.json.gz",
        data_dir / "horovod" / "tiny_timeline.json",
        data_dir / "kineto" / "worker3.legacy.json",
        data_dir / "horovod" / "unterminated_v019.json",  # warns: not terminated, 1 open B
        data_dir / "nsys" / "synthetic.sqlite",
        data_dir / "scalescope" / "ddp_gloo_np2" / "rank-00001.trace.json",
        data_dir / "scalescope" / "ddp_gloo_np2" / "samples-vm.csv",
    ]


@pytest.fixture(scope="module")
def client():
    """A real LocalCluster: two workers in this process (threads), as small as CI allows."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


def _read_files(paths, **engine):
    """``analysis.read`` of every file on the engine (what the deprecated scale.read_files did)."""
    return scale.run_tasks(analysis.read, list(paths), label="reading", **engine)


def _read_serial(files):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frames = [analysis.read(f) for f in files]
    return frames, [(w.category, str(w.message)) for w in caught]


def test_ipc_round_trip_keeps_schema_dtypes(files):
    for f in files:
        df = analysis.read(f)
        for frame in (df, df.iloc[0:0]):  # an empty frame keeps its categories too
            back = scale.from_ipc(scale.to_ipc(frame))
            pd.testing.assert_frame_equal(back, frame)
            assert back.dtypes.to_dict() == frame.dtypes.to_dict()


def test_pool_reads_like_serial_with_the_same_warnings_in_order(files):
    frames, caught = _read_serial(files)
    assert [c for c, _ in caught] == [RecoveryWarning]  # the fixture's one known warning
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        par = _read_files(files, workers=2)
    assert [(w.category, str(w.message)) for w in got] == caught
    assert len(par) == len(frames)
    for a, b in zip(frames, par, strict=True):
        pd.testing.assert_frame_equal(b, a)


def _pid(_: object) -> pd.DataFrame:
    import os

    return pd.DataFrame({"pid": [os.getpid()]})


def test_workers_1_is_serial_and_in_process(files):
    import os

    # the tasks run here, in this process
    assert [int(f["pid"].iloc[0]) for f in scale.run_tasks(_pid, range(3), workers=1)] == [os.getpid()] * 3
    assert {int(f["pid"].iloc[0]) for f in scale.run_tasks(_pid, range(3), workers=2)} != {os.getpid()}
    frames, _ = _read_serial(files[:3])
    for a, b in zip(frames, _read_files(files[:3], workers=1), strict=True):
        pd.testing.assert_frame_equal(b, a)


def test_pool_raises_the_first_failing_file_in_order(files, tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("not a trace\n")
    with pytest.raises(analysis.UnknownFormatError, match=r"notes\.txt"):
        _read_files([files[0], bad, tmp_path / "missing.json"], workers=2)


def test_reduce_files_equals_the_metric_on_all_events(files, client):
    kineto = [files[0], files[2]]
    want = gpu_time_breakdown(analysis.read_many(kineto))
    assert len(want) == 2
    pd.testing.assert_frame_equal(scale.reduce_files(kineto, gpu_time_breakdown, workers=2), want)
    pd.testing.assert_frame_equal(scale.reduce_files(kineto, gpu_time_breakdown, client=client), want)
    # the one door: read_many(reduce=), here, on a pool and on Dask
    for engine in ({"workers": 1}, {"workers": 2}, {"client": client}):
        pd.testing.assert_frame_equal(analysis.read_many(kineto, reduce=gpu_time_breakdown, **engine), want)
    # a metric per file: the Horovod timeline's allreduce table beside the ranks' breakdowns
    tl = files[1]
    parts = scale.reduce_files([*kineto, tl], [gpu_time_breakdown, gpu_time_breakdown, horovod_allreduce],
                               client=client)
    pd.testing.assert_frame_equal(parts[2], horovod_allreduce(analysis.read(tl)))
    pd.testing.assert_frame_equal(scale.concat_tables(parts[:2]), want)


def test_the_old_doors_warn_that_they_are_deprecated(files):
    with pytest.warns(DeprecationWarning, match="read_many"):
        scale.read_files(files[:1], workers=1)
    with pytest.warns(DeprecationWarning, match="reduce="):
        scale.reduce_files(files[:1], gpu_time_breakdown, workers=1)


def test_read_many_takes_options_only_for_reduce(files):
    with pytest.raises(TypeError, match="reduce="):
        analysis.read_many(files[:1], level="step")


def test_dask_tasks_reraise_warnings_and_errors(files, client, tmp_path):
    _, caught = _read_serial([files[3]])
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        _read_files([files[3]], client=client)
    assert [(w.category, str(w.message)) for w in got] == caught
    with pytest.raises(ReadError, match=r"missing\.json"):
        _read_files([tmp_path / "missing.json"], client=client)


def test_slurm_job_script_runs_our_python_with_the_shared_cache(tmp_path):
    pytest.importorskip("dask_jobqueue")
    import sys

    cluster = scale.slurm_cluster(cores=8, memory="32GB", queue="gpu", account="proj42",
                                  walltime="02:00:00", cache_dir=tmp_path / "cache",
                                  job_extra_directives=["--constraint=a100"])
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    lines = script.splitlines()
    assert "#SBATCH -p gpu" in lines
    assert "#SBATCH -A proj42" in lines
    assert "#SBATCH -t 02:00:00" in lines
    assert "#SBATCH --cpus-per-task=8" in lines
    assert "#SBATCH --constraint=a100" in lines
    assert f"export SCALESCOPE_CACHE={tmp_path / 'cache'}" in lines
    worker = next(line for line in lines if "distributed.cli.dask_worker" in line)
    assert worker.startswith(sys.executable + " ")
    assert "--nworkers 8" in worker and "--nthreads 1" in worker


# --------------------------------------------------------------------------------------
# RunSet: per-run metrics on the pool and on Dask equal the metrics of all events


@pytest.fixture(scope="module")
def sweep(repo_root):
    """Four runs of the sample sweep: Horovod and DDP, 1 and 2 ranks (samples included)."""
    from analysis import RunSet

    ids = ["horovod-gloo_np2_bs75_r1", "ddp-gloo_np2_bs75_r1", "horovod-gloo_np1_bs75_r1", "baseline_np1_bs75_r1"]
    return repo_root / "data" / "sample_sweep", ids, RunSet


def _studies(events_or_rs, samples=None, rank_devices=None):
    from analysis import metrics as M

    s = events_or_rs if samples is None else samples
    usage = M.device_usage(s) if rank_devices is None else M.device_usage(s, rank_devices=rank_devices)
    return {
        "step_times": M.step_times(events_or_rs),
        "time_breakdown": M.time_breakdown(events_or_rs),
        "time_breakdown_run": M.time_breakdown(events_or_rs, level="run"),
        "sync_times": M.sync_times(events_or_rs),
        "gpu_time_breakdown": M.gpu_time_breakdown(events_or_rs),
        "device_usage": usage,
    }


@pytest.fixture(scope="module")
def serial_tables(sweep):
    exp, ids, RunSet = sweep
    rs = RunSet.from_dirs([exp], workers=1).filter(run_id=ids)
    return _studies(rs.events, rs.samples, rs.rank_devices)


def _assert_same(got, want):
    assert len(want["step_times"]) > 100 and len(want["sync_times"]) > 50 and len(want["device_usage"]) > 4
    for name in want:
        pd.testing.assert_frame_equal(got[name], want[name], obj=name)


@pytest.mark.parametrize("workers", [1, 2])
def test_runset_metrics_run_by_run_equal_all_events(sweep, serial_tables, workers):
    exp, ids, RunSet = sweep
    rs = RunSet.from_dirs([exp], workers=workers).filter(run_id=ids)
    _assert_same(_studies(rs), serial_tables)
    # the studies never gathered every event of every run in this process
    assert rs.loaded("events") is None and rs.loaded("samples") is None


def test_runset_on_dask_gives_the_same_tables_and_a_dask_events_frame(sweep, serial_tables, client):
    exp, ids, RunSet = sweep
    rs = RunSet.from_dirs([exp], client=client).filter(run_id=ids)
    _assert_same(_studies(rs), serial_tables)
    ev = rs.events
    assert type(ev).__module__.startswith("dask")
    assert ev.npartitions == len(ids)
    serial = RunSet.from_dirs([exp], workers=1).filter(run_id=ids).events
    got = ev.groupby("kind", observed=True).size().compute().sort_index()
    want = serial.groupby("kind", observed=True).size()
    assert got.to_dict() == {k: v for k, v in want.items() if v}


def test_pool_loads_the_events_of_serial_loading(sweep):
    exp, ids, RunSet = sweep
    a = RunSet.from_dirs([exp], workers=1).filter(run_id=ids)
    b = RunSet.from_dirs([exp], workers=2).filter(run_id=ids)
    pd.testing.assert_frame_equal(b.events, a.events)
    pd.testing.assert_frame_equal(b.samples, a.samples)


def test_a_selected_runset_is_reduced_as_selected(sweep):
    from analysis import metrics as M

    exp, ids, RunSet = sweep
    rs = RunSet.from_dirs([exp], workers=2).filter(run_id=ids[:1])
    cut = rs.select(kind="phase", name=["forward", "backward", "step"])
    ev = cut.loaded("events")
    assert set(ev["name"].astype(str)) == {"forward", "backward", "step"}
    pd.testing.assert_frame_equal(M.time_breakdown(cut), M.time_breakdown(ev))


# --------------------------------------------------------------------------------------
# The real corpus: every Kineto trace and Horovod timeline, and the nsys exports


@pytest.mark.corpus
def test_corpus_reads_and_reduces_identically_on_the_pool_and_on_dask(corpus_dir, client):
    files = sorted([*corpus_dir.glob("kineto/**/*.json*"), *corpus_dir.glob("horovod_timeline/*.json"),
                    *corpus_dir.glob("nsys/*.sqlite")])
    assert len(files) >= 18
    frames, caught = _read_serial(files)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        pooled = _read_files(files, workers=2)
    assert [(w.category, str(w.message)) for w in got] == caught
    for a, b in zip(frames, pooled, strict=True):
        pd.testing.assert_frame_equal(b, a)
    # the per-rank GPU breakdown of the 8-rank DLRM job, one file per rank
    dlrm = sorted(corpus_dir.glob("kineto/param_dlrm_8rank/*.json"))
    want = gpu_time_breakdown(analysis.read_many(dlrm))
    assert len(want) == 8
    pd.testing.assert_frame_equal(scale.reduce_files(dlrm, gpu_time_breakdown, client=client), want)
    pd.testing.assert_frame_equal(scale.reduce_files(dlrm, gpu_time_breakdown, workers=2), want)
    timelines = sorted(corpus_dir.glob("horovod_timeline/*.json"))
    parts = scale.reduce_files(timelines, [horovod_allreduce] * len(timelines), client=client)
    for tl, part in zip(timelines, parts, strict=True):
        pd.testing.assert_frame_equal(part, horovod_allreduce(analysis.read(tl)))


def test_read_many_with_workers_equals_serial(files, data_dir, repo_root, tmp_path):
    stray = tmp_path / "notes.txt"
    stray.write_text("not a trace\n")
    inputs = [*files, data_dir / "scalescope" / "ddp_gloo_np2", stray, repo_root / "data" / "sample_sweep"]
    for kind in ("events", "samples"):
        with warnings.catch_warnings(record=True) as w1:
            warnings.simplefilter("always")
            one = analysis.read_many(inputs, kind=kind, workers=1)
        with warnings.catch_warnings(record=True) as w2:
            warnings.simplefilter("always")
            two = analysis.read_many(inputs, kind=kind, workers=2)
        pd.testing.assert_frame_equal(two, one)
        assert [(w.category, str(w.message)) for w in w2] == [(w.category, str(w.message)) for w in w1]
        assert any("notes.txt" in str(w.message) for w in w1)  # the unknown file, said once, last
        assert one["run_id"].nunique() > 28


def test_a_progress_bar_changes_nothing(files, monkeypatch, capsys):
    monkeypatch.setenv("SCALESCOPE_PROGRESS", "1")
    frames, _ = _read_serial(files[:3])
    for a, b in zip(frames, _read_files(files[:3], workers=2), strict=True):
        pd.testing.assert_frame_equal(b, a)
    assert "reading" in capsys.readouterr().err  # the bar was drawn (on stderr)


def test_the_run_cache_cannot_outlive_a_rewrite_and_is_rewritten_when_damaged(sweep, tmp_path):
    """``dask_events``' per-run Parquet entries: keyed by the files' fingerprints (a rewrite
    with the same size and a restored mtime changes the key), and a damaged entry is not
    trusted."""
    import os
    import shutil

    exp, ids, RunSet = sweep
    run = tmp_path / "run"
    shutil.copytree(exp / ids[2], run)
    from analysis.readers.cache import run_entry, run_key

    before = run_key(str(run), "r")
    trace = sorted(run.glob("rank-*.trace.json"))[0]
    st = trace.stat()
    text = trace.read_bytes()
    trace.write_bytes(text[:-40] + b" " * 40)  # same size, other content
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime restored
    assert trace.stat().st_size == st.st_size and trace.stat().st_mtime_ns == st.st_mtime_ns
    assert run_key(str(run), "r") != before
    trace.write_bytes(text)

    one = RunSet.from_dirs([exp], workers=1).filter(run_id=ids[2])
    where = (str(one.runs["path"].iloc[0]), str(one.runs["run_id"].iloc[0]))
    entry = run_entry(*where, lambda: one.events)
    good = pd.read_parquet(entry)
    with open(entry, "r+b") as fh:  # cut the entry short
        fh.truncate(os.path.getsize(entry) // 2)
    with pytest.warns(UserWarning, match="is damaged"):
        again = run_entry(*where, lambda: one.events)
    assert again == entry
    pd.testing.assert_frame_equal(pd.read_parquet(again), good)


def test_a_process_forked_while_another_thread_records_warnings_can_record():
    """Pools fork: a child must not inherit the warning recorder's lock held by a thread
    it does not have (it would wait forever in its first task)."""
    import os
    import threading

    from analysis import errors

    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    holding, done = threading.Event(), threading.Event()

    def record():
        with errors.recording():
            holding.set()
            done.wait(10)

    t = threading.Thread(target=record)
    t.start()
    holding.wait(10)
    try:
        pid = os.fork()
        if pid == 0:  # the child: record once, within a second
            ok = errors._RECORDING.acquire(timeout=1)
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
    finally:
        done.set()
        t.join()
    assert os.waitstatus_to_exitcode(status) == 0


def test_ipc_round_trip_keeps_object_text_columns():
    """A metric's table with text in an object column (``run_id`` after ``astype(object)``)
    comes back from a worker as object, missing values None, as serially (pandas 3 would
    make it its str dtype)."""
    df = pd.DataFrame({"run_id": pd.Series(["a", None], dtype=object), "name": ["x", None], "n": [1, 2]})
    back = scale.from_ipc(scale.to_ipc(df))
    pd.testing.assert_frame_equal(back, df)
    assert back["run_id"].tolist() == ["a", None]
