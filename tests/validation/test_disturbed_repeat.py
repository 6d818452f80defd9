"""A disturbed repeat: busy-looping processes (four per core) run beside one of four repeats
of DDP at one rank. The repeat must be flagged by name as an
outlier, and the headline efficiency must move by less than its interval: with the flagged
repeat left out it is the clean repeats' number.

Each busy loop runs in a session of its own, as a neighbour's job would. The sweep starts every
run in a new session, and Linux with ``sched_autogroup_enabled`` (the default on desktop and many
server kernels) shares the CPU between sessions before it shares it between processes: busy
loops started in the test's own session form one group, get one group's share, and leave the run
its full speed (measured: 0.000073 s per sample against 0.000071-0.000075 clean). In sessions of
their own they slow it about 6x."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pandas as pd
import pytest
from validation._sweeps import EXAMPLE, ROOT, runset

from analysis import metrics as M

pytestmark = pytest.mark.slow
DISTURBED = "ddp-gloo_np1_bs50_r3"
HOG = "import time\nt = time.time() + 600\nwhile time.time() < t: pass\n"


def _sweep_with_hog(out, data):
    cmd = [sys.executable, "-m", "instrumentation.sweep", "--np", "1", "--backend", "ddp-gloo", "--baseline",
           "--repeats", "4", "--batch-size", "50", "--timeout", "300", "--out", str(out), "--", *EXAMPLE,
           "--data-dir", str(data)]
    hogs: list[subprocess.Popen] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the sweep's progress lines as they happen
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env) as p:
        lines = []
        for line in p.stdout:
            lines.append(line)
            if f"] {DISTURBED} ..." in line:
                hogs = [subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True)
                        for _ in range(4 * (os.cpu_count() or 2))]
            elif f"] {DISTURBED}:" in line:
                for h in hogs:
                    h.kill()
                    h.wait()
                hogs = []
        rc = p.wait()
    for h in hogs:
        h.kill()
        h.wait()
    assert rc == 0, "".join(lines[-40:])
    return out


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    root = tmp_path_factory.mktemp("disturbed")
    rs = runset(_sweep_with_hog(root / "exp", root / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pr = M.run_summary(rs)
    return pr


def test_the_disturbed_repeat_is_flagged_by_name(summary):
    flagged = summary.loc[summary["outlier"].notna(), "run_id"].tolist()
    runs = summary[["run_id", "time_per_sample_s", "neighbour_cpu_pct", "outlier"]].to_string()
    print(runs)  # for benchmarks/README.md
    # on a quiet machine it is the only one; a loaded one (other test suites) may disturb others
    assert DISTURBED in flagged, runs
    # and the reason names the evidence: other processes' CPU in the run's samples
    assert "other processes using" in summary.set_index("run_id").loc[DISTURBED, "outlier"], runs
    table = M.scaling_table(summary, by=("config_backend", "batch_size"))
    row = table[table["config_backend"] == "ddp-gloo"].iloc[0]
    assert row["n_outliers"] >= 1 and DISTURBED in row["outliers"]


def test_headline_moves_less_than_its_interval(summary):
    # the headline without the disturbed repeat at all, outliers judged afresh among the rest
    clean = summary[summary["run_id"] != DISTURBED].drop(columns=["outlier"])
    robust = M.scaling_table(summary, by=("config_backend", "batch_size"))
    reference = M.scaling_table(clean, by=("config_backend", "batch_size"))
    r = robust[robust["config_backend"] == "ddp-gloo"].iloc[0]
    c = reference[reference["config_backend"] == "ddp-gloo"].iloc[0]
    if pd.isna(r["efficiency_frac"]) or pd.isna(c["efficiency_frac"]):
        # other load beside the test disturbed most repeats of a side too: then no headline is
        # printed at all, and the row says why (issue 34: a disturbed side is never the headline)
        assert (r["unreliable"] if pd.isna(r["efficiency_frac"]) else c["unreliable"]), (r.to_dict(), c.to_dict())
        return
    half = (c["efficiency_frac_ci_high"] - c["efficiency_frac_ci_low"]) / 2
    print(f"efficiency with the disturbed repeat flagged {r['efficiency_frac']:.3f}, without it "
          f"{c['efficiency_frac']:.3f} ({c['efficiency_frac_ci_low']:.3f}-{c['efficiency_frac_ci_high']:.3f})")
    moved = abs(r["efficiency_frac"] - c["efficiency_frac"])
    if pd.isna(half):
        # load beside the test left fewer than MIN_REPEATS kept repeats on a side: no interval
        # is given, and the headline must then be the clean repeats' own number exactly
        assert moved == 0, (r.to_dict(), c.to_dict())
        return
    assert moved < half, (r["efficiency_frac"], c["efficiency_frac"], half)
