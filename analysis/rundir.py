"""The run directory on the analysis side, the one module that knows its layout
(``docs/run-directory.md``): its file names and globs, what kind of directory a path is
(:func:`kind_of`, decided here only), manifests, epoch metrics, log tails and clock
offsets, with one set of validation rules.

The runs table (:mod:`analysis.runtable`), the run-directory reader
(:mod:`analysis.readers.rundir`), :func:`analysis.read_many` and the notebooks all take the
layout from here. ``instrumentation/`` (which writes it and may not import ``analysis``)
keeps its own constants; ``tests/test_rundir_layout.py`` checks that the two agree.

* A manifest (``run.json`` or ``experiment.json``) is a regular, readable UTF-8 file holding
  one JSON object whose ``format`` is the expected one (``scalescope.run`` /
  ``scalescope.experiment``; a missing ``format`` is refused) and whose ``format_version``
  is an integer from 1 up to :data:`FORMAT_VERSION`. Anything else raises
  :class:`~analysis.errors.ReadError` naming the file and the problem.
* Every field the analysis takes from a manifest is checked against its type and range
  (:data:`RUN_SCHEMA`, :data:`EXPERIMENT_RUN_SCHEMA`; ``docs/run-directory.md``, "Damaged
  experiments"): a field of the wrong type or out of range (``gpu: "A100"``, a list for
  ``config.labels``, ``world_size: 1e20 | "two" | 0 | -3``) is treated as missing and named,
  never passed on. :func:`read_manifest` warns once per file, or appends the problems to
  the caller's list (the runs table lists them under "Damaged runs").
* Epoch metrics (``rank-NNNNN.epochs.jsonl``) drop a cut-off last line with a
  :class:`~analysis.errors.RecoveryWarning`; any other bad line raises (or, with a
  ``damage`` list, drops that file and records why).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from analysis._io import describe_bytes, read_text_bytes
from analysis.errors import ReadError, RecoveryWarning
from instrumentation.paths import leaves

__all__ = [
    "EPOCHS_GLOB",
    "EPOCH_COLUMNS",
    "EPOCH_SCHEMA",
    "EXPERIMENT_FORMAT",
    "EXPERIMENT_MANIFEST",
    "EXPERIMENT_RUN_SCHEMA",
    "EXPERIMENT_SCHEMA",
    "FORMAT_VERSION",
    "LOGS",
    "NSYS_DIR",
    "NSYS_GLOB",
    "REPORT_DIR",
    "RUN_FORMAT",
    "RUN_MANIFEST",
    "RUN_SCHEMA",
    "SAMPLES_GLOB",
    "STDERR_LOG",
    "STDOUT_LOG",
    "TIMELINE",
    "TORCH_PROFILER_DIR",
    "TORCH_PROFILER_GLOB",
    "TRACE_GLOB",
    "checked_manifest",
    "clean_fields",
    "clock_offsets",
    "epoch_files",
    "field_damage",
    "find_max_records",
    "kind_of",
    "load_manifest",
    "log_tail",
    "looks_like_run",
    "profiler_files",
    "read_epochs",
    "read_manifest",
    "run_dirs_below",
    "sample_files",
    "trace_files",
]

# --------------------------------------------------------------------------------------
# The layout: every file name and glob of a run or experiment directory.

#: The experiment's manifest (written by ``scalescope sweep``).
EXPERIMENT_MANIFEST = "experiment.json"
#: A run's manifest: a directory holding one is a run directory.
RUN_MANIFEST = "run.json"
#: Each rank's own trace, ``rank-NNNNN.trace.json`` (``.gz`` once compressed).
TRACE_GLOB = "rank-*.trace.json*"
_TRACE_SUFFIXES = (".trace.json", ".trace.json.gz")
#: Each rank's epoch metrics, ``rank-NNNNN.epochs.jsonl``.
EPOCHS_GLOB = "rank-*.epochs.jsonl"
#: Each node sampler's ``samples-<host>.csv``.
SAMPLES_GLOB = "samples-*.csv"
#: The Horovod timeline of a Horovod run.
TIMELINE = "horovod_timeline.json"
STDERR_LOG, STDOUT_LOG = "stderr.log", "stdout.log"
#: The run's logs, in the order their tails are quoted.
LOGS = (STDERR_LOG, STDOUT_LOG)
#: The outside profilers' outputs (``docs/profilers.md``): a directory and a glob each.
TORCH_PROFILER_DIR, TORCH_PROFILER_GLOB = "torch_profiler", "*.pt.trace.json*"
NSYS_DIR, NSYS_GLOB = "nsys", "*.sqlite"
#: Where ``scalescope report`` writes inside an experiment (never a run).
REPORT_DIR = "report"


def trace_files(run_dir: str | os.PathLike[str]) -> list[Path]:
    """The rank traces of a run directory, sorted by name."""
    return sorted(p for p in Path(run_dir).iterdir()
                  if p.name.startswith("rank-") and p.name.endswith(_TRACE_SUFFIXES))


def epoch_files(run_dir: str | os.PathLike[str]) -> list[Path]:
    """The ranks' epoch metrics files of a run directory, sorted by name."""
    return sorted(Path(run_dir).glob(EPOCHS_GLOB))


