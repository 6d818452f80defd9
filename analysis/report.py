"""``scalescope report EXPERIMENT_DIR``: one self-contained HTML report (plotly.js inlined
once, every figure interactive) plus ``export/`` with PDF/SVG/PNG figures and LaTeX/CSV
tables.

Every study (:mod:`analysis.studies`) runs when the experiment has the data it needs;
otherwise the report says it was skipped and why. Failed runs are listed with the tail of
their logs. :func:`build_report` is :func:`load`, :func:`run_studies`, :func:`export` and
:func:`render`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import metrics as M
from analysis import tables
from analysis.errors import ScalescopeError, recording
from analysis.export import NO_BROWSER, export_many, export_table, find_browser
from analysis.runset import RunSet
from analysis.studies import STUDIES, Context, Section, Skip, event_tables
from instrumentation.progress import printable

__all__ = ["STUDIES", "build_report", "export", "load", "render", "run_studies"]

TEMPLATE = "report.html.j2"


# ---------------------------------------------------------------- rendering

def _fmt(v: object) -> str:
    """One value for the page (exit codes and the like); tables go through :func:`_table_html`."""
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        return str(int(v)) if float(v).is_integer() else f"{v:.4g}"
    return str(v)


def _table_html(df: pd.DataFrame, **kw) -> str:
    """A table for people (:func:`analysis.tables.to_html`): the same formatting layer as the
    LaTeX export, human headers with units, notes on odd numbers under it; escaped."""
    return tables.to_html(df, **kw)


def _render(context: dict) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        finalize=_shown,
    )
    return env.get_template(TEMPLATE).render(**context)


def _shown(value: object) -> object:
    """Every value the page shows goes through the terminal's filter
    (:func:`instrumentation.progress.printable`): a bidi override in a label cannot make it
    read as another, a control character or a file name that is not UTF-8 shows escaped.
    Markup built here (tables, figures) was filtered where it was built."""
    import markupsafe

    if isinstance(value, markupsafe.Markup) or not isinstance(value, str):
        return value
    return printable(value)


#: A JSON escape (inside a figure's data) of a character :func:`printable` escapes, not
#: itself escaped (an even number of backslashes before it); newline and tab are kept.
_JSON_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u(00[01][0-9a-fA-F]|007[fF]|00[89][0-9a-fA-F]|061[cC]|200[eEfF]"
                          r"|202[a-eA-E]|206[6-9])")
#: The same characters written raw (an encoder that keeps non-ASCII as it is).
_JSON_RAW = {c: f"\\\\u{c:04x}" for c in [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), 0x061C,
                                         0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A),
                                         *range(0xD800, 0xE000)]}


def _figure_html(fig, div_id: str) -> str:
    """A figure for the page, its labels filtered as the rest of the page: a bidi override or
    control character in a label shows as ``\\u202e`` rather than acting (the figure's data
    is JSON in a script, where ``\\u202e`` would become the character again: its backslash
    is escaped)."""
    text = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config={"responsive": True,
                       "displaylogo": False})
    text = _JSON_ESCAPE.sub(lambda m: m[0] if m[2] in ("000a", "000A", "0009") else f"{m[1]}\\\\u{m[2].lower()}",
                            text)
    return text.translate(_JSON_RAW)


def _own_warnings(sec: Section, caught: list, first: int) -> None:
    """Warnings a study's own analysis raised (not the data reading it triggered) become notes
    of that study instead of report-level warnings."""
    def own(w) -> bool:
        path = Path(str(w.filename))
        return path.parent.name in ("metrics", "studies")

    mine = [w for w in caught[first:] if issubclass(w.category, UserWarning) and own(w)]
    for w in mine:
        caught.remove(w)
        note = f"Warning: {w.message}"
        if note not in sec.notes:
            sec.notes.append(note)


def load(dirs: Sequence[str | Path]) -> Context:
    """Load the experiment for the studies: the RunSet, its events (or why they could not be
    read) and the per-run table every study compares (:func:`analysis.metrics.run_summary`).
    Warnings about the runs (NCCL warnings, a run that resumed from state it did not create)
    are raised here, for the report's warning list."""
    rs = RunSet.from_dirs(dirs)
    for run_id, text in rs.runs[["run_id", "comm_warnings"]].dropna().itertuples(index=False):
        warnings.warn(f"{run_id}: {text}", UserWarning, stacklevel=1)  # NCCL WARN lines, sockets despite IB
    for run_id, note in rs.runs[["run_id", "left_behind"]].dropna().itertuples(index=False):
        warnings.warn(f"{run_id}: {note}", UserWarning, stacklevel=1)  # its timings may include them
    for run_id, first in rs.runs[["run_id", "resumed_from_epoch"]].dropna().itertuples(index=False):
        if int(first) > 1:  # 0 and 1 are where scripts count from
            warnings.warn(f"{run_id}: its first epoch is labelled {first}, not 0 or 1: it may have resumed from state "
                          "it did not create (a checkpoint in its working directory; see `scalescope sweep --cwd`)",
                          UserWarning, stacklevel=1)
    for run_id, text in rs.runs[["run_id", "shared_reads"]].dropna().itertuples(index=False):
        warnings.warn(f"{run_id}: it read {text} in the shared working directory: the runs are not independent "
                      "(`scalescope sweep --cwd run` gives each run a directory of its own)", UserWarning, stacklevel=1)
    # the studies' tables of the events, run by run: never every run's events at once
    tables, events_error = None, None
    try:
        tables = rs.reduce_tables(event_tables, runs=rs.usable_runs(), epochs=rs.epochs)
    except Exception as exc:
        events_error = f"{type(exc).__name__}: {exc}"
    steps = None if tables is None else tables["steps"]
    try:
        if tables is None:
            per_run = M.run_summary(rs, steps=False)
        elif isinstance(steps, pd.DataFrame):
            per_run = M.run_summary(rs, step_rows=steps)
        else:  # the step table failed on a run: from all events, as before
            per_run = M.run_summary(rs)
    except Exception as exc:
        per_run = pd.DataFrame(columns=[*M.scaling.RUN_META, "epoch_time_s", "throughput_samples_per_s",
                                        "samples_per_epoch"])
        events_error = events_error or f"epoch metrics unreadable: {exc}"
    return Context(rs, tables, events_error, per_run)


