"""Hashes of the frames and warnings the readers and the RunSet produce, for refactorings
that must not change behaviour: run it before and after, and compare the two JSON files.

Covered: every file of ``tests/data`` and of the shared corpus (``../shared/corpus``, when
present) through :func:`analysis.read`; every run directory and experiment there and in
``data/`` through :func:`analysis.read_many`; ``data/sample_sweep`` and
``data/sample_partitions`` as RunSets (every table, the damage table, and the metrics that
take a RunSet), read in this process (``workers=1``) and on a pool of two
(``workers=2``). An exception is recorded as its type and message.

    python benchmarks/frame_hashes.py OUT.json
    python benchmarks/frame_hashes.py --compare BEFORE.json AFTER.json

Paths in warnings are written relative to the repository (so two checkouts compare), and
every read goes through a fresh parse cache (a temporary ``SCALESCOPE_CACHE``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
DATA = ("data/sample_sweep", "data/sample_partitions")


def _rel(text: str) -> str:
    text = text.replace(str(ROOT) + "/", "").replace(str(ROOT), ".")
    return text.replace(str(CORPUS.resolve()), "<corpus>").replace(str(CORPUS), "<corpus>")


def frame_hash(df) -> str:
    """Digest of a frame's column names, dtypes and values (categories by value)."""
    import pandas as pd

    h = hashlib.sha256()
    h.update(repr([(str(c), str(t)) for c, t in df.dtypes.items()]).encode())
    h.update(str(len(df)).encode())
    if len(df):
        try:
            h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
        except TypeError:  # unhashable cells (lists, dicts): their text
            h.update(df.astype(str).to_csv(index=False).encode())
    return h.hexdigest()[:24]


def _record(func, *args, **kwargs) -> dict:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = func(*args, **kwargs)
            result = {"frame": frame_hash(out), "rows": len(out)} if hasattr(out, "dtypes") else {"value": repr(out)}
        except Exception as exc:  # the error is part of the behaviour
            result = {"error": f"{type(exc).__name__}: {_rel(str(exc))}"}
    result["warnings"] = [f"{w.category.__name__}: {_rel(str(w.message))}" for w in caught]
    return result


def _files(base: Path) -> list[Path]:
    return sorted(f for f in base.rglob("*") if f.is_file() and not f.name.startswith("."))


def _dirs(base: Path) -> list[Path]:
    """Run directories (run.json) and experiments (experiment.json) below ``base``."""
    found = {f.parent for f in base.rglob("run.json")} | {f.parent for f in base.rglob("experiment.json")}
    return sorted(found)


def _runset_hashes(path: Path, workers: int) -> dict:
    from analysis import metrics
    from analysis.runset import RunSet

    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            rs = RunSet.from_dirs(path, workers=workers)
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {_rel(str(exc))}"}
    out["from_dirs"] = {"runs": frame_hash(rs.runs.drop(columns=["path"]).astype(str)),
                        "warnings": [f"{w.category.__name__}: {_rel(str(w.message))}" for w in caught]}
    calls = {
        "step_times": lambda r: metrics.step_times(r),
        "time_breakdown": lambda r: metrics.time_breakdown(r),
        "time_breakdown_run": lambda r: metrics.time_breakdown(r, level="run"),
        "time_breakdown_step_tl1": lambda r: metrics.time_breakdown(r, level="step", timeline_rank=1),
        "sync_times": lambda r: metrics.sync_times(r),
        "gpu_time_breakdown": lambda r: metrics.gpu_time_breakdown(r),
        "device_usage": lambda r: metrics.device_usage(r),
    }
    for name, call in calls.items():  # on fresh RunSets: the tables are not loaded
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the scan's warnings are recorded above
            fresh = RunSet.from_dirs(path, workers=workers)
        out[name] = _record(call, fresh)
    for which in ("events", "samples", "epochs", "rank_devices"):
        out[which] = _record(lambda w=which: getattr(rs, w))
    out["damaged"] = _record(lambda: rs.damaged.astype(str).map(_rel))
    return out


def collect() -> dict:
    import analysis

    result: dict = {"read": {}, "read_many": {}, "runset": {}}
    bases = [ROOT / "tests" / "data"] + ([CORPUS] if CORPUS.is_dir() else [])
    for base in bases:
        for f in _files(base):
            result["read"][_rel(str(f))] = _record(analysis.read, f)
    for base in [*bases, *(ROOT / d for d in DATA)]:
        for d in _dirs(base):
            for kind in ("events", "samples"):
                result["read_many"][f"{_rel(str(d))}:{kind}:w1"] = _record(analysis.read_many, d, kind=kind,
                                                                           workers=1)
    for d in DATA:
        for workers in (1, 2):
            result["runset"][f"{d}:w{workers}"] = _runset_hashes(ROOT / d, workers)
        result["read_many"][f"{d}:events:w2"] = _record(analysis.read_many, ROOT / d, workers=2)
    return result


def compare(before: dict, after: dict, prefix: str = "") -> list[str]:
    diffs = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += compare(a, b, f"{prefix}{key}/")
        elif a != b:
            diffs.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="where to write the JSON of hashes")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        diffs = compare(a, b)
        print("\n".join(diffs) if diffs else "identical")
        return 1 if diffs else 0
    if not args.out:
        ap.error("give OUT.json or --compare BEFORE AFTER")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SCALESCOPE_CACHE"] = cache
        os.environ["SCALESCOPE_PROGRESS"] = "0"
        sys.path.insert(0, str(ROOT))
        result = collect()
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True))
    n = sum(len(v) for v in result.values())
    print(f"{n} entries written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
