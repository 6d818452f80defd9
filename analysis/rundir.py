"""The run directory on the analysis side: manifests, epoch metrics, log tails and clock
offsets, with one set of validation rules (``docs/run-directory.md``).

:mod:`analysis.runset` and the ``scalescope`` reader both use this module, so a run that
loads into a RunSet also loads its events:

* A manifest (``run.json`` or ``experiment.json``) is a regular, readable UTF-8 file holding
  one JSON object whose ``format`` is the expected one (``scalescope.run`` /
  ``scalescope.experiment``; a missing ``format`` is refused) and whose ``format_version``
  is an integer from 1 up to :data:`FORMAT_VERSION`. Anything else raises
  :class:`~analysis.errors.ReadError` naming the file and the problem.
* Epoch metrics (``rank-NNNNN.epochs.jsonl``) drop a cut-off last line with a
  :class:`~analysis.errors.RecoveryWarning`; any other bad line raises (or, with a
  ``damage`` list, drops that file and records why).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pandas as pd

from analysis._io import read_bytes
from analysis.errors import ReadError, RecoveryWarning

__all__ = [
    "EPOCH_COLUMNS",
    "EXPERIMENT_FORMAT",
    "FORMAT_VERSION",
    "RUN_FORMAT",
    "clock_offsets",
    "load_manifest",
    "log_tail",
    "read_epochs",
    "read_manifest",
]

RUN_FORMAT = "scalescope.run"
EXPERIMENT_FORMAT = "scalescope.experiment"
#: The newest run-directory / experiment format version this code reads.
FORMAT_VERSION = 1

EPOCH_COLUMNS: dict[str, str] = {
    "run_id": "object",
    "rank": "Int32",
    "epoch": "Int32",
    "epoch_time_s": "float64",
    "samples": "Int64",
    "train_loss": "float64",
    "val_loss": "float64",
    "val_metric": "float64",
    "peak_mem_mib": "float64",
    "peak_mem_kind": "object",
    "wall_ns": "Int64",
}


def load_manifest(path: str | os.PathLike[str], fmt: str) -> dict:
    """A manifest file checked against the rules in the module docstring.

    Raises
    ------
    ReadError
        When the file is missing, unreadable, not UTF-8 JSON, not an object, of another
        ``format`` or of an unsupported ``format_version`` (the message names the version).
    """
    path = Path(path)
    raw = read_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReadError(path, f"not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise ReadError(path, "file is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReadError(path, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except (RecursionError, ValueError) as exc:  # nesting too deep, numbers too long
        raise ReadError(path, f"not valid JSON ({type(exc).__name__}: {str(exc)[:80]})") from None
    if not isinstance(data, dict):
        raise ReadError(path, f"expected a JSON object, found {type(data).__name__}")
    if data.get("format") != fmt:
        raise ReadError(path, f"format is {data.get('format')!r}, expected {fmt!r}")
    version = data.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ReadError(path, f"format_version {version!r} is not a positive integer")
    if version > FORMAT_VERSION:
        raise ReadError(path, f"format_version {version} is newer than this scalescope reads "
                              f"(up to {FORMAT_VERSION}); upgrade scalescope")
    return data


def read_manifest(path: str | os.PathLike[str]) -> dict:
    """Read and validate ``run.json`` (``path`` is the file or its run directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / "run.json"
    return load_manifest(path, RUN_FORMAT)


def clock_offsets(manifest: dict) -> dict[int, int]:
    """``clock.offsets_ns`` of a manifest as ``{rank: ns}`` (add to a rank's times to put
    them on rank 0's clock); entries that are not integers are left out."""
    clock = manifest.get("clock") or {}
    offsets = clock.get("offsets_ns") if isinstance(clock, dict) else None
    out = {}
    for k, v in (offsets if isinstance(offsets, dict) else {}).items():
        try:
            out[int(k)] = int(v)
        except (TypeError, ValueError, OverflowError):
            continue
    return out


def log_tail(run_dir: str | os.PathLike[str] | None, n_lines: int = 20) -> str | None:
    """The last ``n_lines`` of ``stderr.log`` then ``stdout.log`` of a run, or None."""
    if run_dir is None:
        return None
    parts = []
    for name in ("stderr.log", "stdout.log"):
        f = Path(run_dir) / name
        try:
            if not f.is_file():
                continue
            lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        if lines:
            parts.append("\n".join(lines[-n_lines:]))
    return "\n".join(parts) or None


def _empty_epochs() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in EPOCH_COLUMNS.items()})


