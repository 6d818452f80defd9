"""A torchrun-style DDP script in the shape of the PyTorch examples' DDP tutorial
(``multigpu_torchrun.py``), written here: env:// rendezvous from ``RANK``/``LOCAL_RANK``/
``WORLD_SIZE`` (a KeyError without a launcher), a ``DistributedSampler``, ``model.module``,
and a snapshot in the working directory that the next start resumes from.

The scalescope lines are marked ``# ssi``; nothing else knows about scalescope or a baseline.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import instrumentation as ssi  # ssi

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batch-size", type=int, default=16)
p.add_argument("--snapshot", default="snapshot.pt")
args = p.parse_args()

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group(backend="gloo")
ssi.init(config={"batch_size": args.batch_size, "epochs": args.epochs})  # ssi

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 20), torch.randn(256, 1))
loader = DataLoader(data, batch_size=args.batch_size, shuffle=False, sampler=DistributedSampler(data))
model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
epochs_run = 0
if os.path.exists(args.snapshot):
    snap = torch.load(args.snapshot)
    model.load_state_dict(snap["MODEL_STATE"])
    epochs_run = snap["EPOCHS_RUN"]
    print(f"Resuming training from snapshot at Epoch {epochs_run}")
model = DDP(model)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
loader = ssi.instrument(model, opt, loader)  # ssi

for epoch in range(epochs_run, args.epochs):
    loader.sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    ssi.epoch_end(epoch)  # ssi
    if dist.get_rank() == 0:
        torch.save({"MODEL_STATE": model.module.state_dict(), "EPOCHS_RUN": epoch + 1}, args.snapshot)

ssi.finish()  # ssi
del model, opt
dist.destroy_process_group()