def sample_files(run_dir: str | os.PathLike[str]) -> list[Path]:
    """The node samplers' files of a run directory, sorted by name."""
    return sorted(Path(run_dir).glob(SAMPLES_GLOB))


def profiler_files(run_dir: str | os.PathLike[str]) -> list[tuple[Path, str]]:
    """The outside profilers' per-rank outputs of a run directory and the format of each:
    ``torch_profiler/*.pt.trace.json[.gz]`` (``kineto``), then ``nsys/*.sqlite``
    (``nsys_sqlite``)."""
    run_dir = Path(run_dir)
    files = [(f, "kineto") for f in sorted((run_dir / TORCH_PROFILER_DIR).glob(TORCH_PROFILER_GLOB))
             if not f.name.startswith(".")]
    return files + [(f, "nsys_sqlite") for f in sorted((run_dir / NSYS_DIR).glob(NSYS_GLOB))]


def looks_like_run(d: Path) -> bool:
    """A directory holding a run's files (traces, epochs, samples or logs), with or
    without a ``run.json``."""
    try:
        return d.is_dir() and any(f.name.startswith(("rank-", "samples-")) or f.name in LOGS for f in d.iterdir())
    except OSError:
        return False


def run_dirs_below(path: str | os.PathLike[str]) -> list[Path]:
    """Every run directory at any depth below ``path`` (holding a ``run.json``), sorted."""
    return sorted(d.parent for d in Path(path).rglob(RUN_MANIFEST))


def kind_of(path: str | os.PathLike[str]) -> str | None:
    """What a directory is, decided here only:

    * ``"run"``: it holds a ``run.json`` (a file);
    * ``"experiment"``: it holds an ``experiment.json``;
    * ``"runs"``: a directory of run directories;
    * ``"experiments"``: a directory of experiment directories and no run directories;
    * ``None``: none of these (or not a directory).
    """
    path = Path(path)
    if not path.is_dir():
        return None
    if (path / RUN_MANIFEST).is_file():
        return "run"
    if (path / EXPERIMENT_MANIFEST).exists():
        return "experiment"
    children = [d for d in path.iterdir() if d.is_dir()]
    if any((d / RUN_MANIFEST).exists() for d in children):
        return "runs"
    if any((d / EXPERIMENT_MANIFEST).is_file() for d in children):
        return "experiments"
    return None

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
    "steps": "Int64",
    "samples_source": "object",
    "implicit": "boolean",
}


# --------------------------------------------------------------------------------------
# The per-field schema of the manifests: type and range of every field the analysis uses.
# A check returns None for a good value, else what is wrong with it. null is always allowed
# (a missing value); a dict spec checks the keys it names and passes the others through.

Check = Callable[[Any], "str | None"]
#: Largest world size, node count or rank scalescope takes from a manifest.
MAX_RANKS = 1 << 20


def _show(v: Any) -> str:
    text = json.dumps(v) if isinstance(v, (str, int, float, bool)) else type(v).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _int(lo: int, hi: int) -> Check:
    def check(v: Any) -> str | None:
        if type(v) is not int:
            return f"is {_show(v)}, not an integer"
        return None if lo <= v <= hi else f"is {v}, outside [{lo}, {hi}]"
    return check


def _num(lo: float, hi: float = math.inf) -> Check:
    def check(v: Any) -> str | None:
        if type(v) not in (int, float) or not math.isfinite(v):
            return f"is {_show(v)}, not a finite number"
        return None if lo <= v <= hi else f"is {v}, outside [{lo}, {hi}]"
    return check


