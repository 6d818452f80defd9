"""Parallel reads against the machine's two-process ceiling, measured in the same run.

``analysis.read_many(files, workers=2)`` of ``--files`` real-shaped traces (a real corpus
trace scaled up by ``benchmarks/readers.py``'s :func:`scale_real`, one rank per file) is
compared with ``workers=1``; the **ceiling** is what the machine gives two independent
CPU-bound processes doing the same reading: one process reading every file (results
dropped) against two processes reading half of them each, at once (both start reading when
both have imported; start-up is timed in neither measurement). Then

    speed-up = t(workers=1) / t(workers=2)        ceiling = t(one process) / t(two processes)

and the target is speed-up >= 0.85 x ceiling. The CPU time of everything each way
(``workers=2``: the parent and its workers) is reported too: on a machine shared with other
jobs the wall times say how much of the machine was free, the CPU times what the pool costs
beyond the reading itself. Each of ``--repeat`` rounds runs the four
measurements once, each in a fresh interpreter (imports not timed), in one order; the
ratios are taken within a round and their medians reported (the machine may be shared).
The frames of ``workers=2`` are checked equal to ``workers=1``'s (a hash of every row).

Usage::

    .venv/bin/python benchmarks/parallel_reads.py                  # 8 files of 20 MB, 5 rounds
    .venv/bin/python benchmarks/parallel_reads.py --files 8 --mb 20 --format horovod_real
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from readers import CORPUS, REAL, scale_real  # noqa: E402

_CHILD = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
mode, listing = sys.argv[1], sys.argv[2]
files = json.loads(open(listing).read())
import numpy, pandas, pyarrow, msgspec  # noqa: F401  (not timed)
import analysis
from analysis import parallel
analysis.formats()
sys.path.insert(0, "benchmarks")
if len(sys.argv) > 3:  # started with another process: both read once both are ready
    import os
    open(sys.argv[3] + ".ready." + str(os.getpid()), "w").close()
    while not os.path.exists(sys.argv[3] + ".go"):
        time.sleep(0.005)
t = time.perf_counter()
c = time.process_time()
out = {}
df = None
if mode in ("serial", "pool"):
    df = analysis.read_many(files, cache=False, workers=1 if mode == "serial" else 2)
else:  # "alone": one CPU-bound process reading files, nothing kept or sent
    for f in files:
        analysis.read(f, cache=False)
out["s"] = time.perf_counter() - t
out["cpu"] = time.process_time() - c
if df is not None:  # checked after the clock stopped: the ceiling's processes hash nothing
    out["rows"] = len(df)
    from frame_hashes import frame_hash
    out["hash"] = frame_hash(df)
import resource  # the pool's workers, waited for when it shut down, are the children
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
out["cpu_all"] = out["cpu"] + kids.ru_utime + kids.ru_stime
print(json.dumps(out))
"""


#: The checkout whose ``analysis`` the children import (``--tree``; default this one).
TREE: list[Path] = [ROOT]


