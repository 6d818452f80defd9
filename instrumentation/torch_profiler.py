"""PyTorch profiler (Kineto) capture of a window of training steps, per rank.

``scalescope sweep --torch-profiler --profile-steps 1,1,3`` sets
``SCALESCOPE_TORCH_PROFILER=1,1,3`` (``wait,warmup,active``) for every rank;
:func:`instrumentation.init` then starts a ``torch.profiler.profile`` with
``schedule(wait, warmup, active, repeat=1)``, :func:`instrumentation.step_end` steps it,
and the finished window is written to ``<run_dir>/torch_profiler/rank-NNNNN.pt.trace.json.gz``
(Chrome trace, gzipped; read by :mod:`analysis.readers.kineto`). Activities: CPU always,
CUDA when ``torch.cuda.is_available()``; ``record_shapes`` only with
``SCALESCOPE_TORCH_PROFILER_SHAPES=1`` (it costs time per op and the file grows).

Step numbers: the profiler starts at :func:`~instrumentation.init`, before step 0, and is
stepped once per :func:`~instrumentation.step_end`, so Kineto's ``ProfilerStep#N`` is our
step ``N`` (global over the run). With ``wait=1, warmup=1, active=3`` steps 2, 3 and 4 are
recorded. After the window the profiler is stopped and ``step_end`` costs nothing more. A run
that ends inside the window still writes what was recorded (``profile.stop()`` hands the
partial window to the writer).

Never raises into the training loop: any failure warns once and turns the profiler off.
torch is never imported here; it must already be imported by the training script.
"""

from __future__ import annotations

import sys
from pathlib import Path

from instrumentation._env import env_str, warn_once
from instrumentation.manifest import replacing

__all__ = ["DIRNAME", "ENV", "TorchProfiler", "parse_schedule", "start_from_env", "trace_name"]

#: Environment variable carrying ``wait,warmup,active``.
ENV = "SCALESCOPE_TORCH_PROFILER"
#: ``1`` turns ``record_shapes`` on.
ENV_SHAPES = "SCALESCOPE_TORCH_PROFILER_SHAPES"
#: Sub-directory of the run directory for the traces.
DIRNAME = "torch_profiler"


def trace_name(rank: int) -> str:
    """File name of one rank's trace: ``rank-00003.pt.trace.json.gz``."""
    return f"rank-{int(rank):05d}.pt.trace.json.gz"


def parse_schedule(text: str) -> tuple[int, int, int]:
    """``"wait,warmup,active"`` -> three ints (``wait``, ``warmup`` >= 0, ``active`` >= 1).

    Raises
    ------
    ValueError
        With a message naming the bad value.
    """
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 3:
        raise ValueError(f"profile steps must be 'wait,warmup,active' (three integers), got {text!r}")
    try:
        wait, warmup, active = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"profile steps must be integers 'wait,warmup,active', got {text!r}") from None
    if wait < 0 or warmup < 0 or active < 1:
        raise ValueError(f"profile steps need wait >= 0, warmup >= 0, active >= 1, got {text!r}")
    return wait, warmup, active


class TorchProfiler:
    """One rank's ``torch.profiler.profile`` over one window of steps.

    Parameters
    ----------
    out_dir
        Where the trace goes (``<run_dir>/torch_profiler``).
    rank
        This rank (names the file).
    schedule
        ``(wait, warmup, active)``.
    record_shapes
        Passed to ``torch.profiler.profile``.
    """

    def __init__(self, out_dir: Path, *, rank: int, schedule: tuple[int, int, int],
                 record_shapes: bool = False) -> None:
        self.out_dir = Path(out_dir)
        self.rank = int(rank)
        self.wait, self.warmup, self.active = schedule
        self.record_shapes = bool(record_shapes)
        self.path = self.out_dir / trace_name(self.rank)
        self.activities: list[str] = []
        self.prof = None
        self.steps = 0
        self.written = False
        self.error: str | None = None

    @property
    def window(self) -> int:
        return self.wait + self.warmup + self.active

    def info(self) -> dict:
        """What ``run.json`` records under ``profilers.torch_profiler``."""
        return {
            "schedule": {"wait": self.wait, "warmup": self.warmup, "active": self.active, "repeat": 1},
            "profiled_steps": list(range(self.wait + self.warmup, self.window)),
            "activities": list(self.activities),
            "record_shapes": self.record_shapes,
            "dir": DIRNAME,
            "file_pattern": "rank-{rank:05d}.pt.trace.json.gz",
            "torch": getattr(sys.modules.get("torch"), "__version__", None),
            "error": self.error,
        }

    def start(self) -> bool:
        """Start profiling (step 0 begins now). ``False`` (with a warning) when it cannot."""
        torch = sys.modules.get("torch")
        if torch is None:
            self._fail("torch is not imported by the training script; no PyTorch profiler trace")
            return False
        try:
            import torch.profiler as tp

            acts = [tp.ProfilerActivity.CPU]
            self.activities = ["cpu"]
            if torch.cuda.is_available():
                acts.append(tp.ProfilerActivity.CUDA)
                self.activities.append("cuda")
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.prof = tp.profile(
                activities=acts,
                schedule=tp.schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
                on_trace_ready=self._write,
                record_shapes=self.record_shapes,
            )
            self.prof.start()
        except Exception as exc:
            self.prof = None
            self._fail(f"cannot start the PyTorch profiler ({exc!r}); training goes on without it")
            return False
        return True

    def step(self) -> bool:
        """Advance the schedule by one step; ``False`` once the window is over (stop calling)."""
        prof = self.prof
        if prof is None:
            return False
        try:
            prof.step()
            self.steps += 1
            if self.steps >= self.window:  # window done and written: stop paying for it
                self.stop()
                return False
        except Exception as exc:
            self._fail(f"PyTorch profiler step failed ({exc!r}); profiler off")
            self.prof = None
            return False
        return True

    def stop(self) -> None:
        """Stop profiling; a window still recording is written as it is. Idempotent."""
        prof, self.prof = self.prof, None
        if prof is None:
            return
        try:
            prof.stop()
        except Exception as exc:
            self._fail(f"stopping the PyTorch profiler failed ({exc!r})")

    def _write(self, prof) -> None:
        """``on_trace_ready``: export gzipped through a temporary name, then rename
        (:func:`instrumentation.manifest.replacing`)."""
        try:
            with replacing(self.path, suffix=".tmp.json.gz") as tmp:  # torch gzips a name ending .gz
                prof.export_chrome_trace(str(tmp))
            self.written = True
        except Exception as exc:
            self._fail(f"cannot write the PyTorch profiler trace {self.path} ({exc!r})")

    def _fail(self, message: str) -> None:
        self.error = message
        warn_once(f"torch-profiler:{message[:40]}", message)


def start_from_env(run_dir: Path, *, rank: int) -> TorchProfiler | None:
    """A started :class:`TorchProfiler` when ``$SCALESCOPE_TORCH_PROFILER`` is set, else ``None``."""
    raw = env_str(ENV)
    if not raw or raw.lower() in ("0", "off", "no", "false"):
        return None
    try:
        schedule = parse_schedule(raw)
    except ValueError as exc:
        warn_once("torch-profiler-env", f"{ENV}={raw!r}: {exc}; no PyTorch profiler trace")
        return None
    shapes = (env_str(ENV_SHAPES) or "").lower() in ("1", "true", "yes", "on")
    tp = TorchProfiler(Path(run_dir) / DIRNAME, rank=rank, schedule=schedule, record_shapes=shapes)
    tp.start()
    return tp
