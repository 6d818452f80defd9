"""The runs table: run directories and experiment manifests scanned into one row per run
(:func:`runs_table`), with what is damaged or missing about each, the per-rank device
mapping (:func:`read_rank_devices`), thread settings, and each run's communication path,
read from its NCCL logs (:func:`run_comm_path`).

The path itself is worked out by the pure metric :func:`analysis.metrics.commpath.comm_path`;
this module finds and reads the logs (I/O, which the metrics never do).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import rundir, schema
from analysis.errors import ReadError, RecoveryWarning, ScalescopeError
from analysis.metrics.commpath import comm_path
from analysis.readers import nccl as nccl_reader
from analysis.readers import read
from instrumentation import paths
from instrumentation.failure import exception_line, last_meaningful

RUN, EXP = rundir.RUN_MANIFEST, rundir.EXPERIMENT_MANIFEST


def nccl_logs(run_dir: str | os.PathLike[str] | None) -> list[Path]:
    """A run directory's NCCL logs: ``nccl.*.log`` (the sweep's capture), else
    ``stdout.log`` when it holds NCCL lines; none without a directory."""
    if run_dir is None or not Path(run_dir).is_dir():
        return []
    logs = sorted(Path(run_dir).glob("nccl.*.log"))
    if not logs:
        logs = [p for p in (Path(run_dir) / rundir.STDOUT_LOG,) if p.is_file() and nccl_reader.sniff(p)]
    return logs


def run_comm_path(run_dir: str | os.PathLike[str] | None, manifest: dict | None) -> dict:
    """``comm_path``, ``nccl_version`` and ``comm_warnings`` of one run directory.

    NCCL runs are summarised from their logs (:func:`nccl_logs`); Gloo and MPI runs from
    the manifest (:func:`analysis.metrics.commpath.comm_path`). Unreadable logs give a
    :class:`RecoveryWarning` and are left out.
    """
    frames = []
    for f in nccl_logs(run_dir):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RecoveryWarning)
                frames.append(read(f, format="nccl"))
        except ReadError as exc:
            warnings.warn(f"comm_path: {exc}", RecoveryWarning, stacklevel=2)
    return comm_path(manifest, pd.concat(frames, ignore_index=True) if frames else None)


#: Status of a run whose data is used by default.
OK_STATUS = "ok"

RUN_COLUMNS: dict[str, str] = {
    "run_id": "object",
    "experiment": "object",
    "path": "object",
    "status": "object",
    "exit_code": "Int64",
    "log_tail": "object",
    "failure_cause": "object",
    "failure_rank": "Int64",
    "failure_log": "object",
    "failure_hint": "object",
    "shared_reads": "object",
    "cluster": "object",
    "partition": "object",
    "nodes": "object",
    "gpus_per_node": "Int64",
    "gpus_on_node": "Int64",
    "labels": "object",
    "framework": "object",
    "backend": "object",
    "config_backend": "object",
    "requested_backend": "object",
    "horovod_tensor_op": "object",
    "n_ranks": "Int64",
    "n_nodes": "Int64",
    "batch_size": "Int64",
    "global_batch_size": "Int64",
    "learning_rate": "float64",
    "lr_scaling": "object",
    "inject": "object",
    "repeat": "Int64",
    "epochs": "Int64",
    "scaling": "object",
    "batch_mode": "object",
    "data_scale": "Int64",
    "dataset_size": "Int64",
    "time_budget_s": "float64",
    "n_params": "Int64",
    "sampler_kind": "object",
    "sampler_interval_s": "float64",
    "gpu_model": "object",
    "horovod_controller": "object",
    "time_origin": "object",
    "start_time": "object",
    "end_time": "object",
    "wall_s": "float64",
    "comm_path": "object",
    "comm_warnings": "object",
    "threads_per_rank": "Int64",
    "host_cpus": "Int64",
    "threads_mixed": "boolean",
    "resumed_from_epoch": "Int64",
    "baseline_kind": "object",
    "left_behind": "object",
}

#: The damaged or missing parts of an experiment (:attr:`RunSet.damaged`): ``run_id`` (None
#: for the experiment as a whole), ``part`` (``run directory``, ``run.json``, ``run.json
#: fields``, ``experiment.json``, ``events``, ``samples``, ``epochs``, ``rank_devices``), ``path``,
#: ``reason`` and ``excluded`` (the data left out because of it).
DAMAGE_COLUMNS: dict[str, str] = {
    "run_id": "object",
    "part": "object",
    "path": "object",
    "reason": "object",
    "excluded": "object",
}


#: Which GPU each rank used (``run.json`` ``ranks`` and ``sampler.hosts``).
RANK_DEVICE_COLUMNS: dict[str, str] = {
    "run_id": "object",
    "rank": "Int32",
    "local_rank": "Int32",
    "host": "object",
    "torch_device": "Int16",
    "gpu_uuid": "object",
    "device": "Int16",
    "device_from": "object",
}


def _uuid(value: object) -> str | None:
    if not value:
        return None
    return str(value).lower().removeprefix("gpu-")


def read_rank_devices(run_dir: str | os.PathLike[str], *, run_id: str | None = None) -> pd.DataFrame:
    """The GPU of every rank of one run, as the sampler numbers it (NVML's index).

    Returns
    -------
    pandas.DataFrame
        One row per rank with a GPU: the columns of :data:`RANK_DEVICE_COLUMNS`;
        ``torch_device`` is torch's index (within ``CUDA_VISIBLE_DEVICES``), ``device`` the
        NVML index the samples carry, ``device_from`` says how it was matched (``uuid``,
        ``cuda_visible_devices`` or ``same_index``). Empty for CPU runs.

    Notes
    -----
    The rank's GPU UUID (torch) is looked up among the devices NVML listed on its host;
    without a match, ``CUDA_VISIBLE_DEVICES`` maps torch's index to the physical one; without
    that, both indices are taken to be the same.
    """
    run_dir = Path(run_dir)
    m = rundir.read_manifest(run_dir, [])  # bad fields are listed by RunSet's scan
    rid = run_id or m.get("run_id") or run_dir.name
    hosts = ((m.get("sampler") or {}).get("hosts") or {})
    rows = []
    for r in m.get("ranks") or []:
        if not isinstance(r, dict) or r.get("device") is None:
            continue
        host = r.get("host")
        nvml = (hosts.get(host) or {}).get("devices") or []
        by_uuid = {_uuid(d.get("uuid")): d.get("index") for d in nvml if isinstance(d, dict) and d.get("uuid")}
        device, how = by_uuid.get(_uuid(r.get("gpu_uuid"))), "uuid"
        if device is None:
            visible = [v.strip() for v in str(r.get("cuda_visible_devices") or "").split(",") if v.strip()]
            if visible and all(v.isdigit() for v in visible) and int(r["device"]) < len(visible):
                device, how = int(visible[int(r["device"])]), "cuda_visible_devices"
            else:
                device, how = int(r["device"]), "same_index"
        rows.append({"run_id": rid, "rank": r.get("rank"), "local_rank": r.get("local_rank"), "host": host,
                     "torch_device": r.get("device"), "gpu_uuid": r.get("gpu_uuid"), "device": device,
                     "device_from": how})
    if not rows:
        return empty_frame(RANK_DEVICE_COLUMNS)
    df = pd.DataFrame(rows)
    for col, dtype in RANK_DEVICE_COLUMNS.items():
        df[col] = df[col].astype(object) if dtype == "object" else pd.to_numeric(df[col]).astype(dtype)
    return df.sort_values("rank").reset_index(drop=True)


def _backend_label(framework: str | None, backend: str | None, config: dict, manifest: dict | None) -> str | None:
    """The backend as the run used it: Horovod's tensor operation (``horovod-nccl`` when its
    allreduces ran on NCCL, whatever the controller) or controller from ``run.json``, DDP's
    process-group backend; the sweep's label when the run wrote no manifest."""
    hvd = (manifest or {}).get("horovod") or {}
    if framework == "horovod" and (hvd.get("tensor_operation") or hvd.get("controller")):
        op = str(hvd.get("tensor_operation") or "").lower()
        return "horovod-nccl" if op == "nccl" else f"horovod-{hvd.get('controller') or op}"
    if manifest is not None and framework == "ddp" and backend:
        return f"ddp-{backend}"
    if config.get("backend"):
        return str(config["backend"])
    if framework in (None, "none"):
        return "none" if framework == "none" else None
    return f"{framework}-{backend}" if backend else str(framework)


