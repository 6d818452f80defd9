"""What a run's communication used: NCCL debug capture and the node's interconnect facts.

Two halves, both used by the sweep and written into the manifests (``run.json`` key
``comm_capture``, ``experiment.json`` key ``nodes``):

* :func:`nccl_env` sets ``NCCL_DEBUG=INFO`` (unless the caller's environment already sets
  ``NCCL_DEBUG``, or capture is turned off with the sweep's ``--no-nccl-debug``) and
  ``NCCL_DEBUG_FILE=<run>/nccl.%h.%p.log`` so every process (= rank) of an NCCL run
  (DDP over NCCL, or Horovod, whose GPU operations may be NCCL) writes its own NCCL lines
  into the run directory; NCCL expands ``%h`` to the host and ``%p`` to the pid.
  Caveat: NCCL up to 2.21 prints its ``NCCL version`` line to stdout, not to that file
  (``analysis.readers.nccl`` then has no version; :func:`run_capture` records torch's
  ``torch.cuda.nccl.version()`` when the training process reports it).
* :func:`node_info` is collected once per node: ``nvidia-smi topo -m`` (the matrix text,
  read by ``analysis.readers.nvsmi_topo``), the network interfaces and InfiniBand/RoCE
  devices readable from ``/sys`` without root, the MPI implementation and version
  (``mpirun --version``) with every ``OMPI_MCA_*``, ``UCX_*``, ``I_MPI_*`` and ``MPICH_*``
  variable, and Horovod's build (controllers, tensor operations; probed in a subprocess)
  and tuning knobs. Every missing tool is recorded as ``{"available": false, "reason": ...}``.

This module imports neither torch nor analysis.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from instrumentation import paths
from instrumentation.manifest import write_text_atomic

__all__ = [
    "HOROVOD_KNOBS",
    "NCCL_FILE",
    "horovod_info",
    "mpi_info",
    "nccl_env",
    "nccl_logs",
    "nics",
    "node_info",
    "node_info_once",
    "run_capture",
    "topo_matrix",
    "write_node_info",
]

#: Name pattern of the per-process NCCL logs in a run directory (NCCL expands %h and %p;
#: the run directory exists before the ranks start, so NCCL can create the files there).
NCCL_FILE = "nccl.%h.%p.log"
#: Horovod tuning knobs recorded as set (``None`` = unset: Horovod's default applies; the
#: fusion threshold's default is 64 MiB, HOROVOD_FUSION_THRESHOLD in Horovod's docs).
HOROVOD_KNOBS = ("HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_HIERARCHICAL_ALLREDUCE",
                 "HOROVOD_HIERARCHICAL_ALLGATHER", "HOROVOD_CACHE_CAPACITY", "HOROVOD_GPU_OPERATIONS",
                 "HOROVOD_GPU_ALLREDUCE", "HOROVOD_BATCH_D2D_MEMCOPIES", "HOROVOD_TORUS_ALLREDUCE")
HOROVOD_DEFAULT_FUSION_BYTES = 64 * 1024 * 1024
_MPI_PREFIXES = ("OMPI_MCA_", "UCX_", "I_MPI_", "MPICH_", "FI_")
_TIMEOUT_S = 20.0


def _missing(reason: str) -> dict:
    return {"available": False, "reason": reason}


def _run(cmd: list[str], *, env: Mapping[str, str] | None = None) -> tuple[int | None, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S, env=None if env is None else dict(env))
    except FileNotFoundError:
        return None, f"{cmd[0]} not found"
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(cmd)} timed out after {_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return None, f"{cmd[0]}: {exc}"
    return p.returncode, (p.stdout or "") + (p.stderr or "")


def nccl_env(env: dict[str, str], run_dir: str | os.PathLike[str], *, framework: str, controller: str,
             enabled: bool = True) -> dict[str, str]:
    """Add NCCL debug capture to ``env`` (in place, also returned) for runs that may use NCCL.

    NCCL runs are DDP over ``nccl`` and every Horovod run (its GPU operations are NCCL when
    Horovod was built with them; on a CPU build the variables are simply unused). A
    ``NCCL_DEBUG`` the caller set is kept as it is, and so is ``NCCL_DEBUG_FILE``.
    """
    uses_nccl = (framework == "ddp" and controller == "nccl") or framework == "horovod"
    if not enabled or not uses_nccl:
        return env
    if "NCCL_DEBUG" not in env:
        env["NCCL_DEBUG"] = "INFO"
    if "NCCL_DEBUG_FILE" not in env:
        env["NCCL_DEBUG_FILE"] = str(Path(run_dir).resolve() / NCCL_FILE)
    return env


def nccl_logs(run_dir: str | os.PathLike[str]) -> list[str]:
    """The NCCL logs of a run, relative to the run directory (empty files left out)."""
    d = Path(run_dir)
    if not d.is_dir():
        return []
    return sorted(p.name for p in d.glob("nccl.*.log") if p.stat().st_size > 0)


def run_capture(run_dir: str | os.PathLike[str], env: Mapping[str, str]) -> dict:
    """The ``comm_capture`` entry of a run's manifest: NCCL settings and log files.

    ``nccl_debug`` is ``env``'s ``NCCL_DEBUG``, else ``"INFO"`` when the run left NCCL logs
    (the sweep set it for the run only)."""
    logs = nccl_logs(run_dir)
    return {
        "nccl_debug": env.get("NCCL_DEBUG") or ("INFO" if logs else None),
        "nccl_debug_file": env.get("NCCL_DEBUG_FILE"),
        "nccl_logs": logs,
        "nccl_env": {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_") and k not in
                     ("NCCL_DEBUG", "NCCL_DEBUG_FILE")},
        "gloo_socket_ifname": env.get("GLOO_SOCKET_IFNAME"),
        "horovod_knobs": {k: env.get(k) for k in HOROVOD_KNOBS},
        "mpi_env": {k: v for k, v in sorted(env.items()) if k.startswith(_MPI_PREFIXES)},
    }


def topo_matrix() -> dict:
    """``nvidia-smi topo -m``: ``{"available": True, "text": ...}`` or why not."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return _missing("nvidia-smi not on PATH")
    rc, out = _run([exe, "topo", "-m"])
    if rc != 0:
        return _missing(f"nvidia-smi topo -m failed (exit {rc}): {out.strip()[:300]}")
    return {"available": True, "text": out}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def nics(sys_root: str | os.PathLike[str] = "/sys") -> dict:
    """Network interfaces (``/sys/class/net``) and RDMA devices (``/sys/class/infiniband``).

    Returns ``{"available": True, "interfaces": [{name, operstate, speed_mbps, mtu}],
    "rdma": [{name, ports: [{port, state, rate, link_layer}]}]}``; ``rdma`` is empty when
    the node has no InfiniBand/RoCE device, ``available`` false when ``/sys`` is unreadable.
    """
    root = Path(sys_root)
    net = root / "class" / "net"
    if not net.is_dir():
        return _missing(f"{net} not readable")
    ifaces = []
    for d in sorted(net.iterdir()):
        speed = _read(d / "speed")
        ifaces.append({"name": d.name, "operstate": _read(d / "operstate"),
                       "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None,
                       "mtu": int(m) if (m := _read(d / "mtu")) and m.isdigit() else None})
    rdma = []
    ib = root / "class" / "infiniband"
    if ib.is_dir():
        for d in sorted(ib.iterdir()):
            ports = []
            for p in sorted((d / "ports").glob("*")):
                ports.append({"port": p.name, "state": _read(p / "state"), "rate": _read(p / "rate"),
                              "link_layer": _read(p / "link_layer")})
            rdma.append({"name": d.name, "ports": ports})
    return {"available": True, "interfaces": ifaces, "rdma": rdma}


