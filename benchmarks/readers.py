"""Reader benchmark: our Horovod and Kineto readers against the typed msgspec decode floor,
stdlib json, HTA and the parse cache, on real traces scaled up and on generated ones.

Files
-----
kineto_real, horovod_real   a real trace of the shared corpus (``../shared/corpus``; see
                            :data:`REAL`) repeated up to the requested size: each copy of
                            its events shifted after the last in time, with ``ts`` and the ids
                            that link records (flow ``id``, ``correlation``, ``External id``,
                            ``Ev Idx``, ``Record function id``) moved so that no two copies
                            share one; the text (whitespace, key order, number formats,
                            head, tail, termination) is the original's. ``horovod_real`` is
                            unterminated, as the original (``},`` at the end, no ``]``).
kineto_real2, horovod_real2 two more real traces of the same formats (``--formats``)
kineto, horovod             this script's own generators (:func:`generate_kineto`,
                            :func:`generate_horovod`)

The scaled files are made in ``--workdir`` at benchmark time (never kept in the repository).

Methods (each in a **fresh subprocess**, so peak RSS is per method)
-------
ours      ``analysis.readers.<fmt>.read(path)`` (tidy event frame, no cache)
floor     a typed ``msgspec`` decode of the whole file into Structs holding the readers'
          fields (:func:`typed_decoder`, :func:`floor_decode`), no frame
untyped   ``msgspec.json.decode(bytes)`` into dicts and lists
json      ``json.loads`` + ``pandas.DataFrame(events)`` (an untidy frame)
hta       HTA's ``parse_trace_dataframe`` (Kineto only; JSON backend, its default)
cached    ``analysis.read(path)`` in a fresh process after another process read the file
          once (Parquet cache); the first load is reported beside it

Each of ``--repeat`` rounds runs every method once, interleaved, so that a shared machine's
load falls on all of them alike; the table gives medians with the range, of the wall time and
of the process' CPU time (all its threads; on a loaded machine the steadier of the two).
Imports (numpy, pandas, msgspec, the reader modules, pyarrow, HTA) happen before the timer.

Memory columns: *peak RSS / file* is the process' ``ru_maxrss`` (interpreter and imports,
about 140 MiB, included) over the file size; *frame* is ``DataFrame.memory_usage(deep=True)``
of the result; *held* is the RSS growth with the result alive after the read, and *excess* =
peak RSS minus that: the transient memory of the read beyond its result.

Usage::

    .venv/bin/python benchmarks/readers.py                       # 100 MB of each, ours + floor
    .venv/bin/python benchmarks/readers.py --methods ours floor json hta cached --repeat 3
    .venv/bin/python benchmarks/readers.py --formats kineto_real2 horovod_real2

Files go to ``--workdir`` (default ``$TMPDIR/scalescope-bench``) and are reused when they
already have about the requested size (``--regenerate`` to force).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------
# generators


def generate_horovod(path: Path, target_bytes: int, *, seed: int = 0, n_ranks: int = 8) -> int:
    """A Horovod >= 0.20.1 style timeline of about ``target_bytes``. Returns bytes written."""
    rng = random.Random(seed)
    n_tensors = 160
    with open(path, "w") as fh:
        fh.write("[\n")
        fh.write('{"name": "process_name", "ph": "M", "pid": 0, "args": '
                 '{"start_time_since_epoch_in_micros":1700000000000000}},\n')
        fh.write('{"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}},\n')
        for p in range(1, n_tensors + 1):
            fh.write(f'{{"name": "process_name", "ph": "M", "pid": {p}, "args": '
                     f'{{"name": "DistributedAdam_Allreduce/layer{p}/grad_0"}}}},\n')
            fh.write(f'{{"name": "process_sort_index", "ph": "M", "pid": {p}, "args": '
                     f'{{"sort_index": {p}}}}},\n')
        ts = 1000
        written = fh.tell()
        cycle = 0
        while written < target_bytes:
            cycle += 1
            parts = [f'{{"ph": "i", "name": "CYCLE_START", "ts": {ts}, "s": "g"}}']
            for p in range(1, n_tensors + 1):
                t = ts + rng.randint(1, 50)
                parts.append(f'{{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": {t}, "pid": {p}}}')
                if cycle <= 2:  # ticks only while uncached, as Horovod does
                    for r in range(n_ranks):
                        t += rng.randint(0, 3)
                        parts.append(f'{{"ph": "X", "name": "{r}", "ts": {t}, "pid": {p}, "dur": 0}}')
                t += rng.randint(1, 20)
                parts.append(f'{{"ph": "E", "ts": {t}, "pid": {p}}}')
                t += 2
                parts.append(f'{{"ph": "B", "name": "ALLREDUCE", "ts": {t}, "pid": {p}}}')
                for act in ("QUEUE", "MEMCPY_IN_FUSION_BUFFER", "NCCL_ALLREDUCE",
                            "MEMCPY_OUT_FUSION_BUFFER"):
                    parts.append(f'{{"ph": "B", "name": "{act}", "ts": {t}, "pid": {p}}}')
                    t += rng.randint(1, 400)
                    parts.append(f'{{"ph": "E", "ts": {t}, "pid": {p}}}')
                t += 1
                parts.append(f'{{"ph": "E", "ts": {t}, "pid": {p}, "args": {{"dtype": "float32", '
                             f'"shape": "[{64 * p}, 1024]"}}}}')
            ts += 5000
            fh.write(",".join(parts))
            fh.write(",\n")
            written = fh.tell()
        fh.write(f'{{"ph": "i", "name": "CYCLE_START", "ts": {ts}, "s": "g"}}\n]\n')
        return fh.tell()


def generate_kineto(path: Path, target_bytes: int, *, seed: int = 0, rank: int = 0) -> int:
    """A Kineto (torch >= 2.4 style) trace of about ``target_bytes``. Returns bytes written.

    Relative ``ts`` near 4.4e12 µs with 3 decimals (as in real traces, ~52 days after the
    base), CPU ops with shapes, runtime launches, kernels, NCCL kernels with collective
    metadata, memcpys, ac2g flows and ProfilerStep ranges.
    """
    rng = random.Random(seed)
    pid, tid = 2910249, 2919752
    base_ns = 1711964646000000000
    head = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85100000000,
                              "computeMajor": 8, "computeMinor": 0, "numSms": 108}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 8, "pg_count": 1,
                            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                           "backend_config": "cuda:nccl", "pg_size": 8,
                                           "ranks": list(range(8))}],
                            "nccl_version": "2.21.5"},
        "record_shapes": 1,
    }
    ops = ["aten::linear", "aten::addmm", "aten::relu", "aten::mul", "aten::add_",
           "aten::empty", "aten::copy_", "aten::to", "aten::view", "aten::t"]
    kernels = ["void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
               "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
               "at::detail::Array<char*, 3>)",
               "ampere_sgemm_128x64_tn", "void at::native::(anonymous namespace)::"
               "vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, "
               "float const*, float*, float*, float*)"]
    with open(path, "w") as fh:
        body = json.dumps(head, indent=2)[:-2]
        fh.write(body + ',\n  "displayTimeUnit": "ms",\n'
                 f'  "baseTimeNanoseconds": {base_ns},\n  "traceEvents": [\n')
        ts_ns = 4458676388068751  # relative ns: ts = 4458676388068.751 us
        ext = 1000
        corr = 50000
        step = 1
        first = True
        written = fh.tell()
        while written < target_bytes:
            parts = []
            step_start = ts_ns
            for _ in range(400):
                ext += 1
                corr += 1
                d = rng.randint(5_000, 90_000)
                t0 = ts_ns
                parts.append(
                    f'  {{"ph": "X", "cat": "cpu_op", "name": "{rng.choice(ops)}", "pid": {pid}, '
                    f'"tid": {tid}, "ts": {t0 / 1000:.3f}, "dur": {d / 1000:.3f}, "args": {{'
                    f'"External id": {ext}, "Record function id": 0, "Sequence number": {ext * 3}, '
                    f'"Fwd thread id": 0, "Ev Idx": {ext}, "Input Dims": [[{rng.randint(1, 4096)}, '
                    f'1024], [1024]], "Input type": ["float", "float"], "Input Strides": '
                    f'[[1024, 1], [1]], "Concrete Inputs": ["", ""]}}}}')
                t1 = t0 + rng.randint(500, 3000)
                parts.append(
                    f'  {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, '
                    f'"tid": {tid}, "ts": {t1 / 1000:.3f}, "dur": {rng.randint(2000, 9000) / 1000:.3f}, '
                    f'"args": {{"External id": {ext}, "cbid": 211, "correlation": {corr}}}}}')
                parts.append(f'  {{"ph": "s", "id": {corr}, "pid": {pid}, "tid": {tid}, '
                             f'"ts": {t1 / 1000:.3f}, "cat": "ac2g", "name": "ac2g"}}')
                t2 = t1 + rng.randint(5000, 50000)
                if rng.random() < 0.05:
                    n = rng.randint(1000, 10_000_000)
                    kname = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
                    extra = (f', "Collective name": "allreduce", "In msg nelems": {n}, '
                             f'"Out msg nelems": {n}, "Group size": 8, "dtype": "Float", '
                             f'"In split size": "[]", "Out split size": "[]", '
                             f'"Process Group Name": "0", "Process Group Description": '
                             f'"default_pg", "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"')
                    stream = 40
                elif rng.random() < 0.05:
                    kname = "Memcpy HtoD (Pinned -> Device)"
                    extra = None
                    stream = 7
                else:
                    kname = rng.choice(kernels)
                    extra = ""
                    stream = 7
                kd = rng.randint(1000, 400000)
                if extra is None:
                    parts.append(
                        f'  {{"ph": "X", "cat": "gpu_memcpy", "name": "{kname}", "pid": 0, '
                        f'"tid": {stream}, "ts": {t2 / 1000:.3f}, "dur": {kd / 1000:.3f}, "args": {{'
                        f'"External id": {ext}, "device": 0, "context": 1, "stream": {stream}, '
                        f'"correlation": {corr}, "bytes": {rng.randint(4, 1 << 24)}, '
                        f'"memory bandwidth (GB/s)": 12.5}}}}')
                else:
                    parts.append(
                        f'  {{"ph": "X", "cat": "kernel", "name": "{kname}", "pid": 0, '
                        f'"tid": {stream}, "ts": {t2 / 1000:.3f}, "dur": {kd / 1000:.3f}, "args": {{'
                        f'"External id": {ext}, "queued": 0, "device": 0, "context": 1, '
                        f'"stream": {stream}, "correlation": {corr}, "registers per thread": 32, '
                        f'"shared memory": 0, "blocks per SM": 1.5, "warps per SM": 6.0, '
                        f'"grid": [160, 1, 1], "block": [128, 1, 1], '
                        f'"est. achieved occupancy %": 9{extra}}}}}')
                parts.append(f'  {{"ph": "f", "id": {corr}, "pid": 0, "tid": {stream}, '
                             f'"ts": {t2 / 1000:.3f}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}')
                ts_ns = t0 + d + rng.randint(100, 2000)
            parts.append(
                f'  {{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", '
                f'"pid": {pid}, "tid": {tid}, "ts": {step_start / 1000:.3f}, '
                f'"dur": {(ts_ns - step_start) / 1000:.3f}, "args": {{"External id": {ext}}}}}')
            step += 1
            fh.write(("" if first else ",\n") + ",\n".join(parts))
            first = False
            written = fh.tell()
        fh.write(',\n  {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", '
                 f'"ts": {ts_ns / 1000:.3f}}}\n  ],\n  "traceName": "{path}"\n}}\n')
        return fh.tell()


# --------------------------------------------------------------------------------------
# real traces, scaled up

CORPUS = ROOT.parent / "shared" / "corpus"
#: Real traces of each JSON format (``../shared/corpus``), scaled up by :func:`scale_real`.
REAL = {
    "kineto_real": "kineto/hta__negative_queue_length_rank0.json.gz",
    "horovod_real": "horovod_timeline/tflogs-72f32f9__horovod_timeline.json",
    "kineto_real2": "kineto/hta__nccl_data.json.gz",
    "horovod_real2": "horovod_timeline/alcf__timeline_gpu_n1.json",
}
#: Numeric fields shifted per copy: the time, and the ids that link records (flows,
#: correlations, external ids) so that no two copies share one.
_SHIFTED = re.compile(rb'"(ts|External id|id|correlation|Ev Idx|Record function id)":\s*(-?\d+)')


def _events_span(body: bytes) -> slice:
    """The slice of ``body`` (a whole trace) holding its event records: from after the
    event array's ``[`` to the end of its last record (no trailing comma)."""
    key = body.find(b'"traceEvents"')
    lo = body.index(b"[", key if key >= 0 else 0) + 1
    if key >= 0:  # the array's end, found by decoding it (later keys may hold "]")
        _, hi = json.JSONDecoder().raw_decode(body[lo - 1 :].decode())
        hi = lo - 1 + len(body[lo - 1 :].decode()[:hi].encode()) - 1
    else:
        end = body.rstrip()
        hi = len(end) - 1 if end.endswith(b"]") else len(end)  # unterminated: to the end
    inner = body[lo:hi].rstrip().rstrip(b",").rstrip()
    return slice(lo, lo + len(inner))