#: Run axes a ``--label`` of the same name sets where SLURM recorded nothing.
LABEL_AXES = schema.MACHINE_AXES


def _placement(entry: dict, manifest: dict | None, config: dict) -> dict:
    """Cluster, partition, node names and GPUs per node of a run: SLURM's variables in
    ``run.json`` (or the job's entry in ``experiment.json``) first, then the sweep's
    ``--label cluster=/partition=``; ``labels`` is ``KEY=VALUE; ...`` of every label."""
    m = manifest or {}
    env = m.get("slurm") or {}
    job = entry.get("slurm") or {}
    labels = {str(k): str(v) for k, v in (config.get("labels") or {}).items()}
    hosts = (m.get("sampler") or {}).get("hosts") or {}
    seen = [len(h.get("devices") or []) for h in hosts.values() if isinstance(h, dict)]
    out = {
        "cluster": env.get("SLURM_CLUSTER_NAME") or job.get("cluster") or labels.get("cluster"),
        "partition": env.get("SLURM_JOB_PARTITION") or job.get("partition") or labels.get("partition"),
        "nodes": ",".join(sorted(m["ranks_per_host"])) if m.get("ranks_per_host") else None,
        "gpus_per_node": (m.get("gpu") or {}).get("per_node"),
        # GPUs NVML listed on a node: more than gpus_per_node on a partly filled node
        "gpus_on_node": max(seen, default=0) or None,
        "labels": "; ".join(f"{k}={v}" for k, v in labels.items()) or None,
    }
    for key, value in labels.items():
        if key not in LABEL_AXES:
            out[f"label_{key}"] = value
    return out


