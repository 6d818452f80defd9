#!/usr/bin/env python
"""The thesis workload: a 1D CNN that predicts two material parameters from a strain-stress curve.

A reproduction of the reference task (a bachelor thesis on Horovod): synthetic soil
shear tests, one curve per sample, 200 points of (strain, stress, padding flag), and a
small 1D CNN (about 153k parameters) trained with MSE and Adam to recover the two
parameters of the constitutive law that produced each curve. See ``examples/README.md``
for the physics, the data layout and the options.

Runs as a plain single process (``--backend none``), under ``horovodrun`` (``horovod``) or
under ``torchrun`` (``ddp``); ``scalescope sweep`` chooses the backend and the batch size
through the environment (``SCALESCOPE_FRAMEWORK``, ``SCALESCOPE_BATCH_SIZE``).

    python examples/strain_stress.py --epochs 3
    horovodrun -np 2 -H localhost:2 --gloo python examples/strain_stress.py --backend horovod
    torchrun --standalone --nproc-per-node 2 examples/strain_stress.py --backend ddp
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

# ---------------------------------------------------------------------------------------
# Synthetic data: the hyperbolic (Hardin-Drnevich) shear law
# ---------------------------------------------------------------------------------------

#: Points per curve (the network's input length).
N_POINTS = 200
#: Shortest curve, in points; longer ones are up to N_POINTS, the rest is padding.
MIN_POINTS = 100
#: Strain grid: log-spaced shear strain from GAMMA_MIN to GAMMA_MAX (dimensionless).
GAMMA_MIN, GAMMA_MAX = 1e-5, 1e-1
#: Small-strain shear modulus G0 range in MPa (soft clay ... dense sand).
G0_RANGE_MPA = (10.0, 200.0)
#: Shear strength tau_max range in kPa.
TAU_MAX_RANGE_KPA = (20.0, 400.0)
#: Relative (multiplicative) measurement noise on the stress.
NOISE_REL = 0.01
#: Bump when the generator changes, so stale caches are never read.
DATA_VERSION = 1
#: The thesis' single-process batch size: the reference for --lr-scaling.
REFERENCE_BATCH = 75
#: The thesis' learning rate.
DEFAULT_LR = 4.7331e-4


def hyperbolic_stress(gamma: np.ndarray, g0_kpa: np.ndarray, tau_max_kpa: np.ndarray) -> np.ndarray:
    """Shear stress of the hyperbolic law ``tau = G0 * gamma / (1 + G0 * gamma / tau_max)``.

    Parameters
    ----------
    gamma : numpy.ndarray
        Shear strain (dimensionless), broadcastable against the parameters.
    g0_kpa, tau_max_kpa : numpy.ndarray
        Small-strain shear modulus and shear strength, in kPa.

    Returns
    -------
    numpy.ndarray
        Shear stress in kPa: ``G0 * gamma`` at small strain, tending to ``tau_max`` at large.
    """
    return g0_kpa * gamma / (1.0 + g0_kpa * gamma / tau_max_kpa)


def generate(n_samples: int, *, seed: int, n_points: int = N_POINTS) -> dict[str, np.ndarray]:
    """Generate ``n_samples`` padded, flagged strain-stress curves and their targets.

    Deterministic for a given ``(n_samples, seed)``. Chunked, so a million samples
    (2.4 GB of float32 inputs) never need more than the output arrays.

    Parameters
    ----------
    n_samples : int
        Number of curves.
    seed : int
        Seed of numpy's PCG64 generator.
    n_points : int
        Points per curve (default :data:`N_POINTS`); the shortest curve has half as many.

    Returns
    -------
    dict
        ``x``: float32 ``(n, 3, n_points)``, channels = normalised log strain, normalised
        log stress, flag (1 = measured point, 0 = padding; padded points are 0 in all
        channels). ``y``: float32 ``(n, 2)``, ``(G0, tau_max)`` scaled to [0, 1] over their
        ranges. ``length``: int16 ``(n,)`` number of measured points.
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    x = np.zeros((n_samples, 3, n_points), dtype=np.float32)
    y = rng.random((n_samples, 2)).astype(np.float32)
    min_points = MIN_POINTS if n_points == N_POINTS else max(1, n_points // 2)
    length = rng.integers(min_points, n_points + 1, size=n_samples).astype(np.int16 if n_points < 2**15 else np.int32)
    log_gamma = np.linspace(math.log10(GAMMA_MIN), math.log10(GAMMA_MAX), n_points)
    gamma = 10.0**log_gamma
    g0_kpa = 1000.0 * (G0_RANGE_MPA[0] + y[:, 0] * (G0_RANGE_MPA[1] - G0_RANGE_MPA[0]))
    tau_max = TAU_MAX_RANGE_KPA[0] + y[:, 1] * (TAU_MAX_RANGE_KPA[1] - TAU_MAX_RANGE_KPA[0])
    # The stress spans ~1e-1 .. 4e2 kPa: a log scale keeps both ends visible to the network.
    lo = math.log10(G0_RANGE_MPA[0] * 1000.0 * GAMMA_MIN) - 0.5
    hi = math.log10(TAU_MAX_RANGE_KPA[1]) + 0.5
    strain_feature = ((log_gamma - log_gamma[0]) / (log_gamma[-1] - log_gamma[0])).astype(np.float32)
    idx = np.arange(n_points)
    chunk = 65536
    for start in range(0, n_samples, chunk):
        sl = slice(start, min(start + chunk, n_samples))
        tau = hyperbolic_stress(gamma[None, :], g0_kpa[sl, None], tau_max[sl, None])
        tau = tau * (1.0 + NOISE_REL * rng.standard_normal(tau.shape))
        stress_feature = (np.log10(np.maximum(tau, 1e-12)) - lo) / (hi - lo)
        valid = idx[None, :] < length[sl, None]
        x[sl, 0] = np.where(valid, strain_feature[None, :], 0.0)
        x[sl, 1] = np.where(valid, stress_feature, 0.0)
        x[sl, 2] = valid
    return {"x": x, "y": y, "length": length}


def load_or_generate(n_samples: int, *, seed: int, data_dir: Path, log=print,
                     n_points: int = N_POINTS) -> dict[str, np.ndarray]:
    """Return the cached data set for ``(n_samples, seed)``, generating it once if needed.

    Safe when several ranks start together: the first one takes a lock file and generates
    (writing a temporary file and renaming it, so nobody ever reads half a file); the
    others wait for the file. A lock older than 30 minutes is considered stale.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    length = "" if n_points == N_POINTS else f"_len{n_points}"
    path = data_dir / f"strain_stress_v{DATA_VERSION}_n{n_samples}{length}_seed{seed}.npz"
    lock = path.with_suffix(".lock")
    deadline = time.monotonic() + 3600.0
    while not path.exists():
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                if time.time() - lock.stat().st_mtime > 1800.0:
                    lock.unlink()
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited an hour for {path} (lock {lock})") from None
            time.sleep(0.2)
            continue
        try:
            os.close(fd)
            t0 = time.perf_counter()
            data = generate(n_samples, seed=seed, n_points=n_points)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
            np.savez(tmp, **data)
            os.replace(tmp, path)
            log(f"generated {n_samples} curves in {time.perf_counter() - t0:.1f} s -> {path}")
            return data
        finally:
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def split(n_samples: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """75 % / 25 % train/validation split of ``range(n_samples)``, shuffled by ``seed``."""
    perm = np.random.Generator(np.random.PCG64(seed + 1)).permutation(n_samples)
    n_train = (3 * n_samples) // 4
    return np.sort(perm[:n_train]), np.sort(perm[n_train:])


# ---------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        sys.exit(f"strain_stress: error: {name}={value!r} is not an integer")


def _sweep_threads() -> int:
    """``scalescope sweep --threads N``'s N (``$SCALESCOPE_CONFIG`` ``threads``), else 1: this
    example keeps one core per rank unless the sweep was asked for a number."""
    try:
        threads = json.loads(os.environ.get("SCALESCOPE_CONFIG") or "{}").get("threads")
    except (ValueError, AttributeError):
        return 1
    return threads if isinstance(threads, int) and threads > 0 else 1


def build_parser() -> argparse.ArgumentParser:
    """The command-line options; backend and batch-size defaults come from the sweep's env."""
    p = argparse.ArgumentParser(
        prog="strain_stress.py",
        description="Train a 1D CNN to predict two material parameters from strain-stress curves.",
    )
    env_backend = os.environ.get("SCALESCOPE_FRAMEWORK", "") or "none"
    p.add_argument("--backend", choices=("horovod", "ddp", "none"), default=env_backend,
                   help="distribution framework (default: $SCALESCOPE_FRAMEWORK, else none)")
    p.add_argument("--epochs", type=int, default=3, help="training epochs (default 3)")
    p.add_argument("--batch-size", type=int, default=_env_int("SCALESCOPE_BATCH_SIZE", REFERENCE_BATCH),
                   help="per-rank batch size (default: $SCALESCOPE_BATCH_SIZE, else 75)")
    p.add_argument("--lr", type=float, default=DEFAULT_LR, help=f"base learning rate (default {DEFAULT_LR})")
    p.add_argument("--lr-scaling", choices=("none", "linear", "sqrt"), default="none",
                   help="scale the learning rate with the global batch relative to 75: "
                        "linear: lr * B*N/75, sqrt: lr * sqrt(B*N/75) (default none)")
    p.add_argument("--samples", type=int, default=6000,
                   help="number of curves (default 6000; the thesis used 1000000); multiplied by "
                        "--data-scale")
    p.add_argument("--data-scale", type=int, default=_env_int("SCALESCOPE_DATA_SCALE", 1),
                   help="multiply --samples by this (default: $SCALESCOPE_DATA_SCALE, which `scalescope sweep "
                        "--scaling weak` sets to the rank count, else 1)")
    p.add_argument("--curve-length", type=int, default=N_POINTS,
                   help=f"points per curve, the input size (default {N_POINTS}); the first dense layer grows "
                        "with it, so memory does too")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="stop training once this much training time has passed (the epoch under way is "
                        "cut short, evaluated and recorded); --epochs stays the upper bound")
    p.add_argument("--mem-limit-mb", type=float, default=None, metavar="MB",
                   help="fail with a MemoryError (an out-of-memory run to the sweep) when this process's peak "
                        "resident memory passes MB (checked after loading the data, after the first step and "
                        "after each epoch): a memory limit for CPU runs")
    p.add_argument("--data-on-device", action="store_true",
                   help="keep the whole data set on the device and slice batches there (no DataLoader)")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes (default 0)")
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto",
                   help="cpu, cuda, or auto (cuda when available; default)")
    p.add_argument("--seed", type=int, default=0, help="seed for data, split and weights (default 0)")
    p.add_argument("--data-dir", type=Path,
                   default=Path(os.environ.get("SCALESCOPE_DATA_DIR", "") or Path.home() / ".cache" / "scalescope" / "data"),
                   help="where the generated data set is cached (default ~/.cache/scalescope/data)")
    p.add_argument("--threads", type=int, default=_sweep_threads(),
                   help="torch CPU threads per rank (default 1: on CPU each rank is one core, the analogue "
                        "of one GPU per rank, also under `scalescope sweep` unless it was given --threads N, "
                        "which is then the default; 0: cores / ranks on this node)")
    p.add_argument("--no-instrument", action="store_true",
                   help="do not import or call scalescope's instrumentation (overhead baseline)")
    p.add_argument("--inject", action="append", default=[], metavar="PHASE:MS[@RANKS]",
                   help="sleep MS milliseconds inside PHASE (data, forward, backward, optimizer) every "
                        "training step on the listed ranks (comma-separated; default all): a known "
                        "cause to check scalescope's analysis against (repeatable; recorded in run.json; "
                        "'none' injects nothing). On a GPU also gpu-forward / gpu-backward (the GPU "
                        "sleeps, torch.cuda._sleep: the host does not wait) and comm (DDP over NCCL: "
                        "the gradient allreduce starts MS later on a side stream)")
    p.add_argument("--loss-item", choices=("none", "before", "after"), default="none",
                   help="call loss.item() every step before optimizer.step() (inside the step) or after "
                        "step_end() (between steps): the common logging pattern that blocks the host "
                        "until the GPU is done (default none)")
    return p