def _start(mode: str, files: list[str], tmp: Path, barrier: Path | None = None) -> subprocess.Popen:
    listing = tmp / f"{mode}-{len(files)}-{os.urandom(4).hex()}.json"
    listing.write_text(json.dumps(files))
    env = dict(os.environ, PYTHONPATH=str(TREE[0]), SCALESCOPE_PROGRESS="0")
    extra = [str(barrier)] if barrier is not None else []
    return subprocess.Popen([sys.executable, "-c", _CHILD, mode, str(listing), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(err.strip().splitlines()[-1] if err.strip() else "child failed")
    return json.loads(out.strip().splitlines()[-1])


def _round(files: list[str], tmp: Path) -> dict:
    """One round: workers=1, workers=2, one process alone, two processes at once."""
    r = {"serial": _result(_start("serial", files, tmp)), "pool": _result(_start("pool", files, tmp)),
         "alone": _result(_start("alone", files, tmp))}
    half = len(files) // 2
    barrier = tmp / f"barrier-{os.urandom(4).hex()}"
    both = [_start("alone", files[:half], tmp, barrier), _start("alone", files[half:], tmp, barrier)]
    while len(list(tmp.glob(barrier.name + ".ready.*"))) < 2 and all(p.poll() is None for p in both):
        time.sleep(0.005)  # both imported: the reading starts in both at once
    t = time.perf_counter()
    barrier.with_name(barrier.name + ".go").touch()
    parts = [_result(p) for p in both]
    # from the go to the end of the later one (its reading, not its start-up)
    r["two"] = {"s": time.perf_counter() - t, "parts_s": [p["s"] for p in parts]}
    return r


def make_files(fmt: str, n: int, mb: float, workdir: Path) -> list[Path]:
    """``n`` copies of a real trace scaled to about ``mb``, one rank each (Kineto's
    ``distributedInfo.rank`` set to the file's number), reused when present."""
    workdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = workdir / f"{fmt}_{int(mb)}mb_rank{i}{'.pt.trace' if fmt.startswith('kineto') else ''}.json"
        if not path.exists():
            scale_real(CORPUS / REAL[fmt], path, int(mb * 1e6), rank=i)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--format", default="kineto_real2", choices=sorted(REAL))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "scalescope-parallel")
    ap.add_argument("--tree", type=Path, default=ROOT,
                    help="the checkout whose analysis package is measured (e.g. a worktree of an earlier commit)")
    args = ap.parse_args(argv)
    TREE[0] = args.tree.resolve()
    files = [str(p) for p in make_files(args.format, args.files, args.mb, args.workdir)]
    total = sum(os.path.getsize(f) for f in files)
    print(f"# machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"# analysis from {TREE[0]}")
    print(f"# {len(files)} files of {args.format}, {total / 1e6:.0f} MB in all")
    print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            r = _round(files, Path(tmp))
            r["speedup"] = r["serial"]["s"] / r["pool"]["s"]
            r["ceiling"] = r["alone"]["s"] / r["two"]["s"]
            r["identical"] = r["serial"]["hash"] == r["pool"]["hash"]
            print(f"#   round {i}: workers=1 {r['serial']['s']:.2f} s, workers=2 {r['pool']['s']:.2f} s "
                  f"(speed-up {r['speedup']:.2f}x); one process {r['alone']['s']:.2f} s, two at once "
                  f"{r['two']['s']:.2f} s (ceiling {r['ceiling']:.2f}x; halves {r['two']['parts_s']}); "
                  f"of the ceiling {r['speedup'] / r['ceiling']:.2f}; frames identical: {r['identical']}",
                  flush=True)
            rounds.append(r)
    print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    med = statistics.median
    print()
    print("| measurement | median (min-max) over the rounds |")
    print("|---|---|")
    for label, key in (("workers=1 (s)", lambda r: r["serial"]["s"]), ("workers=2 (s)", lambda r: r["pool"]["s"]),
                       ("one process, every file (s)", lambda r: r["alone"]["s"]),
                       ("two processes at once, half each (s)", lambda r: r["two"]["s"]),
                       ("speed-up, workers=1 / workers=2", lambda r: r["speedup"]),
                       ("ceiling, one process / two at once", lambda r: r["ceiling"]),
                       ("speed-up / ceiling (target >= 0.85)", lambda r: r["speedup"] / r["ceiling"]),
                       ("CPU s of workers=1 (one process)", lambda r: r["serial"]["cpu_all"]),
                       ("CPU s of workers=2 (parent and workers)", lambda r: r["pool"]["cpu_all"]),
                       ("CPU of workers=2 / CPU of workers=1", lambda r: r["pool"]["cpu_all"] / r["serial"]["cpu_all"]),
                       ("CPU s of the parent alone with workers=2", lambda r: r["pool"]["cpu"])):
        v = [key(r) for r in rounds]
        print(f"| {label} | {med(v):.2f} ({min(v):.2f}-{max(v):.2f}) |")
    same = all(r["identical"] for r in rounds)
    print(f"| frames of workers=2 equal to workers=1 | {'yes, every round' if same else 'NO'} |")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
