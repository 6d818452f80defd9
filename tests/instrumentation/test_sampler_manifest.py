"""CPU sampler (real psutil rows), NVML probe, atomic manifest writes, NVTX path choice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

import analysis
from instrumentation import manifest, nvtx_ranges
from instrumentation.sampler import Sampler, probe_nvml

psutil = pytest.importorskip("psutil")


def test_nvml_probe_explains_why_it_is_off():
    ok, reason, devices = probe_nvml()
    if ok:
        pytest.skip("this machine has NVML")
    assert reason and devices == []


def test_cpu_sampler_writes_real_rows(tmp_path):
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\n"
                             "while time.time()-t < 3: pass"])
    try:
        path = tmp_path / "samples-h.csv"
        s = Sampler(path, host="h", kind="cpu", interval_s=0.1,
                    pids={0: os.getpid(), 1: busy.pid})
        assert s.start()
        # about 12 ticks in 1.2 s on a quiet machine; on a loaded one the sampler thread is
        # late, not wrong: wait for 3 ticks as long as it takes (the deadline only ends a hang)
        time.sleep(1.2)
        deadline = time.monotonic() + 120
        while s.n_ticks < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        s.stop()
    finally:
        busy.kill()
        busy.wait()
    df = analysis.read(path)  # sniffed as scalescope_samples
    assert set(df["source"]) == {"scalescope_samples"} and set(df["host"]) == {"h"}
    n_ticks = df["ts_ns"].nunique()
    assert n_ticks >= 3
    n_cores = psutil.cpu_count()
    host_rows = df[df["cpu_core"].isna() & df["rank"].isna()]
    assert len(host_rows) == n_ticks
    assert (df.groupby("ts_ns")["cpu_core"].count() == n_cores).all()
    procs = df[df["rank"].notna()]
    assert set(procs["rank"]) == {0, 1}
    assert (procs["rss_mib"] > 1).all()
    assert procs.loc[procs["rank"] == 1, "cpu_util_pct"].max() > 10  # the busy child
    assert df["cpu_util_pct"].between(0, 100 * n_cores).all()


def test_sampler_failure_disables_it_with_a_warning(tmp_path):
    from instrumentation._env import InstrumentationWarning, _reset_warnings

    _reset_warnings()
    s = Sampler(tmp_path / "missing-dir" / "s.csv", host="h", kind="cpu")
    with pytest.warns(InstrumentationWarning, match="sampler is disabled"):
        assert not s.start()
    s.stop()  # harmless


def test_manifest_write_is_atomic(tmp_path):
    path = tmp_path / "run.json"
    big = {"format": "scalescope.run", "format_version": 1, "pad": ["x" * 100] * 2000}
    manifest.write_json_atomic(path, big)
    stop = threading.Event()
    failures = []

    def reader():
        while not stop.is_set():
            try:
                json.loads(path.read_text())
            except ValueError as exc:
                failures.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    for i in range(40):
        big["i"] = i
        manifest.write_json_atomic(path, big)
    stop.set()
    t.join()
    assert failures == []
    assert json.loads(path.read_text())["i"] == 39
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # no temp files left


def test_manifest_write_failure_leaves_no_temp_file(tmp_path):
    with pytest.raises(OSError):
        manifest.write_json_atomic(tmp_path / "no-such-dir" / "run.json", {})
    with pytest.raises(TypeError):
        manifest.write_json_atomic(tmp_path / "run.json", {1j: 2})  # keys must be str-able
    assert list(tmp_path.iterdir()) == []


def test_build_manifest_keys():
    m = manifest.build_manifest(
        run_id="x", framework="ddp", backend="gloo",
        ranks=[{"rank": 1, "host": "b", "local_rank": 0}, {"rank": 0, "host": "a", "local_rank": 0}],
        config={"batch_size": 8},
    )
    assert m["world_size"] == 2 and m["n_nodes"] == 2
    assert m["ranks_per_host"] == {"a": [0], "b": [1]}
    assert [r["rank"] for r in m["ranks"]] == [0, 1]
    assert m["global_batch_size"] == 16


def test_nvtx_is_off_without_a_tool(monkeypatch):
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    monkeypatch.delenv("NVTX_INJECTION32_PATH", raising=False)
    monkeypatch.delenv("SCALESCOPE_NVTX", raising=False)
    ranges, why = nvtx_ranges.setup(True)
    assert ranges is None and "no NVTX tool" in why
    assert nvtx_ranges.setup(False)[0] is None


@pytest.mark.parametrize("mode", ["domain", "handle", "global"])
def test_nvtx_forced_paths_push_and_pop(monkeypatch, mode):
    pytest.importorskip("nvtx")
    monkeypatch.setenv("SCALESCOPE_NVTX", mode)
    ranges, why = nvtx_ranges.setup(True)
    if ranges is None and mode == "domain":
        # With no NVTX tool attached, nvtx >= 0.2.12 hands out a DummyDomain (docs/nvtx.md):
        # the domain path must then refuse, saying so, rather than push into a dummy.
        import nvtx

        assert type(nvtx.get_domain("scalescope")).__name__ == "DummyDomain"
        assert "no usable nvtx API" in why
        return
    assert ranges is not None and ranges.mode == why == mode
    ranges.push("forward")
    ranges.push("custom")
    ranges.pop()
    ranges.pop()


def test_sampler_finds_a_ranks_worker_processes_and_theirs(tmp_path, monkeypatch):
    """The rank's child processes (DataLoader workers) and their children, read from
    /proc/PID/task/TID/children: the same pids as psutil's scan of every process, and the
    busy grandchild's CPU counted in the rank's row; psutil's scan where the files are absent."""
    from instrumentation import sampler

    code = ("import subprocess, sys, time\n"
            "k = subprocess.Popen([sys.executable, '-c', 'import time\\nt=time.time()\\n"
            "while time.time()-t < 60: pass'])\n"
            "time.sleep(60)\n")
    rank = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while len(psutil.Process(rank.pid).children(recursive=True)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = sampler._descendants(rank.pid)
        assert found is not None and len(found) == 1
        assert set(found) == {c.pid for c in psutil.Process(rank.pid).children(recursive=True)}
        mine = sampler._descendants(os.getpid())
        assert rank.pid in mine and found[0] in mine
        for absent in (False, True):
            if absent:  # a kernel without the children files: psutil's scan
                monkeypatch.setattr(sampler.os.path, "exists", lambda p: False)
                assert sampler._descendants(rank.pid) is None
            s = Sampler(tmp_path / f"s{absent}.csv", host="h", kind="cpu", pids={0: rank.pid})
            s._cpu_setup()
            proc = s._procs[0]
            assert s._children_cpu(proc) == 0.0  # the first sample primes the child's counter
            time.sleep(1.0)
            assert s._children_cpu(proc) > 5  # the busy grandchild, counted with its rank
    finally:
        for p in psutil.Process(rank.pid).children(recursive=True):
            p.kill()
        rank.kill()
        rank.wait()
