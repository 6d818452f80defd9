"""Timing comparisons whose tolerance comes from the noise of the run being judged.

A test that compares durations measured on this machine (two instruments timing the same
ranges, a run with an injected delay against one without) must pass with other work on the
machine: a fixed bound such as "totals within 2 %" is the quiet machine's noise, not the
loaded machine's. These helpers measure the noise of the run itself -- the spread of the
per-range or per-step differences -- and judge against it (issue 25, class 8).
"""

from __future__ import annotations

import math

import numpy as np

#: a normal distribution's standard deviation per median absolute deviation
MAD_TO_SD = 1.4826


def robust_spread(values) -> tuple[float, float]:
    """``(median, robust standard deviation)`` (1.4826 * MAD): a few descheduled ranges do
    not widen it the way they widen the standard deviation."""
    v = np.asarray(values, dtype=float)
    med = float(np.median(v))
    return med, MAD_TO_SD * float(np.median(np.abs(v - med)))


def paired_durations_agree(dx, dy, *, what: str, rel: float = 0.02, floor_ns: float = 1_000,
                           max_spiky: float = 0.2) -> None:
    """Assert that two instruments' durations of the same ranges (paired in time order:
    ``dx`` the outer instrument, ``dy`` ours) agree, with a tolerance from this run's noise.

    * A range where the process was descheduled between the two clocks shows as a positive
      spike of ``d = dx - dy``: more than ``max(8 s, 10 floor_ns)`` above the median, ``s``
      the robust spread of ``d`` in this run (clock granularity ``floor_ns`` at least). At
      most ``max_spiky`` of the ranges may be spikes (the 80 % majority of the per-range
      criterion); a negative outlier (our interval longer than the outer one it nests in)
      is never allowed.
    * The totals of the other ranges agree within ``rel`` of the phase's time plus what this
      run's noise explains: each range's nesting overhead (the median ``d``, the time
      between the outer instrument's clock and ours) and three standard errors of the sum
      (``3 s sqrt(n)``).
    """
    dx, dy = np.asarray(dx, dtype=float), np.asarray(dy, dtype=float)
    assert len(dx) == len(dy) > 0, (what, len(dx), len(dy))
    d = dx - dy
    med, s = robust_spread(d)
    s = max(s, floor_ns)
    spiky = d - med > max(8 * s, 10 * floor_ns)
    show = (what, f"median {med / 1e3:.1f} us, spread {s / 1e3:.1f} us", np.round(d / 1e3, 1))
    assert spiky.mean() <= max_spiky, ("too many ranges disagree", *show)
    assert (d - med >= -max(8 * s, 10 * floor_ns)).all(), ("our interval is longer than the outer one", *show)
    calm = ~spiky
    n = int(calm.sum())
    excess = abs(d[calm].sum() - n * max(med, 0.0))
    tol = rel * dy[calm].sum() + 3 * s * math.sqrt(n)
    assert excess <= tol, ("totals disagree beyond this run's noise", f"excess {excess / 1e3:.1f} us, "
                           f"tolerance {tol / 1e3:.1f} us", *show)


def mean_and_error(values) -> tuple[float, float]:
    """The mean of per-step values and its standard error, from their robust spread (a few
    descheduled steps do not decide it)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    _, s = robust_spread(v)
    return float(v.mean()), s / math.sqrt(max(len(v), 1))
