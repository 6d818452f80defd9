"""Chrome-trace numbers: microseconds as JSON writes them to exact int64 nanoseconds, and
columns of JSON integers (used by the Chrome-JSON readers, :mod:`analysis.readers._chrome`)."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import numpy as np

# float64 holds every multiple of 1 ns exactly-enough below 2**43 us (~101 days); see us_to_ns.
EXACT_LIMIT_US = float(2**43)
#: A ts or dur at or beyond this many µs (about 146 years) does not fit int64 ns: the record
#: is dropped with a note, never converted to a wrapped or clipped number.
RANGE_LIMIT_US = float(2**62) / 1000.0


def in_range(us: np.ndarray) -> np.ndarray:
    """Mask of the µs values that convert to int64 ns (finite and below the limit); NaN
    (absent) counts as in range."""
    with np.errstate(invalid="ignore"):
        return np.isnan(us) | (np.abs(us) < RANGE_LIMIT_US)


def us_to_ns(us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Microseconds (float64 decoded from JSON) to int64 nanoseconds, exactly.

    The integer part is converted exactly; the fraction ``us - floor(us)`` is exact in
    float64 and rounds to the right ns while the decoding error (half an ulp) stays below
    0.5 ns, i.e. for ``|us| < 2**43`` (about 101 days). Returns the ns and a mask of the
    values seen to be inexact (a fraction on a larger value). A larger value that decoded
    to a whole number may still have had a fraction in the text: callers that can tell
    floats from ints re-read such values as text (:func:`text_us_to_ns`).
    """
    us = np.asarray(us, dtype=np.float64)
    ip = np.floor(us)
    frac = us - ip
    if not frac.any():  # integer µs (Horovod, old Kineto): exact below 2**53
        return ip.astype(np.int64) * 1000, np.zeros(us.shape, dtype=bool)
    ns = ip.astype(np.int64) * 1000 + np.rint(frac * 1000.0).astype(np.int64)
    inexact = (frac != 0) & (np.abs(us) >= EXACT_LIMIT_US)
    return ns, inexact


def text_us_to_ns(value: Any) -> int | None:
    """Exact ns from a JSON number kept as text (``float_hook=str``) or an int.

    Rounds half to even below 1 ns (only reached when a writer prints more than 3 decimals).
    """
    if value is None:
        return None
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, float):
        return round(value * 1000)
    try:
        return int((Decimal(str(value)) * 1000).to_integral_value(ROUND_HALF_EVEN))
    except ArithmeticError:
        return None


_NONE = {type(None)}


def int_column(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Python ints/None/other to (int64 values, mask of missing): non-ints are missing."""
    arr, missing, _ = int_ids(values)
    return arr, missing


def int_ids(values: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`int_column` and a third mask: the values present (not None) but not an int64
    (a string, a fraction, a number beyond int64), all of them missing as well."""
    n = len(values)
    types = set(map(type, values))
    if types == _NONE:
        return np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool), np.zeros(n, dtype=bool)
    if type(None) not in types:
        try:
            arr = np.array(values, dtype=np.int64)
            return arr, np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        except (TypeError, ValueError, OverflowError):
            pass
    try:
        # ints and None only (None -> NaN): exact while |v| < 2**53
        f = np.array(values, dtype=np.float64)
        mask = np.isnan(f)
        good = f[~mask]
        if not (np.abs(good) >= 2.0**53).any() and (good == np.floor(good)).all():
            # JSON has no NaN: only None, or a text such as "nan", gives one
            not_int = (_present(values, mask) if str in types else np.zeros(n, dtype=bool))
            return np.where(mask, 0, f).astype(np.int64), mask, not_int
    except (TypeError, ValueError):
        pass
    vals = [v if type(v) is int and -(2**63) <= v < 2**63 else None for v in values]
    mask = np.array([v is None for v in vals], dtype=bool)
    arr = np.array([0 if v is None else v for v in vals], dtype=np.int64)
    return arr, mask, _present(values, mask)


def _present(values: list, mask: np.ndarray) -> np.ndarray:
    """``mask`` narrowed to the values that are not None."""
    out = mask.copy()
    where = np.flatnonzero(mask)
    out[where] = [values[i] is not None for i in where.tolist()]
    return out
