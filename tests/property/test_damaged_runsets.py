"""Damaged experiments as a property (issue 16, part 5): whatever files of a copy of
tests/data/experiment_small are emptied, cut, garbled or deleted, a RunSet loads, its tables
load, and every part that cannot be read is named in ``RunSet.damaged`` or in a warning;
nothing raises."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from analysis.runset import RunSet  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXP = ROOT / "tests" / "data" / "experiment_small"
FILES = sorted(str(p.relative_to(EXP)) for p in EXP.rglob("*")
               if p.is_file() and p.suffix in (".json", ".jsonl", ".csv") and p.name != "experiment.json")
OPS = ("empty", "cut", "garble", "delete")


def _damage(path: Path, op: str) -> None:
    raw = path.read_bytes()
    if op == "empty":
        path.write_bytes(b"")
    elif op == "cut":
        path.write_bytes(raw[: len(raw) // 3])
    elif op == "garble":
        path.write_bytes(raw[:10] + b"\xff{[\x00" + raw[10:])
    else:
        path.unlink()


@pytest.mark.timeout(600)
@settings(max_examples=int(__import__("os").environ.get("SCALESCOPE_FUZZ_RUNSETS", "12")), deadline=None, derandomize=__import__("os").environ.get("SCALESCOPE_FUZZ_RANDOM") != "1", database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.lists(st.tuples(st.sampled_from(FILES), st.sampled_from(OPS)), min_size=1, max_size=4,
                       unique_by=lambda t: t[0]))
def test_a_damaged_experiment_always_loads_and_names_what_it_lost(tmp_path_factory, damage):
    exp = tmp_path_factory.mktemp("exp") / "EXP"
    shutil.copytree(EXP, exp)
    for rel, op in damage:
        _damage(exp / rel, op)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rs = RunSet.from_dirs(exp)
        tables = {name: getattr(rs, name) for name in ("events", "samples", "epochs", "rank_devices")}
        damaged = rs.damaged
    assert len(rs.runs) == 7
    said = " ".join(str(w.message) for w in caught) + " " + " ".join(damaged["path"].dropna())
    for rel, op in damage:
        name = Path(rel).name
        run = Path(rel).parts[0]
        if rs.runs.set_index("run_id").loc[run, "status"] != "ok":
            continue  # a failed run's data is not read, so not checked
        if op == "delete" and name != "run.json":
            continue  # a missing trace or samples file is a run without that data
        assert name in said or run in set(damaged["run_id"].dropna()), (rel, op)
    for run_id in set(damaged["run_id"].dropna()) & set(tables["events"]["run_id"].astype(str)):
        parts = set(damaged.loc[damaged["run_id"] == run_id, "part"])
        assert "events" not in parts and "run.json" not in parts, run_id
