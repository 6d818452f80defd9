"""A hydra-style app in the shape of public GPT trainers built on hydra, written here: a
``@app``-decorated ``main`` that takes ``key=value`` overrides (``data_config.path=...``),
a ``Trainer`` class, a dataset read from a relative path in the working directory, a
``DistributedSampler``, epochs counted from 1, and hydra's error handling: any exception
is caught, printed with "Error executing job with overrides" and hydra's advice line, and
the process exits 1 (the interpreter's exit handlers still run, as under hydra).

The scalescope lines are marked ``# ssi``; nothing else knows about scalescope or a baseline.
"""

import functools
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import instrumentation as ssi  # ssi

DEFAULTS = {"data_config.path": "data/input.txt", "trainer.epochs": 2, "trainer.batch_size": 8,
            "trainer.block": 16}


def app(fn):
    """What ``@hydra.main`` does here: overrides into a config, exceptions into exit 1."""
    @functools.wraps(fn)
    def wrapper():
        overrides = sys.argv[1:]
        cfg = dict(DEFAULTS)
        for item in overrides:
            key, _, value = item.partition("=")
            cfg[key] = type(DEFAULTS.get(key, ""))(value)
        try:
            fn(cfg)
        except Exception:
            print(f"Error executing job with overrides: {overrides}", file=sys.stderr)
            traceback.print_exc()
            print("\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
                  file=sys.stderr)
            sys.exit(1)
    return wrapper


class Chars(Dataset):
    """Fixed-length windows of a text file's bytes."""

    def __init__(self, path: str, block: int):
        with open(path, "rb") as f:
            data = torch.tensor(list(f.read()), dtype=torch.long)
        self.data, self.block = data, block

    def __len__(self):
        return (len(self.data) - 1) // self.block

    def __getitem__(self, i):
        chunk = self.data[i * self.block:(i + 1) * self.block + 1]
        return chunk[:-1], chunk[1:]


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
        if self.distributed:
            dist.init_process_group(backend="gloo")
        ssi.init(config={"batch_size": cfg["trainer.batch_size"], "epochs": cfg["trainer.epochs"]})  # ssi
        self.data = Chars(cfg["data_config.path"], cfg["trainer.block"])
        sampler = DistributedSampler(self.data, shuffle=False) if self.distributed else None
        self.loader = DataLoader(self.data, batch_size=cfg["trainer.batch_size"], sampler=sampler)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(256, 32), torch.nn.Linear(32, 256))
        self.model = DDP(model) if self.distributed else model
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.loader = ssi.instrument(self.model, self.opt, self.loader)  # ssi

    def fit(self):
        for epoch in range(1, self.cfg["trainer.epochs"] + 1):
            if self.distributed:
                self.loader.sampler.set_epoch(epoch)
            for x, y in self.loader:
                self.opt.zero_grad()
                loss = F.cross_entropy(self.model(x).reshape(-1, 256), y.reshape(-1))
                loss.backward()
                self.opt.step()
            ssi.epoch_end(epoch, train_loss=loss.item())  # ssi
        ssi.finish()  # ssi
        if self.distributed:
            del self.model, self.opt
            dist.destroy_process_group()


@app
def main(cfg):
    Trainer(cfg).fit()


if __name__ == "__main__":
    main()
