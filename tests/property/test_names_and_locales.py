"""Issue 33, names from any language and logs from any locale:

* **mark() arguments JSON cannot encode** (NumPy scalars, paths, tensors, objects, keys that
  are not strings): only that record's detail changes (a number or text), every phase of the
  trace is kept and the trace is valid JSON;
* **nvidia-smi logs under a decimal-comma locale** (``73,41 W``): every value is read, with
  a warning naming the cause; a clock that steps back is warned; with ``tz=`` the hour a
  daylight-saving change repeats is placed by order, not dropped as garbage rows;
* **experiment lists**: ``scalescope notebooks`` passes its experiments in a form no
  directory name can break (``:``, ``,``, newlines, names that are not UTF-8);
* **labels outside Latin-1 in LaTeX** (CJK, Cyrillic, accents, emoji): distinct labels stay
  distinct, the file is ASCII (and Latin-1 letters, which the preamble prints) and compiles (``tests/test_latex.py`` compiles them);
* **an experiment folder whose name is not UTF-8**: ``scalescope report`` ends normally.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import analysis  # noqa: E402
from analysis import notebooks as nbs  # noqa: E402
from analysis import tables  # noqa: E402
from analysis.errors import RecoveryWarning  # noqa: E402
from analysis.readers import nvml  # noqa: E402
from instrumentation.clock import Anchor  # noqa: E402
from instrumentation.recorder import TraceRecorder  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SETTINGS = {"deadline": None, "derandomize": os.environ.get("SCALESCOPE_FUZZ_RANDOM") != "1", "database": None,
            "suppress_health_check": [HealthCheck.function_scoped_fixture]}


# ------------------------------------------------------------------ mark() arguments

class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


class _Hostile:
    """Every method JSON's fallback might call raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text")

    @property
    def size(self) -> int:
        raise RuntimeError("no size")


def _odd_values():
    vals = [np.float32(1.5), np.int64(7), np.bool_(True), np.array([1, 2]), np.arange(1000), Path("/x/y"),
            _Opaque(), _Hostile(), {1, 2}, b"\xff", {"nested": np.float16(2.0)}, {(1, 2): "tuple key"}, float("nan")]
    try:
        import torch
    except ImportError:
        return vals
    return [*vals, torch.tensor(3.25), torch.ones(3), torch.zeros(100, 100)]


@pytest.mark.parametrize("value", _odd_values(), ids=lambda v: type(v).__name__)
def test_a_mark_argument_json_cannot_encode_costs_only_its_own_detail(tmp_path, value):
    path = tmp_path / "rank-00000.trace.json"
    rec = TraceRecorder(path, rank=0, local_rank=0, host="h", anchor=Anchor(1_700_000_000_000_000_000, 0),
                        start_thread=False)
    rec.add(("phase", "forward", 10, 20, 1, 0, 0, None))
    rec.add(("marker", "odd", 15, None, 1, 0, 0, {"value": value, "plain": 1}))
    rec.add(("phase", "backward", 20, 40, 1, 0, 0, None))
    rec.flush()
    rec.close(status="ok")
    doc = json.loads(path.read_text())  # strict JSON, every record there
    names = [r["name"] for r in doc if r.get("ph") in ("X", "i")]
    assert names == ["forward", "odd", "backward"]
    odd = next(r for r in doc if r["name"] == "odd")["args"]
    assert odd["plain"] == 1 and odd["value"] is not None
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        assert odd["value"] == value.item()
    if isinstance(value, Path):
        assert odd["value"] == "/x/y"
    df = analysis.read(path)
    assert list(df["name"]) == ["forward", "odd", "backward"]


# ------------------------------------------------------------------ nvidia-smi under any locale

HEADER = "timestamp, index, utilization.gpu [%], memory.used [MiB], power.draw [W], clocks.sm [MHz]\n"


def _smi(rows, *, comma: bool) -> str:
    def num(x: float) -> str:
        text = f"{x:.2f}"
        return text.replace(".", ",") if comma else text
    return HEADER + "".join(f"2023/09/07 12:{i // 60:02d}:{i % 60:02d}.000, {d}, {u} %, {m} MiB, {num(p)} W, "
                            f"{num(c)} MHz\n" for i, (d, u, m, p, c) in enumerate(rows))


