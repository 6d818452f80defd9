"""A TINY instrumented training run for the multi-process tests (not the thesis workload).

    torchrun --nproc-per-node 2 tests/instrumentation/tiny_train.py --framework ddp --run-dir D
    horovodrun -np 2 --gloo python tests/instrumentation/tiny_train.py --framework horovod --run-dir D
    python tests/instrumentation/tiny_train.py --framework none --run-dir D

DDP uses the automatic API (``instrument``: hooks, optimizer wrap, recording comm hook) and
then trains an identical DDP model *without* the hook and checks that both end with equal
parameters ("PARAMS_EQUAL True"); ``--accumulate K`` accumulates gradients over K
micro-batches under ``no_sync()``. Horovod and none use the explicit phase API; Horovod with
``--plain-step`` uses ``instrument`` and a plain ``optimizer.step()`` (no explicit
``synchronize()``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys

import torch
from torch import nn

import instrumentation as ssi

p = argparse.ArgumentParser()
p.add_argument("--framework", choices=["ddp", "horovod", "none"], required=True)
p.add_argument("--run-dir", required=True)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--steps", type=int, default=4)
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--sample-interval", type=float, default=0.05)
p.add_argument("--accumulate", type=int, default=1, help="DDP: micro-batches per optimizer step")
p.add_argument("--plain-step", action="store_true", help="Horovod: instrument() and a plain optimizer.step()")
args = p.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)


def make_model() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4))


def batches(rank: int, n: int):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(args.batch_size, 16, generator=g),
             torch.randint(0, 4, (args.batch_size,), generator=g)) for _ in range(n)]


loss_fn = nn.CrossEntropyLoss()
rank, world = 0, 1
hvd = None
if args.framework == "ddp":
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
elif args.framework == "horovod":
    import horovod.torch as hvd

    hvd.init()
    rank, world = hvd.rank(), hvd.size()

run = ssi.init(run_dir=args.run_dir, config={"batch_size": args.batch_size, "learning_rate": 0.1,
                                            "epochs": args.epochs},
               tags={"test": "tiny_train"}, sample_interval_s=args.sample_interval)
data = batches(rank, args.steps)
model = make_model()
opt = torch.optim.SGD(model.parameters(), lr=0.1)

if args.framework == "ddp":
    from torch.nn.parallel import DistributedDataParallel as DDP

    # small buckets so that the tiny model still has several gradient buckets
    model = DDP(model, bucket_cap_mb=0.002)
    loader = ssi.instrument(model, opt, data)

    def micro_step(m, o, i, x, y) -> float:
        """One micro-batch; gradients are synchronised and applied every ``accumulate``."""
        syncs = (i + 1) % args.accumulate == 0
        with m.no_sync() if not syncs else contextlib.nullcontext():
            loss = loss_fn(m(x), y)
            loss.backward()
        if syncs:
            o.step()  # wrapped on the instrumented model: `optimizer` phase, then step_end()
            o.zero_grad()
        return float(loss)

    for epoch in range(args.epochs):
        ssi.epoch_start(epoch)
        total = sum(micro_step(model, opt, i, x, y) for i, (x, y) in enumerate(loader))
        ssi.epoch_end(epoch, samples=args.steps * args.batch_size, train_loss=total / args.steps)
    ssi.finish()
    # Same training without the comm hook: parameters must be identical.
    ref = DDP(make_model(), bucket_cap_mb=0.002)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _epoch in range(args.epochs):
        for i, (x, y) in enumerate(data):
            micro_step(ref, ref_opt, i, x, y)
    equal = all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters(), strict=True))
    print(f"rank {rank} PARAMS_EQUAL {equal}", flush=True)
    # Free the DDP models (their reducers hold the gloo process group) before destroying it:
    # with torch 2.13 a DDP model that outlives destroy_process_group() into interpreter
    # shutdown aborts the process ("terminate called without an active exception") in
    # about one exit in four on a loaded 2-core machine, with or without scalescope.
    del model, ref, opt, ref_opt, loader
    gc.collect()
    dist.destroy_process_group()
    sys.exit(0)

if hvd is not None:
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
if hvd is not None and args.plain_step:
    loader = ssi.instrument(model, opt, data)
    for epoch in range(args.epochs):
        ssi.epoch_start(epoch)
        for x, y in loader:
            loss_fn(model(x), y).backward()
            opt.step()  # synchronises itself: `sync` nested in `optimizer`
            opt.zero_grad()
        ssi.epoch_end(epoch, samples=args.steps * args.batch_size)
    ssi.finish()
    print(f"rank {rank} DONE {os.getpid()}", flush=True)
    sys.exit(0)
for epoch in range(args.epochs):
    ssi.epoch_start(epoch)
    total = 0.0
    for x, y in ssi.wrap_loader(data):
        with ssi.phase("forward"):
            loss = loss_fn(model(x), y)
        with ssi.phase("backward"):
            loss.backward()
        if hvd is not None:
            with ssi.phase("sync"):
                opt.synchronize()
            with ssi.phase("optimizer"), opt.skip_synchronize():
                opt.step()
        else:
            with ssi.phase("optimizer"):
                opt.step()
        opt.zero_grad()
        ssi.step_end()
        total += float(loss)
    with ssi.phase("eval"), torch.no_grad():
        val = float(loss_fn(model(data[0][0]), data[0][1]))
    ssi.epoch_end(epoch, samples=args.steps * args.batch_size, train_loss=total / args.steps,
                  val_loss=val)
ssi.finish()
print(f"rank {rank} DONE {os.getpid()}", flush=True)