def scale_real(src: Path, path: Path, target_bytes: int, *, rank: int | None = None) -> int:
    """A real trace repeated up to about ``target_bytes``: every copy of its events shifted
    after the last by the trace's span, with ``ts`` and the ids of :data:`_SHIFTED` moved
    so that no two copies share one; the text (whitespace, key order, number formats,
    head, tail and termination) is the original's; with ``rank``, a Kineto trace's
    ``distributedInfo.rank`` says that rank. Returns bytes written."""
    import gzip

    raw = gzip.decompress(src.read_bytes()) if src.suffix == ".gz" else src.read_bytes()
    span = _events_span(raw)
    events = raw[span]
    ts = [int(m.group(2)) for m in _SHIFTED.finditer(events) if m.group(1) == b"ts"]
    ids = [int(m.group(2)) for m in _SHIFTED.finditer(events) if m.group(1) != b"ts"]
    t_shift = (max(ts) - min(ts)) + 1000 if ts else 0  # a 1 ms gap between copies
    id_shift = (max(ids) + 1) if ids else 0
    copies = max(1, round((target_bytes - len(raw) + len(events)) / (len(events) + 2)))

    def shifted(k: int) -> bytes:
        if k == 0:
            return events

        def sub(m: re.Match) -> bytes:
            by = t_shift * k if m.group(1) == b"ts" else id_shift * k
            return b'"' + m.group(1) + b'": ' + str(int(m.group(2)) + by).encode()

        return _SHIFTED.sub(sub, events)

    head = raw[: span.start]
    if rank is not None and b'"distributedInfo"' in head:
        at = head.index(b'"distributedInfo"')
        head = head[:at] + re.sub(rb'"rank":\s*\d+', b'"rank": %d' % rank, head[at:], count=1)
    with open(path, "wb") as fh:
        fh.write(head)
        for k in range(copies):
            if k:
                fh.write(b",\n")
            fh.write(shifted(k))
        fh.write(raw[span.stop :])  # the original's end: closed, or unterminated
        return fh.tell()