def _shared_reads(reads: object) -> str | None:
    """The files a run read that an earlier run wrote into the shared working directory, as
    text (``snapshot.pt (written by baseline_np1_r1)``); None when none."""
    if not isinstance(reads, list):
        return None
    words = [f"{Path(str(r.get('path'))).name} (written by {r.get('written_by')})" for r in reads
             if isinstance(r, dict) and r.get("path")]
    return ", ".join(words) or None


def _failure(entry: dict, m: dict, status: str, log_tail: str | None, run_dir: Path | None) -> dict:
    """A not-ok run's cause (the failing rank's exception line, as the sweep recorded it, else
    read from its log tail), that rank, the log's path and the working-directory hint."""
    keys = ("failure_cause", "failure_rank", "failure_log", "failure_hint")
    if status == OK_STATUS:
        return dict.fromkeys(keys)
    f = m.get("failure") if isinstance(m.get("failure"), dict) else {}
    cause = entry.get("cause") or f.get("cause")
    if cause is None and log_tail:
        found = exception_line(log_tail)
        cause = found[0] if found else last_meaningful(log_tail)
    log = entry.get("log") or f.get("log") or (str(run_dir / rundir.STDERR_LOG) if run_dir is not None else None)
    return dict(zip(keys, (cause, entry.get("cause_rank", f.get("cause_rank")), log,
                           entry.get("hint") or f.get("hint")), strict=True))


