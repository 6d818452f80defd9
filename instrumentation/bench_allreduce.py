"""``scalescope bench-allreduce``: allreduce time over message sizes, per backend and rank count.

    scalescope bench-allreduce --np 1,2 --backend gloo,mpi --out runs/EXP/bench

Each (backend, rank count) is one launch with the sweep's own launchers and placement
(:func:`instrumentation.local.launch_command`: ``torchrun --standalone`` for torch.distributed
backends, ``horovodrun -H localhost:N`` for Horovod), all ranks on this node. Backends:

* ``gloo`` and ``nccl``: torch.distributed (``ddp-gloo``, ``ddp-nccl``); NCCL puts rank r on
  ``cuda:r``;
* ``mpi``: torch.distributed over MPI when torch was built with it (``ddp-mpi``), else
  Horovod with its MPI controller (``horovod-mpi``; the fallback is recorded);
* any sweep backend label (``horovod-gloo``, ``horovod-mpi``, ...) as it is.

Sizes (float32 tensors, bytes rounded down to a multiple of 4, at least 4): powers of 4 from
4 B to 256 MiB (cut at ``--max-bytes``), plus the model's gradient size (``--model-params``
x 4; default: examples/strain_stress.py's 153,532 parameters), DDP's bucket sizes (first
bucket 1 MiB, then ``bucket_cap_mb`` 25 MiB) and Horovod's fusion threshold
(``HOROVOD_FUSION_THRESHOLD``, default 64 MiB); these extra sizes are kept even above
``--max-bytes``. Every size is warmed up, then timed ``--repeats`` times; one repeat is
barrier, clock, allreduce (and ``torch.cuda.synchronize`` on GPU), clock, and its time is the
maximum over the ranks (the collective ends when its slowest rank does).

Writes ``<out>/allreduce.csv`` (``backend, launcher_backend, framework, n_ranks, n_nodes,
ranks_per_node, link_class, bytes, size_label, repeat, time_s``; ``link_class`` is
``intra-node`` when all ranks share a node, else ``inter-node``), ``<out>/bench.json`` (the
configuration, each launch's status and the node's communication facts from
:mod:`instrumentation.commpath`) and per launch ``<out>/<label>_np<N>/`` with its logs (and
NCCL logs for NCCL runs). The fit (alpha, beta per link class) is
:func:`analysis.metrics.model.fit_link_alpha_beta`, run by the ``scalescope`` command.

This module imports torch only inside the rank worker.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from instrumentation import commpath
from instrumentation.experiment import BACKENDS, RunSpec, find_tool, now
from instrumentation.local import launch_command
from instrumentation.manifest import write_json_atomic, write_text_atomic

__all__ = ["CSV_COLUMNS", "DDP_BUCKET_BYTES", "add_arguments", "message_sizes", "resolve_backend", "run",
           "run_bench"]

#: strain_stress's 1D CNN (examples/strain_stress.py prints ``parameters=153,532``).
DEFAULT_MODEL_PARAMS = 153_532
#: torch DDP: the first bucket (``dist._DEFAULT_FIRST_BUCKET_BYTES``) and ``bucket_cap_mb=25``.
DDP_BUCKET_BYTES = {"ddp_first_bucket": 1 << 20, "ddp_bucket": 25 << 20}
MAX_BYTES = 256 << 20
CSV_COLUMNS = ("backend", "launcher_backend", "framework", "n_ranks", "n_nodes", "ranks_per_node", "link_class",
               "bytes", "size_label", "repeat", "time_s")
SHORTHANDS = {"gloo": "ddp-gloo", "nccl": "ddp-nccl", "mpi": "ddp-mpi"}


def message_sizes(*, max_bytes: int = MAX_BYTES, model_params: int = DEFAULT_MODEL_PARAMS,
                  fusion_threshold: int | None = None) -> list[tuple[int, str]]:
    """``(bytes, label)`` pairs, sorted by size (see the module docstring).

    Examples
    --------
    >>> [b for b, _ in message_sizes(max_bytes=64, model_params=3, fusion_threshold=8)]
    [4, 8, 12, 16, 64, 1048576, 26214400]
    """
    fusion = fusion_threshold if fusion_threshold is not None else commpath.HOROVOD_DEFAULT_FUSION_BYTES
    sizes: dict[int, str] = {}
    b = 4
    while b <= min(max_bytes, MAX_BYTES):
        sizes[b] = "sweep"
        b *= 4
    extra = {"gradient": model_params * 4, **DDP_BUCKET_BYTES, "horovod_fusion": fusion}
    for label, nbytes in extra.items():
        nbytes = max(4, int(nbytes) // 4 * 4)
        sizes[nbytes] = label if sizes.get(nbytes) in (None, "sweep") else f"{sizes[nbytes]}+{label}"
    return sorted(sizes.items())


def _torch_has_mpi(python: str) -> bool:
    probe = "import torch.distributed as d; print(d.is_available() and d.is_mpi_available())"
    try:
        p = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.stdout.strip().endswith("True")


def resolve_backend(name: str, *, python: str = sys.executable) -> str:
    """The sweep backend label a bench backend name runs as (``mpi`` -> ``ddp-mpi`` or
    ``horovod-mpi``, see the module docstring). Raises ValueError for an unknown name."""
    label = SHORTHANDS.get(name, name)
    if label not in BACKENDS or label == "baseline":
        raise ValueError(f"unknown backend {name!r}; choose from gloo, mpi, nccl or "
                         + ", ".join(b for b in BACKENDS if b != "baseline"))
    if label == "ddp-mpi" and not _torch_has_mpi(python):
        return "horovod-mpi"
    return label


# ---------------------------------------------------------------------------------------
# The rank worker (runs under torchrun / horovodrun)
# ---------------------------------------------------------------------------------------


def _worker(args: argparse.Namespace) -> int:
    import torch

    sizes = [int(s) for s in args.sizes.split(",")]
    labels = args.labels.split(",")
    if args.framework == "horovod":
        import horovod.torch as hvd

        hvd.init()
        rank, size, local_size = hvd.rank(), hvd.size(), hvd.local_size()
        device = torch.device(f"cuda:{hvd.local_rank()}" if args.device == "cuda" else "cpu")

        def allreduce(t):
            hvd.allreduce_(t, op=hvd.Sum)

        def barrier():
            hvd.allreduce(torch.zeros(1), op=hvd.Sum, name="bench.barrier")

        def reduce_max(t):
            return hvd.allreduce(t, op=hvd.Max, name="bench.max")
    else:
        import torch.distributed as dist

        dist.init_process_group(args.controller)
        rank, size = dist.get_rank(), dist.get_world_size()
        local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        on_gpu = args.device == "cuda" or args.controller == "nccl"
        device = torch.device(f"cuda:{local_rank}" if on_gpu else "cpu")
        if on_gpu:
            torch.cuda.set_device(device)

        def allreduce(t):
            dist.all_reduce(t)

        def barrier():
            dist.barrier(**({"device_ids": [device.index]} if device.type == "cuda" else {}))

        def reduce_max(t):
            t = t.to(device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return t.cpu()

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = torch.zeros(len(sizes), args.repeats, dtype=torch.float64)
    for i, nbytes in enumerate(sizes):
        t = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            allreduce(t)
        sync()
        for r in range(args.repeats):
            barrier()
            sync()
            t0 = time.perf_counter()
            allreduce(t)
            sync()
            times[i, r] = time.perf_counter() - t0
        del t
    times = reduce_max(times)
    if rank == 0:
        n_nodes = max(1, size // max(1, local_size))
        fh = io.StringIO()
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for i, nbytes in enumerate(sizes):
            for r in range(args.repeats):
                w.writerow([args.bench_backend, args.backend_label, args.framework, size, n_nodes, local_size,
                            "intra-node" if n_nodes == 1 else "inter-node", nbytes, labels[i], r,
                            f"{float(times[i, r]):.9g}"])
        write_text_atomic(args.csv, fh.getvalue())
    if args.framework == "horovod":
        hvd.shutdown()
    else:
        dist.destroy_process_group()
    return 0


# ---------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------


def _env(spec: RunSpec, run_dir: Path, *, nccl_debug: bool) -> dict[str, str]:
    env = dict(os.environ)
    if spec.controller == "mpi" and hasattr(os, "geteuid") and os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    env.pop("HOROVOD_TIMELINE", None)
    return commpath.nccl_env(env, run_dir, framework=spec.framework, controller=spec.controller, enabled=nccl_debug)


def run_bench(out: Path, *, nps: Sequence[int], backends: Sequence[str], repeats: int = 5, warmup: int = 2,
              max_bytes: int = MAX_BYTES, model_params: int = DEFAULT_MODEL_PARAMS, device: str = "cpu",
              timeout: float | None = None, nccl_debug: bool = True, python: str = sys.executable) -> dict:
    """Run every (backend, rank count) and write the files of the module docstring.

    Returns the ``bench.json`` content. A failed launch is recorded (status, log tail) and
    the others still run.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fusion_env = os.environ.get("HOROVOD_FUSION_THRESHOLD")
    fusion = int(fusion_env) if fusion_env and fusion_env.isdigit() else None
    sizes = message_sizes(max_bytes=max_bytes, model_params=model_params, fusion_threshold=fusion)
    info: dict = {"format": "scalescope.bench_allreduce", "format_version": 1, "start_time": now(),
                  "sizes": [{"bytes": b, "label": lab} for b, lab in sizes], "repeats": repeats, "warmup": warmup,
                  "device": device, "model_params": model_params, "launches": [],
                  "node": commpath.write_node_info(out, python=python)}
    rows: list[list[str]] = []
    for name in backends:
        label = resolve_backend(name, python=python)
        for n in nps:
            spec = RunSpec(label, int(n), None, 1)
            run_dir = out / f"{name}_np{n}"
            run_dir.mkdir(parents=True, exist_ok=True)
            csv_path = run_dir / "allreduce.csv"
            csv_path.unlink(missing_ok=True)
            worker = [python, "-m", "instrumentation.bench_allreduce", "worker", "--framework", spec.framework,
                      "--controller", spec.controller, "--bench-backend", name, "--backend-label", label,
                      "--sizes", ",".join(str(b) for b, _ in sizes), "--labels", ",".join(lab for _, lab in sizes),
                      "--repeats", str(repeats), "--warmup", str(warmup), "--device", device, "--csv", str(csv_path)]
            cmd = launch_command(spec, worker, python=python)
            env = _env(spec, run_dir, nccl_debug=nccl_debug)
            t0 = time.time()
            status, code = "ok", None
            with open(run_dir / "stdout.log", "wb") as so, open(run_dir / "stderr.log", "wb") as se:
                try:
                    code = subprocess.run(cmd, stdout=so, stderr=se, stdin=subprocess.DEVNULL, env=env,
                                          cwd=Path(__file__).resolve().parents[1], timeout=timeout).returncode
                except subprocess.TimeoutExpired:
                    status = "timeout"
            if status == "ok" and (code != 0 or not csv_path.exists()):
                status = "failed"
            entry = {"backend": name, "launcher_backend": label, "np": int(n), "status": status, "exit_code": code,
                     "wall_s": round(time.time() - t0, 3), "command": cmd, "dir": run_dir.name,
                     "comm_capture": commpath.run_capture(run_dir, env)}
            if status != "ok":
                tail = (run_dir / "stderr.log").read_text(errors="replace").strip().splitlines()[-15:]
                entry["log_tail"] = "\n".join(tail)
            else:
                with open(csv_path, newline="") as fh:
                    rows.extend(list(csv.reader(fh))[1:])
            info["launches"].append(entry)
            print(f"bench-allreduce: {name} (as {label}) np={n}: {status} in {entry['wall_s']:.1f} s", file=sys.stderr)
    fh = io.StringIO()
    w = csv.writer(fh)
    w.writerow(CSV_COLUMNS)
    w.writerows(rows)
    write_text_atomic(out / "allreduce.csv", fh.getvalue())
    info["end_time"] = now()
    write_json_atomic(out / "bench.json", info)
    return info


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: rank counts must be >= 1")
    return values


