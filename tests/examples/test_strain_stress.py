"""The thesis workload examples/strain_stress.py: data, model, options, and that it learns."""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "strain_stress.py"


def _load():
    spec = importlib.util.spec_from_file_location("strain_stress", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ss = _load()


def test_hyperbolic_law_known_answers():
    g0, tmax = np.array(50_000.0), np.array(100.0)  # kPa
    # small strain: the initial tangent is G0
    assert ss.hyperbolic_stress(np.array(1e-9), g0, tmax) == pytest.approx(g0 * 1e-9, rel=1e-6)
    # at the reference strain tau_max / G0 the stress is half the strength
    assert ss.hyperbolic_stress(tmax / g0, g0, tmax) == pytest.approx(50.0)
    # large strain tends to tau_max
    assert ss.hyperbolic_stress(np.array(1e3), g0, tmax) == pytest.approx(100.0, rel=1e-5)


def test_generate_is_deterministic_padded_and_flagged():
    a = ss.generate(300, seed=7)
    b = ss.generate(300, seed=7)
    c = ss.generate(300, seed=8)
    for k in ("x", "y", "length"):
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["y"], c["y"])
    x, y, length = a["x"], a["y"], a["length"]
    assert x.shape == (300, 3, 200) and x.dtype == np.float32
    assert y.shape == (300, 2) and y.min() >= 0.0 and y.max() <= 1.0
    assert length.min() >= ss.MIN_POINTS and length.max() <= ss.N_POINTS
    # the flag marks exactly the first `length` points; padding is zero in every channel
    np.testing.assert_array_equal(x[:, 2].sum(axis=1), length)
    for i in range(0, 300, 37):
        n = int(length[i])
        assert (x[i, 2, :n] == 1).all() and (x[i, :, n:] == 0).all()
        # stress grows with strain along a measured curve (noise is 1 %, steps are ~5 %)
        assert (np.diff(x[i, 1, :n]) > -0.02).all()
    assert x[:, :2].min() >= 0.0 and x[:, :2].max() <= 1.0


def test_split_is_75_25_disjoint_and_complete():
    train, val = ss.split(1000, seed=3)
    assert len(train) == 750 and len(val) == 250
    assert set(train).isdisjoint(val) and set(train) | set(val) == set(range(1000))


def _load_in_child(args):
    n, seed, data_dir = args
    return ss.load_or_generate(n, seed=seed, data_dir=Path(data_dir), log=lambda m: None)["y"].sum()


def test_cache_is_written_once_and_shared_by_concurrent_ranks(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        sums = pool.map(_load_in_child, [(500, 1, str(tmp_path))] * 3)
    assert len(set(sums)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["strain_stress_v1_n500_seed1.npz"]
    again = ss.load_or_generate(500, seed=1, data_dir=tmp_path, log=lambda m: None)
    np.testing.assert_array_equal(again["x"], ss.generate(500, seed=1)["x"])


def test_lr_scaling_relative_to_batch_75():
    assert ss.lr_factor("none", batch_size=300, world_size=4) == 1.0
    assert ss.lr_factor("linear", batch_size=75, world_size=4) == 4.0
    assert ss.lr_factor("linear", batch_size=150, world_size=2) == 4.0
    assert ss.lr_factor("sqrt", batch_size=75, world_size=4) == 2.0


def test_model_has_about_153k_parameters():
    torch = pytest.importorskip("torch")
    model = ss.build_model()
    assert sum(p.numel() for p in model.parameters()) == 153_532
    assert model(torch.zeros(5, 3, 200)).shape == (5, 2)


def test_defaults_come_from_the_sweep_environment(monkeypatch):
    monkeypatch.setenv("SCALESCOPE_FRAMEWORK", "ddp")
    monkeypatch.setenv("SCALESCOPE_BATCH_SIZE", "300")
    args = ss.parse_args([])
    assert args.backend == "ddp" and args.batch_size == 300
    monkeypatch.delenv("SCALESCOPE_FRAMEWORK")
    monkeypatch.delenv("SCALESCOPE_BATCH_SIZE")
    args = ss.parse_args([])
    assert args.backend == "none" and args.batch_size == 75 and args.lr == 4.7331e-4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--epochs", "0"], "--epochs must be >= 1"),
        (["--batch-size", "-3"], "--batch-size must be >= 1"),
        (["--lr", "0"], "--lr must be a positive number"),
        (["--samples", "5"], "--samples must be >= 8"),
        (["--backend", "mpi4py"], "invalid choice"),
        (["--data-on-device", "--num-workers", "2"], "exclude each other"),
    ],
)
def test_bad_options_exit_nonzero_with_a_message(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("SCALESCOPE_FRAMEWORK", raising=False)
    with pytest.raises(SystemExit) as exc:
        ss.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_environment_batch_size_exits_with_a_message(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--epochs", "1"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "SCALESCOPE_BATCH_SIZE": "big"}, timeout=60)
    assert proc.returncode != 0
    assert "SCALESCOPE_BATCH_SIZE='big' is not an integer" in proc.stderr


@pytest.mark.slow
def test_it_learns_single_process(tmp_path):
    """Six epochs on 3000 curves: validation MSE well below that of predicting the mean."""
    run_dir = tmp_path / "run"
    env = {"PATH": "/usr/bin:/bin", "SCALESCOPE_RUN_DIR": str(run_dir), "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--backend", "none", "--samples", "3000", "--epochs", "6",
         "--data-dir", str(tmp_path / "data"), "--device", "cpu"],
        capture_output=True, text=True, env=env, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "parameters=153,532" in proc.stdout
    assert proc.stdout.count("epoch ") == 6
    lines = [json.loads(line) for line in (run_dir / "rank-00000.epochs.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in lines] == list(range(6))
    assert lines[-1]["samples"] == 2250
    # val_metric = 1 - val_mse / mse_of_mean: above 0.5 means less than half the mean's error
    assert lines[-1]["val_metric"] > 0.5, lines
    assert lines[-1]["val_loss"] < lines[0]["val_loss"]