INJECT_PHASES = ("data", "forward", "backward", "optimizer", "gpu-forward", "gpu-backward", "comm")
#: Injections that need a GPU (the device sleeps, not the host).
GPU_INJECT = ("gpu-forward", "gpu-backward", "comm")


def parse_inject(specs: list[str]) -> list[tuple[str, float, tuple[int, ...] | None]]:
    """``["data:40@1"]`` -> ``[("data", 0.040, (1,))]``; raises ``ValueError`` with the bad spec.
    ``none`` injects nothing (so ``scalescope sweep --vary inject=none,data:40@1`` interleaves
    clean and injected runs)."""
    out = []
    for spec in specs:
        if spec == "none":
            continue
        head, _, ranks = spec.partition("@")
        name, sep, ms = head.partition(":")
        try:
            if not sep or name not in INJECT_PHASES:
                raise ValueError
            seconds = float(ms) / 1000.0
            if not (seconds >= 0 and math.isfinite(seconds)):
                raise ValueError
            who = tuple(int(r) for r in ranks.split(",")) if ranks else None
            if who is not None and any(r < 0 for r in who):
                raise ValueError
        except ValueError:
            raise ValueError(f"--inject {spec!r}: expected PHASE:MS[@RANKS] with PHASE one of "
                             f"{', '.join(INJECT_PHASES)}, MS >= 0 and RANKS like 1 or 0,2") from None
        out.append((name, seconds, who))
    return out


