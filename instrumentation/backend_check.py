"""Can this machine run the NCCL backends a local sweep asks for?

``ddp-nccl`` needs torch with NCCL and one CUDA GPU per rank; ``horovod-nccl`` needs a
Horovod built with NCCL as well. The sweep runs on login nodes without torch imported, so
the facts come from one short child process of the interpreter that will run the ranks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["NCCL_BACKENDS", "check_nccl", "nccl_facts"]

#: Backend labels that need NCCL (and GPUs) on the machine that runs them.
NCCL_BACKENDS = ("ddp-nccl", "horovod-nccl")

_PROBE = """
import json
out = {"torch": None, "cuda_gpus": 0, "torch_nccl": False, "horovod": None, "horovod_nccl": False}
try:
    import torch
    import torch.distributed as dist
    out["torch"] = torch.__version__
    out["cuda_gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    out["torch_nccl"] = bool(dist.is_available() and dist.is_nccl_available())
except Exception as exc:
    out["torch_error"] = repr(exc)
try:
    import horovod.torch as hvd
    out["horovod"] = "importable"
    out["horovod_nccl"] = bool(hvd.nccl_built())
except Exception as exc:
    out["horovod_error"] = repr(exc)
print(json.dumps(out))
"""


def nccl_facts(*, python: str | None = None, timeout_s: float = 120.0) -> dict:
    """GPUs torch sees, and whether torch and Horovod have NCCL, as the run's interpreter says."""
    try:
        res = subprocess.run([python or sys.executable, "-c", _PROBE], capture_output=True, text=True,
                             timeout=timeout_s, check=False)
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return {"torch": None, "cuda_gpus": 0, "torch_nccl": False, "horovod": None, "horovod_nccl": False,
                "torch_error": f"cannot ask {python or sys.executable}: {exc}"}


def check_nccl(backends: Sequence[str], nps: Sequence[int], *, facts: dict | None = None) -> None:
    """ValueError naming what is missing when a planned NCCL backend cannot run here.

    ``facts`` (from :func:`nccl_facts`) is asked for only when an NCCL backend is planned.
    """
    wanted = [b for b in NCCL_BACKENDS if b in backends]
    if not wanted:
        return
    f = facts if facts is not None else nccl_facts()
    for b in wanted:
        if f.get("torch") is None:
            raise ValueError(f"--backend {b}: torch cannot be imported here ({f.get('torch_error', 'unknown')})")
        if b == "horovod-nccl":
            if f.get("horovod") is None:
                raise ValueError(f"--backend {b}: horovod.torch cannot be imported here "
                                 f"({f.get('horovod_error', 'unknown')})")
            if not f.get("horovod_nccl"):
                raise ValueError(f"--backend {b}: this Horovod was built without NCCL (hvd.nccl_built() is "
                                 "false); rebuild it with HOROVOD_GPU_OPERATIONS=NCCL, or use horovod-gloo / "
                                 "horovod-mpi")
        elif not f.get("torch_nccl"):
            raise ValueError(f"--backend {b}: this torch has no NCCL (torch.distributed.is_nccl_available() is "
                             "false); use ddp-gloo")
        gpus = int(f.get("cuda_gpus") or 0)
        if gpus == 0:
            raise ValueError(f"--backend {b}: torch sees no CUDA GPU on this machine, and NCCL needs one GPU "
                             "per rank; use a Gloo or MPI backend here")
        if max(nps) > gpus:
            raise ValueError(f"--backend {b}: --np {max(nps)} needs {max(nps)} GPUs (one per rank), this "
                             f"machine has {gpus}")
