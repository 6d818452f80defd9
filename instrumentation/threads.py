"""CPU threads of a rank: set from the sweep's request, and read back as they really are.

``scalescope sweep`` exports ``OMP_NUM_THREADS`` and ``SCALESCOPE_THREADS`` (the cores per
rank, or ``--threads N``) for every launcher and the baseline. :func:`apply_from_env`, called
by :func:`instrumentation.init`, sets torch's intra-op threads to ``SCALESCOPE_THREADS`` when
the script imported torch (torch honours ``OMP_NUM_THREADS`` at start-up, but a script may
have changed it since); :func:`thread_info` is what each rank records in ``run.json``
(``ranks[i].threads``, ``docs/run-directory.md``), for any script.

Never imports torch itself and never raises.
"""

from __future__ import annotations

import os
import sys

from instrumentation._env import warn_once

__all__ = ["THREAD_KEYS", "apply_from_env", "requested_threads", "thread_info"]

#: The keys of ``ranks[i].threads`` in ``run.json``.
THREAD_KEYS = ("torch_intra_op", "torch_inter_op", "omp_num_threads", "mkl_num_threads", "cpus_available",
               "host_cpus")


def requested_threads() -> int | None:
    """``$SCALESCOPE_THREADS`` as a positive int, ``None`` when unset or not one (warned)."""
    raw = os.environ.get("SCALESCOPE_THREADS")
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        warn_once("threads-env", f"SCALESCOPE_THREADS={raw!r} is not a positive integer; threads left as they are")
        return None
    return n


def apply_from_env() -> int | None:
    """Set torch's intra-op threads to ``$SCALESCOPE_THREADS`` (when torch is imported and
    the value differs); returns the value applied, ``None`` when nothing was asked."""
    n = requested_threads()
    torch = sys.modules.get("torch")
    if n is None or torch is None:
        return n
    try:
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
    except Exception as exc:
        warn_once("threads-set", f"cannot set torch's threads to {n} ({exc!r}); they stay as they are")
    return n


def _int(fn) -> int | None:
    try:
        return int(fn())
    except Exception:
        return None


def thread_info() -> dict:
    """What this process runs with: torch's intra-op and inter-op threads (``None`` when the
    script did not import torch), ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` as set (strings
    or ``None``), the CPUs this process may run on (``len(os.sched_getaffinity(0))``) and the
    host's CPUs (``os.cpu_count()``)."""
    torch = sys.modules.get("torch")
    info: dict[str, object] = {
        "torch_intra_op": None if torch is None else _int(torch.get_num_threads),
        "torch_inter_op": None if torch is None else _int(torch.get_num_interop_threads),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "mkl_num_threads": os.environ.get("MKL_NUM_THREADS"),
        "cpus_available": _int(lambda: len(os.sched_getaffinity(0))),
        "host_cpus": _int(os.cpu_count),
    }
    return info
