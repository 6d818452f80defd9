"""Small helpers shared by the metric modules (private)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from analysis.errors import ScalescopeError

NS_PER_S = 1e9


def require_columns(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise a clear error when a frame lacks columns a metric needs."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ScalescopeError(f"{what} needs column(s) {missing}; the frame has {list(df.columns)}")


def plain(series: pd.Series) -> pd.Series:
    """A categorical column as plain objects (so groupby never makes empty categories)."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        return series.astype(object)
    return series


def end_ns(df: pd.DataFrame) -> np.ndarray:
    return (df["start_ns"].to_numpy(np.int64) + df["dur_ns"].to_numpy(np.int64))


def spread(values: pd.Series | np.ndarray, prefix: str) -> dict[str, float]:
    """Median, min, max, standard deviation (ddof 1; NaN for one value) and count."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return {f"{prefix}_median": np.nan, f"{prefix}_min": np.nan, f"{prefix}_max": np.nan,
                f"{prefix}_std": np.nan}
    return {
        f"{prefix}_median": float(np.median(v)),
        f"{prefix}_min": float(v.min()),
        f"{prefix}_max": float(v.max()),
        f"{prefix}_std": float(v.std(ddof=1)) if v.size > 1 else np.nan,
    }
