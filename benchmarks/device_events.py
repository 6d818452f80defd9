#!/usr/bin/env python
"""What do the CUDA events of the device timer cost per step? (``docs/metrics.md``, "Device time")

The phase API's loop (data, forward, backward, optimizer, step_end: 4 phases, 8 events a
step) in one process, with the device timer on and off in alternating blocks (ABBA), each
"on" block paired with the "off" block beside it; the median paired difference per step is
reported with a bootstrap 95 % interval, and as a share of a 10 ms step (the target: at most
1 %).

* With CUDA (``--device cuda``, the default where torch sees a GPU): real
  ``torch.cuda.Event`` records on the current stream around a ``torch.cuda._sleep`` of
  ``--step-ms`` per step, so the GPU is busy as in training.
* Without CUDA: the timer's own bookkeeping (pool, marks, spans, lazy resolution) with an
  event class whose ``record``/``query``/``elapsed_time`` do nothing. That is the part of
  the cost scalescope's code adds; the driver's ``cudaEventRecord`` comes on top and is
  measured only on a GPU.

    .venv/bin/python benchmarks/device_events.py                 # about 20 s
    .venv/bin/python benchmarks/device_events.py --blocks 40 --steps 200
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class NullEvent:
    t = 0.0

    def record(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, other) -> float:
        return 0.0


class NullCuda:
    """The timer's API with events that cost nothing: the bookkeeping alone."""

    device = 0

    def event(self) -> NullEvent:
        return NullEvent()

    def record(self, ev: NullEvent) -> None:
        ev.record()

    def synchronize(self) -> None:
        pass


def _steps(ssi, n: int, work) -> float:
    """n steps of the phase API; mean host seconds per step."""
    t0 = time.perf_counter()
    for _ in range(n):
        with ssi.phase("data"):
            pass
        with ssi.phase("forward"):
            work()
        with ssi.phase("backward"):
            work()
        with ssi.phase("optimizer"):
            pass
        ssi.step_end()
    return (time.perf_counter() - t0) / n


def _bootstrap(diffs: list[float], reps: int = 2000) -> tuple[float, float]:
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(reps))
    return meds[int(0.025 * reps)], meds[int(0.975 * reps)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=30, help="block pairs (default 30)")
    p.add_argument("--steps", type=int, default=100, help="steps per block (default 100)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--step-ms", type=float, default=10.0, help="GPU work per step with CUDA (default 10)")
    args = p.parse_args(argv)
    import instrumentation as ssi
    from instrumentation import device, phases

    torch = None
    if args.device != "cpu":
        try:
            import torch as _t

            torch = _t if _t.cuda.is_available() else None
        except ImportError:
            torch = None
        if args.device == "cuda" and torch is None:
            print("device_events: --device cuda but torch sees no GPU", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory() as tmp:
        run = ssi.init(run_dir=Path(tmp) / "r", framework="none", sample_interval_s=0, nvtx=False)
        if torch is not None:
            cycles = _cycles_per_ms(torch)
            def work():
                torch.cuda._sleep(int(args.step_ms / 2 * cycles))
            make = lambda: device.DeviceTimer(device.cuda_api(), run.recorder.add, every=1)  # noqa: E731
        else:
            def work():
                pass
            make = lambda: device.DeviceTimer(NullCuda(), run.recorder.add, every=1)  # noqa: E731
        timer = make()
        on, off = [], []
        for b in range(args.blocks):
            for state in ((True, False) if b % 2 == 0 else (False, True)):
                phases.S.dev = timer if state else None
                (on if state else off).append(_steps(ssi, args.steps, work))
        phases.S.dev = timer
        summary = timer.finish()
        phases.S.dev = None
        ssi.finish()
    diffs = [a - b for a, b in zip(on, off, strict=True)]
    med = statistics.median(diffs)
    lo, hi = _bootstrap(diffs)
    mode = f"CUDA ({torch.cuda.get_device_name()})" if torch is not None else "no CUDA: bookkeeping only"
    print(f"device events: {mode}; {args.blocks} block pairs x {args.steps} steps, 8 events per step")
    print("| | per step | of a 10 ms step |")
    print("|---|---|---|")
    print(f"| events on - off (median paired, 95 % CI) | {1e6 * med:+.2f} µs ({1e6 * lo:+.2f} to {1e6 * hi:+.2f}) "
          f"| {100 * med / 0.010:+.3f} % ({100 * lo / 0.010:+.3f} to {100 * hi / 0.010:+.3f}) |")
    print(f"| step without events (median) | {1e6 * statistics.median(off):.2f} µs | |")
    print(f"timer summary: {summary}")
    return 0


def _cycles_per_ms(torch) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    a.record()
    torch.cuda._sleep(10_000_000)
    b.record()
    b.synchronize()
    return 10_000_000 / max(a.elapsed_time(b), 1e-3)


if __name__ == "__main__":
    sys.exit(main())
