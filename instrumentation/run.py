"""``init`` / ``finish``: set up and tear down one rank's recording.

:func:`init` (after ``hvd.init()`` / ``dist.init_process_group()``) exchanges every rank's
identity and clock with one all-gather, estimates clock offsets, opens this rank's trace,
starts the node sampler on local rank 0, starts the Horovod timeline when asked, and has
rank 0 write ``run.json``. :func:`finish` (also run at exit, on SIGTERM and after an
uncaught exception) flushes and closes everything and has rank 0 update ``run.json``.
Neither ever raises into the training script.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from instrumentation import device as _device
from instrumentation import horovod_timeline as _hvt
from instrumentation import manifest as _mf
from instrumentation import nvtx_ranges as _nvtx
from instrumentation import phases as _ph
from instrumentation import shared_dir as _shared
from instrumentation import threads as _threads
from instrumentation import torch_profiler as _tp
from instrumentation._env import env_float, env_str, warn_once
from instrumentation.clock import estimate_offsets, take_anchor
from instrumentation.recorder import TraceRecorder, trace_path
from instrumentation.sampler import Sampler, probe_nvml

__all__ = ["Run", "current_run", "finish", "init", "note_manifest", "sweep_config"]


class Run:
    """One rank's view of the instrumented run (returned by :func:`init`)."""

    def __init__(self) -> None:
        self.run_dir: Path | None = None
        self.run_id: str | None = None
        self.rank = 0
        self.local_rank = 0
        self.world_size = 1
        self.host = socket.gethostname()
        self.framework = "none"
        self.backend: str | None = None
        self.manifest: dict | None = None  # rank 0 only
        self.recorder: TraceRecorder | None = None
        self.sampler: Sampler | None = None
        self.hvd = None
        self.timeline: dict | None = None
        self.torch_profiler: _tp.TorchProfiler | None = None
        self.finished = False
        self.status: str | None = None
        self.owner_pid = os.getpid()
        self.manifest_dirty = False
        self.threads: dict | None = None  # this rank's threads as read at init

    @property
    def trace_path(self) -> Path | None:
        return None if self.recorder is None else self.recorder.path

    def finish(self, status: str = "ok") -> None:
        finish(status=status)

    def __repr__(self) -> str:
        return (f"Run(run_dir={str(self.run_dir)!r}, rank={self.rank}, world_size="
                f"{self.world_size}, framework={self.framework!r})")


_RUN: Run | None = None
_lock = threading.RLock()
#: ``run.json`` keys noted before rank 0's manifest existed (``instrument()`` before ``init()``)
_pending: dict = {}
_exc_status: str | None = None
_prev_excepthook = None
_prev_sigterm = None


def current_run() -> Run | None:
    """The :class:`Run` of this process, or ``None`` before :func:`init`."""
    return _RUN


def note_manifest(values: dict, *, write: bool = True, override: bool = False) -> None:
    """Add ``values`` to ``run.json`` (rank 0 only; other ranks' calls do nothing): keys whose
    value is still ``null`` (every key with ``override``), then rewrite the file when
    ``write`` (else it goes out with the next write: an epoch's end, ``finish``). Before
    ``init`` they are kept and added at ``init``. Never raises."""
    try:
        run = _RUN
        if run is None or run.finished:
            for k, v in values.items():
                if override or _pending.get(k) is None:
                    _pending[k] = v
            return
        m = run.manifest
        if m is None:
            return
        changed = False
        for k, v in values.items():
            if (override or m.get(k) is None) and m.get(k) != v:
                m[k] = v
                changed = True
        if changed:
            run.manifest_dirty = True
            if write:
                _write_manifest(run)
    except Exception as exc:
        warn_once("note-manifest", f"cannot note {sorted(values)} in run.json: {exc!r}")


def sweep_config() -> dict:
    """The configuration ``scalescope sweep`` passed in ``$SCALESCOPE_CONFIG`` (``{}`` if none)."""
    raw = os.environ.get("SCALESCOPE_CONFIG")
    if not raw:
        return {}
    try:
        val = json.loads(raw)
    except ValueError as exc:
        warn_once("sweep-config", f"SCALESCOPE_CONFIG is not valid JSON ({exc}); ignored")
        return {}
    if not isinstance(val, dict):
        warn_once("sweep-config", "SCALESCOPE_CONFIG is not a JSON object; ignored")
        return {}
    return val


