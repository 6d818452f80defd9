"""``scalescope demo`` (what ``make demo`` runs): a real sweep of the thesis workload and its report.

The sweep: 1 and 2 ranks with Horovod over Gloo and over MPI and DDP over Gloo, plus the
one-process baseline without a framework, at batch sizes 75 and 300, four repeats (an
interval and a verdict need 3 on every side, and a repeat flagged as an outlier is left
out, docs/metrics.md), a few epochs of the synthetic strain-stress task. Then ``scalescope report`` on the experiment.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "strain_stress.py"


def sweep_argv(out: str, *, quick: bool = False) -> list[str]:
    """The ``scalescope sweep`` arguments of the demo experiment."""
    import importlib.util

    backends = ["horovod-gloo", "horovod-mpi", "ddp-gloo"]
    if importlib.util.find_spec("horovod") is None:  # only the backends this machine can run
        backends = ["ddp-gloo"]
    elif shutil.which("mpirun") is None:
        backends.remove("horovod-mpi")
    argv = [
        "--np", "1,2",
        "--backend", ",".join(backends),
        "--baseline",
        "--batch-size", "75" if quick else "75,300",
        "--repeats", "1" if quick else "4",  # an outlier left out still leaves 3: an interval
        "--out", out,
        "--", "python", str(EXAMPLE),  # the sweep runs `python` as its own interpreter
        "--epochs", "2" if quick else "3",
        "--samples", "2000",
    ]
    return argv


def main(*, out: str = "runs/demo", quick: bool = False, report: bool = True) -> int:
    import argparse

    try:
        from instrumentation import sweep
    except ImportError as exc:
        print(f"[demo] the sweep launcher is not available yet ({exc}); nothing to run", file=sys.stderr)
        return 1
    if not EXAMPLE.exists():
        print(f"[demo] {EXAMPLE} is missing; nothing to run", file=sys.stderr)
        return 1
    parser = argparse.ArgumentParser(prog="scalescope sweep")
    sweep.add_arguments(parser)
    args = parser.parse_args(sweep_argv(out, quick=quick))
    print(f"[demo] scalescope sweep {' '.join(sweep_argv(out, quick=quick))}")
    rc = sweep.run(args)
    if rc:
        print(f"[demo] the sweep finished with failed runs (exit {rc}); reporting what ran", file=sys.stderr)
    if not report:
        return rc
    try:
        from analysis import report as report_mod
    except ImportError as exc:
        print(f"[demo] the report is not available yet ({exc}); the experiment is in {out}")
        return rc
    rparser = argparse.ArgumentParser(prog="scalescope report")
    report_mod.add_arguments(rparser)
    rrc = report_mod.run(rparser.parse_args([out]))
    print(
        f"\n[demo] experiment: {out}\n"
        f"[demo] open the notebooks on it: make notebooks EXP={out}   "
        f"(or: .venv/bin/scalescope notebooks {out})"
    )
    return rc or rrc
