"""Static export: figures to PDF/SVG/PNG through kaleido (which drives a headless
Chromium), tables to LaTeX and CSV.

Kaleido 1.x needs a Chromium-based browser. It uses ``$BROWSER_PATH`` when set, otherwise
searches the usual places (``chromium``, ``google-chrome``...) and the copy that
``kaleido_get_chrome`` downloads.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from analysis.errors import ScalescopeError

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


def export_many(
    figures: Mapping[str, go.Figure], out_dir: str | os.PathLike[str], *, formats: Sequence[str] = FORMATS,
    scale: float = 2.0,
) -> list[Path]:
    """Write several figures in one browser session: ``out_dir/<name>.<format>``.

    Raises
    ------
    ScalescopeError
        When no browser is found or kaleido fails; the message says how to get a browser.
    """
    formats = _check_formats(formats)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not figures:
        return []
    browser = find_browser()
    if browser is None:
        raise ScalescopeError(NO_BROWSER)
    import plotly.io as pio

    figs, paths = [], []
    for name, fig in figures.items():
        for fmt in formats:
            figs.append(fig)
            paths.append(out / f"{name}.{fmt}")
    env_before = os.environ.get("BROWSER_PATH")
    os.environ["BROWSER_PATH"] = browser  # the browser we checked is the one kaleido uses
    try:
        pio.write_images(figs, paths, scale=scale)
    except Exception as exc:
        name = type(exc).__name__
        if "ChromeNotFound" in name or "BrowserFailed" in name or "browser" in str(exc).lower():
            raise ScalescopeError(f"{NO_BROWSER} (kaleido said: {name}: {exc})") from None
        raise ScalescopeError(f"static export with kaleido failed: {name}: {exc}") from exc
    finally:
        if env_before is None:
            os.environ.pop("BROWSER_PATH", None)
        else:
            os.environ["BROWSER_PATH"] = env_before
    missing = [p for p in paths if not p.is_file() or p.stat().st_size == 0]
    if missing:
        raise ScalescopeError("kaleido wrote no file for: " + ", ".join(map(str, missing)))
    return paths


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


def export_table(df: pd.DataFrame, path: str | os.PathLike[str], *, float_format: str = "%.4g",
                 caption: str | None = None, label: str | None = None) -> list[Path]:
    """Write a table as ``<path>.tex`` (``DataFrame.to_latex``, booktabs style) and
    ``<path>.csv`` (full precision). Underscores in headers are escaped for LaTeX.

    Returns
    -------
    list of pathlib.Path
        ``[tex, csv]``.
    """
    path = Path(path)
    stem = path.with_suffix("") if path.suffix in (".tex", ".csv") else path
    stem.parent.mkdir(parents=True, exist_ok=True)
    csv = stem.with_name(stem.name + ".csv")
    tex = stem.with_name(stem.name + ".tex")
    df.to_csv(csv, index=False)
    try:
        latex = df.to_latex(index=False, float_format=lambda v: float_format % v, escape=True, caption=caption,
                            label=label, na_rep="--")
    except ImportError as exc:  # pandas' to_latex needs jinja2
        raise ScalescopeError(f"LaTeX export needs jinja2 (a scalescope dependency): {exc}") from exc
    tex.write_text(latex, encoding="utf-8")
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