ROWS = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 100), st.integers(0, 80000),
                          st.floats(0, 999, allow_nan=False), st.floats(0, 2000, allow_nan=False)),
                min_size=1, max_size=12)


@settings(max_examples=40, **SETTINGS)
@given(rows=ROWS)
def test_a_decimal_comma_log_reads_as_the_decimal_point_one(tmp_path_factory, rows):
    tmp = tmp_path_factory.mktemp("smi")
    point, comma = tmp / "point.csv", tmp / "comma.csv"
    point.write_text(_smi(rows, comma=False))
    comma.write_text(_smi(rows, comma=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = nvml.read(point, run_id="r")
        b = nvml.read(comma, run_id="r")
    assert len(b) == len(rows), "a row was lost"
    pd.testing.assert_frame_equal(a, b)
    said = " ".join(str(w.message) for w in caught)
    assert "decimal comma" in said and str(comma) in said


def test_a_clock_stepping_back_is_warned_and_tz_places_the_repeated_hour(tmp_path):
    # the night of 29 October 2023 in Berlin: 02:00-03:00 happens twice; one GPU, a sample every 20 min
    times = ["01:40", "02:00", "02:20", "02:40", "02:00", "02:20", "02:40", "03:00"]
    log = tmp_path / "dst.csv"
    log.write_text(HEADER + "".join(f"2023/10/29 {t}:00.000, 0, 50 %, 100 MiB, 70.00 W, 1000 MHz\n" for t in times))
    with pytest.warns(RecoveryWarning, match="clock steps back by 0:40:00"):
        naive = nvml.read(log, run_id="r")
    assert len(naive) == len(times)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zoned = nvml.read(log, run_id="r", tz="Europe/Berlin")
    said = " ".join(str(w.message) for w in caught)
    assert len(zoned) == len(times), "the repeated hour was dropped"
    assert "garbage" not in said and "daylight-saving" in said
    assert "clock steps back" not in said  # in UTC the samples are in order
    steps = np.diff(zoned["ts_ns"].to_numpy()) / 60e9
    assert list(steps) == [20.0] * (len(times) - 1)
    iso = tmp_path / "dst_iso.csv"  # the same log with ISO-8601 times (naive): the same placement
    iso.write_text(HEADER + "".join(f"2023-10-29T{t}:00, 0, 50 %, 100 MiB, 70.00 W, 1000 MHz\n" for t in times))
    with pytest.warns(RecoveryWarning, match="daylight-saving"):
        assert list(nvml.read(iso, run_id="r", tz="Europe/Berlin")["ts_ns"]) == list(zoned["ts_ns"])
    # the hour a change skips (26 March 2023, 02:00-03:00) does not exist: named, not "garbage"
    gap = tmp_path / "gap.csv"
    gap.write_text(HEADER + "2023/03/26 01:59:00.000, 0, 1 %, 1 MiB, 1.00 W, 1 MHz\n"
                   "2023/03/26 02:30:00.000, 0, 1 %, 1 MiB, 1.00 W, 1 MHz\n")
    with pytest.warns(RecoveryWarning, match="skipped by a daylight-saving change"):
        assert len(nvml.read(gap, run_id="r", tz="Europe/Berlin")) == 1


# ------------------------------------------------------------------ experiment lists

NAMES = st.text(st.sampled_from("ab:;, \n\t'\"[]\\é中") | st.just(os.pathsep), min_size=1, max_size=10).filter(
    lambda n: n.strip() and "/" not in n and n not in (".", ".."))


@settings(max_examples=40, **SETTINGS)
@given(names=st.lists(NAMES, min_size=1, max_size=3, unique=True))
def test_the_experiment_list_survives_any_directory_name(tmp_path_factory, monkeypatch, names):
    base = tmp_path_factory.mktemp("nb")
    dirs = [base / n for n in names]
    monkeypatch.setenv(nbs.ENV_VAR, nbs.env_value(dirs))
    assert nbs.env_experiments() == [d.resolve() for d in dirs]


def test_notebooks_opens_exactly_the_experiment_named(tmp_path, monkeypatch):
    exp = tmp_path / "exp:b"
    shutil.copytree(DATA / "experiment_small", exp)
    for other in ("exp", "b"):
        (tmp_path / other).mkdir()
    calls = []
    monkeypatch.setattr(nbs, "jupyter_command", lambda **kw: ["jupyter"])
    # JupyterLab replaces the process (exec, tests/test_notebooks.py): the call is caught here
    monkeypatch.setattr(nbs.os, "execve", lambda path, cmd, env: calls.append(env))
    assert nbs.main([str(exp)]) == 0
    monkeypatch.setenv(nbs.ENV_VAR, calls[0][nbs.ENV_VAR])
    assert nbs.env_experiments() == [exp.resolve()]
    undecodable = Path(os.fsdecode(os.fsencode(tmp_path) + b"/exp\xff"))
    monkeypatch.setenv(nbs.ENV_VAR, nbs.env_value([undecodable]))
    assert nbs.env_experiments() == [undecodable]


# ------------------------------------------------------------------ LaTeX labels in any script

LABEL = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FFFF, exclude_categories=("Cs",)),
                min_size=1, max_size=6)