# -- framework detection ------------------------------------------------------------------------
def _horovod():
    hvd = sys.modules.get("horovod.torch")
    if hvd is None:
        return None
    try:
        return hvd if hvd.is_initialized() else None
    except Exception:
        return None


def _dist():
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        import torch.distributed as dist

        return dist if dist.is_available() and dist.is_initialized() else None
    except Exception:
        return None


def _detect_framework(requested: str | None) -> str:
    fw = requested or env_str("SCALESCOPE_FRAMEWORK")
    if fw:
        fw = fw.lower()
        if fw not in ("horovod", "ddp", "none"):
            warn_once("framework", f"unknown framework {fw!r}; detecting it instead")
        else:
            return fw
    if _horovod() is not None:
        return "horovod"
    if _dist() is not None:
        return "ddp"
    return "none"


class _Comm:
    """rank/size/barrier/allgather for the framework in use (identity for ``none``)."""

    def __init__(self, framework: str):
        self.framework = framework
        self.hvd = _horovod() if framework == "horovod" else None
        self.dist = _dist() if framework == "ddp" else None
        if framework == "horovod" and self.hvd is None:
            raise RuntimeError("framework 'horovod' but Horovod is not initialised: call "
                               "hvd.init() before instrumentation.init()")
        if framework == "ddp" and self.dist is None:
            if os.environ.get("WORLD_SIZE", "1") != "1":
                raise RuntimeError("framework 'ddp' but torch.distributed is not initialised: call "
                                   "dist.init_process_group() before instrumentation.init()")
            # torchrun at one process, a script whose group is only for more: `if world_size > 1: ...`
            warn_once("ddp-one-process", "framework 'ddp' at one process without a process group: "
                      "recording this process alone")

    def rank(self) -> int:
        if self.hvd is not None:
            return int(self.hvd.rank())
        if self.dist is not None:
            return int(self.dist.get_rank())
        return 0

    def size(self) -> int:
        if self.hvd is not None:
            return int(self.hvd.size())
        if self.dist is not None:
            return int(self.dist.get_world_size())
        return 1

    def local_rank(self) -> int | None:
        if self.hvd is not None:
            return int(self.hvd.local_rank())
        lr = os.environ.get("LOCAL_RANK")
        if lr is not None and lr.isdigit():
            return int(lr)
        return 0 if self.dist is None else None

    def backend(self) -> str | None:
        """What the run uses (Horovod's controller, DDP's process-group backend); the sweep's
        ``SCALESCOPE_BACKEND`` only where the framework cannot say."""
        try:
            if self.hvd is not None:
                if self.hvd.mpi_enabled():
                    return "mpi"
                if self.hvd.gloo_enabled():
                    return "gloo"
            elif self.dist is not None:
                return str(self.dist.get_backend())
        except Exception:
            pass
        return os.environ.get("SCALESCOPE_BACKEND") or None

    def barrier(self) -> None:
        if self.hvd is not None:
            self.hvd.barrier()
        elif self.dist is not None:
            self.dist.barrier()

    def allgather(self, obj: object) -> list:
        if self.hvd is not None:
            return list(self.hvd.allgather_object(obj))
        if self.dist is not None:
            out: list = [None] * self.dist.get_world_size()
            self.dist.all_gather_object(out, obj)
            return out
        return [obj]


# -- init -----------------------------------------------------------------------------------------
def _default_run_dir() -> Path:
    script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "python"
    script = re.sub(r"[^A-Za-z0-9_.-]", "_", script) or "python"
    return Path("runs") / f"{script}-{time.strftime('%Y%m%d-%H%M%S')}"