# --------------------------------------------------------------------------------------
# the floor: a typed msgspec decode into Structs holding the fields the readers use


class KArgs(msgspec.Struct, gc=False):
    correlation: Any = None
    stream: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    dtype: Any = None
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    nbytes: Any = msgspec.field(default=None, name="bytes")
    input_dims: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input type")


class KEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: int | float | None = None
    dur: int | float | None = None
    args: KArgs | None = None


class KTrace(msgspec.Struct, gc=False):
    traceEvents: list[KEvent] = []  # the format's key; msgspec copies a default list


class HArgs(msgspec.Struct, gc=False):
    name: str | None = None
    start_time_since_epoch_in_micros: int | None = None
    dtype: str | None = None
    shape: str | None = None


class HEvent(msgspec.Struct, gc=False):
    ph: str = ""
    name: str | None = None
    ts: float = float("nan")
    dur: float | None = None
    pid: int = -1
    args: HArgs | None = None


def typed_decoder(fmt: str) -> msgspec.json.Decoder:
    """A msgspec decoder into typed Structs holding the fields the reader uses (the
    reader's own Struct layout), for the decode floor: Python objects, no frame."""
    return msgspec.json.Decoder(KTrace if fmt.startswith("kineto") else list[HEvent])


def floor_decode(path: str | Path, fmt: str) -> int:
    """The floor: ``path`` read into one buffer and decoded whole by :func:`typed_decoder`;
    returns the number of records. An unterminated array (Horovod <= 0.20) is closed in
    place (its trailing comma overwritten with ``]``), so no copy of the text is made."""
    size = os.path.getsize(path)
    buf = bytearray(size + 1)
    with open(path, "rb") as fh:
        fh.readinto(memoryview(buf)[:size])
    end = size
    while end and buf[end - 1] in b" \t\r\n":
        end -= 1
    if buf[end - 1 : end] == b",":  # unterminated: "...}," -> "...}]"
        buf[end - 1] = 0x5D
    elif not fmt.startswith("kineto") and buf[end - 1 : end] == b"}":
        buf[end] = 0x5D
        end += 1
    # a view, not a copy (the records' msgspec.Raw fields keep it alive)
    obj = typed_decoder(fmt).decode(memoryview(buf)[:end])
    return len(obj.traceEvents) if hasattr(obj, "traceEvents") else len(obj)


