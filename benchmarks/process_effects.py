"""Do the readers' process-wide memory switches earn their place? (issue 26, rule 7)

``analysis.read`` does two things beyond parsing that reach outside the frame it builds:

* **small pages**: while a frame is built, NumPy's process-wide ``MADV_HUGEPAGE`` hint is
  switched off (``analysis.readers._memory.small_pages``) where the kernel would compact
  memory on the first touch of a marked array;
* **trim**: freed heap memory is handed back to the OS with glibc's ``malloc_trim``
  (``release_freed_memory``) every few MiB while the frame's columns are built.

Each variant reads the same generated file in a fresh interpreter, ``cache=False``, with
one of them turned into a no-op, interleaved over ``--repeat`` rounds (the machine may be
shared: compare within a round). Reported: the best and the median wall time, and the
largest peak RSS (``ru_maxrss``).

    .venv/bin/python benchmarks/process_effects.py --size-mb 200 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from readers import generate_horovod, generate_kineto  # noqa: E402

_CHILD = r"""
import contextlib, json, resource, sys, time, warnings
warnings.simplefilter("ignore")
variant, path = sys.argv[1], sys.argv[2]
import numpy, pandas, msgspec, pyarrow  # imports are not timed
import analysis
from analysis.readers import _assembly, _memory, file as file_mod
analysis.formats()
if variant in ("no small pages", "neither"):
    file_mod.small_pages = contextlib.nullcontext
if variant in ("no trim", "neither"):
    _assembly.release_freed_memory = lambda: None
    _memory.release_freed_memory = lambda: None
t = time.perf_counter()
df = analysis.read(path, cache=False)
s = time.perf_counter() - t
print(json.dumps({"s": s, "rows": len(df), "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

VARIANTS = ("as is", "no small pages", "no trim", "neither")


def run(variant: str, path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), SCALESCOPE_PROGRESS="0")
    out = subprocess.run([sys.executable, "-c", _CHILD, variant, str(path)], capture_output=True, text=True,
                         env=env, cwd=ROOT, check=False)
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=200.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--formats", nargs="+", default=["horovod", "kineto"])
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "scalescope-bench")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    for fmt in args.formats:
        path = args.workdir / f"effects_{fmt}_{int(args.size_mb)}mb.json"
        target = int(args.size_mb * 1e6)
        if not path.exists() or abs(path.stat().st_size - target) > 0.05 * target:
            (generate_horovod if fmt == "horovod" else generate_kineto)(path, target)
        res: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for _ in range(args.repeat):  # interleaved: a load that comes and goes hits all
            for v in VARIANTS:
                r = run(v, path)
                print(f"#   {fmt} {v}: {r}", flush=True)
                res[v].append(r)
        print(f"\n| {fmt} {path.stat().st_size / 1e6:.0f} MB | best (s) | median (s) | vs as is (median) "
              "| peak RSS (MiB) |\n|---|---|---|---|---|")
        base = statistics.median(r["s"] for r in res["as is"] if "s" in r)
        for v, runs in res.items():
            ok = [r for r in runs if "s" in r]
            if not ok:
                print(f"| {v} | error: {runs[0].get('error')} | | | |")
                continue
            med = statistics.median(r["s"] for r in ok)
            print(f"| {v} | {min(r['s'] for r in ok):.2f} | {med:.2f} | {med / base:.2f}x | "
                  f"{max(r['peak_mib'] for r in ok):.0f} |")
        print()
    print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