def _bytes(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 4096, 64K, 256M)") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The driver's options (``scalescope bench-allreduce``)."""
    p.add_argument("--np", type=_int_list, default=[1, 2], metavar="N1,N2", help="rank counts (default 1,2)")
    p.add_argument("--backend", default="gloo", metavar="B1,B2",
                   help="gloo, mpi, nccl or sweep backend labels, comma-separated (default gloo)")
    p.add_argument("--out", type=Path, required=True, help="output directory, e.g. runs/EXP/bench")
    p.add_argument("--repeats", type=int, default=5, help="timed allreduces per size (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed allreduces per size first (default 2)")
    p.add_argument("--max-bytes", type=_bytes, default=MAX_BYTES,
                   help="largest size of the power-of-4 series (default 256M; model sizes are always kept)")
    p.add_argument("--model-params", type=int, default=DEFAULT_MODEL_PARAMS,
                   help=f"parameters of the model whose gradient size is measured (default {DEFAULT_MODEL_PARAMS:,})")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the tensors live (NCCL always uses cuda)")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="stop a launch after S seconds")
    p.add_argument("--no-nccl-debug", action="store_true", help="do not capture NCCL_DEBUG=INFO logs")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        w = argparse.ArgumentParser(prog="bench_allreduce worker")
        for opt in ("--framework", "--controller", "--bench-backend", "--backend-label", "--sizes", "--labels",
                    "--device", "--csv"):
            w.add_argument(opt, required=True)
        w.add_argument("--repeats", type=int, required=True)
        w.add_argument("--warmup", type=int, required=True)
        return _worker(w.parse_args(argv[1:]))
    p = argparse.ArgumentParser(prog="python -m instrumentation.bench_allreduce", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run the benchmark from parsed options; 0 when every launch succeeded, else 1."""
    try:
        backends = [b.strip() for b in args.backend.split(",") if b.strip()]
        for b in backends:
            resolve_backend(b)
        for b in {resolve_backend(b) for b in backends}:
            find_tool("horovodrun" if BACKENDS[b][0] == "horovod" else "torchrun")
    except (ValueError, FileNotFoundError) as exc:
        print(f"bench-allreduce: error: {exc}", file=sys.stderr)
        return 2
    info = run_bench(args.out, nps=args.np, backends=backends, repeats=args.repeats, warmup=args.warmup,
                     max_bytes=args.max_bytes, model_params=args.model_params, device=args.device,
                     timeout=args.timeout, nccl_debug=not args.no_nccl_debug)
    return 0 if all(x["status"] == "ok" for x in info["launches"]) else 1


if __name__ == "__main__":
    sys.exit(main())