_MPI_VERSION = (
    (re.compile(r"\(Open MPI\) (\S+)|Open MPI v?(\d\S*)"), "Open MPI"),
    (re.compile(r"Intel\(R\) MPI Library.*?Version (\S+)|Intel.*MPI.*?(\d[\d.]+)"), "Intel MPI"),
    (re.compile(r"HYDRA build details:\s*\n\s*Version:\s*(\S+)|MPICH Version:\s*(\S+)"), "MPICH"),
    (re.compile(r"MVAPICH2? Version:\s*(\S+)|mvapich2?-?(\d\S*)"), "MVAPICH"),
)


def mpi_info(env: Mapping[str, str] | None = None) -> dict:
    """MPI implementation and version from ``mpirun --version``, plus its environment knobs."""
    env = os.environ if env is None else env
    knobs = {k: v for k, v in sorted(env.items()) if k.startswith(_MPI_PREFIXES)}
    exe = shutil.which("mpirun") or shutil.which("mpiexec")
    if exe is None:
        return {**_missing("mpirun/mpiexec not on PATH"), "env": knobs}
    rc, out = _run([exe, "--version"])
    if rc is None:
        return {**_missing(out), "env": knobs}
    impl, version = "unknown", None
    for pattern, name in _MPI_VERSION:
        if m := pattern.search(out):
            impl, version = name, next((g for g in m.groups() if g), None)
            break
    return {"available": True, "launcher": exe, "implementation": impl, "version": version,
            "version_text": out.strip().splitlines()[0] if out.strip() else "", "env": knobs}