def run_studies(ctx: Context, caught: list) -> list[Section]:
    """Every study of :data:`STUDIES` on ``ctx``: a study the experiment cannot support is a
    skipped section saying why, one that fails says how (never aborts the report); the
    warnings a study's own analysis raised (out of ``caught``) become its notes."""
    sections: list[Section] = []
    for key, title, study in STUDIES:
        first = len(caught)
        try:
            sec = study(ctx)
        except Skip as exc:
            sec = Section(key, title, skipped=str(exc))
        except Exception as exc:
            sec = Section(key, title, skipped=f"failed with {type(exc).__name__}: {exc}",
                          notes=[traceback.format_exc(limit=3)])
        sec.key, sec.title = key, title
        _own_warnings(sec, caught, first)
        sections.append(sec)
    return sections


#: The report's record of the files it wrote into ``export/`` (one name a line): the next
#: report into the same folder removes those it does not write again, and nothing else.
WRITTEN = ".scalescope-written"


def export(sections: Sequence[Section], export_dir: Path, *, static: bool) -> str | None:
    """Write every table (CSV and LaTeX, always) and, with ``static`` and a browser, every
    figure (PDF/SVG/PNG) into ``export_dir``; returns the note saying why figures were not
    exported, or None.

    ``export_dir`` then holds only this report: what an earlier report wrote there (listed in
    its ``.scalescope-written``) and this one did not write again is removed (the export of a
    study the data no longer has); a file the report never wrote (the user's) is kept."""
    written: list[Path] = []
    try:
        for sec in sections:
            for name, df, caption in sec.tables:
                written += export_table(df, export_dir / name,
                                        caption=f"{sec.title}: {caption}" if caption else sec.title,
                                        label=f"scalescope-{name}", main=tables.MAIN_COLUMNS.get(name, ()))
        figures = {name: fig for sec in sections for name, fig in sec.figures}
        if not static:
            return "Static figure export was skipped (--no-static)."
        if find_browser() is None:
            return f"Static figure export was skipped: {NO_BROWSER}"
        if figures:
            try:
                written += export_many(figures, export_dir)
            except ScalescopeError as exc:
                return f"Static figure export failed and was skipped: {exc}"
        return None
    finally:
        _keep_only(export_dir, written)


def _keep_only(export_dir: Path, written: Sequence[Path]) -> None:
    """Remove what an earlier report wrote into ``export_dir`` and this one did not; record
    what this one wrote. Only plain files directly in ``export_dir`` named in the record go
    (never a link's target, never a file of the user's)."""
    from analysis import atomic

    record = export_dir / WRITTEN
    mine = {Path(p).name for p in written}
    before: set[str] = set()
    try:
        if record.is_file() and not record.is_symlink():
            before = {n for n in record.read_text(encoding="utf-8", errors="surrogateescape").splitlines() if n}
    except OSError:
        pass
    for name in sorted(before - mine):
        f = export_dir / name
        if Path(name).name != name or name in ("", ".", "..", WRITTEN):
            continue
        try:
            if f.is_symlink() or f.is_file():
                f.unlink()
        except OSError:
            continue
    if mine or before:
        export_dir.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(record, "".join(f"{n}\n" for n in sorted(mine)).encode("utf-8", "surrogateescape"))


def _rendered(sec: Section) -> dict:
    figs = [{"name": name, "html": _figure_html(fig, f"fig-{name}")} for name, fig in sec.figures]
    return {"key": sec.key, "title": sec.title, "intro": sec.intro, "skipped": sec.skipped, "notes": sec.notes,
            "figures": figs,
            "tables": [{"name": n, "caption": c, "html": _table_html(df)} for n, df, c in sec.tables]}


