"""Static export: figures to PDF/SVG/PNG through kaleido (which drives a headless
Chromium) at a thesis' single-column size, tables to LaTeX (:mod:`analysis.tables`) and CSV
that is safe to open in a spreadsheet. Every file goes through :mod:`analysis.atomic`.

Kaleido 1.x needs a Chromium-based browser. It uses ``$BROWSER_PATH`` when set, otherwise
searches the usual places (``chromium``, ``google-chrome``...) and the copy that
``kaleido_get_chrome`` downloads.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from analysis.atomic import replacing, write_text
from analysis.errors import ScalescopeError

if TYPE_CHECKING:  # plotly is imported where figures are written, not for CSV and LaTeX
    import plotly.graph_objects as go

FORMATS: tuple[str, ...] = ("pdf", "svg", "png")

NO_BROWSER = (
    "static figure export needs a Chromium-based browser and none was found. Install one "
    "(Debian/Ubuntu: `apt-get install chromium`; or run `kaleido_get_chrome` / "
    "`plotly_get_chrome` to download Chrome for Testing), or point $BROWSER_PATH at an "
    "existing chrome/chromium executable. The interactive HTML report does not need it."
)


def find_browser() -> str | None:
    """Path of the browser kaleido will use, or ``None`` when there is none."""
    env = os.environ.get("BROWSER_PATH")
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    try:
        from choreographer.browsers.chromium import Chromium

        found = Chromium.find_browser(skip_local=False)
        if found:
            return str(found)
    except Exception:  # choreographer missing or its search failed: fall back to PATH
        pass
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def _check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    bad = [f for f in formats if f not in ("pdf", "svg", "png", "jpeg", "webp")]
    if bad:
        raise ScalescopeError(f"unknown image format(s) {bad}; use pdf, svg, png, jpeg or webp")
    return tuple(formats)


#: Static figures are drawn for one column of a thesis: 6.3 in wide (A4 or letter with
#: 2.5-3 cm margins), at 300 dpi. In layout pixels (96 per inch, plotly's unit) that is
#: :data:`PRINT_WIDTH_PX` wide, scaled by :data:`PRINT_SCALE` for a PNG of 1890 pixels; a 13 px
#: label prints at about 10 pt. PDF and SVG are vector: the same layout at any size.
PRINT_WIDTH_IN: float = 6.3
PRINT_DPI: int = 300
PRINT_WIDTH_PX: int = round(PRINT_WIDTH_IN * 96)
PRINT_SCALE: float = PRINT_DPI / 96


def _print_size(fig: go.Figure) -> tuple[int, int]:
    """(width, height) in layout pixels for the static export: the print width and the
    figure's own height (its width when it has one and is narrower)."""
    w = fig.layout.width or PRINT_WIDTH_PX
    return min(int(w), PRINT_WIDTH_PX), int(fig.layout.height or 450)


def export_many(
    figures: Mapping[str, go.Figure], out_dir: str | os.PathLike[str], *, formats: Sequence[str] = FORMATS,
    scale: float = PRINT_SCALE,
) -> list[Path]:
    """Write several figures in one browser session: ``out_dir/<name>.<format>``, each at the
    print size (:data:`PRINT_WIDTH_IN` inches at :data:`PRINT_DPI` dpi). Every file is written
    to a temporary file and renamed into place (:mod:`analysis.atomic`): an interrupted export
    leaves the previous files or none.

    Raises
    ------
    ScalescopeError
        When no browser is found or kaleido fails; the message says how to get a browser.
    OutputError
        When ``out_dir`` cannot be written (names the path).
    """
    formats = _check_formats(formats)
    out = Path(out_dir)
    if not figures:
        return []
    browser = find_browser()
    if browser is None:
        raise ScalescopeError(NO_BROWSER)
    import plotly.io as pio

    jobs = [(fig, out / f"{name}.{fmt}", fmt) for name, fig in figures.items() for fmt in formats]
    env_before = os.environ.get("BROWSER_PATH")
    os.environ["BROWSER_PATH"] = browser  # the browser we checked is the one kaleido uses
    try:
        with contextlib.ExitStack() as stack:
            tmps = [stack.enter_context(replacing(path)) for _, path, _ in jobs]
            sizes = [_print_size(fig) for fig, _, _ in jobs]
            try:
                pio.write_images([f for f, _, _ in jobs], tmps, format=[fmt for _, _, fmt in jobs], scale=scale,
                                 width=[w for w, _ in sizes], height=[h for _, h in sizes])
            except Exception as exc:
                name = type(exc).__name__
                if "ChromeNotFound" in name or "BrowserFailed" in name or "browser" in str(exc).lower():
                    raise ScalescopeError(f"{NO_BROWSER} (kaleido said: {name}: {exc})") from None
                raise ScalescopeError(f"static export with kaleido failed: {name}: {exc}") from exc
            missing = [path for (_, path, _), tmp in zip(jobs, tmps, strict=True)
                       if not tmp.is_file() or tmp.stat().st_size == 0]
            if missing:
                raise ScalescopeError("kaleido wrote no file for: " + ", ".join(map(str, missing)))
    finally:
        if env_before is None:
            os.environ.pop("BROWSER_PATH", None)
        else:
            os.environ["BROWSER_PATH"] = env_before
    return [path for _, path, _ in jobs]