_HOROVOD_PROBE = r"""
import json
try:
    import horovod, horovod.torch as hvd
    print(json.dumps({"available": True, "version": horovod.__version__,
        "controllers": {"gloo": bool(hvd.gloo_built()), "mpi": bool(hvd.mpi_built())},
        "tensor_operations": {"nccl": bool(hvd.nccl_built()), "gloo": bool(hvd.gloo_built()),
                              "mpi": bool(hvd.mpi_built()), "ddl": bool(hvd.ddl_built()),
                              "ccl": bool(hvd.ccl_built())},
        "cuda": bool(hvd.cuda_built()), "rocm": bool(getattr(hvd, "rocm_built", lambda: False)())}))
except Exception as exc:
    print(json.dumps({"available": False, "reason": f"{type(exc).__name__}: {exc}"}))
"""


def horovod_info(env: Mapping[str, str] | None = None, *, python: str | None = None) -> dict:
    """Horovod's build (probed in a subprocess, so this process never imports it) and knobs."""
    env = os.environ if env is None else env
    knobs = {k: env.get(k) for k in HOROVOD_KNOBS}
    rc, out = _run([python or sys.executable, "-c", _HOROVOD_PROBE])
    info: dict
    try:
        info = json.loads(out.strip().splitlines()[-1]) if rc == 0 else _missing(out.strip()[-300:])
    except (ValueError, IndexError):
        info = _missing(f"probe printed no JSON: {out.strip()[-300:]}")
    threshold = knobs["HOROVOD_FUSION_THRESHOLD"]
    info["knobs"] = knobs
    info["fusion_threshold_bytes"] = int(threshold) if threshold and threshold.isdigit() else HOROVOD_DEFAULT_FUSION_BYTES
    return info


def node_info(*, python: str | None = None, env: Mapping[str, str] | None = None) -> dict:
    """Everything this module records once per node (see the module docstring)."""
    return {"host": socket.gethostname(), "topo": topo_matrix(), "nics": nics(), "mpi": mpi_info(env),
            "horovod": horovod_info(env, python=python)}


def write_node_info(out_dir: str | os.PathLike[str], *, python: str | None = None) -> dict:
    """Collect :func:`node_info` and keep ``nvidia-smi topo -m`` as ``<out>/nodes/<host>.topo.txt``.

    Returns the node entry (the topo text replaced by the file's path relative to ``out``).
    """
    info = node_info(python=python)
    topo = info["topo"]
    d = Path(out_dir) / "nodes"
    if topo.get("available") and paths.outside(d, out_dir) and (d.is_symlink() or d.exists()):
        topo["error"] = f"{d}: {paths.LEAVES}; the matrix was not kept"  # never written through
        topo.pop("text", None)
    elif topo.get("available"):
        d.mkdir(parents=True, exist_ok=True)
        f = d / f"{info['host']}.topo.txt"
        write_text_atomic(f, topo.pop("text"))
        topo["file"] = str(f.relative_to(out_dir))
    return info


_NODE_CACHE: dict[str, dict] = {}


def node_info_once(out_dir: str | os.PathLike[str], *, python: str | None = None) -> dict:
    """:func:`write_node_info` for ``out_dir``, collected once per process and directory."""
    key = str(Path(out_dir).resolve())
    if key not in _NODE_CACHE:
        _NODE_CACHE[key] = write_node_info(out_dir, python=python)
    return _NODE_CACHE[key]
