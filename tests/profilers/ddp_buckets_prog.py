"""DDP (gloo, CPU) training with several gradient buckets, for the Kineto cross-check.

Run by ``torchrun`` through ``scalescope sweep``; ``--steps`` iterations of a 6-layer MLP
whose gradients (about 0.8 MB) are split into several buckets by ``bucket_cap_mb=0.1``, with
scalescope's DDP comm hook recording every bucket allreduce.
"""

import argparse
import gc

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import instrumentation as ssi

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8)
args = p.parse_args()

dist.init_process_group("gloo")
torch.set_num_threads(1)
torch.manual_seed(0)
layers = []
for _ in range(6):
    layers += [torch.nn.Linear(180, 180), torch.nn.ReLU()]
model = DistributedDataParallel(torch.nn.Sequential(*layers, torch.nn.Linear(180, 1)), bucket_cap_mb=0.1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ssi.init(config={"batch_size": 16})
ssi.ddp_comm_hook(model)
g = torch.Generator().manual_seed(dist.get_rank())
for _step in range(args.steps):
    with ssi.phase("data"):
        x, y = torch.randn(16, 180, generator=g), torch.randn(16, 1, generator=g)
    with ssi.phase("forward"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    with ssi.phase("backward"):
        loss.backward()
    with ssi.phase("optimizer"):
        opt.step()
        opt.zero_grad()
    ssi.step_end()
ssi.epoch_end(0, samples=16 * args.steps)
ssi.finish()
# Free the DDP model before destroying its process group: with torch 2.13 a DDP model alive at
# interpreter shutdown sometimes aborts the process (docs/instrumentation.md, "DDP exit").
del model, opt, loss
gc.collect()
dist.destroy_process_group()
