"""The CPU-only tables that device time must leave unchanged, computed on the bundled
``data/sample_sweep``: ``python tests/_cpu_tables.py OUT_DIR`` writes them as CSV
(``tests/data/cpu_tables/`` holds them as computed before device time existed, commit
4b09f86); ``test_device_time.py::test_cpu_runs_are_unchanged`` recomputes and compares."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "data" / "sample_sweep"


def tables() -> dict:
    import analysis.metrics as M
    from analysis import RunSet

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rs = RunSet.from_dirs([EXPERIMENT])
        runs = rs.usable_runs() if hasattr(rs, "usable_runs") else rs.runs
        ev = rs.events
        out = {
            "breakdown_rank": M.time_breakdown(ev, level="rank"),
            "breakdown_step": M.time_breakdown(ev, level="step"),
            "step_table": M.step_table(ev, runs=runs, epochs=rs.epochs),
            "scaling_loss": M.scaling_loss(ev, runs, epochs=rs.epochs, samples=rs.samples),
        }
    return out


if __name__ == "__main__":
    dest = Path(sys.argv[1])
    dest.mkdir(parents=True, exist_ok=True)
    for name, df in tables().items():
        df.drop(columns=[c for c in df.columns if c == "source"]).to_csv(dest / f"{name}.csv", index=False)
        print(name, df.shape)
