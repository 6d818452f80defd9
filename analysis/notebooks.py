"""``scalescope notebooks [EXPERIMENT_DIR]``: open JupyterLab on the project's notebooks.

Every notebook's parameters cell reads ``SCALESCOPE_EXPERIMENT`` (falling back to the sample
experiment in ``data/``), so starting JupyterLab with that variable set points all of them at
one experiment without editing a cell.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from analysis.errors import ScalescopeError

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
ENV_VAR = "SCALESCOPE_EXPERIMENT"

#: The notebooks of each report study (``analysis.report.STUDIES`` keys): every report section
#: has one, and every notebook shows at least one section (07: the GPU timelines of the time
#: breakdown from other tools' traces).
STUDY_NOTEBOOKS: dict[str, tuple[str, ...]] = {
    "summary": ("02_scaling",),
    "why": ("08_why_not_ideal",),
    "breakdown": ("01_single_run_breakdown", "07_other_tools"),
    "sync": ("03_sync_cost",),
    "scaling": ("02_scaling",),
    "overhead": ("02_scaling",),
    "usage": ("04_device_usage", "12_compute_update_memory"),
    "backends": ("06_backends",),
    "batch": ("05_batch_size_lr", "14_batch_lr_reference"),
    "memory": ("12_compute_update_memory",),
    "model": ("03_sync_cost",),
    "stragglers": ("13_stragglers",),
    "clusters": ("09_clusters_partitions",),
    "strong_weak": ("10_strong_weak",),
    "input_size": ("11_input_size",),
}


def experiment_dir(default: str | os.PathLike[str]) -> Path:
    """The experiment a notebook should read: ``$SCALESCOPE_EXPERIMENT`` or ``default``.

    Used by the notebooks' parameters cells, so ``scalescope notebooks DIR`` points every
    notebook at ``DIR``.
    """
    return Path(os.environ.get(ENV_VAR) or default).expanduser().resolve()


def experiment_dirs(*defaults: str | os.PathLike[str]) -> list[Path]:
    """The experiments a multi-experiment notebook compares: ``$SCALESCOPE_EXPERIMENTS``
    (paths separated by ``os.pathsep``) or ``defaults``."""
    env = os.environ.get(ENV_VAR + "S")
    paths = [p for p in env.split(os.pathsep) if p] if env else list(defaults)
    return [Path(p).expanduser().resolve() for p in paths]


def main(experiment: str | None = None, *, no_browser: bool = False) -> int:
    if experiment is not None:
        exp = Path(experiment).expanduser().resolve()
        if not (exp / "experiment.json").exists() and not any(exp.glob("*/run.json")):
            raise ScalescopeError(f"{exp}: not an experiment directory (no experiment.json or run directories)")
    jupyter = Path(sys.executable).parent / "jupyter"
    if not jupyter.exists():
        found = shutil.which("jupyter")
        if not found:
            raise ScalescopeError("JupyterLab is not installed: pip install 'scalescope[notebooks]'")
        jupyter = Path(found)
    env = dict(os.environ)
    if experiment is not None:
        env[ENV_VAR] = str(exp)
        print(f"notebooks will read {exp} (SCALESCOPE_EXPERIMENT)")
    cmd = [str(jupyter), "lab", f"--notebook-dir={NOTEBOOKS}"]
    if no_browser:
        cmd.append("--no-browser")
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    return subprocess.call(cmd, env=env)


def export_dir(experiment: str | os.PathLike[str]) -> Path:
    """Where a notebook writes its figures and tables: ``$SCALESCOPE_EXPORT_DIR`` or
    ``<experiment>/export`` (next to the experiment, as the notebooks promise)."""
    env = os.environ.get("SCALESCOPE_EXPORT_DIR")
    return Path(env) if env else Path(experiment) / "export"


def pick_run(runs, run_id: str | None = None) -> str:
    """``run_id`` when the runs table has it, else the usable run with the most ranks
    (preferring Horovod, then DDP), so a notebook's default works on any experiment."""
    ok = runs[runs["status"] == "ok"]
    if run_id is not None and run_id in set(ok["run_id"]):
        return run_id
    if ok.empty:
        raise ScalescopeError("the experiment has no successful run")
    order = ok.assign(_fw=ok["framework"].map({"horovod": 0, "ddp": 1}).fillna(2))
    return str(order.sort_values(["n_ranks", "_fw"], ascending=[False, True])["run_id"].iloc[0])
