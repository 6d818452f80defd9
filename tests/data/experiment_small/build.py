"""Writes this hand-built experiment directory (run once by hand; the files are committed).

Every number is chosen so the answers can be worked out on paper: see README.md.
Run from the repository root: ``python tests/data/experiment_small/build.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
T0_US = 1_763_820_000_000_000  # 2025-11-22T14:00:00Z in µs
DATASET = 40
EPOCHS = 2

# run_id: (framework, backend, np, hosts, batch, {phase: ms}, other_ms, repeat, val_metric per epoch)
RUNS = {
    "none_np1_bs10_r1": ("none", None, 1, ["node1"], 10,
                         {"data": 1, "forward": 2, "backward": 4, "optimizer": 1}, 2, 1, [0.5, 0.7]),
    "none_np1_bs20_r1": ("none", None, 1, ["node1"], 20,
                         {"data": 2, "forward": 4, "backward": 8, "optimizer": 1}, 3, 1, [0.4, 0.6]),
    "horovod-gloo_np1_bs10_r1": ("horovod", "gloo", 1, ["node1"], 10,
                                 {"data": 1, "forward": 2, "backward": 4, "sync": 1.5, "optimizer": 1}, 2, 1,
                                 [0.5, 0.7]),
    "horovod-gloo_np2_bs10_r1": ("horovod", "gloo", 2, ["node1"], 10,
                                 {"data": 1, "forward": 2, "backward": 4, "sync": 3, "optimizer": 1}, 2, 1,
                                 [0.45, 0.65]),
    "horovod-gloo_np2_bs10_r2": ("horovod", "gloo", 2, ["node1"], 10,
                                 {"data": 1, "forward": 2, "backward": 4, "sync": 4, "optimizer": 1}, 2, 2,
                                 [0.45, 0.65]),
    "horovod-gloo_np4_bs10_r1": ("horovod", "gloo", 4, ["node1", "node2"], 10,
                                 {"data": 1, "forward": 2, "backward": 4, "sync": 5, "optimizer": 1}, 2, 1,
                                 [0.4, 0.6]),
}
FAILED = "horovod-gloo_np8_bs10_r1"
FAILED_TAIL = "Traceback (most recent call last):\nRuntimeError: Gloo connectFullMesh failed: Connection refused"


def us(x: float) -> float:
    return round(x, 3)


def manifest(run_id, fw, backend, np_, hosts, batch, repeat, start_us, end_us, status="ok"):
    per_host = len([0 for _ in range(np_)]) // len(hosts)
    rph = {h: list(range(i * per_host, (i + 1) * per_host)) for i, h in enumerate(hosts)}
    ranks = [{"rank": r, "local_rank": r % per_host, "host": hosts[r // per_host], "pid": 1000 + r,
              "device": None, "clock": {"offset_ns": 0}} for r in range(np_)]
    label = "none" if fw == "none" else f"{fw}-{backend}"
    return {
        "format": "scalescope.run", "format_version": 1, "run_id": run_id, "status": status,
        "exit_code": 0 if status == "ok" else None,
        "start_time": f"2025-11-22T14:00:{int((start_us - T0_US) / 1e6):02d}+00:00",
        "end_time": None if end_us is None else f"2025-11-22T14:00:{int((end_us - T0_US) / 1e6):02d}+00:00",
        "world_size": np_, "n_nodes": len(hosts), "ranks_per_host": rph, "ranks": ranks,
        "framework": fw, "backend": backend,
        "horovod": {"controller": backend, "tensor_operation": "gloo", "version": "0.28.1"} if fw == "horovod" else None,
        "versions": {"python": "3.11", "torch": "2.13.0", "cuda": None, "horovod": "0.28.1" if fw == "horovod" else None,
                     "nccl": None, "mpi": None, "scalescope": "0.1.0"},
        "gpu": None, "batch_size": batch, "global_batch_size": batch * np_, "learning_rate": 0.01 * np_,
        "lr_scaling": "linear", "epochs": EPOCHS, "dataset_size": DATASET, "n_params": 1000,
        "command": ["python", "examples/strain_stress.py"], "slurm": None,
        "sampler": {"kind": "cpu", "interval_s": 0.01, "nvml_unavailable_reason": "no NVIDIA driver"},
        "config": {"backend": label, "np": np_, "batch_size": batch, "repeat": repeat, "vary": {}},
        "tags": {}, "clock": {"reference_rank": 0, "offsets_ns": {str(r): 0 for r in range(1, np_)}},
        "profilers": {},
    }


def trace_events(rank, host, phases, other_ms, steps_per_epoch, start_us):
    ev = [
        {"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank} @ {host}"}},
        {"name": "thread_name", "ph": "M", "pid": rank, "tid": 7, "args": {"name": "MainThread"}},
        {"name": "scalescope_clock", "ph": "M", "pid": rank,
         "args": {"rank": rank, "local_rank": rank % 2, "host": host, "wall_ns": start_us * 1000,
                  "mono_ns": 5_000_000_000, "format_version": 1}},
    ]
    step_ms = sum(phases.values()) + other_ms
    t = start_us
    step = 0
    for epoch in range(EPOCHS):
        epoch_start = t
        for _ in range(steps_per_epoch):
            ev.append({"name": "step", "cat": "phase", "ph": "X", "ts": us(t), "dur": us(step_ms * 1000),
                       "pid": rank, "tid": 7, "args": {"step": step, "epoch": epoch}})
            p = t
            for name, ms in phases.items():
                ev.append({"name": name, "cat": "phase", "ph": "X", "ts": us(p), "dur": us(ms * 1000),
                           "pid": rank, "tid": 7, "args": {"step": step, "epoch": epoch}})
                p += ms * 1000
            t += step_ms * 1000
            step += 1
        ev.append({"name": "epoch", "cat": "phase", "ph": "X", "ts": us(epoch_start), "dur": us(t - epoch_start),
                   "pid": rank, "tid": 7, "args": {"epoch": epoch}})
    return ev, t


def write_trace(path, events):
    with open(path, "w") as fh:
        fh.write("[\n")
        for e in events:
            fh.write(json.dumps(e) + ",\n")
        rank = events[0]["pid"]
        n = sum(1 for e in events if e["ph"] != "M")
        end = {"name": "scalescope_end", "ph": "M", "pid": rank, "tid": 0,
               "args": {"wall_ns": 0, "status": "ok", "n_events": n}}
        fh.write(json.dumps(end, separators=(",", ":")) + "\n]\n")


def horovod_timeline(start_us, steps):
    """Two tensors fused into one allreduce per step, starting 6 ms into each 13 ms step."""
    recs = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros": start_us}},
            {"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}}]
    for pid, tensor in ((1, "allreduce.grad_a"), (2, "allreduce.grad_b")):
        recs.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": tensor}})
        recs.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}})
    body = []
    for k in range(steps):
        s = k * 13_000  # µs since the timeline started (= the run's first step)
        # grad_a: rank 0 ready at 6.0 ms, rank 1 at 6.4 ms; grad_b: rank 1 at 6.1, rank 0 at 6.2
        for pid, ticks in ((1, (("0", 6000), ("1", 6400))), (2, (("1", 6100), ("0", 6200)))):
            body.append({"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": s + 6000, "pid": pid})
            for rank, ts in ticks:
                body.append({"ph": "X", "name": rank, "ts": s + ts, "pid": pid, "dur": 0})
            body.append({"ph": "E", "ts": s + ticks[-1][1], "pid": pid})
        for pid in (1, 2):
            body.append({"ph": "B", "name": "ALLREDUCE", "ts": s + 6500, "pid": pid})
        for name, b, e in (("MEMCPY_IN_FUSION_BUFFER", 6500, 7000), ("GLOO_ALLREDUCE", 7000, 9500),
                           ("MEMCPY_OUT_FUSION_BUFFER", 9500, 9800)):
            for pid in (1, 2):  # the fusion duplicate: the same activity for every fused tensor
                body.append({"ph": "B", "name": name, "ts": s + b, "pid": pid})
                body.append({"ph": "E", "ts": s + e, "pid": pid})
        for pid in (1, 2):
            body.append({"ph": "E", "ts": s + 9800, "pid": pid, "args": {"dtype": "float32", "shape": "[500]"}})
    return recs + body


def main() -> None:
    entries = []
    for i, (run_id, (fw, backend, np_, hosts, batch, phases, other, repeat, vals)) in enumerate(RUNS.items()):
        d = HERE / run_id
        d.mkdir(exist_ok=True)
        start = T0_US + i * 10_000_000
        steps_per_epoch = DATASET // (batch * np_)
        step_ms = sum(phases.values()) + other
        epoch_s = round(steps_per_epoch * step_ms / 1000, 6)
        per_host = np_ // len(hosts)
        end = start
        for rank in range(np_):
            host = hosts[rank // per_host]
            ev, end = trace_events(rank, host, phases, other, steps_per_epoch, start)
            write_trace(d / f"rank-{rank:05d}.trace.json", ev)
            with open(d / f"rank-{rank:05d}.epochs.jsonl", "w") as fh:
                for epoch in range(EPOCHS):
                    fh.write(json.dumps({
                        "rank": rank, "epoch": epoch, "epoch_time_s": epoch_s, "samples": DATASET // np_,
                        "train_loss": round(1.0 - 0.2 * epoch, 3), "val_loss": round(0.9 - 0.2 * epoch, 3),
                        "val_metric": vals[epoch], "peak_mem_mib": 300.0 if rank == 0 else 250.0,
                        "peak_mem_kind": "rss",
                        "wall_ns": int((start + (epoch + 1) * epoch_s * 1e6) * 1000)}) + "\n")
        for h_i, host in enumerate(hosts):
            rows = ["ts_ns,host,cpu_core,rank,cpu_util_pct,rss_mib"]
            for k in range(3):
                ts = (start + k * 10_000) * 1000
                rows.append(f"{ts},{host},,,{50 * per_host},")
                for r in range(h_i * per_host, (h_i + 1) * per_host):
                    rows.append(f"{ts},{host},,{r},95.0,{300.0 if r == 0 else 250.0}")
            (d / f"samples-{host}.csv").write_text("\n".join(rows) + "\n")
        if run_id == "horovod-gloo_np2_bs10_r1":
            (d / "horovod_timeline.json").write_text(
                "[\n" + ",\n".join(json.dumps(r) for r in horovod_timeline(start, EPOCHS * steps_per_epoch)) + "\n]\n")
        (d / "run.json").write_text(json.dumps(manifest(run_id, fw, backend, np_, hosts, batch, repeat, start, end),
                                               indent=1) + "\n")
        (d / "stdout.log").write_text("epoch 0 done\nepoch 1 done\n")
        (d / "stderr.log").write_text("")
        label = "none" if fw == "none" else f"{fw}-{backend}"
        entries.append({"run_id": run_id, "status": "ok", "exit_code": 0,
                        "config": {"backend": label, "np": np_, "batch_size": batch, "repeat": repeat, "vary": {}},
                        "wall_s": 3.0 + np_})
    d = HERE / FAILED
    d.mkdir(exist_ok=True)
    start = T0_US + len(RUNS) * 10_000_000
    (d / "run.json").write_text(json.dumps(manifest(FAILED, "horovod", "gloo", 8, ["node1", "node2", "node3", "node4"],
                                                    10, 1, start, None, status="running"), indent=1) + "\n")
    (d / "stderr.log").write_text(FAILED_TAIL + "\n")
    (d / "stdout.log").write_text("")
    entries.append({"run_id": FAILED, "status": "failed", "exit_code": 1,
                    "config": {"backend": "horovod-gloo", "np": 8, "batch_size": 10, "repeat": 1, "vary": {}},
                    "wall_s": 2.5, "log_tail": FAILED_TAIL})
    exp = {"format": "scalescope.experiment", "format_version": 1, "name": "experiment_small",
           "created": "2025-11-22T14:00:00+00:00", "command": ["scalescope", "sweep", "--np", "1,2,4,8"],
           "script": ["python", "examples/strain_stress.py", "--epochs", "2"], "runs": entries}
    (HERE / "experiment.json").write_text(json.dumps(exp, indent=1) + "\n")


if __name__ == "__main__":
    main()