def inject_plan(specs: list[tuple[str, float, tuple[int, ...] | None]], rank: int) -> dict[str, float]:
    """Seconds to sleep per phase on ``rank`` (phases named several times add up)."""
    plan: dict[str, float] = {}
    for name, seconds, who in specs:
        if who is None or rank in who:
            plan[name] = plan.get(name, 0.0) + seconds
    return plan


class _SlowLoader:
    """Sleeps before each batch, inside the ``data`` phase of the wrapped loader."""

    def __init__(self, loader, seconds: float):
        self._loader, self._seconds = loader, seconds

    def __iter__(self):
        for item in self._loader:
            time.sleep(self._seconds)
            yield item

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str):
        return getattr(self._loader, name)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error(f"--epochs must be >= 1, got {args.epochs}")
    if args.batch_size < 1:
        p.error(f"--batch-size must be >= 1, got {args.batch_size}")
    if not (args.lr > 0 and math.isfinite(args.lr)):
        p.error(f"--lr must be a positive number, got {args.lr}")
    if args.samples < 8:
        p.error(f"--samples must be >= 8 (6 training and 2 validation curves), got {args.samples}")
    if args.data_scale < 1:
        p.error(f"--data-scale must be >= 1, got {args.data_scale}")
    if args.curve_length < 8:
        p.error(f"--curve-length must be >= 8, got {args.curve_length}")
    if args.time_budget is not None and not (args.time_budget > 0 and math.isfinite(args.time_budget)):
        p.error(f"--time-budget must be a positive number of seconds, got {args.time_budget}")
    if args.mem_limit_mb is not None and not args.mem_limit_mb > 0:
        p.error(f"--mem-limit-mb must be positive, got {args.mem_limit_mb}")
    if args.num_workers < 0:
        p.error(f"--num-workers must be >= 0, got {args.num_workers}")
    if args.threads < 0:
        p.error(f"--threads must be >= 0, got {args.threads}")
    if args.data_on_device and args.num_workers:
        p.error("--data-on-device and --num-workers exclude each other (no DataLoader on device)")
    try:
        args.inject_specs = parse_inject(args.inject)
    except ValueError as exc:
        p.error(str(exc))
    gpu_only = sorted({name for name, _, _ in args.inject_specs if name in GPU_INJECT})
    if gpu_only and args.device == "cpu":
        p.error(f"--inject {', '.join(gpu_only)} sleeps on the GPU: it needs --device cuda")
    if "comm" in gpu_only and args.backend != "ddp":
        p.error("--inject comm delays DDP's gradient allreduce: it needs --backend ddp")
    return args


