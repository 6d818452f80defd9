"""The notebooks' side of the library, and ``scalescope notebooks EXP [EXP ...]``.

One rule picks what a notebook shows, in this order:

1. ``EXPERIMENTS`` in its parameters cell, when the user set it (a path or a list of paths);
2. ``$SCALESCOPE_EXPERIMENTS``, which ``scalescope notebooks EXP [EXP ...]`` sets for every
   notebook it opens: a JSON list of paths, so that no character a directory name may hold
   (``:``, ``,``, a newline) separates them. Set by hand, it may also be one path, or paths
   separated by ``os.pathsep``;
3. the sample the notebook was written on (``data/``), only when neither says anything.

:func:`open_experiment` applies it, says in one printed line what the notebook shows and
why, and where its exports go: ``notebooks-export/`` next to the (first) experiment, never
into the checkout (the bundled samples export into the temporary directory). An opened
experiment that is missing or holds no runs stops the notebook; it never falls back to the
sample.

:func:`need` stops a notebook whose study the experiment cannot support: Jupyter shows its
one-line message (no traceback) and runs no further cell (the kernel aborts the cells queued
after an error). Under nbclient the stop is a ``CellExecutionError`` whose ``ename`` is
``NotebookStop``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import rundir
from analysis.errors import ScalescopeError
from instrumentation.progress import printable

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
DATA = ROOT / "data"
#: The one variable: the experiments every notebook shows (a JSON list of paths).
ENV_VAR = "SCALESCOPE_EXPERIMENTS"
#: The folder next to an experiment that the notebooks export into, one subfolder each.
EXPORT_DIRNAME = "notebooks-export"
#: How to get Dask when a notebook cell wants it.
DASK_INSTALL = "pip install 'scalescope[scale]'  (or: make setup-dev)"

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
    "scope": ("08_why_not_ideal",),
}


# ------------------------------------------------------------------ stopping cleanly
class NotebookStop(Exception):
    """The notebook cannot go on (its study needs runs the experiment does not have, or the
    experiment cannot be read). IPython shows ``_render_traceback_``'s one line instead of
    a traceback; the kernel then skips the cells queued after it."""

    def _render_traceback_(self) -> list[str]:
        return [f"Stopped: {self}"]


def need(condition: Any, message: str) -> None:
    """Stop the notebook here with ``message`` unless ``condition`` holds.

    ``message`` says what the study needs and what the experiment has, e.g.
    ``need(len(sizes) > 0, "this study needs runs that vary the input size (...)")``.
    """
    if not condition:
        raise NotebookStop(message)


class Note(str):
    """A line a notebook shows in place of a table or chart the experiment has nothing for."""

    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        return f"*{self}*"


def note(message: str) -> Note:
    """``message`` as a cell's output (plain text, italic in Jupyter), e.g.
    ``table if len(table) else note("no GPUs in these runs: ...")``."""
    return Note(message)


# ------------------------------------------------------------------ what a notebook shows
@dataclass(frozen=True)
class Opened:
    """What :func:`resolve` chose: the experiment directories, why, and the export folder."""

    dirs: tuple[Path, ...]
    why: str
    export: Path
    sample: bool

    def line(self) -> str:
        """The one line a notebook prints about what it shows."""
        shown = ", ".join(_short(d) for d in self.dirs)
        what = f"the bundled sample {shown}" if self.sample else shown
        return f"Showing {what} ({self.why}); exports go to {self.export}"


def _short(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def _as_paths(value: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    items = [value] if isinstance(value, (str, os.PathLike)) else list(value)
    return [Path(p).expanduser().resolve() for p in items]


def env_value(dirs: Sequence[str | os.PathLike[str]]) -> str:
    """``$SCALESCOPE_EXPERIMENTS`` for ``dirs``: a JSON list (a name that is not UTF-8 kept
    through its escaped surrogates), split again by :func:`env_experiments` exactly."""
    import json

    return json.dumps([os.fspath(d) for d in dirs])


def env_experiments() -> list[Path]:
    """The experiments in ``$SCALESCOPE_EXPERIMENTS`` (empty when unset): a JSON list of paths
    (as :func:`env_value` writes it); set by hand, one existing directory, else paths
    separated by ``os.pathsep``."""
    import json

    raw = os.environ.get(ENV_VAR, "")
    if raw.lstrip().startswith("["):
        try:
            items = json.loads(raw)
        except ValueError:
            raise NotebookStop(f"${ENV_VAR} starts with '[' but is not a JSON list of paths") from None
        if not isinstance(items, list) or not all(isinstance(p, str) for p in items):
            raise NotebookStop(f"${ENV_VAR} is not a JSON list of paths")
        return _as_paths([p for p in items if p.strip()])
    if raw.strip() and Path(raw).expanduser().is_dir():
        return _as_paths([raw])
    return _as_paths([p for p in raw.split(os.pathsep) if p.strip()])


def resolve(
    experiments: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None,
    *,
    sample: str | Sequence[str],
    export: str | os.PathLike[str] | None = None,
) -> Opened:
    """Apply the module's rule (parameters cell, then ``$SCALESCOPE_EXPERIMENTS``, then the
    sample ``data/<sample>``) without reading anything. ``export`` set by the user wins too."""
    env = env_experiments()
    if experiments is not None:
        dirs, is_sample = _as_paths(experiments), False
        why = "EXPERIMENTS in the parameters cell" + (f", over ${ENV_VAR}" if env else "")
    elif env:
        dirs, is_sample = env, False
        why = f"opened by `scalescope notebooks`: ${ENV_VAR}"
    else:
        names = [sample] if isinstance(sample, str) else list(sample)
        dirs, is_sample = [(DATA / n).resolve() for n in names], True
        why = "no experiment opened: `scalescope notebooks EXP` or EXPERIMENTS in the parameters cell"
    if not dirs:
        raise NotebookStop("EXPERIMENTS in the parameters cell is empty: give an experiment directory")
    if export is not None:
        out = Path(export).expanduser().resolve()
    elif dirs[0].is_relative_to(DATA):  # a bundled sample: never into the checkout
        out = Path(tempfile.gettempdir()) / "scalescope" / EXPORT_DIRNAME / "-".join(dirs[0].relative_to(DATA).parts)
    else:
        out = dirs[0] / EXPORT_DIRNAME
    return Opened(tuple(dirs), why, out, is_sample)


def open_experiment(
    experiments: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None = None,
    *,
    sample: str | Sequence[str] = "sample_sweep",
    export: str | os.PathLike[str] | None = None,
    include_failed: bool = False,
):
    """The RunSet a notebook shows and the folder it exports into, chosen by the module's rule.

    Prints one line saying which experiment(s) and why. Stops the notebook (:class:`NotebookStop`)
    when a chosen directory is missing or holds no runs.

    Returns
    -------
    (RunSet, pathlib.Path)
    """
    from analysis.runset import RunSet

    opened = resolve(experiments, sample=sample, export=export)
    print(opened.line())
    missing = [d for d in opened.dirs if not d.exists()]
    need(not missing, f"{', '.join(map(str, missing))} does not exist ({opened.why})")
    try:
        rs = RunSet.from_dirs(list(opened.dirs), include_failed=include_failed)
    except ScalescopeError as exc:
        raise NotebookStop(f"{exc} ({opened.why})") from None
    return rs, opened.export


def pick_run(runs, run_id: str | None = None) -> str:
    """``run_id`` when the runs table has it, else the usable run with the most ranks
    (preferring Horovod, then DDP), so a notebook's default works on any experiment."""
    ok = runs[runs["status"] == "ok"]
    if run_id is not None and run_id in set(ok["run_id"]):
        return run_id
    need(not ok.empty, "the experiment has no successful run")
    order = ok.assign(_fw=ok["framework"].map({"horovod": 0, "ddp": 1}).fillna(2))
    return str(order.sort_values(["n_ranks", "_fw"], ascending=[False, True])["run_id"].iloc[0])


