"""The run-directory input of the runs table beyond the manifests: each run's communication
path, read from its NCCL logs (:func:`run_comm_path`).

The path itself is worked out by the pure metric :func:`analysis.metrics.commpath.comm_path`;
this module finds and reads the logs (I/O, which the metrics never do).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pandas as pd

from analysis.errors import ReadError, RecoveryWarning
from analysis.metrics.commpath import comm_path
from analysis.readers import nccl as nccl_reader
from analysis.readers import read


def nccl_logs(run_dir: str | os.PathLike[str] | None) -> list[Path]:
    """A run directory's NCCL logs: ``nccl.*.log`` (the sweep's capture), else
    ``stdout.log`` when it holds NCCL lines; none without a directory."""
    if run_dir is None or not Path(run_dir).is_dir():
        return []
    logs = sorted(Path(run_dir).glob("nccl.*.log"))
    if not logs:
        logs = [p for p in (Path(run_dir) / "stdout.log",) if p.is_file() and nccl_reader.sniff(p)]
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
