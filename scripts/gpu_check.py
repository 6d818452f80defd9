#!/usr/bin/env python
"""Run, on a machine with NVIDIA GPUs, every GPU path scalescope's CI never runs; one command.

    python scripts/gpu_check.py --out runs/gpu-check          # or: scalescope doctor --gpu-check

Steps (each recorded as ok / failed / skipped with the reason; a failed step never stops the
next one):

1. ``environment``: torch, CUDA, GPUs, the NCCL torch was built with, NVML, nvidia-smi;
2. ``nvml``: :class:`instrumentation.sampler.Sampler` in NVML mode while the GPU runs matrix
   products; the samples file read back with the ``scalescope_samples`` reader;
3. ``node``: :func:`instrumentation.commpath.write_node_info` (``nvidia-smi topo -m`` read
   with the ``nvsmi_topo`` reader, NICs, MPI, Horovod build);
4. ``sweep``: ``scalescope sweep --torch-profiler`` of ``examples/strain_stress.py --device
   cuda``: the baseline, DDP over NCCL on 1 GPU (2 when present), DDP over Gloo with CUDA
   tensors at 2 ranks, Horovod over NCCL when Horovod is importable; every run's events,
   samples (NVML sample counts), Kineto traces (CUDA kernels) and NCCL logs read back;
5. ``nsys``: one baseline run under ``--nsys`` when an ``nsys`` binary exists;
6. ``bench``: ``scalescope bench-allreduce`` over NCCL (and Gloo) when that command exists;
7. ``device``: the device-time validations (``scripts/gpu_device_check.py``: an A/A pair,
   CUDA events on against off, a GPU sleep in backward, a delayed allreduce, injected data
   time, ``loss.item()`` before and after the step, the last arriver of a 2-rank Gloo run).

Writes ``<out>/gpu-check.json`` (the summary) and ``<out>/gpu-check.md`` (the same as a
table) and prints the table. Exit status 0 when every step that could run passed, 1 when
one failed, 2 when there is no NVIDIA GPU (nothing was run). The ``gpu``-marked tests
(tests/test_gpu_check.py) run this script and check its summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXIT_NO_GPU = 2


def _sh(cmd: list[str], *, timeout: float, env: dict | None = None, log: Path | None = None) -> tuple[int, str]:
    """Run ``cmd`` in the repo root; its output goes to ``log`` (and the tail is returned)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
        out = (p.stdout or "") + (p.stderr or "")
        rc = p.returncode
    except subprocess.TimeoutExpired as exc:
        out = f"timed out after {timeout:.0f} s\n{exc.stdout or ''}{exc.stderr or ''}"
        rc = 124
    if log is not None:
        log.write_text(out if isinstance(out, str) else str(out))
    return rc, out[-3000:]


_ENV_PROBE = r"""
import json, torch
out = {"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
       "gpus": torch.cuda.device_count()}
if torch.cuda.is_available():
    out["names"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception as exc:
        out["nccl"] = f"unavailable: {exc}"
print(json.dumps(out))
"""


def step_environment(out: Path) -> dict:
    rc, text = _sh([sys.executable, "-c", _ENV_PROBE], timeout=120)
    if rc != 0:
        return {"status": "failed", "reason": text[-500:]}
    info = json.loads(text.strip().splitlines()[-1])
    smi = shutil.which("nvidia-smi")
    if smi:
        rc, drv = _sh([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], timeout=30)
        info["nvidia_smi"] = drv.strip() if rc == 0 else f"failed: {drv.strip()[:200]}"
    else:
        info["nvidia_smi"] = "not on PATH"
    try:
        import pynvml

        pynvml.nvmlInit()
        info["nvml_gpus"] = pynvml.nvmlDeviceGetCount()
        info["nvml_driver"] = pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlShutdown()
    except Exception as exc:  # recorded, not fatal: the sampler step will say the same
        info["nvml_error"] = f"{type(exc).__name__}: {exc}"
    try:
        import horovod

        info["horovod"] = horovod.__version__
    except Exception as exc:
        info["horovod"] = f"not importable ({type(exc).__name__}: {exc})"
    info["status"] = "ok" if info.get("cuda_available") else "failed"
    return info


_LOAD = r"""
import sys, time, torch
x = torch.randn(4096, 4096, device="cuda")
t = time.time()
while time.time() - t < float(sys.argv[1]):
    y = x @ x
    torch.cuda.synchronize()
"""