def _run_row(experiment: str | None, entry: dict, run_dir: Path | None, manifest: dict | None) -> dict:
    m = manifest or {}
    config = m.get("config") or entry.get("config") or {}
    sampler = m.get("sampler") or {}
    world = m.get("world_size")
    if world is None:
        world = config.get("np")  # the sweep's requested world size (run never wrote run.json)
    n_nodes = m.get("n_nodes")
    if n_nodes is None and m.get("ranks_per_host"):
        n_nodes = len(m["ranks_per_host"])
    batch = m.get("batch_size") if m.get("batch_size") is not None else config.get("batch_size")
    gbs = m.get("global_batch_size")
    if gbs is None and batch is not None and world is not None:
        gbs = int(batch) * int(world)
    status = entry.get("status") or m.get("status") or "unknown"
    exit_code = entry.get("exit_code", m.get("exit_code"))
    log_tail = entry.get("log_tail")
    if log_tail is None and status != OK_STATUS:
        log_tail = rundir.log_tail(run_dir)
    framework = m.get("framework")
    if framework is None and config.get("backend"):
        framework = "none" if config["backend"] == "none" else str(config["backend"]).split("-")[0]
    backend = m.get("backend")
    if backend is None and framework not in (None, "none") and "-" in str(config.get("backend", "")):
        backend = str(config["backend"]).split("-", 1)[1]
    row = {
        # labels, not paths (the path column is what is opened): text any column can hold
        "run_id": paths.name_text(entry.get("run_id") or m.get("run_id") or (run_dir.name if run_dir else None)),
        "experiment": paths.name_text(experiment),
        "path": str(run_dir) if run_dir is not None else None,
        "status": status,
        "exit_code": exit_code,
        "log_tail": log_tail,
        **_failure(entry, m, status, log_tail, run_dir),
        "shared_reads": _shared_reads(entry.get("shared_reads") or m.get("shared_reads")),
        **_placement(entry, manifest, config),
        "framework": framework,
        "backend": backend,
        "config_backend": _backend_label(framework, backend, config, manifest),
        "requested_backend": config.get("backend"),
        "horovod_tensor_op": (m.get("horovod") or {}).get("tensor_operation"),
        "n_ranks": world,
        "n_nodes": n_nodes,
        "batch_size": batch,
        "global_batch_size": gbs,
        "learning_rate": m.get("learning_rate"),
        "lr_scaling": m.get("lr_scaling"),
        # a delay the example injected to check the analysis (``--inject``); None: none
        "inject": m.get("inject") or None,
        "repeat": config.get("repeat"),
        "epochs": m.get("epochs"),
        "scaling": config.get("scaling") or "strong",
        # per_rank: --batch-size fixed the batch per rank; global: --global-batch-size fixed the global batch
        "batch_mode": config.get("batch_mode") or "per_rank",
        "data_scale": m.get("data_scale", config.get("data_scale", 1)),
        "dataset_size": m.get("dataset_size"),
        "time_budget_s": m.get("time_budget_s"),
        "n_params": m.get("n_params"),
        "sampler_kind": sampler.get("kind"),
        "sampler_interval_s": sampler.get("interval_s"),
        "gpu_model": (m.get("gpu") or {}).get("model"),
        "horovod_controller": (m.get("horovod") or {}).get("controller"),
        # our traces carry Unix-epoch ns on each rank's clock, put on rank 0's by the reader
        "time_origin": "unix_epoch" if manifest is not None else None,
        "start_time": m.get("start_time"),
        "end_time": m.get("end_time"),
        "wall_s": entry.get("wall_s"),
        **_comm(run_dir, manifest),
        **thread_settings(m),
        "resumed_from_epoch": m.get("resumed_from_epoch"),
        "baseline_kind": m.get("baseline_kind"),
        # processes the run left running, stopped when its launcher exited (sweep, issue 33)
        "left_behind": _left_behind_note(m.get("left_behind")),
    }
    for key, value in (config.get("vary") or {}).items():
        row[f"vary_{key}"] = value
    return row


def _left_behind_note(value: object) -> str | None:
    note = value.get("note") if isinstance(value, dict) else None
    return note if isinstance(note, str) else None


def thread_settings(m: dict) -> dict:
    """``threads_per_rank`` (the largest torch intra-op thread count over the ranks of
    ``run.json`` ``ranks[i].threads``, else the manifest's ``threads_per_rank``), ``host_cpus``
    and ``threads_mixed`` (the ranks ran with different intra-op thread counts)."""
    per_rank = [r.get("threads") for r in m.get("ranks") or [] if isinstance(r, dict)]
    per_rank = [t for t in per_rank if isinstance(t, dict)]
    intra = [t.get("torch_intra_op") for t in per_rank if isinstance(t.get("torch_intra_op"), int)]
    cpus = [t.get("host_cpus") for t in per_rank if isinstance(t.get("host_cpus"), int)]
    return {"threads_per_rank": max(intra) if intra else m.get("threads_per_rank"),
            "host_cpus": max(cpus) if cpus else None,
            "threads_mixed": len(set(intra)) > 1 if intra else None}