def _str(v: Any) -> str | None:
    return None if isinstance(v, str) else f"is {_show(v)}, not a string"


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"is {_show(v)}, not true or false"


def _scalar(v: Any) -> str | None:
    return None if isinstance(v, (str, int, float, bool)) else f"is {_show(v)}, not a string or number"


def _list_of_str(v: Any) -> str | None:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        return f"is {_show(v)}, not a list of strings"
    return None


_COUNT = _int(0, 2**62)
_ID = _int(-(2**63), 2**63 - 1)
_RANK = _int(0, MAX_RANKS - 1)
_RANKS = _int(1, MAX_RANKS)

#: ``config`` of a run (``run.json`` and ``experiment.json`` entries): the sweep's settings.
CONFIG_SCHEMA: dict[str, Any] = {
    "backend": _str, "np": _RANKS, "batch_size": _int(1, 2**62), "repeat": _int(0, 2**31),
    "scaling": _str, "data_scale": _int(1, 2**62),
    "labels": ("mapping", _scalar), "vary": ("mapping", _scalar),
}

#: ``run.json``: the fields the runs table, the scalescope reader and the GPU mapping use.
RUN_SCHEMA: dict[str, Any] = {
    "run_id": _str, "status": _str, "exit_code": _ID, "exit_note": _str,
    "start_time": _str, "end_time": _str,
    "world_size": _RANKS, "n_nodes": _RANKS,
    "ranks_per_host": ("mapping", ("list", _RANK)),
    "ranks": ("list", {"rank": _RANK, "local_rank": _RANK, "host": _str, "pid": _ID,
                       "device": _int(0, 2**15 - 1), "device_name": _str, "gpu_uuid": _str,
                       "cuda_visible_devices": _scalar}),
    "framework": _str, "backend": _str,
    "horovod": {"controller": _str, "tensor_operation": _str, "version": _str},
    "versions": ("mapping", _scalar),
    "gpu": {"model": _str, "count": _COUNT, "per_node": _COUNT},
    "batch_size": _int(1, 2**62), "global_batch_size": _int(1, 2**62),
    "learning_rate": _num(0), "lr_scaling": _str, "epochs": _COUNT,
    "data_scale": _int(1, 2**62), "curve_length": _COUNT, "time_budget_s": _num(0),
    "mem_limit_mb": _num(0), "threads_per_rank": _COUNT,
    "dataset_size": _COUNT, "n_params": _COUNT, "inject": _scalar,
    "command": _list_of_str,
    "slurm": ("mapping", _scalar),
    "sampler": {"kind": _str, "interval_s": _num(0), "nvml_unavailable_reason": _str, "error": _str,
                "hosts": ("mapping", {"rank": _RANK, "kind": _str, "file": _str,
                                      "devices": ("list", {"index": _int(0, 2**15 - 1), "name": _str,
                                                           "uuid": _str})})},
    "config": CONFIG_SCHEMA,
    "clock": {"reference_rank": _RANK, "offsets_ns": ("mapping", _int(-(2**62), 2**62)),
              "spread_ns": ("mapping", _int(0, 2**62))},
    "comm_capture": {}, "profilers": {}, "nvtx": {}, "horovod_timeline": {},
    "failure": {"cause": _str, "cause_rank": _RANK, "log": _str, "hint": _str},
    "shared_reads": ("list", {"path": _str, "written_by": _str, "rank": _RANK}),
}

def _real(v: Any) -> str | None:
    """A number, NaN and infinities allowed (a loss is NaN when training diverged)."""
    return None if type(v) in (int, float) else f"is {_show(v)}, not a number"


#: One line of ``rank-NNNNN.epochs.jsonl``.
EPOCH_SCHEMA: dict[str, Any] = {
    "rank": _RANK, "epoch": _int(0, 2**31 - 1), "epoch_time_s": _num(0), "samples": _COUNT,
    "train_loss": _real, "val_loss": _real, "val_metric": _real, "peak_mem_mib": _num(0),
    "peak_mem_kind": _str, "wall_ns": _int(0, 2**63 - 1), "steps": _COUNT, "samples_source": _str,
    "implicit": _bool,
}

#: ``experiment.json`` itself (its ``runs`` are checked entry by entry).
EXPERIMENT_SCHEMA: dict[str, Any] = {"name": _str, "created": _str, "command": _list_of_str,
                                     "script": _list_of_str}

