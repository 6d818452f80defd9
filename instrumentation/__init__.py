"""scalescope instrumentation: light, crash-safe recording inside training processes.

>>> import instrumentation as ssi                          # doctest: +SKIP
>>> run = ssi.init(config={"batch_size": 64})              # doctest: +SKIP
>>> for batch in ssi.wrap_loader(loader):                  # doctest: +SKIP
...     with ssi.phase("forward"): loss = model(batch)
...     with ssi.phase("backward"): loss.backward()
...     with ssi.phase("optimizer"): opt.step()
...     ssi.step_end()
>>> ssi.finish()                                           # doctest: +SKIP

Pure Python and the standard library; torch, horovod, nvtx, pynvml and psutil are used
only when present. Never imports :mod:`analysis`. No function raises into the training
loop. See ``docs/instrumentation.md`` and ``docs/run-directory.md``.
"""

from __future__ import annotations

from instrumentation._env import InstrumentationWarning
from instrumentation.auto import ddp_comm_hook, horovod_comm_hook, instrument, wrap_loader
from instrumentation.phases import (
    PHASES,
    current_step,
    epoch_end,
    epoch_start,
    mark,
    phase,
    step_end,
)
from instrumentation.run import Run, current_run, finish, init, sweep_config

__all__ = [
    "PHASES",
    "InstrumentationWarning",
    "Run",
    "current_run",
    "current_step",
    "ddp_comm_hook",
    "epoch_end",
    "epoch_start",
    "finish",
    "horovod_comm_hook",
    "init",
    "instrument",
    "mark",
    "phase",
    "step_end",
    "sweep_config",
    "wrap_loader",
]
