"""A synthetic benchmark with fixed work per rank and no dataset (like Horovod's
``pytorch_synthetic_benchmark.py``): every rank runs ``--steps`` steps on random batches of
``--batch-size`` (``$SCALESCOPE_BATCH_SIZE``), whatever the rank count. No epochs are
recorded, so scalescope compares its runs by throughput.

    python -m instrumentation.sweep --np 1,2 --backend ddp-gloo --baseline --out D \
        -- python tests/validation/weak_synthetic.py --steps 30
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn

import instrumentation as ssi

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--batch-size", type=int, default=int(os.environ.get("SCALESCOPE_BATCH_SIZE", "64")))
args = p.parse_args()
framework = os.environ.get("SCALESCOPE_FRAMEWORK", "") or "none"
torch.set_num_threads(1)
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
if framework == "ddp":
    import torch.distributed as dist

    dist.init_process_group(backend="gloo")
    model = nn.parallel.DistributedDataParallel(model)
ssi.init(framework=framework, config={"batch_size": args.batch_size, "threads_per_rank": 1,
                                      "steps_per_rank": args.steps, "model": "weak_synthetic"})
if framework == "ddp":
    ssi.ddp_comm_hook(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()
status = "failed"
try:
    for _ in range(args.steps):
        with ssi.phase("data"):
            x = torch.randn(args.batch_size, 256)
            y = torch.randint(0, 10, (args.batch_size,))
        with ssi.phase("forward"):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
        with ssi.phase("backward"):
            loss.backward()
        with ssi.phase("optimizer"):
            opt.step()
        ssi.step_end()
    status = "ok"
finally:
    ssi.finish(status=status)
    if framework == "ddp":
        dist.destroy_process_group()
