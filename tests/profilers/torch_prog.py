"""A few instrumented steps of a tiny torch model in one process (no framework), for the
PyTorch profiler tests: ``python torch_prog.py RUN_DIR N_STEPS`` (the window comes from
``$SCALESCOPE_TORCH_PROFILER``)."""

import sys

import torch

import instrumentation as ssi

ssi.init(run_dir=sys.argv[1], framework="none", sample_interval_s=0)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _step in range(int(sys.argv[2])):
    with ssi.phase("data"):
        x, y = torch.randn(32, 64), torch.randn(32, 1)
    with ssi.phase("forward"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    with ssi.phase("backward"):
        loss.backward()
    with ssi.phase("optimizer"):
        opt.step()
        opt.zero_grad()
    ssi.step_end()
ssi.epoch_end(0, samples=32 * int(sys.argv[2]))
ssi.finish()