def step_nvml(out: Path) -> dict:
    import analysis
    from instrumentation.sampler import Sampler, probe_nvml

    ok, why, devices = probe_nvml()
    if not ok:
        return {"status": "failed", "reason": f"NVML unusable: {why}"}
    path = out / f"samples-{socket.gethostname()}.csv"
    s = Sampler(path, host=socket.gethostname(), kind="nvml", interval_s=0.05)
    if not s.start():
        return {"status": "failed", "reason": f"sampler did not start: {s.error}"}
    rc, text = _sh([sys.executable, "-c", _LOAD, "3"], timeout=180)
    s.stop()
    df = analysis.read(path)
    busy = df[df["util_gpu_pct"] > 50]
    return {"status": "ok" if rc == 0 and len(df) and len(busy) else "failed", "devices": devices,
            "ticks": s.n_ticks, "sample_rows": len(df), "rows_util_over_50pct": len(busy),
            "max_util_gpu_pct": float(df["util_gpu_pct"].max()) if len(df) else None,
            "max_power_w": float(df["power_w"].max()) if len(df) else None,
            "reader": analysis.sniff(path), **({"load_error": text[-500:]} if rc else {})}


def step_node(out: Path) -> dict:
    import analysis
    from instrumentation import commpath

    info = commpath.write_node_info(out, python=sys.executable)
    res = {"status": "ok", "nics": [i["name"] for i in (info["nics"].get("interfaces") or [])],
           "rdma": [d["name"] for d in (info["nics"].get("rdma") or [])],
           "mpi": {k: info["mpi"].get(k) for k in ("available", "implementation", "version", "reason")},
           "horovod": {k: info["horovod"].get(k) for k in ("available", "version", "tensor_operations", "reason")}}
    topo = info["topo"]
    if topo.get("available"):
        df = analysis.read(out / topo["file"])
        res["topo"] = {"file": topo["file"], "reader": analysis.sniff(out / topo["file"]), "pairs": len(df),
                       "links": df["link"].value_counts().loc[lambda s: s > 0].to_dict(),
                       "text": (out / topo["file"]).read_text()}
    else:
        res["topo"] = topo
        res["status"] = "failed"
    return res


def _read_run(run_dir: Path) -> dict:
    """What each reader loaded from one run directory."""
    import analysis
    from analysis.readers import nccl as nccl_reader
    from analysis.readers.rundir import read_run_dir

    res: dict = {"run": run_dir.name}
    manifest = json.loads((run_dir / "run.json").read_text())
    res["status"] = manifest.get("status")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ev = read_run_dir(run_dir, include_profilers=True)
        sm = read_run_dir(run_dir, kind="samples")
    res["events_by_source"] = ev["source"].value_counts().loc[lambda s: s > 0].to_dict()
    kin = ev[ev["source"] == "kineto"]
    res["kineto_gpu_events"] = int(kin["device"].notna().sum())
    res["kineto_gpu_kinds"] = kin.loc[kin["device"].notna(), "kind"].value_counts().loc[lambda s: s > 0].to_dict()
    res["nvml_samples"] = int(sm["device"].notna().sum()) if len(sm) else 0
    res["samples_by_source"] = sm["source"].value_counts().loc[lambda s: s > 0].to_dict() if len(sm) else {}
    res["warnings"] = sorted({str(w.message)[:200] for w in caught})[:5]
    logs = sorted(run_dir.glob("nccl.*.log"))
    if not logs:  # capture not wired: NCCL prints to the ranks' stdout
        logs = [p for p in (run_dir / "stdout.log", run_dir / "stderr.log") if p.exists() and p.stat().st_size]
        logs = [p for p in logs if nccl_reader.sniff(p)]
    nccl = []
    for f in logs:
        df = analysis.read(f, format="nccl")
        conn = df[df["record"] == "connection"]
        nccl.append({"file": str(f.relative_to(run_dir)), "records": len(df),
                     "version": sorted(df["nccl_version"].dropna().unique().tolist()),
                     "nranks": sorted(int(x) for x in df["nranks"].dropna().unique()),
                     "transports": conn["transport"].value_counts().loc[lambda s: s > 0].to_dict(),
                     "network": sorted(df.loc[df["record"] == "network", "net"].dropna().unique().tolist()),
                     "warn": df.loc[df["record"] == "warn", "text"].tolist()[:5]})
    res["nccl_logs"] = nccl
    from analysis.runtable import run_comm_path

    res["comm_path"] = run_comm_path(run_dir, manifest)
    res["comm_capture_logs"] = (manifest.get("comm_capture") or {}).get("nccl_logs")
    return res