# ------------------------------------------------------------------ the report's studies
def study(key: str, ctx, *, required: bool = True):
    """The report's study ``key`` on ``ctx`` (:func:`analysis.studies.run_study`: the same
    tables and figures as the report's section), its notes printed. When the experiment
    cannot support it, a ``required`` study stops the notebook with the report's reason;
    otherwise the reason is printed and the skipped section returned."""
    from analysis.studies import run_study

    sec = run_study(key, ctx)
    if sec.skipped:
        need(not required, f"{sec.title}: {sec.skipped}")
        print(f"{sec.title}: skipped, {sec.skipped}")
    elif sec.notes:
        print("\n".join(sec.notes))
    return sec


def table_or_note(sec, name: str):
    """``sec.table(name)``, or a note saying the experiment has nothing for it."""
    if name in sec.table_names:
        return sec.table(name)
    return note(f"These runs give no {name} table in \"{sec.title}\"" + (f": {sec.skipped}" if sec.skipped else
                                                                          " (its notes say why)"))


def figure_or_note(sec, name: str):
    """``sec.figure(name)``, or a note saying the experiment has nothing for it."""
    if name in sec.figure_names:
        return sec.figure(name)
    return note(f"These runs give no {name} figure in \"{sec.title}\"" + (f": {sec.skipped}" if sec.skipped else
                                                                           " (its notes say why)"))


