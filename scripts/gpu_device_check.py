#!/usr/bin/env python
"""The device-time validations of ``docs/metrics.md`` ("Device time") on a GPU: one command.

    python scripts/gpu_device_check.py --out runs/gpu-check     # or: scalescope doctor --gpu-check

Three sweeps of ``examples/strain_stress.py --device cuda`` (a model and batch large enough
that the GPU is busy), 12 runs, then the checks, each a known cause recovered or a null
result that must hold:

============  ================================================  =========================================
check         runs                                              passes when
============  ================================================  =========================================
``aa``        DDP over NCCL, 1 rank, twice (inject none)        device steps equal within 3 % (A/A)
``overhead``  the same with ``SCALESCOPE_DEVICE_EVERY=0``       host step with events <= 1 % + noise above
                                                                the host step without
``gpu_sleep`` ``--inject gpu-backward:5``                       device backward +5 ms (±1), host +<0.5 ms
``comm``      ``--inject comm:5`` (allreduce 5 ms later on a    device exposed sync +5 ms (±1.5), host sync
              side stream)                                      +<0.5 ms
``data``      ``--inject data:5``                               data +5 ms (±1) on host and device
``item``      ``--loss-item before`` / ``after``                device step within 5 % of the A/A's; after:
                                                                the host waits between steps (between_steps)
``arrival``   DDP over Gloo with CUDA tensors, 2 ranks on the    the last arriver and slowest rank is rank 1
              GPU(s), ``--inject gpu-backward:5@1``
============  ================================================  =========================================

Writes ``<out>/device-check.json`` and prints a table; exit 0 when every check passed, 1 when
one failed, 2 without a GPU. :func:`evaluate` is the pure part (run directories in, checks
out), tested on CPU with device spans from a fake event class (``tests/test_gpu_check.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXIT_NO_GPU = 2
#: The model and data of every run: about 50 steps of a busy GPU per epoch.
SCRIPT = ["examples/strain_stress.py", "--device", "cuda", "--epochs", "1", "--batch-size", "256",
          "--curve-length", "2048", "--samples", "16000"]
#: (experiment, sweep options, environment) of the three sweeps.
SWEEPS = (
    ("nccl", ["--np", "1", "--backend", "ddp-nccl", "--repeats", "2", "--vary",
              "inject=none,gpu-backward:5,comm:5,data:5"], {}),
    ("item", ["--np", "1", "--backend", "ddp-nccl", "--vary", "loss-item=before,after"], {}),
    ("off", ["--np", "1", "--backend", "ddp-nccl", "--repeats", "2"], {"SCALESCOPE_DEVICE_EVERY": "0"}),
    ("gloo", ["--np", "2", "--backend", "ddp-gloo", "--vary", "inject=gpu-backward:5@1"], {}),
)


def run_sweeps(out: Path, *, timeout: float = 420) -> list[dict]:
    """The sweeps into ``out/<name>``; their exit codes and log paths."""
    done = []
    for name, opts, extra in SWEEPS:
        env = {**os.environ, **extra}
        cmd = [sys.executable, "-m", "instrumentation.sweep", *opts, "--timeout", "240", "--sample-interval", "0.1",
               "--out", str(out / name), "--", sys.executable, *SCRIPT, "--data-dir", str(out / "data")]
        log = out / f"device-{name}.log"
        t0 = time.time()
        try:
            p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
            rc, text = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as exc:
            rc, text = 124, f"timed out after {timeout:.0f} s\n{exc.stdout or ''}{exc.stderr or ''}"
        log.write_text(text if isinstance(text, str) else str(text))
        done.append({"sweep": name, "rc": rc, "wall_s": round(time.time() - t0, 1), "log": str(log)})
    return done


def _per_run(out: Path) -> tuple:
    """Every sweep's runs (``exp``: the sweep) with their options, the mean device and host
    parts per kept step of each (run, rank) (``source``), and the device-time tables."""
    import pandas as pd

    import analysis.metrics as M
    from analysis import RunSet

    runs, parts, between, arrivals, steps = [], [], [], [], []
    for name, _, _ in SWEEPS:
        if not (out / name).is_dir():
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rs = RunSet.from_dirs([out / name])
            ev = rs.events
        runs.append(rs.runs.assign(exp=name, run_id=rs.runs["run_id"].astype(str)))
        for source in ("events", "host"):
            b = M.time_breakdown(ev, level="step", source=source if source == "host" else "auto")
            b = b[b["source"] == source]
            per = b.groupby(["run_id", "rank"])[["step_time_s", "data_s", "forward_s", "backward_s",
                                                 "sync_exposed_s", "optimizer_s", "other_s"]].mean().reset_index()
            parts.append(per.assign(source=source, exp=name))
        between.append(M.between_steps(ev).assign(exp=name))
        arrivals.append(M.event_arrivals(ev).assign(exp=name))
        steps.append(M.rank_step_parts(ev).assign(exp=name))
    if not runs:
        raise RuntimeError(f"no sweep under {out}: nothing to check")
    cat = lambda frames: pd.concat(frames, ignore_index=True)  # noqa: E731
    return cat(runs), cat(parts), cat(between), cat(arrivals), cat(steps)


def _opt(run, key: str) -> str:
    """The value of the script option ``--key`` the sweep gave a run (``none`` when not)."""
    for col in (f"vary_{key}", f"vary_{key.replace('-', '_')}"):
        v = run.get(col)
        if v is not None and v == v:
            return str(v)
    return "none"


def evaluate(out: Path) -> dict:
    """The checks of the module docstring on the sweeps' run directories under ``out``."""
    runs, parts, between, arrivals, steps = _per_run(out)
    checks: dict[str, dict] = {}

    def part(run_ids: list[tuple], source: str, col: str) -> float:
        key = parts["exp"] + "/" + parts["run_id"].astype(str)
        sel = parts[key.isin([f"{e}/{r}" for e, r in run_ids]) & (parts["source"] == source) & (parts["rank"] == 0)]
        return float(sel[col].mean()) * 1e3 if len(sel) else float("nan")

    def ids(exp: str, **opts: str) -> list[tuple]:
        return [(exp, r["run_id"]) for r in runs[runs["exp"] == exp].to_dict("records")
                if all(_opt(r, k) == v for k, v in opts.items())]

    def of(frame, chosen: list[tuple]):
        key = frame["exp"] + "/" + frame["run_id"].astype(str)
        return frame[key.isin([f"{e}/{r}" for e, r in chosen])]

    clean = ids("nccl", inject="none")
    dev_steps = [part([r], "events", "step_time_s") for r in clean]
    checks["aa"] = _check(len(dev_steps) == 2 and abs(dev_steps[0] - dev_steps[1]) <= 0.03 * max(dev_steps),
                          device_step_ms=dev_steps)
    off = ids("off")
    on_host, off_host = part(clean, "host", "step_time_s"), part(off, "host", "step_time_s")
    noise = abs(part(clean[:1], "host", "step_time_s") - part(clean[1:], "host", "step_time_s"))
    checks["overhead"] = _check(on_host <= off_host * 1.01 + noise, host_step_on_ms=on_host, host_step_off_ms=off_host,
                                aa_noise_ms=noise, overhead_pct=100 * (on_host / off_host - 1))
    for name, inj, col, tol in (("gpu_sleep", "gpu-backward:5", "backward_s", 1.0),
                                ("comm", "comm:5", "sync_exposed_s", 1.5)):
        got = ids("nccl", inject=inj)
        d_dev = part(got, "events", col) - part(clean, "events", col)
        d_host = part(got, "host", col) - part(clean, "host", col)
        checks[name] = _check(abs(d_dev - 5.0) <= tol and abs(d_host) < 0.5, device_delta_ms=d_dev,
                              host_delta_ms=d_host)
    got = ids("nccl", inject="data:5")
    d_dev, d_host = (part(got, s, "data_s") - part(clean, s, "data_s") for s in ("events", "host"))
    checks["data"] = _check(abs(d_dev - 5.0) <= 1.0 and abs(d_host - 5.0) <= 1.0, device_delta_ms=d_dev,
                            host_delta_ms=d_host)
    base = part(clean, "events", "step_time_s")
    item = {w: part(ids("item", **{"loss-item": w}), "events", "step_time_s") for w in ("before", "after")}
    after = of(between, ids("item", **{"loss-item": "after"}))
    blocked = float(after["blocked_frac"].max()) if len(after) else 0.0
    checks["item"] = _check(all(abs(v - base) <= 0.05 * base for v in item.values()) and blocked > 0.5,
                            device_step_ms={"none": base, **item}, after_blocked_frac=blocked)
    gloo = ids("gloo")
    arr = of(arrivals, gloo)
    last = arr.drop_duplicates(["run_id", "seq"])["last_rank"].value_counts(normalize=True).to_dict() if len(arr) \
        else {}
    st = of(steps, gloo)
    slow = st[st["is_slowest"]]["rank"].value_counts(normalize=True).to_dict()
    checks["arrival"] = _check(last.get(1, 0) > 0.8 and slow.get(1, 0) > 0.8, last_rank_share=last,
                               slowest_share=slow)
    return checks