def render(ctx: Context, sections: Sequence[Section], dirs: Sequence[str | Path], *, damaged: pd.DataFrame,
           data_warnings: list[str], static_note: str | None) -> str:
    """The HTML page of the report (plotly.js inlined once)."""
    import plotly.offline

    rs = ctx.rs
    runs_cols = ["run_id", "status", "config_backend", "n_ranks", "n_nodes", "batch_size", "repeat", "wall_s",
                 "threads_per_rank", "resumed_from_epoch"]
    ok = (rs.runs["status"] == "ok") & ~rs.runs["run_id"].isin(damaged["run_id"].dropna())
    return _render({
        "title": f"scalescope report: {', '.join(Path(d).name for d in dirs)}",
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "experiment_dirs": [str(Path(d).resolve()) for d in dirs],
        "plotlyjs": plotly.offline.get_plotlyjs(),
        "runs_table": _table_html(rs.runs[[c for c in runs_cols if c in rs.runs.columns]]),
        "n_runs": len(rs.runs), "n_ok": int(ok.sum()),
        "failed": [{"run_id": r.run_id, "status": r.status, "exit_code": _fmt(r.exit_code),
                    "cause": getattr(r, "failure_cause", None), "rank": _fmt(getattr(r, "failure_rank", None)),
                    "log": getattr(r, "failure_log", None), "hint": getattr(r, "failure_hint", None),
                    "log_tail": r.log_tail or "(no log)"} for r in rs.failed_runs().itertuples()],
        "damaged_table": _table_html(damaged) if len(damaged) else None,
        "n_damaged": len(damaged),
        "sections": [_rendered(sec) for sec in sections],
        "skipped": [(s.title, s.skipped) for s in sections if s.skipped],
        "events_error": ctx.events_error,
        "static_note": static_note,
        "data_warnings": data_warnings,
        "n_figures": sum(len(sec.figures) for sec in sections),
    })


def _check_out(out: Path, root: Path) -> None:
    """ScalescopeError naming the folder when the report would be written outside the folder
    the user named (``--out``, else the experiment): ``report/`` or its ``export/`` a
    symbolic link out of it (a shared experiment's links are never written through)."""
    from instrumentation.paths import LEAVES, outside

    for d in (out, out / "export"):
        if (d.is_symlink() or d.exists()) and outside(d, root):
            raise ScalescopeError(f"{d}: {LEAVES}; the report is not written there (give --out)")


def build_report(experiment_dir: str | Path | Sequence[str | Path], out_dir: str | Path | None = None, *,
                 static: bool = True) -> Path:
    """Build the HTML report of an experiment and its ``export/`` folder.

    Parameters
    ----------
    experiment_dir
        An experiment directory (``experiment.json``), a run directory, or several.
    out_dir
        Where to write; default ``<experiment_dir>/report``.
    static
        Also write PDF/SVG/PNG figures (needs Chromium; skipped with a note when missing).

    Returns
    -------
    pathlib.Path
        The ``index.html`` written (to a temporary file renamed into place: a full disk or
        a Ctrl-C leaves the previous page, or none, never a truncated one).
    """
    from analysis import atomic

    dirs = [experiment_dir] if isinstance(experiment_dir, (str, Path)) else list(experiment_dir)
    out = Path(out_dir) if out_dir is not None else Path(dirs[0]) / "report"
    _check_out(out, Path(dirs[0]) if out_dir is None else out)
    out.mkdir(parents=True, exist_ok=True)
    with recording() as caught:
        ctx = load(dirs)
        sections = run_studies(ctx, caught)
        damaged = ctx.rs.damaged  # after the studies loaded the data: load-time damage included
    data_warnings = sorted({str(w.message) for w in caught if issubclass(w.category, UserWarning)})
    static_note = export(sections, out / "export", static=static)
    page = out / "index.html"
    atomic.write_text(page, render(ctx, sections, dirs, damaged=damaged, data_warnings=data_warnings,
                                   static_note=static_note))
    return page


# ---------------------------------------------------------------- command line

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``scalescope report``."""
    parser.add_argument("experiment_dir", nargs="+", help="experiment directory (or run directories)")
    parser.add_argument("--out", default=None, help="output directory (default: EXPERIMENT_DIR/report)")
    parser.add_argument("--no-static", action="store_true",
                        help="do not export PDF/SVG/PNG figures (no browser needed)")


def run(args: argparse.Namespace) -> int:
    """Run ``scalescope report`` with parsed arguments; returns the exit status."""
    try:
        page = build_report(args.experiment_dir if len(args.experiment_dir) > 1 else args.experiment_dir[0],
                            args.out, static=not args.no_static)
    except ScalescopeError as exc:
        import sys

        print(printable(f"scalescope report: error: {exc}"), file=sys.stderr)
        return 1
    print(printable(f"report written to {page}"))
    return 0
