"""A GPT trainer in the shape of public ones without a DataLoader, written here: globals
overridden by ``exec(open('configurator.py').read())`` (``--key=value``), batches cut from
a file under ``data/`` opened by a relative path, and gradient accumulation divided by the
world size (``gradient_accumulation_steps //= world_size``) with DDP's
``require_backward_grad_sync`` on the last micro-batch only; iterations, no epochs.

The scalescope lines are marked ``# ssi``; nothing else knows about scalescope or a baseline.
"""

import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

import instrumentation as ssi  # ssi

batch_size = 4
block_size = 16
gradient_accumulation_steps = 8
max_iters = 8
exec(open("configurator.py").read())  # noqa: SIM115 - the shape of such scripts: overrides from the command line

ddp = int(os.environ.get("RANK", -1)) != -1 and int(os.environ.get("WORLD_SIZE", "1")) > 1
world_size = 1
if ddp:
    init_process_group(backend="gloo")
    world_size = int(os.environ["WORLD_SIZE"])
    assert gradient_accumulation_steps % world_size == 0
    gradient_accumulation_steps //= world_size
ssi.init(config={"batch_size": batch_size})  # ssi: the micro-batch, as such scripts name it

with open(os.path.join("data", "train.bin"), "rb") as f:
    data = torch.tensor(list(f.read()), dtype=torch.long)
gen = torch.Generator().manual_seed(1337 + int(os.environ.get("RANK", 0)))


def get_batch():
    ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=gen)
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


torch.manual_seed(1337)
model = torch.nn.Sequential(torch.nn.Embedding(256, 64), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 256))
if ddp:
    model = DDP(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ssi.instrument(model, optimizer)  # ssi: counts each micro-batch of a step

for _ in range(max_iters):
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        x, y = get_batch()
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)) / gradient_accumulation_steps
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

ssi.finish()  # ssi
if ddp:
    del model, optimizer
    destroy_process_group()