def _check(ok: bool, **facts) -> dict:
    def plain(v):
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return round(float(v), 4) if isinstance(v, float) or hasattr(v, "dtype") else v
    return {"status": "ok" if ok else "failed", **{k: plain(v) for k, v in facts.items()}}


def step_device(out: Path) -> dict:
    """Run the sweeps and the checks (the ``device`` step of ``scripts/gpu_check.py``)."""
    sweeps = run_sweeps(out)
    res: dict = {"sweeps": sweeps}
    try:
        res["checks"] = evaluate(out)
    except Exception as exc:
        import traceback

        res.update(status="failed", reason=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-2000:])
        return res
    failed = [k for k, c in res["checks"].items() if c["status"] != "ok"] + \
        [s["sweep"] for s in sweeps if s["rc"]]
    res["status"] = "failed" if failed else "ok"
    if failed:
        res["failed"] = failed
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/gpu-check"))
    p.add_argument("--evaluate-only", action="store_true", help="check sweeps already under --out")
    args = p.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not args.evaluate_only:
        try:
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError("torch sees no CUDA device")
        except Exception as exc:
            print(f"gpu_device_check: no usable NVIDIA GPU here ({exc}); nothing run", file=sys.stderr)
            return EXIT_NO_GPU
    res = evaluate(out) if args.evaluate_only else step_device(out)
    checks = res.get("checks", res) if isinstance(res, dict) else res
    (out / "device-check.json").write_text(json.dumps(res, indent=2, default=str))
    for name, c in checks.items():
        if isinstance(c, dict) and "status" in c:
            print(f"{name:10s} {c['status']:7s} {json.dumps({k: v for k, v in c.items() if k != 'status'})}")
    bad = [c for c in checks.values() if isinstance(c, dict) and c.get("status") == "failed"]
    return 1 if bad or res.get("status") == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
