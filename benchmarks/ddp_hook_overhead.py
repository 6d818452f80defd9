#!/usr/bin/env python
"""What does the recording DDP comm hook cost? Step time with scalescope's hook against PyTorch's own.

The thesis workload's model in ``DistributedDataParallel`` (one process, Gloo, world size 1:
DDP still buckets the gradients, calls the comm hook for each bucket and waits for the
futures at the end of backward), batch 75, CPU. ONE model trains; its registered comm hook
dispatches each step either to scalescope's recording hook (``ddp_comm_hook``'s: records each
bucket's allreduce and DDP's wait as a ``sync`` phase, queueing an autograd callback) or to
PyTorch's ``default_hooks.allreduce_hook``, the hook scalescope's wraps, so the difference is
the recording alone. Steps alternate (ABBA) and every step records the same phases
(``ssi.phase``), so only the hook path differs. (Two DDP replicas side by side, one per
hook, differed by up to 100 µs a step whichever hook they had, from memory placement.) The overhead is the median of the per-pair step differences
(recording minus default) with a bootstrap 95 % interval, in µs and in % of the median
default step; ``--bucket-mb`` sets DDP's ``bucket_cap_mb`` to get several buckets.

    .venv/bin/python benchmarks/ddp_hook_overhead.py              # ~1 minute on 2 cores
    .venv/bin/python benchmarks/ddp_hook_overhead.py --bucket-mb 0.1   # 7 buckets per step

Targets (instrumentation overall): <= 1 % added step time at batch 75, <= 5 µs per recorded
phase; the hook adds one ``sync`` phase and one ``comm`` record per bucket per step.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _workload_module():
    spec = importlib.util.spec_from_file_location("strain_stress", ROOT / "examples" / "strain_stress.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def run(args: argparse.Namespace) -> dict:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    import instrumentation as ssi
    from instrumentation import auto

    ss = _workload_module()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="ss-ddphook-") as tmp:
        tmp = Path(tmp)
        dist.init_process_group("gloo", init_method=f"file://{tmp / 'store'}", rank=0, world_size=1)
        try:
            torch.manual_seed(0)
            model = DDP(ss.build_model(), bucket_cap_mb=args.bucket_mb)
            opt = torch.optim.Adam(model.parameters(), lr=4.7331e-4)
            recording = [False]

            def hook(state, bucket):  # one model, one registered hook: the step picks the path
                return (auto._recording_allreduce_hook if recording[0] else allreduce_hook)(state, bucket)

            model.register_comm_hook(state=None, hook=hook)
            ssi.init(run_dir=tmp / "run", framework="ddp", config={"benchmark": "ddp hook", "batch_size": 75})
            gen = torch.Generator().manual_seed(1)
            x = torch.rand(args.pool, 3, ss.N_POINTS, generator=gen)
            y = torch.rand(args.pool, 2, generator=gen)
            loss_fn = torch.nn.MSELoss()

            def step(i: int) -> int:
                j = (i * 75) % (args.pool - 75)
                xb, yb = x[j:j + 75], y[j:j + 75]
                t0 = time.perf_counter_ns()
                with ssi.phase("forward"):
                    opt.zero_grad()
                    loss = loss_fn(model(xb), yb)
                with ssi.phase("backward"):
                    loss.backward()
                with ssi.phase("optimizer"):
                    opt.step()
                ssi.step_end()
                return time.perf_counter_ns() - t0

            pattern = (True, False, False, True)
            times: dict[bool, list[int]] = {True: [], False: []}
            diffs: list[int] = []
            pair: dict[bool, int] = {}
            for k in range(args.warmup + args.steps * 2):
                rec = recording[0] = pattern[k % 4]
                dt = step(k)
                if k < args.warmup:
                    continue
                times[rec].append(dt)
                pair[rec] = dt
                if len(pair) == 2:
                    diffs.append(pair[True] - pair[False])
                    pair = {}
            ssi.finish()
            text = "".join(p.read_text() for p in (tmp / "run").glob("rank-*.trace.json"))
            n_sync = text.count('"name":"sync"')
            n_comm = text.count('"cat":"comm"')
        finally:
            dist.destroy_process_group()
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
    base = statistics.median(times[False])
    med = statistics.median(diffs)
    return {
        "pairs": len(diffs), "bucket_mb": args.bucket_mb,
        "sync_phases": n_sync, "comm_records": n_comm,
        "default_step_ms": base / 1e6, "recording_step_ms": statistics.median(times[True]) / 1e6,
        "pair_median_us": med / 1e3, "pair_median_ci95_us": [meds[49] / 1e3, meds[1949] / 1e3],
        "pair_median_pct": med / base * 100, "pair_median_ci95_pct": [meds[49] / base * 100, meds[1949] / base * 100],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600, help="steps of each kind (default 600)")
    p.add_argument("--warmup", type=int, default=40, help="steps left out first (default 40)")
    p.add_argument("--pool", type=int, default=3000, help="random curves to draw batches from")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (default 25: one bucket)")
    args = p.parse_args(argv)
    os.environ.setdefault("SCALESCOPE_NVTX", "off")
    r = run(args)
    print(f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print("| bucket_cap_mb | pairs | sync phases | comm records | default step (ms) | recording step (ms) "
          "| added per step (µs, median, 95 % CI) | added (% of step, 95 % CI) |")
    print("|---|---|---|---|---|---|---|---|")
    lo, hi = r["pair_median_ci95_us"]
    plo, phi = r["pair_median_ci95_pct"]
    print(f"| {r['bucket_mb']:g} | {r['pairs']} | {r['sync_phases']} | {r['comm_records']} "
          f"| {r['default_step_ms']:.3f} | {r['recording_step_ms']:.3f} "
          f"| {r['pair_median_us']:+.1f} ({lo:+.1f} to {hi:+.1f}) "
          f"| {r['pair_median_pct']:+.2f} % ({plo:+.2f} to {phi:+.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
