"""A Horovod training script in the usual shape, written here: ``hvd.DistributedOptimizer``,
parameter and optimizer-state broadcasts, a ``DistributedSampler`` over ``hvd.size()``, and
the loss averaged over ranks with ``hvd.allreduce`` each epoch. It writes ``metrics.csv``
into its working directory (appending, as a log would).

The scalescope lines are marked ``# ssi``; ``epoch_end`` gets no ``samples=``.
"""

import argparse

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import instrumentation as ssi  # ssi

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--batch-size", type=int, default=16)
p.add_argument("--threads-total", type=int, default=0,
               help="set torch's threads to this many divided by the ranks (a rule of its own, after init)")
args = p.parse_args()

hvd.init()
ssi.init(config={"batch_size": args.batch_size, "epochs": args.epochs})  # ssi
if args.threads_total:
    torch.set_num_threads(max(1, args.threads_total // hvd.size()))
torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 20), torch.randint(0, 3, (256,)))
sampler = DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank())
loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3 * hvd.size())
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
loader = ssi.instrument(model, optimizer, loader)  # ssi

for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    total = torch.zeros(1)
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.detach()
    avg = hvd.allreduce(total / len(loader), name="avg_loss")
    ssi.epoch_end(epoch, train_loss=avg)  # ssi
    if hvd.rank() == 0:
        with open("metrics.csv", "a") as f:
            f.write(f"{epoch},{float(avg):.6f}\n")
ssi.finish()  # ssi