def thread_mismatches(runs: pd.DataFrame, by: tuple[str, ...] = ("experiment", "batch_size")) -> list[str]:
    """Warnings for the comparisons (runs sharing ``by``: a baseline and the backends at every
    rank count) whose runs ran with different thread settings, and for runs whose ranks
    disagree (``threads_mixed``).

    A comparison is consistent when every run had the same threads per rank, or when every
    run had the cores per rank (``host_cpus // ranks per node``, at least 1: what
    ``scalescope sweep`` sets by default). Runs without a thread count are left out.
    """
    out = []
    for r in runs[runs["threads_mixed"].fillna(False).astype(bool)].itertuples():
        out.append(f"{r.run_id}: its ranks ran with different torch thread counts (run.json ranks[i].threads)")
    known = runs[runs["threads_per_rank"].notna()]
    if known.empty:
        return out
    cols = [c for c in by if c in known.columns]
    groups = known.groupby(cols, dropna=False, sort=True) if cols else [((), known)]
    for key, g in groups:
        threads = g["threads_per_rank"].astype(int)
        per_node = np.ceil(g["n_ranks"].fillna(1).astype(float) / g["n_nodes"].fillna(1).astype(float).clip(lower=1))
        cores = (g["host_cpus"].astype(float) // per_node.clip(lower=1)).clip(lower=1)
        if threads.nunique() <= 1 or (g["host_cpus"].notna().all() and (threads == cores).all()):
            continue
        what = ", ".join(f"{r.run_id}: {int(r.threads_per_rank)}" for r in g.sort_values("run_id").itertuples())
        where = ", ".join(f"{c}={v}" for c, v in zip(cols, key if isinstance(key, tuple) else (key,), strict=False))
        out.append(f"runs compared with each other ({where or 'all runs'}) ran with different threads per rank "
                   f"({what}), so their times differ by more than the rank count (`scalescope sweep` sets the "
                   "cores per rank by default, or --threads N)")
    return out


def _comm(run_dir: Path | None, manifest: dict | None) -> dict:
    """``comm_path`` and ``comm_warnings`` (``; ``-joined, None when none) of a run
    (:func:`run_comm_path`)."""
    info = run_comm_path(run_dir, manifest)
    return {"comm_path": info["comm_path"], "comm_warnings": "; ".join(info["comm_warnings"]) or None}


def _inferred(values: pd.Series) -> pd.Series:
    """An extra column typed as pandas would infer it; kept as Python objects where its text
    cannot be a string column (a lone surrogate: a file name that is not UTF-8)."""
    try:
        return pd.Series(values.tolist(), index=values.index, name=values.name)
    except (UnicodeEncodeError, UnicodeDecodeError):
        return values


def _typed_runs(rows: list[dict]) -> pd.DataFrame:
    # built as objects: a path or name that is not UTF-8 (lone surrogates) cannot be in a
    # string column, and a run's real path must stay as it is to be read
    df = pd.DataFrame(rows, dtype=object)
    for col in df.columns:
        if col not in RUN_COLUMNS:
            df[col] = _inferred(df[col])
    for col, dtype in RUN_COLUMNS.items():
        if col not in df:
            df[col] = None
        if dtype == "object":
            df[col] = df[col].astype(object).where(df[col].notna(), None)
        elif dtype == "float64":
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
        else:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype(dtype)
    extra = [c for c in df.columns if c not in RUN_COLUMNS]
    return df[[*RUN_COLUMNS, *sorted(extra)]].reset_index(drop=True)


#: One scanned run: (experiment name, experiment entry, run dir, run manifest, damage records).
_Scanned = tuple[str | None, dict, Path | None, dict | None, list[dict]]


def _damage(part: str, path: Path | str | None, reason: str, excluded: str, run_id: str | None = None) -> dict:
    return {"run_id": paths.name_text(run_id), "part": part, "path": None if path is None else str(path), "reason": reason,
            "excluded": excluded}


#: What an unknown number of ranks leaves out: the studies place every run by its ranks.
_NO_RANKS = "the whole run (it cannot be placed on the ranks axis of any study)"
def _experiment_run(path: Path, name: str, entry: dict) -> _Scanned:
    """One run listed in experiment.json, with what is damaged or missing about it. Only a
    run the launcher recorded as ``ok`` is expected to have a directory and a run.json."""
    run_dir = path / str(entry["run_id"])
    problems: list[str] = []
    entry = rundir.clean_fields(entry, rundir.EXPERIMENT_RUN_SCHEMA, problems, prefix=f"runs.{entry['run_id']}.")
    damage = rundir.field_damage(EXP, path / EXP, problems, str(entry["run_id"]))
    expected = entry.get("status") in (OK_STATUS, None)
    if paths.leaves(run_dir):
        damage.append(_damage("run directory", run_dir, paths.LEAVES, "all data"))
        return (name, entry, None, None, damage)
    if not run_dir.is_dir():
        if expected:
            damage.append(_damage("run directory", run_dir, "listed in experiment.json but the directory is missing",
                                  "all data"))
        return (name, entry, None, None, damage)
    manifest = None
    damage.extend(_logs_out(run_dir))
    if (run_dir / RUN).exists():
        try:
            manifest, bad_fields = rundir.checked_manifest(run_dir, str(entry["run_id"]))
            damage.extend(bad_fields)
        except ReadError as exc:
            damage.append(_damage(RUN, run_dir / RUN, exc.problem,
                                  "events, samples and GPU mapping (the run's row comes from experiment.json)"))
    elif expected:
        damage.append(_damage(RUN, run_dir / RUN, "missing",
                              "events, samples and GPU mapping (the run's row comes from experiment.json)"))
    return (name, entry, run_dir, manifest, damage)


def _logs_out(run_dir: Path) -> list[dict]:
    """The run's logs that are links out of the experiment: named, never quoted (the other
    files are named by the reader that refuses them)."""
    return [_damage("log", f, paths.LEAVES, "its log tail") for f in (run_dir / name for name in rundir.LOGS)
            if f.is_symlink() and paths.leaves(f)]


def _scan_experiment(path: Path, exp_file: Path) -> tuple[list[_Scanned], list[dict]]:
    try:
        exp = rundir.load_manifest(exp_file, rundir.EXPERIMENT_FORMAT)
        runs = exp.get("runs")
        if not isinstance(runs, list):
            raise ReadError(exp_file, "has no 'runs' list")
    except ReadError as exc:
        # the runs are still there: read them from their own run.json
        found, damage = _scan_dirs(path, path.name)
        if not found:
            raise
        note = _damage(EXP, exp_file, exc.problem,
                       "the launcher's records (status, exit code, log tail); runs found from their run.json")
        return found, [note, *damage]
    problems: list[str] = []
    exp = rundir.clean_fields(exp, rundir.EXPERIMENT_SCHEMA, problems)
    name = exp.get("name") or path.name
    out, damage, listed = [], rundir.field_damage(EXP, exp_file, problems, None), set()
    for i, entry in enumerate(runs):
        rid = entry.get("run_id") if isinstance(entry, dict) else None
        if not paths.is_run_id(rid):  # "../x", "/abs", "..": never followed out of the experiment
            damage.append(_damage(EXP, exp_file, f"runs[{i}] has no valid run_id (not a directory "
                                  "name inside the experiment; not followed)", f"runs[{i}]"))
            continue
        listed.add(rid)
        out.append(_experiment_run(path, name, entry))
    unlisted = sorted(d.name for d in path.iterdir() if (d / RUN).is_file() and d.name not in listed)
    if unlisted:
        warnings.warn(f"{exp_file}: {len(unlisted)} run director(ies) not listed in the manifest are ignored: "
                      + ", ".join(unlisted[:10]), RecoveryWarning, stacklevel=4)
    for d in sorted(path.iterdir()):
        if d.name not in listed and not (d / RUN).exists() and d.name != rundir.REPORT_DIR and rundir.looks_like_run(d):
            damage.append(_damage("run directory", d, "not listed in experiment.json and has no run.json",
                                  "all data", run_id=d.name))
    return out, damage


def _scan_dirs(path: Path, name: str) -> tuple[list[_Scanned], list[dict]]:
    """The run directories (holding a run.json) inside ``path``."""
    out = []
    for d in sorted(d for d in path.iterdir() if (d / RUN).exists()):
        if paths.leaves(d):
            out.append((name, {"run_id": d.name}, None, None, [_damage("run directory", d, paths.LEAVES, "all data", run_id=d.name)]))
            continue
        try:
            out.append((name, {}, d, *rundir.checked_manifest(d)))
        except ReadError as exc:
            out.append((name, {}, d, None, [_damage(RUN, d / RUN, exc.problem, "all data")]))
    return out, []


def _scan(path: Path) -> tuple[list[_Scanned], list[dict]]:
    """Every run under path, and the damage of the experiment as a whole (run_id None).

    A single run directory must have a valid run.json (it raises otherwise); inside an
    experiment, a damaged manifest, run.json or run directory is recorded, never fatal."""
    if not path.exists():
        raise ReadError(path, "directory not found")
    if not path.is_dir():
        raise ReadError(path, "not a directory (expected an experiment or run directory)")
    kind = rundir.kind_of(path)
    if kind == "run":
        manifest, bad_fields = rundir.checked_manifest(path)
        return [(None, {}, path, manifest, [])], bad_fields
    if kind == "experiment":
        return _scan_experiment(path, path / EXP)
    if kind == "experiments":  # a folder of experiments (e.g. one per partition)
        parts = [_scan(d) for d in sorted(d for d in path.iterdir() if (d / EXP).is_file())]
        return [f for p in parts for f in p[0]], [d for p in parts for d in p[1]]
    found, damage = _scan_dirs(path, path.name)
    if not found:
        raise ReadError(path, f"neither an experiment directory ({EXP}) nor a run directory ({RUN}), "
                              "and no run or experiment directories inside")
    return found, damage


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def damage_message(d: dict) -> str:
    where = f"run {d['run_id']}: " if d["run_id"] else ""
    return f"{where}{d['part']} damaged: {d['path']}: {d['reason']}; left out: {d['excluded']}"


def damage_frame(records: list[dict]) -> pd.DataFrame:
    if not records:
        return empty_frame(DAMAGE_COLUMNS)
    return pd.DataFrame([{c: d.get(c) for c in DAMAGE_COLUMNS} for d in records], columns=list(DAMAGE_COLUMNS),
                        dtype=object)


def runs_table(paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str]) -> tuple[pd.DataFrame, list[dict]]:
    """The runs table of experiment directories, run directories, directories of run
    directories or of experiment directories, and the damage records found on the way
    (each with its ``run_id``; see :meth:`analysis.runset.RunSet.from_dirs`)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    rows, run_damage, damage = [], [], []
    for p in paths:
        scanned, whole = _scan(Path(p))
        damage.extend(whole)
        for exp, entry, run_dir, manifest, dmg in scanned:
            rows.append(_run_row(exp, entry, run_dir, manifest))
            run_damage.append(dmg)
    if not rows:
        raise ScalescopeError("no runs found in " + ", ".join(map(str, paths)))
    ids = pd.Series([r["run_id"] for r in rows])
    dup = ids.duplicated(keep=False)
    for r, d in zip(rows, dup, strict=False):
        if d:
            r["run_id"] = f"{r['experiment']}/{r['run_id']}"
    if pd.Series([r["run_id"] for r in rows]).duplicated().any():
        raise ScalescopeError("the same run was given twice: " + ", ".join(sorted(ids[dup].astype(str))))
    for r, dmg in zip(rows, run_damage, strict=True):
        if r["status"] == OK_STATUS and r["n_ranks"] is None:
            dmg = [*dmg, _damage(RUN, r["path"], "the number of ranks is unknown (world_size and "
                                 "config.np are missing or damaged)", _NO_RANKS)]
        damage.extend({**d, "run_id": r["run_id"]} for d in dmg)
    return _typed_runs(rows), damage