def _safe_host(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", host)


def _device_info() -> dict:
    d: dict[str, object] = {"device": None, "device_name": None, "gpu_uuid": None,
                            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            i = torch.cuda.current_device()
            d["device"] = int(i)
            props = torch.cuda.get_device_properties(i)
            d["device_name"] = props.name
            uuid = getattr(props, "uuid", None)
            d["gpu_uuid"] = None if uuid is None else str(uuid)
    except Exception:
        pass
    return d


def init(
    *,
    run_dir: str | os.PathLike[str] | None = None,
    framework: str | None = None,
    config: dict | None = None,
    tags: dict | None = None,
    sample_interval_s: float = 0.1,
    nvtx: bool | str = True,
    horovod_timeline: bool = True,
    flush_interval_s: float = 0.5,
) -> Run:
    """Start recording this rank (see ``docs/instrumentation.md``).

    Parameters
    ----------
    run_dir
        The run directory; default ``$SCALESCOPE_RUN_DIR``, else
        ``./runs/<script>-<timestamp>`` (rank 0's choice, shared with every rank).
    framework
        ``"horovod"``, ``"ddp"`` or ``"none"``; default ``$SCALESCOPE_FRAMEWORK``, else
        detected (Horovod initialised? ``torch.distributed`` initialised?).
    config
        Training configuration merged into ``run.json`` (``batch_size``, ``learning_rate``,
        ``lr_scaling``, ``epochs``, ``dataset_size``, ``n_params``, ...).
    tags
        User tags (``run.json`` ``tags``).
    sample_interval_s
        Sampler period; ``$SCALESCOPE_SAMPLE_INTERVAL`` overrides; ``0`` disables sampling.
    nvtx
        ``True``: NVTX ranges when a tool is attached; ``"force"``: always; ``False``: never.
    horovod_timeline
        Start the Horovod timeline when ``HOROVOD_TIMELINE=DYNAMIC``.
    flush_interval_s
        Trace flush period (at most 1 s keeps the crash-safety promise).

    Returns
    -------
    Run
        This rank's run. A second call returns the first run with a warning.

    Notes
    -----
    Collective: every rank must call it (one all-gather plus five barrier/all-gather rounds
    for the clock offsets). Never raises: on an internal failure it warns and recording is
    off (all other functions become no-ops).
    """
    global _RUN
    with _lock:
        if _RUN is not None and not _RUN.finished:
            warn_once("init-twice", "init() called twice; keeping the first run")
            return _RUN
        run = Run()
        try:
            _init(run, run_dir=run_dir, framework=framework, config=config, tags=tags,
                  sample_interval_s=sample_interval_s, nvtx=nvtx,
                  horovod_timeline=horovod_timeline, flush_interval_s=flush_interval_s)
        except Exception as exc:
            if not isinstance(exc, _Unwritable):  # that one has already warned
                warn_once("init", f"init failed ({exc!r}); recording is off, training goes on")
            _ph.S.reset()
            if run.recorder is not None:
                run.recorder.close(status="init-failed")
            run.finished = True
        _RUN = run
        return run


def _init(run: Run, *, run_dir, framework, config, tags, sample_interval_s, nvtx,
          horovod_timeline, flush_interval_s) -> None:
    start_time = _mf.iso_now()
    comm = _connect(run, framework)
    _threads.apply_from_env()  # the sweep's threads per rank ($SCALESCOPE_THREADS) for torch's intra-op pool
    anchor = take_anchor()
    interval = env_float("SCALESCOPE_SAMPLE_INTERVAL", float(sample_interval_s))
    proposed = run_dir or env_str("SCALESCOPE_RUN_DIR") or _default_run_dir()
    identity = _identity(run, comm, anchor=anchor, proposed=proposed, interval=interval)
    run.threads = identity["threads"]
    infos = comm.allgather(identity)
    clock = (estimate_offsets(comm.barrier, comm.allgather) if run.world_size > 1 else
             {"reference_rank": 0, "method": "single-process", "rounds": 0,
              "offsets_ns": {}, "spread_ns": {}})
    by_host = _group_by_host(infos)
    _adopt_run_dir(run, infos)
    nvtx_mode = _open_trace(run, anchor, nvtx=nvtx, flush_interval_s=flush_interval_s)
    _shared.watch_reads(run.run_dir, run.rank)  # files earlier runs of a sweep wrote into this directory
    samplers = _choose_samplers(by_host, interval=interval)
    _start_sampler(run, samplers[run.host], by_host[run.host], interval=interval)
    if comm.hvd is not None:
        run.timeline = _hvt.start(comm.hvd, run.run_dir, enabled=horovod_timeline)
    # PyTorch profiler window ($SCALESCOPE_TORCH_PROFILER, set by `sweep --torch-profiler`)
    run.torch_profiler = _tp.start_from_env(run.run_dir, rank=run.rank)
    if run.torch_profiler is not None and run.torch_profiler.prof is not None:
        _ph.S.on_step = run.torch_profiler.step
    _install_handlers()
    if run.rank == 0:
        run.manifest = _mf.build_manifest(
            run_id=run.run_id, ranks=_public(infos), framework=run.framework, backend=run.backend,
            config=config, sweep=sweep_config() or None, tags=tags,
            sampler=_sampler_summary(samplers, interval=interval), clock=clock,
            horovod=_horovod_info(comm.hvd, run.backend), horovod_timeline=run.timeline,
            nvtx={"domain": _nvtx.DOMAIN, "mode": nvtx_mode}, gpu=_gpu_summary(infos, by_host, samplers),
            versions_=_mf.versions(framework=run.framework, check_mpi=run.backend == "mpi"),
            start_time=start_time,
        )
        if run.torch_profiler is not None:
            run.manifest["profilers"] = {"torch_profiler": run.torch_profiler.info()}
        try:
            _describe_process(run.manifest, run.framework)
        except Exception as exc:  # a deleted working directory, say: the rest of the manifest stands
            warn_once("describe", f"cannot describe the process in run.json: {exc!r}")
        for k, v in _pending.items():
            if run.manifest.get(k) is None or k.startswith("grad_"):
                run.manifest[k] = v
        _pending.clear()
        _write_manifest(run)
    _ph.S.batch_size = _batch_size(config)
    _ph.S.on_epoch_end = _on_epoch_end


def _batch_size(config: dict | None) -> int | None:
    """This rank's batch size: ``init(config=...)``'s, else ``$SCALESCOPE_BATCH_SIZE``."""
    for value in ((config or {}).get("batch_size"), os.environ.get("SCALESCOPE_BATCH_SIZE")):
        try:
            if value is not None and int(value) > 0:
                return int(value)
        except (TypeError, ValueError):
            continue
    return None


def _describe_process(m: dict, framework: str) -> None:
    """What the manifest says beyond the framework's view: ``threads_per_rank`` (when the
    script gave none: the largest torch intra-op thread count of the ranks, else
    ``OMP_NUM_THREADS``), ``working_dir`` and, for a run without a framework, whether one was
    initialised anyway (``baseline_kind``)."""
    if m.get("threads_per_rank") is None:
        m["threads_per_rank"], m["threads_per_rank_source"] = _threads.per_rank(m.get("ranks") or [])
    else:
        m["threads_per_rank_source"] = "script"
    m["working_dir"] = {"mode": env_str("SCALESCOPE_CWD"), "path": os.getcwd(),
                        "user_cwd": env_str("SCALESCOPE_USER_CWD")}
    m["framework_initialised"] = m["baseline_kind"] = None
    if framework == "none":
        initialised = "horovod" if _horovod() is not None else "ddp" if _dist() is not None else None
        m["framework_initialised"] = initialised
        m["baseline_kind"] = "framework_one_process" if initialised else "no_framework"
    for key in ("resumed_from_epoch", "grad_bytes", "grad_bytes_source", "grad_tensors"):
        m.setdefault(key, None)


def _on_epoch_end(line: dict) -> None:
    """After each epoch (every rank): rank 0 flags a run whose first epoch label is above 1 (it
    resumed from state it did not create: a checkpoint in its working directory; 0 and 1 are
    where scripts count from) and writes what was noted since the last write (gradient bytes)."""
    run = _RUN
    if run is None:
        return
    if _ph.S.n_epoch_ends == 1:
        _threads_after_first_epoch(run)
    if run.manifest is None:
        return
    first = _ph.S.first_epoch
    if _ph.S.n_epoch_ends == 1 and first not in (None, 0, 1) and run.manifest.get("resumed_from_epoch") is None:
        run.manifest["resumed_from_epoch"] = first
        run.manifest_dirty = True
        warn_once("resumed", f"the first epoch is labelled {first}, not 0 or 1: this run may have resumed from state "
                  "it did not create (a checkpoint in its working directory); run.json resumed_from_epoch says so")
    if run.manifest_dirty:
        run.manifest_dirty = False
        _write_manifest(run)


def _connect(run: Run, framework: str | None) -> _Comm:
    """The framework's communicator; sets ``run``'s framework, rank, size and backend."""
    fw = _detect_framework(framework)
    comm = _Comm(fw)
    run.framework = fw
    run.hvd = comm.hvd
    run.rank, run.world_size = comm.rank(), comm.size()
    run.backend = comm.backend() if fw != "none" else None
    return comm


def _identity(run: Run, comm: _Comm, *, anchor, proposed, interval: float) -> dict:
    """What this rank tells the others: who and where it is, its device and clock, the run
    directory it would choose, and what it could sample (keys starting with ``_`` stay out
    of the manifest)."""
    nvml_ok, nvml_reason, nvml_devices = (False, "sampling disabled (interval 0)", [])
    if interval > 0:
        nvml_ok, nvml_reason, nvml_devices = probe_nvml()
    try:
        import psutil  # noqa: F401

        have_psutil = True
    except Exception:
        have_psutil = False
    return {
        "rank": run.rank, "local_rank": comm.local_rank(), "host": run.host,
        "pid": os.getpid(), **_device_info(), "clock": anchor.as_dict(), "threads": _threads.thread_info(),
        "_run_dir": str(Path(proposed).absolute()),
        "_nvml": [nvml_ok, nvml_reason, nvml_devices], "_psutil": have_psutil,
    }


def _public(infos: list[dict]) -> list[dict]:
    return [{k: v for k, v in i.items() if not k.startswith("_")} for i in infos]


def _group_by_host(infos: list[dict]) -> dict[str, list[dict]]:
    """Ranks by host in rank order; fills in local ranks where the launcher did not say
    (plain DDP without torchrun)."""
    by_host: dict[str, list[dict]] = {}
    for info in sorted(infos, key=lambda i: i["rank"]):
        by_host.setdefault(info["host"], []).append(info)
    for members in by_host.values():
        for i, info in enumerate(members):
            if info["local_rank"] is None:
                info["local_rank"] = i
    return by_host


def _adopt_run_dir(run: Run, infos: list[dict]) -> None:
    """Rank 0's run directory for every rank; :class:`_Unwritable` (after a warning) when
    this rank cannot write there."""
    mine = next(i for i in infos if i["rank"] == run.rank)
    run.local_rank = int(mine["local_rank"])
    rank0 = next(i for i in infos if i["rank"] == 0)
    run.run_dir = Path(rank0["_run_dir"])
    run.run_id = env_str("SCALESCOPE_RUN_ID") or run.run_dir.name
    problem = _unwritable(run.run_dir)
    if problem:
        warn_once(f"rundir:{run.run_dir}", f"cannot write to the run directory {run.run_dir} "
                  f"({problem}); nothing is recorded for rank {run.rank}, training goes on")
        raise _Unwritable()


def _open_trace(run: Run, anchor, *, nvtx, flush_interval_s: float) -> str:
    """Open this rank's trace and epoch file and route the phases to them; returns the NVTX mode."""
    S = _ph.S
    S.reset()
    run.recorder = TraceRecorder(
        trace_path(run.run_dir, run.rank), rank=run.rank,
        local_rank=run.local_rank, host=run.host, anchor=anchor,
        flush_interval_s=min(float(flush_interval_s), 1.0),
    )
    S.rank = run.rank
    S.epochs_path = run.run_dir / f"rank-{run.rank:05d}.epochs.jsonl"
    ranges, nvtx_mode = _nvtx.setup(nvtx)
    S.nvtx = ranges
    S.rec = run.recorder
    S.dev_factory = _device_factory(run.recorder)
    return nvtx_mode


def _device_factory(recorder: TraceRecorder):
    """What makes the device timer when the first step opens: None when device events are off
    (``SCALESCOPE_DEVICE_EVERY=0``) or torch has no CUDA; the timer itself is made only if
    CUDA is initialised by then (a CPU run on a GPU machine stays host-timed)."""
    every = _device.every_from_env()
    if every == 0:
        return None
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_available():
            return None
    except Exception:
        return None

    def make():
        api = _device.cuda_api(_device.model_device(_ph.model()))
        return None if api is None else _device.DeviceTimer(api, recorder.add, every=every)

    return make


def _choose_samplers(by_host: dict[str, list[dict]], *, interval: float) -> dict[str, dict]:
    """One sampler per node, run by its local rank 0: NVML when that rank can see it, psutil
    CPU sampling otherwise, none when sampling is off (``run.json`` ``sampler.hosts``)."""
    samplers: dict[str, dict] = {}
    for host, members in by_host.items():
        lead = next((m for m in members if m["local_rank"] == 0), members[0])
        ok, reason, devices = lead["_nvml"]
        kind = None if interval <= 0 else "nvml" if ok else "cpu" if lead["_psutil"] else None
        samplers[host] = {"rank": lead["rank"], "kind": kind, "file": f"samples-{_safe_host(host)}.csv"
                          if kind else None, "nvml_unavailable_reason": reason,
                          "devices": devices}
    return samplers


def _start_sampler(run: Run, chosen: dict, members: list[dict], *, interval: float) -> None:
    """Start this node's sampler when this rank is the one chosen for it."""
    if chosen["rank"] != run.rank or not chosen["kind"]:
        return
    pids = {m["rank"]: m["pid"] for m in members}
    run.sampler = Sampler(run.run_dir / chosen["file"], host=run.host, kind=chosen["kind"],
                          interval_s=interval, pids=pids)
    if not run.sampler.start():
        run.sampler = None


def _sampler_summary(samplers: dict[str, dict], *, interval: float) -> dict:
    kinds = {s["kind"] for s in samplers.values()}
    reasons = {s["nvml_unavailable_reason"] for s in samplers.values() if s["kind"] != "nvml"}
    return {
        "kind": kinds.pop() if len(kinds) == 1 else "mixed",
        "interval_s": interval if interval > 0 else None,
        "nvml_unavailable_reason": "; ".join(sorted(r for r in reasons if r)) or None,
        "hosts": samplers,
    }


def _gpu_summary(infos: list[dict], by_host: dict[str, list[dict]], samplers: dict[str, dict]) -> dict | None:
    """``run.json`` ``gpu``: from the ranks' torch devices, else from what NVML saw, else None."""
    names = [i["device_name"] for i in infos if i.get("device_name")]
    if names:
        return {"model": names[0], "count": len(names), "per_node": max(len(m) for m in by_host.values())}
    if any(s["kind"] == "nvml" for s in samplers.values()):
        devs = [d for s in samplers.values() for d in s["devices"]]
        return {"model": devs[0]["name"], "count": len(devs),
                "per_node": max(len(s["devices"]) for s in samplers.values())}
    return None


def _horovod_info(hvd, controller: str | None) -> dict | None:
    if hvd is None:
        return None
    return {"controller": controller, "version": _mf.dist_version("horovod"),
            "tensor_operation": _hvd_tensor_op(hvd, controller)}


class _Unwritable(Exception):
    """The run directory cannot be written (already warned)."""


def _unwritable(run_dir: Path) -> str | None:
    """``None`` when ``run_dir`` exists (or was created) and accepts a file, else why not."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".scalescope-probe-{os.getpid()}"
        try:
            with open(probe, "w") as fh:
                fh.write("x")
        finally:  # a full disk creates the file and fails on the write: never leave it behind
            try:
                probe.unlink()
            except OSError:
                pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _hvd_tensor_op(hvd, controller: str | None) -> str | None:
    env = os.environ.get("HOROVOD_GPU_OPERATIONS") or os.environ.get("HOROVOD_GPU_ALLREDUCE")
    if env:
        return env.lower()
    try:
        torch = sys.modules.get("torch")
        if hvd.nccl_built() and torch is not None and torch.cuda.is_available():
            return "nccl"
    except Exception:
        pass
    return controller


def _write_manifest(run: Run) -> None:
    if run.manifest is None or run.run_dir is None:
        return
    try:
        _mf.write_json_atomic(run.run_dir / "run.json", run.manifest)
    except OSError as exc:
        warn_once(f"manifest:{run.run_dir}", f"cannot write {run.run_dir / 'run.json'} "
                  f"({exc.strerror or exc}); training goes on")
    except Exception as exc:
        warn_once("manifest", f"cannot write run.json: {exc!r}")


def _threads_after_first_epoch(run: Run) -> None:
    """Every rank: when its threads differ after the first epoch from what it read at init (the
    script set them after ``init``), it writes them to ``rank-NNNNN.threads.json``, which the
    sweep launcher merges into ``run.json`` (rank 0 updates its own entry at once)."""
    now = _threads.thread_info()
    if run.threads is None or now == run.threads or run.run_dir is None:
        return
    run.threads = now
    try:
        _mf.write_json_atomic(_threads.threads_path(run.run_dir, run.rank), {"rank": run.rank, "threads": now})
    except OSError as exc:
        warn_once("threads-file", f"cannot record this rank's threads ({exc.strerror or exc}); training goes on")
    m = run.manifest
    if m is not None:
        _threads.merge_into(m, {run.rank: now})
        run.manifest_dirty = True


# -- finish ---------------------------------------------------------------------------------------
def finish(status: str = "ok") -> None:
    """Flush and close this rank's recording; rank 0 updates ``run.json``.

    Parameters
    ----------
    status
        ``"ok"``, ``"failed"`` or ``"killed"``. At exit the status is ``"failed"`` when an
        exception escaped the script.

    Notes
    -----
    Local only (no collective): safe when other ranks have died. Idempotent. A call from the
    script is recorded as the script reaching its end (``run.json`` ``end.by: "script"``);
    the exit handlers record ``exit``, ``exception`` or ``signal`` instead.
    """
    _finish_by(status, by="script")


def _finish_by(status: str, *, by: str) -> None:
    run = _RUN
    if run is None or run.finished or os.getpid() != run.owner_pid:
        return
    with _lock:
        if run.finished:
            return
        run.finished = True
        try:
            _finish(run, status, by=by)
        except Exception as exc:
            warn_once("finish", f"finish failed: {exc!r}")


def _finish(run: Run, status: str, *, by: str = "script") -> None:
    run.status = status
    S = _ph.S
    # how it ended and what it had done, before finish()'s implicit epoch is counted
    end = _mf.end_record(by, steps=S.step, epoch_ends=S.n_epoch_ends, epochs=(run.manifest or {}).get("epochs"))
    if status == "ok":
        _ph.close_implicit_epoch()  # steps after the last epoch_end (all of them without epochs)
        _ph.step_end()
    extra = _device_summary(S)
    if S.step_open and S.nvtx is not None:
        try:
            S.nvtx.pop()
        except Exception:
            pass
    S.rec = None  # phases become no-ops from here on
    S.nvtx = None
    S.on_step = None
    if run.torch_profiler is not None:
        run.torch_profiler.stop()  # writes a window still recording
    if run.hvd is not None:
        _hvt.stop(run.hvd, run.timeline)
    if run.sampler is not None:
        run.sampler.stop()
    if run.recorder is not None:
        run.recorder.close(status=status, extra=extra)
    if run.manifest is not None:
        run.manifest["status"] = status
        run.manifest["end_time"] = _mf.iso_now()
        run.manifest["end"] = end
        if run.sampler is not None and run.sampler.error:
            run.manifest["sampler"]["error"] = run.sampler.error
        if run.recorder is not None and not run.recorder.enabled:
            run.manifest["trace_error"] = "rank 0 could not write its trace"
        if run.torch_profiler is not None:
            profilers = run.manifest.get("profilers") or {}
            profilers["torch_profiler"] = run.torch_profiler.info()
            run.manifest["profilers"] = profilers
        _write_manifest(run)


def _device_summary(S) -> dict:
    """The device timer's summary after its one synchronize, and DDP's own timing (a
    cross-check), for the trace's end record; empty without device timing."""
    dev, S.dev, S.dev_factory = S.dev, None, None
    out: dict = {}
    if dev is not None:
        try:
            out["device"] = dev.finish()
        except Exception as exc:
            warn_once("device-finish", f"could not resolve the last CUDA events: {exc!r}")
    ddp = _device.ddp_logging_data(_ph.model())
    if ddp:
        out["ddp_logging"] = ddp
    return out


def _atexit() -> None:
    _finish_by(_exc_status or "ok", by="exception" if _exc_status else "exit")


def _excepthook(exc_type, exc, tb) -> None:
    global _exc_status
    _exc_status = "killed" if issubclass(exc_type, KeyboardInterrupt) else "failed"
    prev = _prev_excepthook or sys.__excepthook__
    try:
        prev(exc_type, exc, tb)
    finally:
        _finish_by(_exc_status, by="exception")


def _sigterm(signum, frame) -> None:
    _finish_by("killed", by="signal")
    prev = _prev_sigterm
    if callable(prev):
        prev(signum, frame)
    elif prev == signal.SIG_IGN:
        return
    else:  # default action: die of SIGTERM, as without us
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


_handlers_installed = False


def _install_handlers() -> None:
    global _handlers_installed, _prev_excepthook, _prev_sigterm
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_atexit)
    _prev_excepthook = sys.excepthook
    sys.excepthook = _excepthook
    if threading.current_thread() is threading.main_thread():
        try:
            prev = signal.getsignal(signal.SIGTERM)
            if prev is not _sigterm:
                _prev_sigterm = prev
                signal.signal(signal.SIGTERM, _sigterm)
        except (ValueError, OSError) as exc:
            warn_once("sigterm", f"cannot install the SIGTERM handler: {exc}")
