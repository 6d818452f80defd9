"""The large experiment: ``scalescope report`` on ``--runs`` runs of ``--ranks`` ranks each,
with real-shaped traces, timed, with the peak memory of the report's process and of all
its processes together.

Each run is a run directory of 64 (``--ranks``) ranks on 8 hosts: ``run.json`` (the
manifest of ``data/sample_sweep``'s 2-rank DDP run, widened to the ranks), per rank the
scalescope trace and epoch metrics of that run's rank 1 (its rank, host and process name
rewritten), CPU samples, and a PyTorch profiler trace in ``torch_profiler/``: a real Kineto
trace of the shared corpus (``--source``, default ``kineto/hta__nccl_data.json.gz``: an
A100 NCCL training step, 40.6k events, 10 MB of JSON) with ``distributedInfo.rank`` and
``world_size`` set to the rank's. The profiler traces are gzip files of two members (the
rank's head, then the corpus trace's events, compressed once and shared), so making 512
of them takes seconds; readers gunzip every member.

The report runs in a fresh process (``python -m analysis.cli report DIR --out OUT
--no-static``, the parse cache in a fresh directory); its wall time and the peak RSS of
the report process (``VmHWM``) and of its whole process tree (the pool's workers
included; sampled every 50 ms) are printed.

Usage::

    .venv/bin/python benchmarks/large_report.py                      # 8 runs x 64 ranks
    .venv/bin/python benchmarks/large_report.py --runs 2 --ranks 8   # a quick look
    .venv/bin/python benchmarks/large_report.py --metrics            # the two slow metrics alone

``--metrics`` skips the report: it reads the experiment's events once (a RunSet in this
process) and prints the CPU seconds of ``time_breakdown(level="step")`` and ``step_table``
on them, each the best of ``--rounds``; run it from two checkouts to compare versions.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
TEMPLATE = ROOT / "data" / "sample_sweep"
TEMPLATE_RUN = "ddp-gloo_np2_bs300_r1"


def _profiler_parts(source: Path) -> tuple[bytes, bytes]:
    """The corpus trace's text before its events (the head, with the rank to set) and its
    events and tail compressed once (the second gzip member of every rank's file)."""
    raw = gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes()
    at = raw.index(b'"traceEvents"')
    return raw[:at], gzip.compress(raw[at:], compresslevel=6)


def _rank_head(head: bytes, rank: int, world: int) -> bytes:
    info = head.index(b'"distributedInfo"')
    tail = re.sub(rb'"rank":\s*\d+', b'"rank": %d' % rank, head[info:], count=1)
    tail = re.sub(rb'"world_size":\s*\d+', b'"world_size": %d' % world, tail, count=1)
    return head[:info] + tail


def _longer(trace: str, epochs: str, copies: int) -> tuple[str, str]:
    """A rank's captured trace and epoch metrics as if it had trained ``copies`` times as
    long: the timed events (phases, collectives) repeated, each copy after the last in time
    (its span and 1 ms more), with its steps and epochs numbered on; metadata once, the end
    record last with the new event count. The epoch metrics repeated the same way."""
    if copies <= 1:
        return trace, epochs
    events = json.loads(trace)
    meta = [e for e in events if e.get("ph") != "X" and e.get("name") != "scalescope_end"]
    end = [e for e in events if e.get("name") == "scalescope_end"]
    timed = [e for e in events if e.get("ph") == "X"]
    steps = 1 + max(int(e["args"]["step"]) for e in timed if "step" in e.get("args", {}))
    n_epochs = 1 + max(int(e["args"]["epoch"]) for e in timed if "epoch" in e.get("args", {}))
    first = min(e["ts"] for e in timed)
    span = max(e["ts"] + e["dur"] for e in timed) - first + 1000.0
    out = list(meta)
    for c in range(copies):
        for e in timed:
            args = dict(e["args"])
            if "step" in args:
                args["step"] = int(args["step"]) + c * steps
            if "epoch" in args:
                args["epoch"] = int(args["epoch"]) + c * n_epochs
            out.append(dict(e, ts=round(e["ts"] + c * span, 3), args=args))
    for e in end:
        shift_ns = (copies - 1) * round(span * 1000)
        out.append(dict(e, args=dict(e["args"], n_events=int(e["args"]["n_events"]) + (copies - 1) * len(timed),
                                     wall_ns=int(e["args"]["wall_ns"]) + shift_ns)))
    lines = []
    for c in range(copies):
        for line in epochs.splitlines():
            rec = json.loads(line)
            rec["epoch"] = int(rec["epoch"]) + c * n_epochs
            if "wall_ns" in rec:
                rec["wall_ns"] = int(rec["wall_ns"]) + c * round(span * 1000)
            lines.append(json.dumps(rec))
    return "[\n" + ",\n".join(json.dumps(e, separators=(",", ":")) for e in out) + "\n]\n", "\n".join(lines) + "\n"


def _run(out: Path, run_id: str, ranks: int, batch: int, profiler: tuple[bytes, bytes], copies: int = 1) -> dict:
    src = TEMPLATE / TEMPLATE_RUN
    out.mkdir(parents=True)
    manifest = json.loads((src / "run.json").read_text())
    proto = manifest["ranks"][1]
    manifest.update(run_id=run_id, world_size=ranks, n_nodes=max(1, ranks // 8), ranks_per_host=min(8, ranks),
                    batch_size=batch, global_batch_size=batch * ranks)
    manifest["ranks"] = [dict(proto, rank=r, local_rank=r % 8, host=f"node{r // 8}", pid=10_000 + r)
                         for r in range(ranks)]
    manifest["config"] = dict(manifest.get("config") or {}, np=ranks, batch_size=batch)
    (out / "run.json").write_text(json.dumps(manifest, indent=1))
    trace, epochs = _longer((src / "rank-00001.trace.json").read_text(),
                            (src / "rank-00001.epochs.jsonl").read_text(), copies)
    (out / "torch_profiler").mkdir()
    head, body = profiler
    for r in range(ranks):
        t = (trace.replace('"rank 1 @ vm"', f'"rank {r} @ node{r // 8}"')
             .replace('"rank":1,"local_rank":1,"host":"vm"', f'"rank":{r},"local_rank":{r % 8},"host":"node{r // 8}"'))
        (out / f"rank-{r:05d}.trace.json").write_text(t)
        (out / f"rank-{r:05d}.epochs.jsonl").write_text(epochs.replace('{"rank": 1,', f'{{"rank": {r},'))
        with open(out / "torch_profiler" / f"node{r // 8}_{10_000 + r}.pt.trace.json.gz", "wb") as fh:
            fh.write(gzip.compress(_rank_head(head, r, ranks), compresslevel=6))
            fh.write(body)
    for name in ("samples-vm.csv", "stdout.log", "stderr.log"):
        shutil.copy(src / name, out / name)
    return {"run_id": run_id, "status": "ok", "exit_code": 0,
            "config": {"backend": "ddp-gloo", "framework": "ddp", "np": ranks, "batch_size": batch,
                       "repeat": 1, "vary": {}, "experiment": "large"}}


def make_experiment(workdir: Path, runs: int, ranks: int, source: Path, copies: int = 1) -> Path:
    """The experiment directory (made anew); each rank trained ``copies`` times as long as
    the captured run (:func:`_longer`)."""
    exp = workdir / f"large_{runs}x{ranks}x{copies}"
    if exp.exists():
        shutil.rmtree(exp)
    exp.mkdir(parents=True)
    meta = json.loads((TEMPLATE / "experiment.json").read_text())
    profiler = _profiler_parts(source)
    listed = []
    for k in range(runs):
        batch = (50, 100, 200, 400)[k % 4]
        run_id = f"ddp-gloo_np{ranks}_bs{batch}_r{k // 4 + 1}"
        listed.append(_run(exp / run_id, run_id, ranks, batch, profiler, copies))
    meta.update(name=exp.name, runs=listed)
    (exp / "experiment.json").write_text(json.dumps(meta, indent=1))
    return exp


def _text(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _tree_rss_kib(pid: int) -> tuple[int, int]:
    """``(VmHWM of pid, summed VmRSS of pid and its descendants)`` in KiB."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(_text(f"/proc/{d}/stat").rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    hwm, total, todo = 0, 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            status = _text(f"/proc/{p}/status")
        except OSError:
            continue
        rss = re.search(r"VmRSS:\s+(\d+)", status)
        total += int(rss.group(1)) if rss else 0
        if p == pid:
            m = re.search(r"VmHWM:\s+(\d+)", status)
            hwm = int(m.group(1)) if m else 0
    return hwm, total


def run_report(exp: Path, out: Path, cache: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), SCALESCOPE_CACHE=str(cache), SCALESCOPE_PROGRESS="0")
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "analysis.cli", "report", str(exp), "--out", str(out),
                             "--no-static"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    peak = {"hwm": 0, "tree": 0}

    def sample() -> None:
        while proc.poll() is None:
            hwm, tree = _tree_rss_kib(proc.pid)
            peak["hwm"], peak["tree"] = max(peak["hwm"], hwm), max(peak["tree"], tree)
            time.sleep(0.05)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    log, _ = proc.communicate()
    elapsed = time.perf_counter() - t
    watcher.join()
    return {"s": elapsed, "rc": proc.returncode, "report_peak_mib": peak["hwm"] / 1024,
            "tree_peak_mib": peak["tree"] / 1024, "log_tail": log.strip().splitlines()[-5:]}


def time_metrics(exp: Path, rounds: int) -> dict:
    """CPU seconds (best of ``rounds``) of the report's two slowest metrics on the
    experiment's events, read once in this process."""
    import warnings

    sys.path.insert(0, str(ROOT))
    from analysis import metrics as M
    from analysis.runset import RunSet

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the widened manifests' ranks_per_host
        rs = RunSet.from_dirs(exp)
        events = rs.events
    out = {"events": len(events)}
    for name, call in (("time_breakdown(level='step')", lambda: M.time_breakdown(events, level="step")),
                       ("step_table", lambda: M.step_table(events, runs=rs.usable_runs(), epochs=rs.epochs))):
        best = float("inf")
        for _ in range(rounds):
            t = time.process_time()
            call()
            best = min(best, time.process_time() - t)
        out[name] = best
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--source", default="kineto/hta__nccl_data.json.gz")
    ap.add_argument("--copies", type=int, default=1,
                    help="each rank trains this many times as long as the captured run (longer traces)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "scalescope-large")
    ap.add_argument("--metrics", action="store_true",
                    help="no report: CPU time of time_breakdown and step_table on the events")
    ap.add_argument("--rounds", type=int, default=3, help="with --metrics: rounds, the best is printed")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    exp = make_experiment(args.workdir, args.runs, args.ranks, CORPUS / args.source, args.copies)
    size = sum(f.stat().st_size for f in exp.rglob("*") if f.is_file())
    print(f"# machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"# experiment {exp}: {args.runs} runs x {args.ranks} ranks x {args.copies} copies, {size / 1e6:.0f} MB on disk "
          f"(made in {time.perf_counter() - t:.0f} s)")
    print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    if args.metrics:
        m = time_metrics(exp, args.rounds)
        print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"| metric on {m.pop('events'):,} events | CPU s (best of {args.rounds}) |\n|---|---|")
        print("\n".join(f"| {k} | {v:.2f} |" for k, v in m.items()))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        r = run_report(exp, Path(tmp) / "report", Path(tmp) / "cache")
    print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\n".join(f"#   {line}" for line in r.pop("log_tail")))
    print()
    print("| experiment | exit code | wall (s) | peak RSS, report process (MiB) | peak RSS, all its processes (MiB) |")
    print("|---|---|---|---|---|")
    print(f"| {args.runs} runs x {args.ranks} ranks x {args.copies} copies, {size / 1e6:.0f} MB | {r['rc']} | {r['s']:.0f} | "
          f"{r['report_peak_mib']:.0f} | {r['tree_peak_mib']:.0f} |")
    return r["rc"]


if __name__ == "__main__":
    raise SystemExit(main())
