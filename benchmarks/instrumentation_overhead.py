#!/usr/bin/env python
"""What does scalescope's instrumentation cost? Step time with and without it, and one phase record.

1. The thesis workload (``examples/strain_stress.py``, one process, batch 75, CPU) run with
   ``--no-instrument`` (instrumentation never imported) and instrumented (phases, step and
   epoch records, CPU sampler), interleaved (A B, B A, A B, ...) so that drifts of a shared
   machine hit both alike. Step time = an epoch's training-loop time / its steps; the first
   epoch of every process is warm-up and dropped; the table gives the overhead three ways:
   ratio of the medians over all other epochs, median of the per-pair ratios, and ratio of
   the fastest epochs (the least disturbed by other load on a shared machine).
2. A micro-benchmark of one recorded phase: ``with instrumentation.phase("forward"): pass``
   after ``init`` (recording to a real trace file, sampler running, no NVTX tool attached),
   minus the same loop with ``contextlib.nullcontext``; median of several rounds.

    .venv/bin/python benchmarks/instrumentation_overhead.py               # ~2-3 minutes on 2 cores
    .venv/bin/python benchmarks/instrumentation_overhead.py --repeats 4 --epochs 6 --json out.json

Targets: <= 1 % added step time at batch 75, <= 5 µs per recorded phase.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "strain_stress.py"
EPOCH_LINE = re.compile(r"^epoch (\d+)/\d+: .* time=([0-9.]+)s", re.M)


def _workload(*, instrument: bool, args: argparse.Namespace, data_dir: Path, run_dir: Path) -> list[float]:
    """Run the workload once; return the step time (s) of each epoch after the first."""
    cmd = [sys.executable, str(SCRIPT), "--backend", "none", "--device", "cpu", "--batch-size", "75",
           "--samples", str(args.samples), "--epochs", str(args.epochs), "--threads", str(args.threads),
           "--data-dir", str(data_dir)]
    if not instrument:
        cmd.append("--no-instrument")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCALESCOPE_")}
    env["SCALESCOPE_RUN_DIR"] = str(run_dir)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"workload failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    train = (3 * args.samples) // 4
    steps = -(-train // 75)
    epochs = [(int(e), float(t)) for e, t in EPOCH_LINE.findall(proc.stdout)]
    if len(epochs) != args.epochs:
        raise SystemExit(f"expected {args.epochs} epoch lines, got:\n{proc.stdout[-2000:]}")
    return [t / steps for e, t in epochs if e > 1]


def step_time_benchmark(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="ss-overhead-") as tmp:
        tmp = Path(tmp)
        data_dir = Path(args.data_dir) if args.data_dir else tmp / "data"
        # generate the data set once, outside the timed runs
        _workload(instrument=False, args=argparse.Namespace(**{**vars(args), "epochs": 1}),
                  data_dir=data_dir, run_dir=tmp / "warm")
        times: dict[bool, list[float]] = {False: [], True: []}
        pair_pct = []
        for r in range(args.repeats):
            order = (False, True) if r % 2 == 0 else (True, False)
            medians = {}
            for instrument in order:
                epochs = _workload(instrument=instrument, args=args, data_dir=data_dir,
                                   run_dir=tmp / f"run{r}-{int(instrument)}")
                times[instrument] += epochs
                medians[instrument] = statistics.median(epochs)
                print(f"  repeat {r + 1}/{args.repeats} {'instrumented' if instrument else 'baseline    '}: "
                      f"median step {medians[instrument] * 1e3:.3f} ms", flush=True)
            pair_pct.append((medians[True] / medians[False] - 1.0) * 100.0)
    base, inst = statistics.median(times[False]), statistics.median(times[True])
    q = statistics.quantiles
    return {
        "baseline_step_ms": base * 1e3, "instrumented_step_ms": inst * 1e3,
        "overhead_pct": (inst / base - 1.0) * 100.0,
        "baseline_min_step_ms": min(times[False]) * 1e3, "instrumented_min_step_ms": min(times[True]) * 1e3,
        "min_overhead_pct": (min(times[True]) / min(times[False]) - 1.0) * 100.0,
        "pair_overhead_pct": pair_pct, "pair_overhead_median_pct": statistics.median(pair_pct),
        "baseline_iqr_ms": [v * 1e3 for v in q(times[False], n=4)[::2]],
        "instrumented_iqr_ms": [v * 1e3 for v in q(times[True], n=4)[::2]],
        "n_epochs_each": len(times[False]),
    }


def phase_benchmark(*, n: int, rounds: int) -> dict:
    import instrumentation as ssi

    with tempfile.TemporaryDirectory(prefix="ss-phase-") as tmp:
        ssi.init(run_dir=tmp, framework="none", config={"benchmark": "phase"})
        phase, null = ssi.phase, contextlib.nullcontext
        rec, empty = [], []
        for _ in range(rounds):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                with phase("forward"):
                    pass
            rec.append((time.perf_counter_ns() - t0) / n)
            ssi.step_end()
            t0 = time.perf_counter_ns()
            for _ in range(n):
                with null():
                    pass
            empty.append((time.perf_counter_ns() - t0) / n)
        ssi.finish()
        trace_bytes = sum(p.stat().st_size for p in Path(tmp).glob("rank-*.trace.json"))
    rec_med, empty_med = statistics.median(rec), statistics.median(empty)
    return {"phase_raw_us": rec_med / 1e3, "empty_loop_us": empty_med / 1e3,
            "phase_us": (rec_med - empty_med) / 1e3, "phases_recorded": n * rounds,
            "trace_bytes": trace_bytes}


def machine() -> dict:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = {"python": platform.python_version()}
    with contextlib.suppress(ImportError):
        import torch

        versions["torch"] = torch.__version__
    return {"cpu": cpu, "cores": os.cpu_count(), "os": platform.platform(), **versions,
            "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=8, help="process pairs (default 8)")
    p.add_argument("--epochs", type=int, default=4, help="epochs per process; the first is dropped (default 4)")
    p.add_argument("--samples", type=int, default=6000, help="curves (default 6000: 60 steps an epoch)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: steadier on a shared machine)")
    p.add_argument("--data-dir", default=None, help="data cache (default: a temporary directory)")
    p.add_argument("--phase-n", type=int, default=200_000, help="phases per micro-benchmark round")
    p.add_argument("--phase-rounds", type=int, default=7)
    p.add_argument("--skip-workload", action="store_true", help="only the phase micro-benchmark")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    if args.epochs < 2 or args.repeats < 1:
        p.error("--epochs must be >= 2 (the first is warm-up) and --repeats >= 1")

    result = {"machine": machine(), "command": [Path(sys.executable).name, *sys.argv]}
    print(f"machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, "
          f"Python {result['machine']['python']}, torch {result['machine'].get('torch')}")
    print("phase micro-benchmark ...", flush=True)
    result["phase"] = phase_benchmark(n=args.phase_n, rounds=args.phase_rounds)
    if not args.skip_workload:
        print("workload (batch 75, one process, CPU), interleaved ...", flush=True)
        result["step"] = step_time_benchmark(args)

    print()
    print("| measurement | value | target |")
    print("|---|---|---|")
    ph = result["phase"]
    print(f"| one recorded phase (enter+exit, empty-loop corrected) | {ph['phase_us']:.2f} µs | <= 5 µs |")
    print(f"| one recorded phase, raw loop | {ph['phase_raw_us']:.2f} µs | |")
    if "step" in result:
        st = result["step"]
        print(f"| median step, no instrumentation | {st['baseline_step_ms']:.3f} ms "
              f"(IQR {st['baseline_iqr_ms'][0]:.3f}-{st['baseline_iqr_ms'][1]:.3f}) | |")
        print(f"| median step, instrumented | {st['instrumented_step_ms']:.3f} ms "
              f"(IQR {st['instrumented_iqr_ms'][0]:.3f}-{st['instrumented_iqr_ms'][1]:.3f}) | |")
        print(f"| added step time (ratio of the medians) | {st['overhead_pct']:+.2f} % "
              f"({st['n_epochs_each']} epochs each) | <= 1 % |")
        pairs = ", ".join(f"{v:+.1f}" for v in st["pair_overhead_pct"])
        print(f"| added step time (median of {len(st['pair_overhead_pct'])} interleaved pairs) | "
              f"{st['pair_overhead_median_pct']:+.2f} % (pairs: {pairs}) | <= 1 % |")
        print(f"| added step time (fastest epoch of each: {st['baseline_min_step_ms']:.3f} vs "
              f"{st['instrumented_min_step_ms']:.3f} ms) | {st['min_overhead_pct']:+.2f} % | <= 1 % |")
        per_step = ph["phase_us"] * 5 / (st["baseline_step_ms"] * 1e3) * 100.0
        print(f"| estimate: 5 phase records per step / step time | {per_step:.3f} % | |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