def _epoch_rows(f: Path) -> list[dict]:
    if not f.stat().st_size:  # a rank that never finished an epoch, or a file that lost its data
        raise ReadError(f, "file is empty (0 bytes): no epoch metrics")
    lines = read_bytes(f).split(b"\n")
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            if i == len(lines) - 1:  # no newline after it: cut off while being written
                warnings.warn(f"{f}: dropped a cut-off last line ({len(line)} bytes) of a run that stopped "
                              "while writing", RecoveryWarning, stacklevel=4)
                continue
            raise ReadError(f, f"line {i + 1} is not valid JSON") from None
        if not isinstance(obj, dict):
            raise ReadError(f, f"line {i + 1} is not a JSON object")
        if "rank" not in obj:
            try:
                obj["rank"] = int(f.name.split("-")[1].split(".")[0])
            except (IndexError, ValueError):
                raise ReadError(f, f"line {i + 1} has no rank") from None
        rows.append({c: obj.get(c) for c in EPOCH_COLUMNS if c != "run_id"})
    return rows


def _typed_epochs(rows: list[dict], run_id: str, files: str) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    df.insert(0, "run_id", run_id)
    for col, dtype in EPOCH_COLUMNS.items():
        if dtype == "object":
            df[col] = df[col].astype(object).where(df[col].notna(), None)
            continue
        values = pd.to_numeric(df[col], errors="coerce")
        if dtype != "float64":
            bad = values.notna() & (values != values.round())
            if bad.any():
                raise ReadError(files, f"{col} has non-integer values")
        try:
            df[col] = values.astype(dtype)
        except (TypeError, ValueError, OverflowError):
            raise ReadError(files, f"{col} has values out of range") from None
    return df


def read_epochs(run_dir: str | os.PathLike[str], *, run_id: str | None = None,
                damage: list[dict] | None = None) -> pd.DataFrame:
    """Per-rank epoch metrics of one run directory (``rank-NNNNN.epochs.jsonl``).

    Parameters
    ----------
    run_dir
        The run directory.
    run_id
        Value of the ``run_id`` column; default ``run.json``'s ``run_id`` when it has one,
        else the directory name.
    damage
        When given, a file that cannot be read is left out and ``{"part", "path",
        "reason"}`` is appended here; otherwise its :class:`ReadError` is raised (an empty
        file, a rank that has not finished an epoch yet, only warns).

    Returns
    -------
    pandas.DataFrame
        One row per (rank, epoch) with the columns of :data:`EPOCH_COLUMNS`.

    Notes
    -----
    The files are appended line by line, so a killed rank can leave a cut-off last line:
    it is dropped with one :class:`~analysis.errors.RecoveryWarning`. Any other line that
    is not a JSON object is an error.
    """
    run_dir = Path(run_dir)
    if run_id is None:
        try:
            run_id = read_manifest(run_dir).get("run_id") if (run_dir / "run.json").exists() else None
        except ReadError:
            run_id = None
        run_id = run_id or run_dir.name
    frames = []
    for f in sorted(run_dir.glob("rank-*.epochs.jsonl")):
        try:
            rows = _epoch_rows(f)
            if rows:
                frames.append(_typed_epochs(rows, run_id, str(f)))
        except (ReadError, OSError) as exc:
            if damage is None and isinstance(exc, ReadError) and "file is empty" in exc.problem:
                warnings.warn(str(exc), RecoveryWarning, stacklevel=2)
                continue
            if damage is None:
                if isinstance(exc, OSError):
                    raise ReadError(f, f"cannot read: {exc.strerror or exc}") from None
                raise
            damage.append({"part": "epochs", "path": str(f),
                           "reason": getattr(exc, "problem", None) or str(exc)})
    if not frames:
        return _empty_epochs()
    df = pd.concat(frames, ignore_index=True)
    return df.sort_values(["rank", "epoch"], kind="stable").reset_index(drop=True)
