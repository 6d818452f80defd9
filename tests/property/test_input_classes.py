"""The input classes of issue 25 as properties, on the project's fixtures:

* **byte damage at any offset**: a run of NUL bytes (a file-system hole, a disk error) or of
  random bytes anywhere in any text reader's input ends in a frame, a RecoveryWarning or a
  ReadError naming the file (never another exception); in a line-based format a NUL run
  costs exactly the lines it touches (the frame is that of the file without them) and the
  warning names the offset of the first NUL byte;
* **gzip members split anywhere**: the file cut at any byte offsets into gzip members
  joined as ``cat a.gz b.gz ...`` reads as the plain file does;
* **manifest fields of any JSON type**: any JSON value in any field of a run's ``run.json``
  never makes the runs table raise; a value the schema refuses is listed under
  ``RunSet.damaged`` and never reaches the runs table.

The examples are few and fixed (``max_examples``, ``derandomize``) so CI cost stays bounded;
``SCALESCOPE_FUZZ_EXAMPLES`` / ``SCALESCOPE_FUZZ_RANDOM=1`` search longer.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import analysis  # noqa: E402
from analysis import rundir, schema  # noqa: E402
from analysis.errors import ReadError, ScalescopeError  # noqa: E402
from analysis.runset import RunSet  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
EXAMPLES = int(os.environ.get("SCALESCOPE_FUZZ_EXAMPLES", "20"))
RANDOM = os.environ.get("SCALESCOPE_FUZZ_RANDOM") == "1"
SETTINGS = {"deadline": None, "derandomize": not RANDOM, "database": None,
            "suppress_health_check": [HealthCheck.function_scoped_fixture]}

#: Text fixtures: format, path, and how many leading lines are structure (a header, a units
#: row, a trace's metadata records) whose damage may cost the whole file.
TEXT = {
    "scalescope_trace": ("scalescope/ddp_gloo_np2/rank-00000.trace.json", 5),
    "scalescope_samples": ("scalescope/ddp_gloo_np2/samples-vm.csv", 1),
    "nsys_csv": ("nsys/cuda_gpu_trace.csv", 1),
    "nvprof_csv": ("nvprof/gpu_trace.csv", 5),
    "nvml": ("nvml/smi_units.csv", 1),
    "nccl": ("nccl/h100_ddp_nccl_np1.log", 0),
    "kineto": ("kineto/tiny_rank1.pt.trace.json", 0),
    "horovod": ("horovod/tiny_timeline.json", 0),
    "nvsmi_topo": ("topo/h100_single_gpu.topo.txt", 0),
}
#: Formats whose records are lines (and whose NUL-damaged lines are dropped one by one).
LINE_BASED = ("scalescope_trace", "scalescope_samples", "nsys_csv", "nvprof_csv", "nvml", "nccl")


def _read(path: Path, fmt: str) -> tuple[pd.DataFrame | None, list[str]]:
    """The three-way rule: a valid frame (maybe with warnings) or a ScalescopeError naming
    the file; anything else fails the test."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            df = analysis.read(path, fmt, cache=False)
        except ScalescopeError as exc:
            assert str(path) in str(exc) or path.name in str(exc), exc
            return None, [str(exc)]
    kind = analysis.readers.formats()[fmt].kind
    if kind == "events":
        schema.validate_events(df)
    elif kind == "samples":
        schema.validate_samples(df)
    return df, [str(w.message) for w in caught]