#: One entry of ``experiment.json``'s ``runs`` (``run_id`` is checked on its own).
EXPERIMENT_RUN_SCHEMA: dict[str, Any] = {
    "status": _str, "exit_code": _ID, "log_tail": _str, "wall_s": _num(0),
    "cause": _str, "cause_rank": _RANK, "log": _str, "hint": _str,
    "shared_reads": ("list", {"path": _str, "written_by": _str, "rank": _RANK}), "wrote_shared": _list_of_str,
    "config": CONFIG_SCHEMA, "slurm": ("mapping", _scalar),
}


def _clean(value: Any, spec: Any, where: str, problems: list[str]) -> tuple[Any, bool]:
    """``(value checked against spec, ok)``: a bad value is replaced by None (and named in
    ``problems``); inside a good container, bad members are left out (dict keys set to
    None, list items and mapping entries dropped)."""
    if value is None:
        return None, True
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            problems.append(f"{where} is {_show(value)}, not an object")
            return None, False
        out = dict(value)
        for key, sub in spec.items():
            if key in out:
                out[key], _ = _clean(out[key], sub, f"{where}.{key}", problems)
        return out, True
    if isinstance(spec, tuple):
        kind, sub = spec
        if kind == "list":
            if not isinstance(value, list):
                problems.append(f"{where} is {_show(value)}, not a list")
                return None, False
            kept = []
            for i, item in enumerate(value):
                got, ok = _clean(item, sub, f"{where}[{i}]", problems)
                if ok:
                    kept.append(got)
            return kept, True
        if not isinstance(value, dict):  # "mapping": an object of any keys, each value checked
            problems.append(f"{where} is {_show(value)}, not an object")
            return None, False
        kept_map = {}
        for key, item in value.items():
            got, ok = _clean(item, sub, f"{where}.{key}", problems)
            if ok:
                kept_map[key] = got
        return kept_map, True
    problem = spec(value)
    if problem:
        problems.append(f"{where} {problem}")
        return None, False
    return value, True


def clean_fields(data: dict, schema: dict[str, Any], problems: list[str], *, prefix: str = "") -> dict:
    """``data`` with every field of ``schema`` checked (type and range): a bad one is set
    to None (treated as missing) and described in ``problems``; bad members of a list or
    object are left out. Fields the schema does not name pass through unchanged."""
    out, _ = _clean(data, schema, prefix.rstrip("."), problems)
    if prefix == "":
        problems[:] = [p.lstrip(".") for p in problems]
    return out


def field_damage(part: str, path: Path, problems: list[str], run_id: str | None) -> list[dict]:
    """The damage record (``RunSet.damaged``'s columns) of manifest fields of the wrong type
    or out of range, each treated as missing and the rest of the run used; [] for none."""
    if not problems:
        return []
    more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
    fields = ", ".join(dict.fromkeys(p.split(" ", 1)[0] for p in problems))
    return [{"run_id": run_id, "part": part, "path": str(path),
             "reason": "field(s) of the wrong type or out of range: " + "; ".join(problems[:10]) + more,
             "excluded": f"the value of {fields} (treated as missing; the rest of the run is used)"}]


def checked_manifest(run_dir: Path, run_id: str | None = None) -> tuple[dict, list[dict]]:
    """A run's checked ``run.json`` and the damage record of its bad fields (if any)."""
    problems: list[str] = []
    m = read_manifest(run_dir, problems)
    rid = run_id or (m.get("run_id") if isinstance(m.get("run_id"), str) else None) or Path(run_dir).name
    return m, field_damage(f"{RUN_MANIFEST} fields", Path(run_dir) / RUN_MANIFEST, problems, rid)


def load_manifest(path: str | os.PathLike[str], fmt: str) -> dict:
    """A manifest file checked against the rules in the module docstring.

    Raises
    ------
    ReadError
        When the file is missing, unreadable, not UTF-8 JSON, not an object, of another
        ``format`` or of an unsupported ``format_version`` (the message names the version).
    """
    path = Path(path)
    raw = read_text_bytes(path)  # gzip of any members, UTF-16 refused, a UTF-8 BOM skipped
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