@settings(max_examples=100, **SETTINGS)
@given(labels=st.lists(LABEL, min_size=2, max_size=5, unique=True))
def test_latex_keeps_labels_distinct_and_printable(labels):
    # distinct once the characters printed as they are (space-like, dropped) are set aside
    escaped = [tables.latex_escape(x) for x in labels]
    # ASCII, and the Latin-1 letters the documented preamble prints from UTF-8 as they are
    assert all(c.isascii() or (0xC0 <= ord(c) <= 0xFF and c not in "×÷") for e in escaped for c in e)
    for a, b in zip(labels, escaped, strict=True):
        assert "?" not in b or "?" in a
    folded = {" ".join(x.split()) for x in labels if all(ord(c) >= 0x20 and not 0x7F <= ord(c) < 0xA0 for c in x)}
    assert len({tables.latex_escape(x) for x in folded}) == len(folded)


def test_cjk_partition_names_stay_distinct_and_compile(tmp_path):
    from analysis.export import export_table

    df = pd.DataFrame({"label_partition": ["東京", "大阪", "Łódź", "Ωmega", "Київ", "🚀"], "wall_s": range(6)})
    with pytest.warns(UserWarning, match="code points"):
        tex, _ = export_table(df, tmp_path / "parts")
    text = tex.read_text()
    assert all(ord(c) <= 0xFF for c in text) and "??" not in text
    assert "[U+6771+U+4EAC]" not in text  # one bracket per character
    assert "{[}U+6771{]}{[}U+4EAC{]}" in text and "{[}U+5927{]}{[}U+962A{]}" in text and "\\L{}ód\\'{z}" in text
    if shutil.which("pdflatex"):
        from tests.test_latex import compile_tables

        assert compile_tables([tex], tmp_path / "work") == {}


# ------------------------------------------------------------------ a folder name that is not UTF-8

def test_report_into_a_folder_whose_name_is_not_utf8(tmp_path):
    # two experiments named after their folders, as a sweep names them, read as one folder
    base = Path(os.fsdecode(os.fsencode(tmp_path) + b"/parts\xfe"))
    base.mkdir()
    for tag in (b"a\xff", b"b\xff"):
        exp = Path(os.fsdecode(os.fsencode(base) + b"/" + tag))
        shutil.copytree(DATA / "experiment_small", exp)
        manifest = json.loads((exp / "experiment.json").read_text())
        manifest["name"] = exp.name
        (exp / "experiment.json").write_text(json.dumps(manifest))
    proc = subprocess.run([sys.executable, "-m", "analysis.cli", "report", base, "--no-static"], capture_output=True,
                          cwd=ROOT, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0, err
    assert "This is a bug" not in err
    assert b"\\udcfe" in proc.stdout  # the path shown escaped, as everywhere
    page = (base / "report" / "index.html").read_text(encoding="utf-8")
    assert "a\\xff/none_np1_bs10_r1" in page and "b\\xff/none_np1_bs10_r1" in page  # distinct, readable