def _write(tmp: Path, sub: str, name: str, raw: bytes) -> Path:
    d = tmp / sub
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_bytes(raw)
    return p


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fmt", list(TEXT))
@settings(max_examples=EXAMPLES, **SETTINGS)
@given(data=st.data())
def test_byte_damage_at_any_offset(fmt, tmp_path_factory, data):
    rel, skip = TEXT[fmt]
    raw = (DATA / rel).read_bytes()
    lines = raw.splitlines(keepends=True)
    start = len(b"".join(lines[:skip]))
    at = data.draw(st.integers(start, len(raw) - 1), label="offset")
    n = data.draw(st.integers(1, 64), label="length")
    nul = data.draw(st.booleans(), label="nul")
    junk = b"\0" * n if nul else data.draw(st.binary(min_size=n, max_size=n), label="bytes")
    overwrite = data.draw(st.booleans(), label="overwrite")
    damaged = raw[:at] + junk + raw[at + (n if overwrite else 0):]
    tmp = tmp_path_factory.mktemp("dmg")
    p = _write(tmp, "a", Path(rel).name, damaged)
    df, msgs = _read(p, fmt)
    if not (nul and fmt in LINE_BASED) or b"\n" in damaged[at:at + n] or b"\r" in raw:
        return  # the three-way rule is all that holds for arbitrary bytes
    # a NUL run in a line-based file: exactly the touched lines are lost, and named
    lo = damaged.rfind(b"\n", 0, at) + 1
    hi = damaged.find(b"\n", at + n)
    without = damaged[:lo] + (damaged[hi + 1:] if hi >= 0 else b"")
    if damaged.count(b"\0") != n:
        return
    ref, _ = _read(_write(tmp, "b", Path(rel).name, without), fmt)
    assert (df is None) == (ref is None)
    if df is not None:
        pd.testing.assert_frame_equal(df, ref)
    assert any(f"NUL data at offset {at:,}" in m for m in msgs), msgs


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fmt", list(TEXT))
@settings(max_examples=EXAMPLES, **SETTINGS)
@given(data=st.data())
def test_gzip_members_split_anywhere_read_as_the_plain_file(fmt, tmp_path_factory, data):
    rel, _ = TEXT[fmt]
    raw = (DATA / rel).read_bytes()
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(raw)), min_size=1, max_size=4), label="cuts")))
    on_lines = data.draw(st.booleans(), label="at line ends")
    if on_lines:  # move each cut to the next line end
        cuts = sorted({raw.find(b"\n", c) + 1 or len(raw) for c in cuts})
    bounds = [0, *cuts, len(raw)]
    joined = b"".join(gzip.compress(raw[a:b]) for a, b in itertools.pairwise(bounds))
    tmp = tmp_path_factory.mktemp("gz")
    plain, plain_msgs = _read(_write(tmp, "a", Path(rel).name, raw), fmt)
    p = _write(tmp, "b", Path(rel).name, joined)
    got, msgs = _read(p, fmt)
    assert plain is not None and got is not None
    pd.testing.assert_frame_equal(got, plain)
    assert [m.replace(str(p), "F") for m in msgs] == [m.replace(str(tmp / "a" / Path(rel).name), "F")
                                                     for m in plain_msgs]


# -- manifests ----------------------------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70)
                    | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
                    max_leaves=6)
#: Field paths of run.json that the runs table, the reader and the GPU mapping take.
FIELDS = [(k,) for k in rundir.RUN_SCHEMA] + [
    ("config", k) for k in rundir.CONFIG_SCHEMA] + [
    ("gpu", "model"), ("gpu", "per_node"), ("horovod", "controller"), ("sampler", "interval_s"),
    ("sampler", "hosts"), ("clock", "offsets_ns"), ("ranks", 0), ("ranks", 1, "rank"), ("ranks", 0, "host"),
    ("ranks_per_host", "node1")]
RUN = "horovod-gloo_np2_bs10_r1"


@pytest.fixture(scope="module")
def small_exp(tmp_path_factory):
    """Two runs of experiment_small (a framework run and the baseline), as an experiment."""
    src = DATA / "experiment_small"
    out = tmp_path_factory.mktemp("exp") / "EXP"
    out.mkdir()
    keep = [RUN, "none_np1_bs10_r1"]
    for r in keep:
        shutil.copytree(src / r, out / r)
    exp = json.loads((src / "experiment.json").read_text())
    exp["runs"] = [e for e in exp["runs"] if e["run_id"] in keep]
    (out / "experiment.json").write_text(json.dumps(exp))
    return out


@pytest.mark.timeout(300)
@settings(max_examples=EXAMPLES + 10, **SETTINGS)
@given(field=st.sampled_from(FIELDS), value=JSON)
def test_manifest_fields_of_any_json_type(small_exp, field, value):
    f = small_exp / RUN / "run.json"
    good = f.read_text()
    data = json.loads(good)
    node = data
    for k in field[:-1]:
        if isinstance(k, str) and node.get(k) is None:
            node[k] = {}  # e.g. gpu: null in a CPU run
        node = node[k]
    node[field[-1]] = value
    f.write_text(json.dumps(data))
    try:
        problems: list[str] = []
        try:
            rundir.read_manifest(f, problems)
        except ReadError:
            problems = ["run.json refused"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rs = RunSet.from_dirs(small_exp)
            runs, damaged = rs.runs, rs.damaged
            rs.epochs  # noqa: B018  (a table built from the runs: must not raise)
        row = runs.set_index("run_id").loc[RUN]
        if problems:
            assert RUN in set(damaged["run_id"]), (field, value)
        for col in ("n_ranks", "n_nodes", "batch_size", "global_batch_size"):
            assert pd.isna(row[col]) or row[col] >= 1, (col, row[col])
        for col in ("gpu_model", "backend", "framework", "labels", "nodes"):
            assert row[col] is None or isinstance(row[col], str), (col, row[col])
    finally:
        f.write_text(good)
