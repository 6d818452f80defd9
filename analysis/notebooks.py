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


def experiment_dir(default: str | os.PathLike[str]) -> Path:
    """The experiment a notebook should read: ``$SCALESCOPE_EXPERIMENT`` or ``default``.

    Used by the notebooks' parameters cells, so ``scalescope notebooks DIR`` points every
    notebook at ``DIR``.
    """
    return Path(os.environ.get(ENV_VAR) or default).expanduser().resolve()


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
