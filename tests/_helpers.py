"""Small helpers shared by test modules (importable because pyproject sets pytest's
``pythonpath = ["tests"]``)."""

from __future__ import annotations

import subprocess
import sys


def _horovod_missing() -> str | None:
    proc = subprocess.run([sys.executable, "-c", "import horovod.torch"], capture_output=True, text=True)
    return None if proc.returncode == 0 else f"import horovod.torch fails: {proc.stderr.strip().splitlines()[-1:]}"


#: Why Horovod cannot be used here, or None when it can.
HVD_MISSING = _horovod_missing()
#: The backends a real sweep in the tests runs on this machine.
REAL_BACKENDS = ["ddp-gloo"] + ([] if HVD_MISSING else ["horovod-gloo", "horovod-mpi"])