class GpuSleep:
    """``torch.cuda._sleep`` for a number of milliseconds: the GPU spins, the host goes on.
    Cycles per millisecond are measured once before training (with CUDA events)."""

    def __init__(self, torch):
        self.torch = torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # warm up
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        end.synchronize()
        self.cycles_per_ms = 10_000_000 / max(start.elapsed_time(end), 1e-3)

    def __call__(self, seconds: float) -> None:
        if seconds > 0:
            self.torch.cuda._sleep(int(seconds * 1000 * self.cycles_per_ms))


def delayed_allreduce_hook(sleep: GpuSleep, seconds: float):
    """A DDP comm hook whose allreduce starts ``seconds`` later on the device: a side stream
    waits for the gradients, sleeps, and issues the allreduce (NCCL orders itself after the
    current stream, here the side stream); the compute stream meets it at DDP's wait."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    side = torch.cuda.Stream()

    def hook(state, bucket):  # no annotations: DDP checks them
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            sleep(seconds)
            return allreduce_hook(state, bucket)

    return hook


def lr_factor(scaling: str, *, batch_size: int, world_size: int) -> float:
    """Learning-rate factor for a global batch ``batch_size * world_size`` relative to 75."""
    ratio = batch_size * world_size / REFERENCE_BATCH
    return {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[scaling]


# ---------------------------------------------------------------------------------------
# Model, distribution, training
# ---------------------------------------------------------------------------------------


def build_model(n_points: int = N_POINTS):
    """The 1D CNN: 2 x (Conv1d k=5 + ReLU + MaxPool 2), then 1600 -> 94 -> 2 (153,532 parameters
    at the default 200 points; the dense layer has 32 * n_points/4 inputs)."""
    from torch import nn

    return nn.Sequential(
        nn.Conv1d(3, 16, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Conv1d(16, 32, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Flatten(),
        nn.Linear(32 * (n_points // 4), 94), nn.ReLU(),
        nn.Linear(94, 2),
    )


class _Dist:
    """The few collective operations the loop needs, for horovod, ddp and none."""

    def __init__(self, backend: str, device_kind: str):
        self.backend = backend
        self.rank, self.size, self.local_rank, self.local_size = 0, 1, 0, 1
        if backend == "horovod":
            import horovod.torch as hvd

            hvd.init()
            self.hvd = hvd
            self.rank, self.size = hvd.rank(), hvd.size()
            self.local_rank, self.local_size = hvd.local_rank(), hvd.local_size()
        elif backend == "ddp":
            import torch.distributed as dist

            self.dist = dist
            pg = os.environ.get("SCALESCOPE_BACKEND", "") or ("nccl" if device_kind == "cuda" else "gloo")
            if "RANK" not in os.environ:
                sys.exit("strain_stress: error: --backend ddp needs torchrun (RANK/WORLD_SIZE are not set)")
            dist.init_process_group(backend=pg)
            self.pg_backend = pg
            self.rank, self.size = dist.get_rank(), dist.get_world_size()
            self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            self.local_size = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.size)))

    def sum(self, values: list[float], device) -> list[float]:
        """Sum a few floats over all ranks."""
        if self.size == 1:
            return list(values)
        import torch

        t = torch.tensor(values, dtype=torch.float64)
        if self.backend == "horovod":
            t = self.hvd.allreduce(t, op=self.hvd.Sum, name="metrics")
        else:
            t = t.to(device) if self.pg_backend == "nccl" else t
            self.dist.all_reduce(t)
        return [float(v) for v in t.cpu()]

    def close(self) -> None:
        if self.backend == "ddp" and self.dist.is_initialized():
            self.dist.destroy_process_group()


class _DeviceBatches:
    """Batches sliced from tensors that already live on the device (``--data-on-device``).

    Shards like ``DistributedSampler`` (pad to a multiple of the world size, rank r takes
    every size-th index), reshuffled each epoch with ``seed + epoch``.
    """

    def __init__(self, x, y, *, batch_size, rank, size, shuffle, seed):
        self.x, self.y = x, y
        self.batch_size, self.rank, self.size = batch_size, rank, size
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _indices(self):
        import torch

        n = self.x.shape[0]
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            idx = torch.randperm(n, generator=g)
        else:
            idx = torch.arange(n)
        per_rank = math.ceil(n / self.size)
        idx = torch.cat([idx, idx[: per_rank * self.size - n]])
        return idx[self.rank :: self.size].to(self.x.device)

    def __len__(self) -> int:
        return math.ceil(math.ceil(self.x.shape[0] / self.size) / self.batch_size)

    def __iter__(self):
        idx = self._indices()
        for i in range(0, idx.numel(), self.batch_size):
            b = idx[i : i + self.batch_size]
            yield self.x[b], self.y[b]


def _loaders(data, train_idx, val_idx, *, args, dist, device):
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    xt, yt, xv, yv = x[train_idx], y[train_idx], x[val_idx], y[val_idx]
    if args.data_on_device:
        xt, yt, xv, yv = (t.to(device) for t in (xt, yt, xv, yv))
        common = {"rank": dist.rank, "size": dist.size, "seed": args.seed}
        xv, yv = xv[dist.rank :: dist.size], yv[dist.rank :: dist.size]
        return (_DeviceBatches(xt, yt, batch_size=args.batch_size, shuffle=True, **common),
                _DeviceBatches(xv, yv, batch_size=max(args.batch_size, 500), shuffle=False,
                               rank=0, size=1, seed=args.seed))
    pin = device.type == "cuda"
    kw = {"num_workers": args.num_workers, "pin_memory": pin, "persistent_workers": args.num_workers > 0}
    train_sampler = DistributedSampler(TensorDataset(xt, yt), num_replicas=dist.size, rank=dist.rank,
                                       shuffle=True, seed=args.seed)
    train = DataLoader(TensorDataset(xt, yt), batch_size=args.batch_size, sampler=train_sampler, **kw)
    # Validation shards without DistributedSampler's padding, so every curve counts once.
    val = DataLoader(TensorDataset(xv[dist.rank :: dist.size], yv[dist.rank :: dist.size]),
                     batch_size=max(args.batch_size, 500), shuffle=False, **kw)
    return train, val


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("strain_stress: error: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    device_kind = "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
    if args.backend == "horovod":
        try:
            import horovod.torch  # noqa: F401
        except ImportError as exc:
            print(f"strain_stress: error: --backend horovod but horovod.torch cannot be imported: {exc}",
                  file=sys.stderr)
            return 2
    dist = _Dist(args.backend, device_kind)
    try:
        return _train(args, dist, device_kind)
    finally:
        # Collect the DDP model (in reference cycles through its hooks) while the process
        # group still exists: with torch 2.13 a DDP model that outlives
        # destroy_process_group() into interpreter shutdown aborts the process ("terminate
        # called without an active exception") in roughly one gloo exit in ten under load.
        gc.collect()
        dist.close()


def _train(args: argparse.Namespace, dist: _Dist, device_kind: str) -> int:
    """Train and evaluate; returns the exit status. ``main`` closes ``dist`` afterwards."""
    import torch

    # several ranks may share a GPU (Gloo with CUDA tensors on a one-GPU machine)
    device = torch.device("cuda", dist.local_rank % max(torch.cuda.device_count(), 1)) if device_kind == "cuda" \
        else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        # One core per rank by default: the CPU analogue of one GPU per rank, so that speedup
        # against rank count means what it means on GPUs, and no rank's OpenMP threads spin
        # against another's (which made epoch times vary 10x on a loaded 2-core machine).
        torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // dist.local_size))
    is_root = dist.rank == 0

    def log(msg: str) -> None:
        if is_root:
            print(msg, flush=True)

    torch.manual_seed(args.seed)
    model = build_model(args.curve_length).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    factor = lr_factor(args.lr_scaling, batch_size=args.batch_size, world_size=dist.size)
    lr = args.lr * factor
    log(f"strain_stress: backend={args.backend} world_size={dist.size} device={device} "
        f"parameters={n_params:,} batch_size={args.batch_size} global_batch={args.batch_size * dist.size} "
        f"lr={lr:.6g} ({args.lr_scaling} scaling x{factor:.4g})")

    n_samples = args.samples * args.data_scale
    data = load_or_generate(n_samples, seed=args.seed, data_dir=args.data_dir, log=log, n_points=args.curve_length)
    train_idx, val_idx = split(n_samples, seed=args.seed)
    train_loader, val_loader = _loaders(data, train_idx, val_idx, args=args, dist=dist, device=device)
    # Reference for "it learns": the validation MSE of predicting the training mean.
    y_train, y_val = data["y"][train_idx], data["y"][val_idx]
    mean_mse = float(np.mean((y_val - y_train.mean(axis=0)) ** 2))
    del data
    check_memory(args.mem_limit_mb, "after loading the data")

    # DistributedSampler (or the on-device batcher) reshuffles per epoch via set_epoch.
    reshuffle = getattr(train_loader, "sampler", train_loader)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    if args.backend == "horovod":
        hvd = dist.hvd
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        train_model = model
    elif args.backend == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        train_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    else:
        train_model = model

    inject = inject_plan(args.inject_specs, dist.rank)
    sleep_fwd, sleep_bwd, sleep_opt = (inject.get(k, 0.0) for k in ("forward", "backward", "optimizer"))
    gpu_fwd, gpu_bwd, comm_delay = (inject.get(k, 0.0) for k in GPU_INJECT)
    gpu_sleep = GpuSleep(torch) if device.type == "cuda" and (gpu_fwd or gpu_bwd or comm_delay) else None
    comm_hook = delayed_allreduce_hook(gpu_sleep, comm_delay) if comm_delay else None
    if args.no_instrument:
        ssi = None
        phase = _no_phase
        if comm_hook is not None:
            train_model.register_comm_hook(state=None, hook=comm_hook)
        if inject.get("data"):
            train_loader = _SlowLoader(train_loader, inject["data"])
    else:
        import instrumentation as ssi

        ssi.init(framework=args.backend, config={
            "batch_size": args.batch_size, "learning_rate": lr, "base_learning_rate": args.lr,
            "lr_scaling": args.lr_scaling, "epochs": args.epochs, "dataset_size": n_samples,
            "data_scale": args.data_scale, "curve_length": args.curve_length, "time_budget_s": args.time_budget,
            "mem_limit_mb": args.mem_limit_mb, "threads_per_rank": torch.get_num_threads() if device.type == "cpu" else None,
            "train_size": len(train_idx), "val_size": len(val_idx), "n_params": n_params,
            "model": "strain_stress_cnn1d", "data_on_device": args.data_on_device,
            "num_workers": args.num_workers, "seed": args.seed, "device": str(device),
            "inject": ";".join(x for x in args.inject if x != "none"), "inject_here": inject,
        })
        if args.backend == "ddp":
            ssi.ddp_comm_hook(train_model, hook=comm_hook)
        elif args.backend == "horovod":
            ssi.horovod_comm_hook(optimizer)
        if inject.get("data"):
            train_loader = _SlowLoader(train_loader, inject["data"])
        train_loader = ssi.wrap_loader(train_loader)  # next() is recorded as `data`
        phase = ssi.phase

    loss_fn = torch.nn.MSELoss()
    nb = device.type == "cuda"
    status = "failed"
    trained_s = 0.0
    try:
        for epoch in range(args.epochs):
            reshuffle.set_epoch(epoch)
            if ssi is not None:
                ssi.epoch_start(epoch)
            train_model.train()
            t0 = time.perf_counter()
            loss_sum, n_seen = torch.zeros((), device=device), 0
            with phase("epoch"):
                for xb, yb in train_loader:
                    xb, yb = xb.to(device, non_blocking=nb), yb.to(device, non_blocking=nb)
                    with phase("forward"):
                        optimizer.zero_grad()  # set_to_none is the default (Horovod takes no argument)
                        loss = loss_fn(train_model(xb), yb)
                        if sleep_fwd:
                            time.sleep(sleep_fwd)
                        if gpu_fwd:
                            gpu_sleep(gpu_fwd)
                    with phase("backward"):
                        if sleep_bwd:  # before the gradients exist, so the others wait for them
                            time.sleep(sleep_bwd)
                        if gpu_bwd:  # the GPU computes the gradients that much later
                            gpu_sleep(gpu_bwd)
                        loss.backward()
                    if args.backend == "horovod":
                        # Wait for Horovod's allreduces here, so the exposed sync time is not
                        # counted as weight update.
                        with phase("sync"):
                            optimizer.synchronize()
                        with phase("optimizer"), optimizer.skip_synchronize():
                            if args.loss_item == "before":
                                loss.item()
                            optimizer.step()
                            if sleep_opt:
                                time.sleep(sleep_opt)
                    else:
                        with phase("optimizer"):
                            if args.loss_item == "before":
                                loss.item()  # blocks the host until the GPU has computed the loss
                            optimizer.step()
                            if sleep_opt:
                                time.sleep(sleep_opt)
                    loss_sum += loss.detach() * xb.shape[0]
                    if n_seen == 0:
                        check_memory(args.mem_limit_mb, "after the first training step")
                    n_seen += xb.shape[0]
                    if ssi is not None:
                        ssi.step_end()
                    if args.loss_item == "after":
                        loss.item()  # between steps: the host waits for the whole step's GPU work
            train_time = time.perf_counter() - t0
            trained_s += train_time
            check_memory(args.mem_limit_mb, f"after epoch {epoch + 1}")
            with phase("eval"):
                val_sse, val_n = _evaluate(train_model, val_loader, device)
            tot_loss, tot_seen, tot_sse, tot_n = dist.sum([float(loss_sum), n_seen, val_sse, val_n], device)
            train_loss, val_mse = tot_loss / tot_seen, tot_sse / (2 * tot_n)
            if ssi is not None:
                ssi.epoch_end(epoch, samples=n_seen, train_loss=train_loss, val_loss=val_mse,
                              val_metric=1.0 - val_mse / mean_mse)
            log(f"epoch {epoch + 1}/{args.epochs}: train_loss={train_loss:.6f} val_mse={val_mse:.6f} "
                f"(mean predictor {mean_mse:.6f}) time={train_time:.4f}s "
                f"throughput={tot_seen / train_time:.0f} samples/s")
            # every rank stops after the same epoch: rank 0's training time decides
            if args.time_budget is not None and dist.sum([trained_s if dist.rank == 0 else 0.0],
                                                         device)[0] >= args.time_budget:
                log(f"time budget of {args.time_budget:g} s used up after {epoch + 1} epoch(s)")
                break
        status = "ok"
    finally:
        if ssi is not None:
            ssi.finish(status=status)
    return 0


def peak_rss_mib() -> float:
    """This process's peak resident memory so far (MiB), from getrusage."""
    import resource

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024.0 if sys.platform != "darwin" else kib / 2**20


def check_memory(limit_mb: float | None, when: str) -> None:
    """Raise ``MemoryError`` when the peak resident memory has passed ``limit_mb`` (``--mem-limit-mb``)."""
    if limit_mb is None:
        return
    peak = peak_rss_mib()
    if peak > limit_mb:
        raise MemoryError(f"out of memory: peak resident memory {peak:.0f} MiB {when} exceeds "
                          f"--mem-limit-mb {limit_mb:g}")


def _no_phase(name: str):
    return contextlib.nullcontext()


def _evaluate(model, loader, device) -> tuple[float, int]:
    """Sum of squared errors over this rank's validation shard, and its number of samples."""
    import torch

    model.eval()
    sse = torch.zeros((), dtype=torch.float64, device=device)
    n = 0
    with torch.no_grad():
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            sse += ((model(xb) - yb) ** 2).sum().double()
            n += xb.shape[0]
    return float(sse), n


if __name__ == "__main__":
    sys.exit(main())
