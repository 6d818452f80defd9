"""The product end to end on a real experiment made by the sweep in this test session: the
report, the RunSet and `scalescope convert` on what the instrumentation wrote."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import analysis.metrics as M
from analysis import RunSet, cli, report

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exp(real_experiment):
    out, proc = real_experiment
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_runset_reads_every_run_from_its_manifest(exp):
    rs = RunSet.from_dirs([exp])
    manifest = json.loads((exp / "experiment.json").read_text())
    assert set(rs.runs["run_id"]) == {r["run_id"] for r in manifest["runs"]}
    for r in rs.runs.itertuples():
        run = json.loads((exp / r.run_id / "run.json").read_text())
        assert r.n_ranks == run["world_size"]
    assert set(rs.events["kind"].unique()) >= {"phase"}
    assert len(rs.samples) and rs.samples["cpu_util_pct"].notna().any()


def test_real_horovod_timelines_read_without_damage(exp):
    import warnings

    import analysis

    timelines = sorted(exp.glob("horovod-*/horovod_timeline.json"))
    if not timelines:
        pytest.skip("no Horovod runs on this machine")
    for t in timelines:
        with warnings.catch_warnings():
            warnings.simplefilter("error", analysis.RecoveryWarning)
            df = analysis.read(t, format="horovod")
        names = set(df["name"].astype(str))
        assert "BROADCAST" in names  # parameters broadcast at start, at every size
        # Horovod's DistributedOptimizer allreduces gradients only when size() > 1
        assert ({"ALLREDUCE", "NEGOTIATE_ALLREDUCE"} <= names) == ("_np1_" not in t.parent.name), t


def test_breakdown_shares_sum_to_one_on_real_runs(exp):
    rs = RunSet.from_dirs([exp])
    b = M.time_breakdown(rs.events, level="rank")
    shares = b[[c for c in b.columns if c.endswith("_frac")
                and c.split("_frac")[0] in ("data", "forward", "backward", "sync_exposed", "optimizer", "other")]]
    assert len(shares.columns) == 6
    assert (shares.sum(axis=1) - 1).abs().max() < 1e-9


def test_scaling_against_the_baseline(exp):
    rs = RunSet.from_dirs([exp])
    table = M.scaling_table(M.run_summary(rs), baseline="none")
    base = table[table["config_backend"] == "none"]
    assert (base["speedup"] == 1).all()
    two = table[table["n_ranks"] == 2]
    # a row whose runs' own CPU samples show other processes taking cores they needed (a loaded
    # machine) gives no number, and says why (issue 34)
    unreliable = two["unreliable"].notna() if "unreliable" in two else pd.Series(False, index=two.index)
    assert two.loc[unreliable, "unreliable"].str.contains("ran beside other processes").all()
    assert two.loc[unreliable, "speedup"].isna().all()
    given = two[~unreliable]
    assert len(two) >= 1 and (given["speedup"] > 0).all()
    assert ((given["efficiency_frac"] - given["speedup"] / 2).abs() < 1e-9).all()


def test_report_on_the_real_experiment(exp, tmp_path):
    page = report.build_report(exp, tmp_path / "rep", static=False)
    html = page.read_text()
    for section in ("Time breakdown", "Synchronisation cost", "Scaling", "Framework overhead",
                    "Device usage", "Backend comparison"):
        assert section in html, section
    summary = pd.read_csv(tmp_path / "rep" / "export" / "summary.csv")
    assert {1, 2} <= set(summary["n_ranks"])
    assert summary["sync_exposed_frac"].notna().any()


def test_convert_writes_the_tidy_tables(exp, tmp_path, capsys):
    run = next(p for p in exp.iterdir() if p.name.startswith("horovod-gloo_np2") or p.name.startswith("ddp-gloo_np2"))
    rc = cli.main(["convert", str(run), "--to", "parquet", "--out", str(tmp_path)])
    assert rc == 0, capsys.readouterr().err
    events = pd.read_parquet(tmp_path / f"{run.name}.events.parquet")
    samples = pd.read_parquet(tmp_path / f"{run.name}.samples.parquet")
    assert set(events["rank"].dropna().unique()) == {0, 1}
    assert len(samples) > 0