def export(fig: go.Figure, path: str | os.PathLike[str], formats: Sequence[str] = FORMATS, *,
           scale: float = 2.0) -> list[Path]:
    """Write one figure as ``<path>.pdf``, ``.svg`` and ``.png`` (any suffix of ``path``
    is replaced).

    Returns
    -------
    list of pathlib.Path
        The files written.

    Raises
    ------
    ScalescopeError
        When no Chromium-based browser is available (with how to get one).
    """
    path = Path(path)
    return export_many({path.stem if path.suffix[1:] in (*FORMATS, "jpeg", "webp") else path.name: fig},
                       path.parent, formats=formats, scale=scale)


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: object) -> object:
    """A cell a spreadsheet would evaluate as a formula (text starting with ``=``, ``+``, ``-``,
    ``@``, a tab or a carriage return) prefixed with ``'`` (the OWASP rule); plain numbers,
    negative ones included, and everything else unchanged."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.match(value):
        return "'" + value
    return value


def safe_csv_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell and column name passed through :func:`spreadsheet_safe`;
    numeric columns untouched (a copy only where something changes)."""
    out = df
    for col in df.columns:
        s = df[col]
        if pd.api.types.is_object_dtype(s) or pd.api.types.is_string_dtype(s) \
                or isinstance(s.dtype, pd.CategoricalDtype):
            fixed = s.astype(object).map(spreadsheet_safe)
            if not fixed.equals(s.astype(object)):
                out = out.copy() if out is df else out
                out[col] = fixed
    names = [spreadsheet_safe(str(c)) if isinstance(c, str) else c for c in out.columns]
    if names != list(out.columns):
        out = out.copy() if out is df else out
        out.columns = names
    return out


def write_csv(df: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write ``df`` as CSV (full precision, no index) safe to open in a spreadsheet
    (:func:`safe_csv_frame`), atomically (:func:`analysis.atomic.replacing`)."""
    path = Path(path)
    safe = safe_csv_frame(df)
    with replacing(path) as tmp:
        safe.to_csv(tmp, index=False)
    return path


def export_table(df: pd.DataFrame, path: str | os.PathLike[str], *, caption: str | None = None,
                 label: str | None = None, columns: Sequence[str] | None = None, main: Sequence[str] = (),
                 time_unit: str | None = None) -> list[Path]:
    """Write a table as ``<path>.tex`` for a thesis and ``<path>.csv`` (every column, full
    precision).

    The ``.tex`` is a ``table`` float for ``\\input`` under :data:`analysis.tables.LATEX_PREAMBLE`
    (``booktabs`` and ``graphicx``): the columns a reader needs that fit a default article page
    (the others named as being in the CSV), human headers with units, numbers rounded to what
    their uncertainty supports, intervals under their values, a ``\\label`` (``tab:<label or
    name>``) and everything escaped (:func:`analysis.tables.to_latex`). ``columns``, ``main``
    and ``time_unit`` go to :func:`analysis.tables.layout`. Text cells a spreadsheet would
    evaluate are neutralised in the CSV (:func:`spreadsheet_safe`). Both files are written
    atomically.

    Returns
    -------
    list of pathlib.Path
        ``[tex, csv]``.
    """
    from analysis.tables import to_latex

    path = Path(path)
    stem = path.with_suffix("") if path.suffix in (".tex", ".csv") else path
    csv = stem.with_name(stem.name + ".csv")
    tex = stem.with_name(stem.name + ".tex")
    write_csv(df, csv)
    latex = to_latex(df, caption=caption, label=label or stem.name, csv_name=csv.name, columns=columns, main=main,
                     time_unit=time_unit)
    write_text(tex, latex)
    return [tex, csv]


def export_bundle(
    out_dir: str | os.PathLike[str],
    *,
    figures: Mapping[str, go.Figure] | None = None,
    tables: Mapping[str, pd.DataFrame] | None = None,
    formats: Sequence[str] = FORMATS,
) -> list[Path]:
    """Write a notebook's or report's figures and tables into one folder.

    Tables always go out as LaTeX and CSV. Figures go out as ``formats`` when a browser is
    available; without one they are skipped with a warning that says how to get one (the
    tables are still written), so a notebook never fails at its export cell for that reason.

    Returns
    -------
    list of pathlib.Path
        Every file written.
    """
    import warnings

    out = Path(out_dir)
    written: list[Path] = []
    for name, df in (tables or {}).items():
        written.extend(export_table(df, out / name))
    if figures:
        if find_browser() is None:
            warnings.warn(f"figures not exported: {NO_BROWSER}", UserWarning, stacklevel=2)
        else:
            written.extend(export_many(figures, out, formats=formats))
    return written