def export_sections(sections: Sequence, folder: str | os.PathLike[str], *, static: bool = True) -> Path:
    """The sections' tables and figures into ``folder``, by the report's own export
    (:func:`analysis.report.export`: the same files, names and captions); prints where, or
    why the figures were not written."""
    from analysis.report import export

    out = Path(folder)
    why = export([s for s in sections if not s.skipped], out, static=static)
    print(f"exported to {out}" + (f" ({why})" if why else ""))
    return out


# ------------------------------------------------------------------ Dask, optional
def local_dask(n_workers: int = 2):
    """A small in-process Dask ``(client, cluster)``, or ``(None, None)`` with one line saying
    how to install Dask when it is not installed (the notebook goes on without it)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        print(f"Dask is not installed, so this cell is skipped (the rest of the notebook does "
              f"not need it). To run it: {DASK_INSTALL}")
        return None, None
    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=False,
                           dashboard_address=None)
    return Client(cluster), cluster


# ------------------------------------------------------------------ notebook 07's files
@dataclass(frozen=True)
class ToolFiles:
    """Other tools' files for notebook 07 (None where there is none) and its export folder."""

    kineto: Path | None
    nsys: Path | None
    nvprof: Path | None
    smi: Path | None
    export: Path


CORPUS = ROOT.parent / "shared" / "corpus"
#: The real files notebook 07 reads when no experiment is open (present in the project's
#: development checkout only; missing ones are skipped).
CORPUS_FILES = {
    "kineto": CORPUS / "kineto" / "param_dlrm_8rank",
    "nsys": CORPUS / "nsys" / "flame__torch-ex.sqlite",
    "nvprof": CORPUS / "nvprof" / "cudatimeline__trace.csv",
    "smi": CORPUS / "nvml_smi" / "nanogpt-pr643-f4f827d__gpu_metrics.csv",
}


def _first(paths: Iterable[Path]) -> Path | None:
    return next(iter(sorted(paths)), None)


