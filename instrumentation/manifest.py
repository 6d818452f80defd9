"""The run manifest ``run.json``: what ran, where, with which versions; written atomically.

Rank 0 writes it (``docs/run-directory.md``) from the information every rank sent at
:func:`instrumentation.init`: ``status: "running"`` at init, then ``ok`` / ``failed`` /
``killed`` with ``end_time`` at :func:`instrumentation.finish`. Writing goes to a temporary
file in the same directory followed by ``os.replace``, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "RESERVED_KEYS",
    "build_manifest",
    "end_record",
    "iso_now",
    "versions",
    "write_json_atomic",
    "write_text_atomic",
]

FORMAT = "scalescope.run"
FORMAT_VERSION = 1

#: Training-configuration keys (set from ``init(config=...)``; ``null`` when not given).
TRAIN_KEYS = ("batch_size", "global_batch_size", "learning_rate", "lr_scaling", "epochs",
              "dataset_size", "n_params")

#: Keys ``init(config=...)`` may not overwrite.
RESERVED_KEYS = frozenset({
    "format", "format_version", "run_id", "status", "exit_code", "start_time", "end_time",
    "world_size", "n_nodes", "ranks_per_host", "ranks", "framework", "backend", "horovod",
    "versions", "gpu", "command", "slurm", "sampler", "config", "tags", "clock", "profilers",
    "nvtx", "horovod_timeline", "scalescope", "working_dir", "baseline_kind", "framework_initialised",
    "resumed_from_epoch",
})


def iso_now() -> str:
    """The current local time, ISO 8601 with its UTC offset."""
    return _dt.datetime.now().astimezone().isoformat(timespec="milliseconds")


def dist_version(name: str) -> str | None:
    """The installed version of a distribution (``horovod``, ``torch``...), or None."""
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def _mpi_version() -> str | None:
    """``mpirun --version``'s first line (only when an MPI launcher is on PATH; 2 s cap)."""
    exe = shutil.which("mpirun")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=2,
                             check=False)
        for line in (out.stdout + out.stderr).splitlines():
            if line.strip():
                return line.strip()
    except Exception:
        return None
    return None


