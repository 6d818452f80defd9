"""A real one-node SLURM cluster for the tests that submit jobs (``scripts/local_slurm.sh``).

Started once per session by the first test that asks for it, stopped at the end; those
tests skip where it cannot start (not root, SLURM or munge not installed, daemons refusing).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "local_slurm.sh"


def _free_port_pair() -> int:
    """A port P with P and P + 1 free (slurmctld and slurmd), from 20000-29998."""
    for _ in range(200):
        port = random.randrange(20000, 29998)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for the local SLURM cluster")


@pytest.fixture(scope="session")
def local_slurm(tmp_path_factory):
    """``SLURM_CONF`` of a running private cluster (set in ``os.environ`` for the session)."""
    if os.name != "posix" or os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root (slurmd starts jobs as their user)")
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])  # the daemons live in sbin
    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch") if not shutil.which(b, path=path)]
    if missing:
        pytest.skip(f"SLURM not installed ({', '.join(missing)} missing; scripts/system_deps.sh installs it)")
    state = tmp_path_factory.mktemp("slurm")
    # a port pair of its own, so a second test session on this machine starts its own cluster
    env = {**os.environ, "SCALESCOPE_SLURM_PORT": str(_free_port_pair())}
    proc = subprocess.run(["bash", str(SCRIPT), "start", str(state)], capture_output=True, text=True, timeout=180,
                          env=env)
    if proc.returncode != 0:
        pytest.skip(f"the local SLURM cluster did not start: {proc.stderr.strip()[-600:]}")
    conf = str(state / "slurm.conf")
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    try:
        yield conf
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], capture_output=True, text=True, timeout=120,
                       env=env)
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