def read_manifest(path: str | os.PathLike[str], problems: list[str] | None = None) -> dict:
    """Read and validate ``run.json`` (``path`` is the file or its run directory).

    Every field of :data:`RUN_SCHEMA` is checked: one of the wrong type or out of range is
    set to None and described, in ``problems`` when a list is given, else in one
    :class:`RecoveryWarning` naming the file."""
    path = Path(path)
    if path.is_dir():
        path = path / RUN_MANIFEST
    found: list[str] = []
    data = clean_fields(load_manifest(path, RUN_FORMAT), RUN_SCHEMA, found)
    if problems is not None:
        problems.extend(found)
    elif found:
        warnings.warn(f"{path}: {len(found)} field(s) of the wrong type or out of range are treated as missing: "
                      + "; ".join(found[:10]), RecoveryWarning, stacklevel=2)
    return data


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
    for name in LOGS:
        f = Path(run_dir) / name
        try:
            if not f.is_file() or leaves(f):  # a link out of the experiment: never quoted
                continue
            lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        if lines:
            parts.append("\n".join(lines[-n_lines:]))
    return "\n".join(parts) or None


def _empty_epochs() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in EPOCH_COLUMNS.items()})


def _epoch_rows(f: Path, problems: list[str]) -> list[dict]:
    """The lines of one epochs file; fields of the wrong type or out of range are set to None
    and described in ``problems``."""
    if not f.stat().st_size:  # a rank that never finished an epoch, or a file that lost its data
        raise ReadError(f, "file is empty (0 bytes): no epoch metrics")
    lines = read_text_bytes(f).split(b"\n")  # gzip of any members, UTF-16 refused, BOM skipped
    rows = []
    offset = 0
    for i, line in enumerate(lines):
        start, offset = offset, offset + len(line) + 1
        if not line.strip():
            continue
        try:
            if b"\0" in line:
                raise ValueError("NUL")
            obj = json.loads(line)
        except (ValueError, RecursionError):
            if i == len(lines) - 1 and b"\0" not in line:  # no newline after it: cut off while written
                warnings.warn(f"{f}: dropped a cut-off last line ({len(line)} bytes) of a run that stopped "
                              "while writing", RecoveryWarning, stacklevel=4)
                continue
            found = describe_bytes(line, start)
            found = f" ({found})" if "NUL" in found or "UTF-8" in found else ""
            raise ReadError(f, f"line {i + 1} is not valid JSON{found}") from None
        if not isinstance(obj, dict):
            raise ReadError(f, f"line {i + 1} is not a JSON object")
        found: list[str] = []
        obj = clean_fields(obj, EPOCH_SCHEMA, found)
        problems.extend(f"line {i + 1}: {p}" for p in found)
        if obj.get("rank") is None:  # missing, or of the wrong type (named in problems)
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
    is not a JSON object is an error. Every field is checked against :data:`EPOCH_SCHEMA`
    (type and range: a negative or infinite epoch time, a string for a count): a bad value
    is treated as missing, with a warning (or a ``damage`` record) naming the file, the line
    and the field; a bad ``rank`` falls back to the file name's.
    """
    run_dir = Path(run_dir)
    if run_id is None:
        try:
            run_id = read_manifest(run_dir).get("run_id") if (run_dir / RUN_MANIFEST).exists() else None
        except ReadError:
            run_id = None
        run_id = run_id or run_dir.name
    frames = []
    for f in epoch_files(run_dir):
        try:
            problems: list[str] = []
            rows = _epoch_rows(f, problems)
            if rows:
                frames.append(_typed_epochs(rows, run_id, str(f)))
            if problems:
                more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
                reason = (f"{len(problems)} value(s) of the wrong type or out of range, treated as missing: "
                          + "; ".join(problems[:5]) + more)
                if damage is None:
                    warnings.warn(f"{f}: {reason}", RecoveryWarning, stacklevel=2)
                else:
                    damage.append({"part": "epochs", "path": str(f), "reason": reason,
                                   "excluded": "those values (treated as missing); the rest of the file is used"})
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


def find_max_records(runs: pd.DataFrame) -> list[dict]:
    """The ``find_max`` records (``scalescope sweep --find-max``) of the experiments the runs
    of a runs table belong to, read from their ``experiment.json`` (one that cannot be read
    adds none); pass them to :func:`analysis.metrics.memory_limit`."""
    out = []
    for path in sorted({str(Path(p).parent) for p in runs["path"].dropna()}):
        f = Path(path) / EXPERIMENT_MANIFEST
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        out.extend(r for r in data.get("find_max") or [] if isinstance(r, dict))
    return out
