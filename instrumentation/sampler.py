"""Per-node hardware sampler: NVML GPU metrics, or psutil CPU metrics when NVML is absent.

One sampler per node, on local rank 0, in a daemon thread (default period 0.1 s). It writes
``samples-<host>.csv`` (``docs/run-directory.md``): a header, then one block of rows per
tick, written and flushed every tick.

* NVML (``nvidia-ml-py``, module ``pynvml``): one row per visible GPU with utilisation
  (GPU and memory, % of the driver's last sample period), memory used/total (MiB), power
  (mW converted to W), temperature (°C) and SM clock (MHz). Each metric call is wrapped on
  its own: an unsupported metric leaves its cell empty.
* CPU (``psutil``): a host row (mean of the per-core utilisations), one row per core, and
  one row per local training process (process CPU %, 100 = one full core, and RSS MiB);
  the pids of the other local ranks come from :func:`instrumentation.init`'s exchange.

Any failure while sampling disables the sampler with one warning; training goes on.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from instrumentation._env import warn_once, warn_write_error

__all__ = ["CPU_COLUMNS", "GPU_COLUMNS", "Sampler", "probe_nvml"]

GPU_COLUMNS = ("ts_ns", "host", "device", "util_gpu_pct", "util_mem_pct", "mem_used_mib",
               "mem_total_mib", "power_w", "temp_c", "sm_clock_mhz")
CPU_COLUMNS = ("ts_ns", "host", "cpu_core", "rank", "cpu_util_pct", "rss_mib")


def probe_nvml() -> tuple[bool, str | None, list[dict]]:
    """Try ``pynvml.nvmlInit()``; return ``(ok, reason_if_not, devices)``.

    ``devices`` lists ``{"index", "name", "uuid"}`` per visible GPU (NVML's own indices,
    which ignore ``CUDA_VISIBLE_DEVICES``).
    """
    try:
        import pynvml
    except Exception as exc:
        return False, f"pynvml not importable: {exc}", []
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return False, f"nvmlInit failed: {type(exc).__name__}: {exc}", []
    devices = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            d: dict[str, object] = {"index": i, "name": None, "uuid": None}
            for key, fn in (("name", pynvml.nvmlDeviceGetName), ("uuid", pynvml.nvmlDeviceGetUUID)):
                try:
                    val = fn(h)
                    d[key] = val.decode() if isinstance(val, bytes) else str(val)
                except Exception:
                    pass
            devices.append(d)
    except Exception as exc:
        return False, f"NVML device enumeration failed: {exc}", []
    if not devices:
        return False, "NVML found no GPU", []
    return True, None, devices


def _fmt(v: float | int | None) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3f}".rstrip("0").rstrip(".")
    return str(v)


def _descendants(pid: int) -> list[int] | None:
    """The pids of ``pid``'s child processes and theirs, from Linux's
    ``/proc/PID/task/TID/children`` (a few small reads per tick, where psutil's
    ``children(recursive=True)`` reads the ``stat`` of every process on the machine: about
    4 ms of the sampler thread's CPU per tick, under the GIL); None where the kernel does not
    provide those files."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        return None
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:  # a child that ended meanwhile
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children", "rb") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except (OSError, ValueError):  # a thread that ended meanwhile
                continue
            out += kids
            todo += kids
    return out


class Sampler:
    """Background sampler writing ``samples-<host>.csv``.

    Parameters
    ----------
    path
        The CSV file (created or truncated).
    host
        Host name written in every row.
    kind
        ``"nvml"`` or ``"cpu"``.
    interval_s
        Sampling period.
    pids
        ``{rank: pid}`` of the training processes on this node (CPU mode).
    """

    def __init__(self, path: str | os.PathLike[str], *, host: str, kind: str,
                 interval_s: float = 0.1, pids: dict[int, int] | None = None):
        self.path = Path(path)
        self.host = host
        self.kind = kind
        self.interval_s = max(float(interval_s), 0.01)
        self.pids = dict(pids or {})
        self.n_ticks = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fh = None

    # -- NVML ---------------------------------------------------------------------------
    def _nvml_setup(self) -> None:
        import pynvml

        self._nv = pynvml
        pynvml.nvmlInit()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                         for i in range(pynvml.nvmlDeviceGetCount())]

    def _nvml_rows(self, ts: int) -> list[str]:
        nv = self._nv
        rows = []
        for i, h in enumerate(self._handles):
            ug = um = used = total = power = temp = sm = None
            try:
                u = nv.nvmlDeviceGetUtilizationRates(h)
                ug, um = u.gpu, u.memory
            except Exception:
                pass
            try:
                m = nv.nvmlDeviceGetMemoryInfo(h)
                used, total = m.used / 2**20, m.total / 2**20
            except Exception:
                pass
            try:
                power = nv.nvmlDeviceGetPowerUsage(h) / 1000.0  # mW -> W
            except Exception:
                pass
            try:
                temp = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
            except Exception:
                pass
            try:
                sm = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
            except Exception:
                pass
            rows.append(",".join((str(ts), self.host, str(i), *map(_fmt, (ug, um, used, total,
                                                                           power, temp, sm)))))
        return rows

    # -- CPU ----------------------------------------------------------------------------
    def _cpu_setup(self) -> None:
        import psutil

        self._ps = psutil
        psutil.cpu_percent(percpu=True)  # primes the per-core counters
        self._procs: dict[int, object] = {}
        self._kids: dict[int, object] = {}  # the ranks' child processes (DataLoader workers), primed
        for rank, pid in sorted(self.pids.items()):
            try:
                p = psutil.Process(pid)
                p.cpu_percent()  # primes
                self._procs[rank] = p
            except Exception as exc:
                warn_once(f"sampler-pid:{pid}", f"cannot sample rank {rank} (pid {pid}): {exc}")

    def _cpu_rows(self, ts: int) -> list[str]:
        ps = self._ps
        cores = ps.cpu_percent(percpu=True)
        rows = [f"{ts},{self.host},,,{_fmt(sum(cores) / len(cores) if cores else None)},"]
        rows += [f"{ts},{self.host},{i},,{_fmt(float(c))}," for i, c in enumerate(cores)]
        for rank, p in list(self._procs.items()):
            try:
                with p.oneshot():  # type: ignore[attr-defined]
                    cpu = p.cpu_percent()  # type: ignore[attr-defined]
                    rss = p.memory_info().rss / 2**20  # type: ignore[attr-defined]
                cpu += self._children_cpu(p)
                rows.append(f"{ts},{self.host},,{rank},{_fmt(float(cpu))},{_fmt(rss)}")
            except Exception:  # the process ended: stop sampling it
                del self._procs[rank]
        return rows

    def _children_cpu(self, p: object) -> float:
        """The CPU of a rank's child processes (DataLoader workers) since the last sample, so
        that the rank's row is the rank's whole work and no worker is taken for a neighbour; a
        child is counted from its second sample on (the first primes its counter)."""
        total = 0.0
        try:
            pids = _descendants(p.pid)  # type: ignore[attr-defined]
            if pids is None:  # no /proc/PID/task/TID/children: psutil reads every process's stat
                pids = [kid.pid for kid in p.children(recursive=True)]  # type: ignore[attr-defined]
        except Exception:
            return 0.0
        for pid in pids:
            known = self._kids.get(pid)
            try:
                if known is None:
                    kid = self._ps.Process(pid)
                    self._kids[pid] = kid
                    kid.cpu_percent()
                else:
                    total += known.cpu_percent()  # type: ignore[attr-defined]
            except Exception:  # it ended between the listing and the read
                self._kids.pop(pid, None)
        return total

    # -- thread -------------------------------------------------------------------------
    def start(self) -> bool:
        """Open the file and start the thread; ``False`` (with a warning) on failure. NVML
        sampling takes its first sample at once (a GPU's memory before training)."""
        try:
            if self.kind == "nvml":
                self._nvml_setup()
                header, self._rows = GPU_COLUMNS, self._nvml_rows
            else:
                self._cpu_setup()
                header, self._rows = CPU_COLUMNS, self._cpu_rows
            self._fh = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - kept open
            self._fh.write(",".join(header) + "\n")
            self._fh.flush()
            if self.kind == "nvml":  # one sample now, before training: the memory the run starts from
                self.tick()
        except Exception as exc:
            self._disable(exc)
            return False
        self._thread = threading.Thread(target=self._run, name="scalescope-sampler", daemon=True)
        self._thread.start()
        return True

    def _disable(self, exc: BaseException) -> None:
        self.error = f"{type(exc).__name__}: {exc}"
        warn_write_error(f"sampler:{self.path}", f"the {self.kind} sampler is disabled ({self.error}); "
                         "training goes on", exc)
        if self._fh is not None:
            try:
                self._fh.close()
            except Exception:
                pass
            self._fh = None

    def tick(self) -> None:
        """Take one sample now and write it (the thread calls this every period)."""
        if self._fh is None:
            return
        rows = self._rows(time.time_ns())
        self._fh.write("\n".join(rows) + "\n")
        self._fh.flush()
        self.n_ticks += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception as exc:
                self._disable(exc)
                return

    def stop(self) -> None:
        """Take a last sample, stop the thread and close the file."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._fh is not None:
            try:
                self.tick()
            except Exception:
                pass
            try:
                self._fh.close()
            except Exception:
                pass
            self._fh = None
        if self.kind == "nvml" and getattr(self, "_nv", None) is not None:
            try:
                self._nv.nvmlShutdown()
            except Exception:
                pass