# --------------------------------------------------------------------------------------
# methods (each runs in a fresh interpreter)

_CHILD = r"""
import json, os, resource, sys, time, warnings
warnings.simplefilter("ignore")
method, fmt, path = sys.argv[1], sys.argv[2], sys.argv[3]
kind = fmt.split("_")[0]
import numpy, pandas, msgspec  # imports are not part of the timing
if method in ("ours", "base"):
    import analysis.readers
    from analysis.readers import horovod, kineto
    reader = horovod if kind == "horovod" else kineto
elif method == "hta":
    import logging
    logging.disable(logging.WARNING)
    from hta.common.trace_parser import parse_trace_dataframe
    from hta.configs.parser_config import ParserConfig
elif method == "cached":
    import analysis
    import pyarrow.parquet  # noqa: F401  (pandas imports it lazily on the first read)
    analysis.formats()  # the registry imports every reader module lazily: not timed either
elif method == "floor":
    sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
    from readers import floor_decode
def current_mib():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
def hwm_mib():
    with open("/proc/self/status") as fh:
        return int(fh.read().split("VmHWM:")[1].split()[0]) / 1024
try:  # the imports' own peak (about 200 MiB, above what they keep) must not hide the read's
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    rss_mib = hwm_mib
except OSError:
    def rss_mib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
base = current_mib()
t = time.perf_counter()
c = time.process_time()
extra = {}
if method in ("ours", "base"):
    df = reader.read(path)
    rows = len(df)
elif method == "json":
    with open(path, "rb") as fh:
        text = fh.read().rstrip()
    if not text.endswith((b"]", b"}")):  # unterminated (Horovod <= 0.20)
        text = text.rstrip(b",") + b"]"
    obj = json.loads(text)
    events = obj["traceEvents"] if isinstance(obj, dict) else obj
    df = pandas.DataFrame(events)
    rows = len(df)
elif method == "hta":
    meta, df, sym = parse_trace_dataframe(path, ParserConfig.get_default_cfg())
    rows = len(df)
elif method == "floor":
    rows = floor_decode(path, fmt)
elif method == "untyped":
    with open(path, "rb") as fh:
        obj = msgspec.json.decode(fh.read())
    rows = len(obj["traceEvents"] if isinstance(obj, dict) else obj)
elif method == "cached":  # run twice on one cache dir: first writes, second re-loads
    df = analysis.read(path, format=kind, cache=True)
    rows = len(df)
elapsed = time.perf_counter() - t
cpu = time.process_time() - c
if method in ("ours", "base", "cached"):
    extra["frame_mib"] = float(df.memory_usage(deep=True).sum()) / 2**20
    import analysis.readers._assembly as _assembly
    _assembly.release_freed_memory()  # what the heap still holds of freed temporaries
    extra["after_mib"] = current_mib()  # resident with the frame alive
print(json.dumps({"s": elapsed, "cpu": cpu, "rows": rows, "peak_mib": rss_mib(), "base_mib": base, **extra}))
"""


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - platforms without it
        return "n/a"


