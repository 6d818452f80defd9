"""The GPU-side breakdown on real Nsight Systems exports from the corpus, checked against the
kernel and copy intervals read straight from the SQLite files (independently of our reader)."""

from __future__ import annotations

import sqlite3
import warnings

import pytest

import analysis
import analysis.metrics as M

pytestmark = pytest.mark.corpus


def _union_s(intervals: list[tuple[int, int]]) -> float:
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total / 1e9


@pytest.mark.parametrize("name", ["flame__torch-ex.sqlite", "pipit__perlmutter-cloverleaf-cuda.sqlite",
                                  "parallel2__report2.sqlite"])
def test_gpu_breakdown_of_nsys_exports(corpus_dir, name):
    path = corpus_dir / "nsys" / name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", analysis.RecoveryWarning)
        events = analysis.read(path)
    g = M.gpu_time_breakdown(events)
    assert len(g) == 1
    row = g.iloc[0]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    kernels = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    copies = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchall()
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        copies += con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchall()
    con.close()
    everything = kernels + copies
    span = (max(e for _, e in everything) - min(s for s, _ in everything)) / 1e9
    assert row["span_s"] == pytest.approx(span, rel=1e-9)
    assert row["compute_s"] == pytest.approx(_union_s(kernels), rel=1e-9)  # no NCCL kernels in these
    assert row["comm_s"] == 0
    # memory time counts copies not hidden under kernels; idle is what no activity covers
    assert row["compute_s"] + row["memory_s"] == pytest.approx(_union_s(everything), rel=1e-9)
    assert row["idle_s"] == pytest.approx(span - _union_s(everything), rel=1e-9, abs=1e-12)
    fracs = row[["compute_frac", "comm_frac", "memory_frac", "idle_frac"]].sum()
    assert fracs == pytest.approx(1.0)


def test_nccl_kernels_count_as_communication(corpus_dir):
    events = analysis.read(corpus_dir / "kineto" / "hta__nccl_data.json.gz")
    g = M.gpu_time_breakdown(events)
    assert (g["comm_total_s"] > 0).all()
    nccl = events[(events["kind"] == "comm") & events["device"].notna()]
    assert len(nccl) and nccl["name"].astype(str).str.contains("nccl", case=False).all()
