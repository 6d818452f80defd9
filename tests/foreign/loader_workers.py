"""A DDP script (torchrun-style env rendezvous) with its own ``DataLoader`` worker processes
and a ``Dataset`` that computes its samples, written here. Workers are forked after
``ssi.init``; they never write scalescope files.

The scalescope lines are marked ``# ssi``.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import instrumentation as ssi  # ssi


class Curves(Dataset):
    def __len__(self):
        return 192

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(32, generator=g)
        return x, x.sum(dim=0, keepdim=True)


p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--batch-size", type=int, default=16)
p.add_argument("--workers", type=int, default=2)
args = p.parse_args()

dist.init_process_group(backend="gloo", init_method="env://", rank=int(os.environ["RANK"]),
                        world_size=int(os.environ["WORLD_SIZE"]))
ssi.init(config={"batch_size": args.batch_size})  # ssi
torch.manual_seed(0)
data = Curves()
loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data), num_workers=args.workers)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
loader = ssi.instrument(model, opt, loader)  # ssi
for epoch in range(args.epochs):
    loader.sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    ssi.epoch_end(epoch)  # ssi
ssi.finish()  # ssi
del model, opt
dist.destroy_process_group()