def versions(*, framework: str = "none", check_mpi: bool = False) -> dict:
    """Software versions: python, torch, cuda, horovod, nccl, mpi, scalescope.

    Never imports torch or horovod itself: their runtime details (CUDA, NCCL) are read
    only when the training script already imported them.
    """
    v: dict[str, object] = {
        "python": platform.python_version(),
        "torch": None, "cuda": None, "horovod": dist_version("horovod"), "nccl": None,
        "mpi": None, "scalescope": dist_version("scalescope"),
        "nvtx": dist_version("nvtx"), "nvidia_ml_py": dist_version("nvidia-ml-py"),
        "platform": platform.platform(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        v["torch"] = getattr(torch, "__version__", None)
        try:
            v["cuda"] = torch.version.cuda
        except Exception:
            pass
        try:
            if torch.cuda.is_available():
                nccl = torch.cuda.nccl.version()
                v["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except Exception:
            pass
    else:
        v["torch"] = dist_version("torch")
    hvd_mpi = None
    hvd = sys.modules.get("horovod.torch")
    if hvd is not None:
        try:
            hvd_mpi = bool(hvd.mpi_built())
        except Exception:
            pass
    if check_mpi or any(k.startswith("OMPI_COMM_WORLD") for k in os.environ):
        v["mpi"] = _mpi_version()
    elif hvd_mpi is not None:
        v["mpi"] = "built into horovod (version not queried)" if hvd_mpi else None
    return v


def slurm_env() -> dict | None:
    """The ``SLURM_*`` environment variables, or ``None`` outside Slurm."""
    d = {k: v for k, v in sorted(os.environ.items()) if k.startswith("SLURM_")}
    return d or None


def build_manifest(
    *,
    run_id: str,
    ranks: list[dict],
    framework: str,
    backend: str | None,
    config: dict | None = None,
    sweep: dict | None = None,
    tags: dict | None = None,
    sampler: dict | None = None,
    clock: dict | None = None,
    horovod: dict | None = None,
    horovod_timeline: dict | None = None,
    nvtx: dict | None = None,
    gpu: dict | None = None,
    versions_: dict | None = None,
    start_time: str | None = None,
) -> dict:
    """Assemble the ``run.json`` object (every documented key present, ``null`` if unknown).

    ``ranks`` is the list gathered from every rank (``rank``, ``local_rank``, ``host``,
    ``pid``, ``device``, ``clock``), in any order.
    """
    ranks = sorted(ranks, key=lambda r: r["rank"])
    per_host: dict[str, list[int]] = {}
    for r in ranks:
        per_host.setdefault(r["host"], []).append(r["rank"])
    m: dict[str, object] = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "run_id": run_id, "status": "running", "exit_code": None,
        "start_time": start_time or iso_now(), "end_time": None,
        "world_size": len(ranks), "n_nodes": len(per_host), "ranks_per_host": per_host,
        "ranks": ranks, "framework": framework, "backend": backend,
        "horovod": horovod, "versions": versions_, "gpu": gpu,
        **dict.fromkeys(TRAIN_KEYS),
        "command": list(sys.argv), "slurm": slurm_env(), "sampler": sampler,
        "config": sweep, "tags": dict(tags) if tags else {}, "clock": clock,
        "profilers": None, "nvtx": nvtx, "horovod_timeline": horovod_timeline,
    }
    rejected = []
    for k, val in (config or {}).items():
        if k in RESERVED_KEYS:
            rejected.append(k)
            continue
        m[str(k)] = val
    if m.get("global_batch_size") is None and isinstance(m.get("batch_size"), int):
        m["global_batch_size"] = m["batch_size"] * len(ranks)
    if rejected:
        m["config_rejected_keys"] = rejected
    return m


def write_json_atomic(path: str | os.PathLike[str], obj: object) -> None:
    """Write JSON to ``path`` through a temporary file and ``os.replace`` (atomic on POSIX).

    Raises ``OSError`` on failure (callers in the training process catch it and warn).
    """
    write_text_atomic(path, json.dumps(obj, indent=1, default=str) + "\n")


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same directory and
    ``os.replace``: a crash, Ctrl-C or a full disk leaves the previous file or none, never a
    truncated one. The file's mode is kept where it existed (a script stays executable).

    Raises ``OSError`` on failure, the temporary file removed.
    """
    path = Path(path)
    try:
        _write_text_atomic(path, text)
    except OSError as exc:  # a full disk's write error names no file: name the one we write
        if exc.filename is not None:
            raise
        raise type(exc)(exc.errno, exc.strerror or str(exc), str(path)) from exc


def _write_text_atomic(path: Path, text: str) -> None:
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], *, suffix: str = ".tmp") -> Iterator[Path]:
    """The one "write to a temporary file and rename" of ``instrumentation/`` (which cannot
    import :mod:`analysis.atomic`, the analysis side's): yield a new temporary file beside
    ``path`` (named ``.<name>.<random><suffix>``: a writer that picks its format from the
    suffix, as torch's ``.json.gz``, gets it); once the block ends, flush it to disk, give it
    ``path``'s mode (0644 for a new file) and rename it onto ``path``. On any error the
    temporary file is removed, ``path`` keeps its previous content and the error is raised
    (callers in the training process catch it and warn)."""
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        try:
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        except FileNotFoundError:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def end_record(by: str, *, steps: int, epoch_ends: int, epochs: object) -> dict:
    """``run.json`` ``end``: how rank 0's recording ended (``by``: ``script`` when the script
    called ``finish()``, ``exit``, ``exception``, ``signal``) and what it had done by then. The
    sweep keeps a non-zero exit ``ok`` only when the script trained and reached its own end
    (``docs/run-directory.md``); ``epochs`` is the planned number from ``init(config=...)``."""
    planned = epochs if isinstance(epochs, int) and not isinstance(epochs, bool) and epochs > 0 else None
    return {"by": by, "steps": int(steps), "epoch_ends": int(epoch_ends), "epochs_planned": planned,
            "last_epoch_reached": None if planned is None else epoch_ends >= planned}