def step_sweep(out: Path, *, gpus: int, horovod: bool, samples: int) -> dict:
    exp = out / "sweep"
    nccl_np = "1,2" if gpus >= 2 else "1"
    script = ["--", sys.executable, "examples/strain_stress.py", "--device", "cuda", "--epochs", "1",
              "--samples", str(samples), "--data-dir", str(out / "data")]
    env = dict(os.environ)
    env.setdefault("NCCL_DEBUG", "INFO")  # also when the sweep's own capture is absent
    results: dict = {"status": "ok", "sweeps": []}
    # one GPU per rank: strain_stress puts rank r on cuda:r, and NCCL refuses two ranks on one GPU
    plans = [("ddp-nccl", nccl_np, True), ("ddp-gloo", nccl_np, False)]
    if horovod:
        plans.append(("horovod-gloo", nccl_np, False))  # Horovod's GPU ops (NCCL) when it was built with them
    for backend, nps, baseline in plans:
        cmd = [sys.executable, "-m", "instrumentation.sweep", "--np", nps, "--backend", backend, "--torch-profiler",
               "--sample-interval", "0.05", "--timeout", "240", "--out", str(exp)]
        if baseline:
            cmd.append("--baseline")
        t0 = time.time()
        rc, text = _sh(cmd + script, timeout=600, env=env, log=out / f"sweep-{backend}.log")
        results["sweeps"].append({"backend": backend, "np": nps, "rc": rc, "wall_s": round(time.time() - t0, 1),
                                  **({"tail": text[-1500:]} if rc else {})})
        if rc:
            results["status"] = "failed"
    runs = []
    for d in sorted(exp.glob("*/run.json")) if exp.is_dir() else []:
        try:
            runs.append(_read_run(d.parent))
        except Exception as exc:
            runs.append({"run": d.parent.name, "error": f"{type(exc).__name__}: {exc}",
                         "traceback": traceback.format_exc()[-1500:]})
            results["status"] = "failed"
    results["runs"] = runs
    if not runs or any(r.get("status") != "ok" for r in runs):
        results["status"] = "failed"
    return results


def _find_nsys() -> str | None:
    try:
        from instrumentation.profilers import find_nsys

        return find_nsys()
    except Exception:
        return shutil.which("nsys")


#: nsys binaries that ship inside other NVIDIA tools (Nsight Compute bundles one), tried last.
BUNDLED_NSYS = ("/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",)


def step_nsys(out: Path, *, samples: int) -> dict:
    import glob

    nsys = _find_nsys()
    env = dict(os.environ)
    bundled = None
    if not nsys:
        bundled = next((p for pat in BUNDLED_NSYS for p in sorted(glob.glob(pat)) if os.access(p, os.X_OK)), None)
        if bundled is None:
            return {"status": "skipped", "reason": "no nsys binary (PATH, CUDA toolkit, Nsight Systems install dirs)"}
        nsys = bundled  # the sweep finds it on PATH
        env["PATH"] = f"{Path(bundled).parent}{os.pathsep}{env.get('PATH', '')}"
    exp = out / "nsys"
    cmd = [sys.executable, "-m", "instrumentation.sweep", "--np", "1", "--backend", "", "--baseline", "--nsys",
           "--timeout", "150", "--out", str(exp), "--", sys.executable, "examples/strain_stress.py", "--device",
           "cuda", "--epochs", "1", "--samples", str(samples), "--data-dir", str(out / "data")]
    rc, text = _sh(cmd, timeout=240, env=env, log=out / "nsys.log")
    res: dict = {"nsys": nsys, "bundled_with_another_tool": bundled is not None, "rc": rc}
    res["files"] = sorted(str(p.relative_to(exp)) for p in exp.glob("*/nsys/*"))
    logs = sorted(exp.glob("*/stderr.log"))
    if logs:
        res["run_stderr_tail"] = logs[0].read_text(errors="replace")[-1500:]
    runs = sorted(exp.glob("*/run.json")) if exp.is_dir() else []
    if runs:
        try:
            res["run"] = _read_run(runs[0].parent)
        except Exception as exc:
            res["read_error"] = f"{type(exc).__name__}: {exc}"
    ok = rc == 0 and runs and res.get("run", {}).get("events_by_source", {}).get("nsys_sqlite")
    res["status"] = "ok" if ok else "failed"
    if not ok:
        res["tail"] = text[-1500:]
    return res