#: The checkout whose readers the method ``base`` runs (``--baseline``).
BASELINE: list[Path] = []


def run_method(method: str, fmt: str, path: Path, *, cache_dir: Path) -> dict:
    tree = BASELINE[0] if method == "base" and BASELINE else ROOT
    env = dict(os.environ, PYTHONPATH=str(tree), SCALESCOPE_CACHE=str(cache_dir),
               SCALESCOPE_PROGRESS="0")
    proc = subprocess.run([sys.executable, "-c", _CHILD, method, fmt, str(path)],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _file(workdir: Path, fmt: str, size_mb: float, regenerate: bool) -> Path:
    """The benchmark file of ``fmt`` (generated, or a real trace scaled up) of about
    ``size_mb``, made when missing or of another size."""
    suffix = ".pt.trace.json" if fmt.startswith("kineto") else ".json"
    path = workdir / f"{fmt}_{int(size_mb)}mb{suffix}"
    target = int(size_mb * 1e6)
    if regenerate or not path.exists() or abs(path.stat().st_size - target) > 0.1 * target:
        t = time.perf_counter()
        if fmt in REAL:
            scale_real(CORPUS / REAL[fmt], path, target)
        else:
            (generate_horovod if fmt == "horovod" else generate_kineto)(path, target)
        print(f"# made {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s",
              flush=True)
    return path


def _rounds(method: str, fmt: str, path: Path) -> dict:
    """One run of ``method`` (for the cache: a first load, then two re-loads)."""
    with tempfile.TemporaryDirectory() as cache:
        r1 = run_method(method, fmt, path, cache_dir=Path(cache))
        if method != "cached" or "error" in r1:
            return r1
        runs = [run_method(method, fmt, path, cache_dir=Path(cache)) for _ in range(2)]
        ok = [r for r in runs if "error" not in r]
        if not ok:
            return runs[0]
        best = dict(min(ok, key=lambda x: x["s"]))
        best["first_s"], best["first_cpu"] = r1["s"], r1["cpu"]
        return best


def _summary(runs: list[dict]) -> dict:
    """Median, fastest and slowest time (wall and CPU) and the largest peak RSS."""
    ok = [x for x in runs if "error" not in x]
    if not ok:
        return runs[0]
    r = dict(ok[0])
    for key in ("s", "cpu"):
        v = sorted(x[key] for x in ok)
        r[key], r[key + "_min"], r[key + "_max"] = statistics.median(v), v[0], v[-1]
    r["peak_mib"] = max(x["peak_mib"] for x in ok)
    if all("after_mib" in x for x in ok):
        r["excess_mib"] = max(x["peak_mib"] - x["after_mib"] for x in ok)
    if "first_s" in r:
        r["first_s"] = statistics.median(x["first_s"] for x in ok)
    return r


_LABEL = {"ours": "ours (tidy frame)", "base": "ours, --baseline checkout", "json": "json + pandas.DataFrame",
          "hta": "HTA parse_trace_dataframe", "floor": "typed msgspec decode (floor)",
          "untyped": "msgspec.json.decode, untyped", "cached": "analysis.read, cached re-load"}


def _table(rows: list) -> None:
    print("| file | method | wall s, median (min-max) | CPU s, median (min-max) | MB/s (CPU) | rows | "
          "peak RSS (MiB) | peak RSS / file | frame (MiB) | held (MiB) | excess (MiB) | "
          "vs floor (CPU) | vs floor (wall) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for fmt, size, results in rows:
        floor = results.get("floor", {})
        for method, r in results.items():
            name = f"{fmt} {size / 1e6:.0f} MB"
            if "error" in r:
                print(f"| {name} | {method} | error: {r['error'][:60]} |" + " |" * 11)
                continue
            vs_cpu = f"{floor['cpu'] / r['cpu']:.2f}x" if "cpu" in floor and method != "floor" else ""
            vs_wall = f"{floor['s'] / r['s']:.2f}x" if "s" in floor and method != "floor" else ""
            frame = f"{r['frame_mib']:.0f}" if "frame_mib" in r else ""
            held = f"{r['after_mib'] - r['base_mib']:.0f}" if "after_mib" in r else ""
            excess = f"{r['excess_mib']:.0f}" if "excess_mib" in r else ""
            print(f"| {name} | {_LABEL[method]} | {r['s']:.2f} ({r['s_min']:.2f}-{r['s_max']:.2f}) | "
                  f"{r['cpu']:.2f} ({r['cpu_min']:.2f}-{r['cpu_max']:.2f}) | {size / 1e6 / r['cpu']:.0f} | "
                  f"{r['rows']:,} | {r['peak_mib']:.0f} (+{r['peak_mib'] - r['base_mib']:.0f}) | "
                  f"{r['peak_mib'] * 2**20 / size:.2f} | {frame} | {held} | {excess} | {vs_cpu} | {vs_wall} |")
            if method == "cached":
                print(f"| {name} | analysis.read, first load (writes cache) | {r['first_s']:.2f} | | | | | | | | | | |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[100.0])
    ap.add_argument("--formats", nargs="+", default=["kineto_real", "horovod_real", "kineto", "horovod"],
                    help="generated (kineto, horovod) and real traces scaled up: " + ", ".join(REAL))
    ap.add_argument("--methods", nargs="+", default=["ours", "floor"],
                    help="ours, floor, untyped, json, hta, cached, base (with --baseline)")
    ap.add_argument("--baseline", type=Path,
                    help="another checkout (e.g. a `git worktree` of the commit before a change): "
                         "the method 'base' runs its readers, interleaved with this one's")
    ap.add_argument("--workdir", type=Path,
                    default=Path(tempfile.gettempdir()) / "scalescope-bench")
    ap.add_argument("--regenerate", action="store_true")
    ap.add_argument("--repeat", type=int, default=5,
                    help="rounds; in each, every method runs once in a fresh process (interleaved), "
                         "and the medians are reported (the machine may be shared)")
    args = ap.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.baseline:
        BASELINE[:] = [args.baseline.resolve()]
        if "base" not in args.methods:
            args.methods.insert(0, "base")
    print(f"# machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {platform.platform()}")
    print(f"# load average at start: {_loadavg()}", flush=True)
    rows = []
    for size_mb in args.sizes_mb:
        for fmt in args.formats:
            path = _file(args.workdir, fmt, size_mb, args.regenerate)
            methods = [m for m in args.methods if not (m == "hta" and not fmt.startswith("kineto"))]
            runs: dict[str, list] = {m: [] for m in methods}
            for _ in range(max(1, args.repeat)):
                for method in methods:
                    runs[method].append(_rounds(method, fmt, path))
            results = {m: _summary(v) for m, v in runs.items()}
            for m, r in results.items():
                print(f"#   {fmt} {m}: {r}", flush=True)
            rows.append((fmt, path.stat().st_size, results))
    print(f"# load average at end: {_loadavg()}")
    print()
    print("Medians over the rounds (each method once per round, in a fresh process); CPU = the "
          "process' CPU time (all its threads), wall = elapsed.\npeak RSS = ru_maxrss (interpreter "
          "and imports included; in brackets, the growth over the RSS after the imports); held = "
          "RSS growth with the frame alive;\nexcess = peak RSS - that RSS (the transient memory "
          "of the read).\n")
    _table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
