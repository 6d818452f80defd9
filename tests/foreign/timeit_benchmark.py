"""A ``timeit`` benchmark in the shape of Horovod's ``pytorch_synthetic_benchmark.py``,
written here: synthetic data, ``hvd.DistributedOptimizer``, parameter and optimizer-state
broadcasts, warm-up batches, then timed iterations; no epochs, no data loader and no
``step_end``: ``instrument`` closes each step at ``optimizer.step()``.

The scalescope lines are marked ``# ssi``.
"""

import argparse
import timeit

import horovod.torch as hvd
import torch
import torch.nn.functional as F

import instrumentation as ssi  # ssi

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=16)
p.add_argument("--num-warmup-batches", type=int, default=3)
p.add_argument("--num-batches-per-iter", type=int, default=4)
p.add_argument("--num-iters", type=int, default=3)
args = p.parse_args()

hvd.init()
ssi.init(config={"batch_size": args.batch_size})  # ssi
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
ssi.instrument(model, optimizer)  # ssi

data = torch.randn(args.batch_size, 64)
target = torch.randint(0, 10, (args.batch_size,))


def benchmark_step():
    optimizer.zero_grad()
    F.cross_entropy(model(data), target).backward()
    optimizer.step()


timeit.timeit(benchmark_step, number=args.num_warmup_batches)
img_secs = []
for _ in range(args.num_iters):
    t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
    img_secs.append(args.batch_size * args.num_batches_per_iter / t)
if hvd.rank() == 0:
    print(f"Img/sec per rank: {sum(img_secs) / len(img_secs):.1f}")
ssi.finish()  # ssi: the steps become the run's one (implicit) epoch
