"""``scalescope convert``: write the tidy tables of any supported input as Parquet or CSV."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from analysis import readers
from analysis.atomic import replacing
from analysis.errors import ScalescopeError, recording
from analysis.export import write_csv


def _write(df: pd.DataFrame, dest: Path, to: str) -> Path:
    """Write atomically (:mod:`analysis.atomic`): an interrupted or failed write leaves the
    previous file or none. CSV text cells a spreadsheet would evaluate are neutralised
    (:func:`analysis.export.spreadsheet_safe`); Parquet keeps the values as they are."""
    if to == "parquet":
        with replacing(dest) as tmp:
            df.to_parquet(tmp, index=False)
        return dest
    return write_csv(df, dest)


def convert_one(path: str | Path, *, to: str = "parquet", out: str | Path | None = None,
                format: str | None = None) -> list[Path]:
    """Convert one file or directory; return the files written.

    A file gives ``<name>.events.<ext>`` (or ``.samples.<ext>`` for sample formats); a run or
    experiment directory gives both tables for everything in it.
    """
    path = Path(path)
    ext = "parquet" if to == "parquet" else "csv"
    out_dir = Path(out) if out else (path if path.is_dir() else path.parent)
    stem = path.name.rstrip("/") if path.is_dir() else readers.default_run_id(path)
    written = []
    if path.is_dir():
        for kind in ("events", "samples"):
            df = readers.read_many(path, kind=kind, format=format)
            if len(df):
                written.append(_write(df, out_dir / f"{stem}.{kind}.{ext}", to))
        if not written:
            raise ScalescopeError(f"{path}: no readable trace, profile or sample files found")
        return written
    fmt = format or readers.sniff(path)
    df = readers.read(path, fmt)
    kind = readers.formats()[fmt].kind
    written.append(_write(df, out_dir / f"{stem}.{kind}.{ext}", to))
    return written


def main(paths: list[str], *, to: str = "parquet", out: str | None = None, format: str | None = None) -> int:
    failures = 0
    for p in paths:
        try:
            with recording() as caught:
                written = convert_one(p, to=to, out=out, format=format)
            for w in caught:
                print(f"warning: {w.message}", file=sys.stderr)
            for w in written:
                n = len(pd.read_parquet(w) if to == "parquet" else pd.read_csv(w))
                print(f"{p} -> {w} ({n:,} rows)")
        except ScalescopeError as exc:
            failures += 1
            print(f"error: {exc}", file=sys.stderr)
    return 1 if failures else 0