def tool_files(
    experiments: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None = None,
    *,
    export: str | os.PathLike[str] | None = None,
    **paths: str | os.PathLike[str] | None,
) -> ToolFiles:
    """The files notebook 07 reads: ``paths`` set in its parameters cell (``kineto``,
    ``nsys``, ``nvprof``, ``smi``) win; else, with an experiment opened (the module's rule),
    the first run's PyTorch profiler traces (``--torch-profiler``) and Nsight Systems export
    (``--nsys``); else the real-file corpus. Prints where they come from; stops when an opened
    experiment has none and no path was set."""
    unknown = set(paths) - set(CORPUS_FILES)
    if unknown:
        raise TypeError(f"tool_files: unknown file kinds {sorted(unknown)}; use {sorted(CORPUS_FILES)}")
    given = {k: Path(v).expanduser().resolve() for k, v in paths.items() if v is not None}
    env = env_experiments()
    shown = False  # the line saying which experiment was printed
    if given:
        found = given
        why = "paths in the parameters cell" + (f", over ${ENV_VAR}" if env else "")
        out = Path(export) if export else Path(tempfile.gettempdir()) / "scalescope" / EXPORT_DIRNAME
    elif experiments is not None or env:
        opened = resolve(experiments, sample="sample_sweep", export=export)
        print(opened.line())
        shown = True
        runs = [r for d in opened.dirs for r in sorted(d.glob(f"*/{rundir.RUN_MANIFEST}"))]
        kineto = _first(r.parent / rundir.TORCH_PROFILER_DIR for r in runs
                        if (r.parent / rundir.TORCH_PROFILER_DIR).is_dir())
        nsys = _first(p for r in runs for p in (r.parent / rundir.NSYS_DIR).glob(rundir.NSYS_GLOB))
        found = {k: v for k, v in {"kineto": kineto, "nsys": nsys}.items() if v is not None}
        need(found, f"{', '.join(map(_short, opened.dirs))} holds no other tools' files: sweep with "
                    "--torch-profiler (Kineto traces) or --nsys (Nsight Systems), or set the paths in "
                    "the parameters cell")
        out = opened.export
    else:
        found = {k: v for k, v in CORPUS_FILES.items() if v.exists()}
        why = "no experiment opened: the project's real-file corpus"
        need(found, f"no experiment opened and no corpus at {CORPUS}: set the paths in the parameters "
                    "cell, or open an experiment swept with --torch-profiler or --nsys")
        out = Path(export) if export else Path(tempfile.gettempdir()) / "scalescope" / EXPORT_DIRNAME
    listed = ", ".join(f"{k} {_short(v)}" for k, v in found.items())
    print(f"Reading {listed}" + ("" if shown else f" ({why}); exports go to {out}"))
    return ToolFiles(**{k: found.get(k) for k in CORPUS_FILES}, export=Path(out))


# ------------------------------------------------------------------ the command
def check_experiment(path: str | os.PathLike[str]) -> Path:
    """``path`` resolved, or a ScalescopeError when it is not an experiment directory."""
    exp = Path(path).expanduser().resolve()
    if not exp.is_dir():
        raise ScalescopeError(f"{exp}: no such directory")
    if rundir.kind_of(exp) not in ("run", "experiment", "runs"):
        raise ScalescopeError(f"{exp}: not an experiment directory (no experiment.json or run directories)")
    return exp


def jupyter_command(*, port: int | None = None, no_browser: bool = False) -> list[str]:
    """The ``jupyter lab`` command line on the notebooks folder."""
    jupyter = Path(sys.executable).parent / "jupyter"
    if not jupyter.exists():
        found = shutil.which("jupyter")
        if not found:
            raise ScalescopeError("JupyterLab is not installed: pip install 'scalescope[notebooks]'")
        jupyter = Path(found)
    cmd = [str(jupyter), "lab", f"--notebook-dir={NOTEBOOKS}"]
    if port is not None:
        cmd.append(f"--port={port}")
    if no_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd


def main(experiments: Sequence[str] = (), *, port: int | None = None, no_browser: bool = False) -> int:
    """``scalescope notebooks EXP [EXP ...]``: JupyterLab with every notebook on ``EXP``."""
    dirs = [check_experiment(e) for e in experiments]
    cmd = jupyter_command(port=port, no_browser=no_browser)
    env = dict(os.environ)
    if dirs:
        env[ENV_VAR] = env_value(dirs)
        print(printable(f"every notebook shows {', '.join(map(str, dirs))} (${ENV_VAR}; an EXPERIMENTS set in a "
                        f"notebook's parameters cell wins); exports go to {dirs[0] / EXPORT_DIRNAME}"))
    elif env.get(ENV_VAR):
        print(printable(f"every notebook shows ${ENV_VAR}={env[ENV_VAR]}"))
    else:
        print("no experiment given: the notebooks show the bundled samples in data/ "
              "(scalescope notebooks EXP [EXP ...] to show yours)")
    # JupyterLab replaces this process (as `exec` in a shell script): the PID the user sees is the
    # server's, so stopping `scalescope notebooks` by its PID stops JupyterLab (a child would
    # keep serving on the port after its parent was killed)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(cmd[0], cmd, env)
    return 0  # reached only where execve is replaced (tests)