def step_bench(out: Path, *, gpus: int) -> dict:
    """bench-allreduce over NCCL (and Gloo on CUDA tensors) at 1 rank, 2 when two GPUs exist;
    the alpha-beta fit needs 2 or more ranks, so on one GPU it is recorded as not possible."""
    from analysis import bench
    from analysis.errors import ScalescopeError

    exp = out / "bench"
    nps = "1,2" if gpus >= 2 else "1"
    cmd = [sys.executable, "-m", "instrumentation.bench_allreduce", "--np", nps, "--backend", "nccl,gloo",
           "--device", "cuda", "--out", str(exp), "--repeats", "5", "--timeout", "300"]
    rc, text = _sh(cmd, timeout=420, log=out / "bench.log")
    res: dict = {"rc": rc}
    f = exp / "allreduce.csv"
    if f.exists():
        import pandas as pd

        df = pd.read_csv(f)
        res["rows"] = len(df)
        med = df.groupby(["backend", "n_ranks", "bytes", "size_label"], as_index=False)["time_s"].median()
        keep = med[med["size_label"].ne("sweep") | med["bytes"].isin([4, 1 << 20, 256 << 20])]
        res["median_time_s"] = keep.to_dict("records")
        try:
            res["fit"] = bench.summarize(exp)["fit"].to_dict("records")
        except ScalescopeError as exc:
            res["fit"] = f"not possible: {exc}"
        info = json.loads((exp / "bench.json").read_text())
        res["launches"] = [{k: x.get(k) for k in ("backend", "np", "status", "wall_s", "log_tail")}
                           for x in info["launches"]]
        res["nccl_logs"] = sorted(str(p.relative_to(exp)) for p in exp.glob("*/nccl.*.log"))
    res["status"] = "ok" if rc == 0 and f.exists() else "failed"
    if res["status"] != "ok":
        res["tail"] = text[-2500:]
    return res


def _markdown(summary: dict) -> str:
    lines = ["| step | status | detail |", "|---|---|---|"]
    for name, res in summary["steps"].items():
        detail = {k: v for k, v in res.items() if k not in ("status", "runs", "text", "tail", "traceback")}
        lines.append(f"| {name} | {res.get('status')} | `{json.dumps(detail, default=str)[:400]}` |")
    for r in summary["steps"].get("sweep", {}).get("runs", []):
        lines.append(f"| run {r.get('run')} | {r.get('status')} | events {r.get('events_by_source')}, "
                     f"kineto GPU events {r.get('kineto_gpu_events')}, NVML samples {r.get('nvml_samples')}, "
                     f"NCCL {[(n['file'], n['version'], n['nranks'], n['transports']) for n in r.get('nccl_logs', [])]} |")
    return "\n".join(lines) + "\n"


def _device_step(out: Path) -> dict:
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_device_check

    return gpu_device_check.step_device(out / "device")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/gpu-check"), help="where everything is written")
    p.add_argument("--samples", type=int, default=2000, help="training samples per run (default 2000)")
    p.add_argument("--skip", action="append", default=[],
                   choices=("nvml", "node", "sweep", "nsys", "bench", "device"),
                   help="leave a step out (repeatable)")
    args = p.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "steps": {}}
    env = step_environment(out)
    summary["steps"]["environment"] = env
    if not env.get("cuda_available"):
        print(f"gpu_check: no usable NVIDIA GPU here ({env.get('reason') or env}); nothing run", file=sys.stderr)
        (out / "gpu-check.json").write_text(json.dumps(summary, indent=2, default=str))
        return EXIT_NO_GPU
    gpus = int(env.get("gpus") or 0)
    horovod = not str(env.get("horovod", "")).startswith("not importable")
    steps = {
        "nvml": lambda: step_nvml(out),
        "node": lambda: step_node(out),
        "sweep": lambda: step_sweep(out, gpus=gpus, horovod=horovod, samples=args.samples),
        "nsys": lambda: step_nsys(out, samples=args.samples),
        "bench": lambda: step_bench(out, gpus=gpus),
        "device": lambda: _device_step(out),
    }
    for name, fn in steps.items():
        if name in args.skip:
            summary["steps"][name] = {"status": "skipped", "reason": "--skip"}
            continue
        t0 = time.time()
        print(f"gpu_check: {name} ...", file=sys.stderr, flush=True)
        try:
            res = fn()
        except Exception as exc:
            res = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        res["wall_s"] = round(time.time() - t0, 1)
        summary["steps"][name] = res
        (out / "gpu-check.json").write_text(json.dumps(summary, indent=2, default=str))
    if not horovod:
        summary["steps"]["horovod"] = {"status": "skipped", "reason": env.get("horovod")}
    (out / "gpu-check.json").write_text(json.dumps(summary, indent=2, default=str))
    md = _markdown(summary)
    (out / "gpu-check.md").write_text(md)
    print(md)
    return 1 if any(s.get("status") == "failed" for s in summary["steps"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
