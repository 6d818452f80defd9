"""scripts/gpu_check.py: the one command for the GPU paths (docs/gpu-check.md). The `gpu` test
runs it on a machine with an NVIDIA GPU; without one, the script says so and runs nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, timeout=120)
    return probe.stdout.strip().endswith("True")


def test_without_a_gpu_nothing_runs_and_the_summary_says_why(tmp_path):
    if _has_gpu():
        pytest.skip("this machine has a GPU: see test_gpu_check_passes")
    p = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "no usable NVIDIA GPU" in p.stderr
    summary = json.loads((tmp_path / "gpu-check.json").read_text())
    assert summary["steps"]["environment"]["cuda_available"] is False
    assert set(summary["steps"]) == {"environment"}


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_check_passes(tmp_path):
    if not _has_gpu():
        pytest.skip("no NVIDIA GPU here")
    p = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--skip", "nsys"], capture_output=True,
                       text=True, cwd=ROOT, timeout=1800)
    summary = json.loads((tmp_path / "gpu-check.json").read_text())
    steps = summary["steps"]
    assert steps["nvml"]["status"] == "ok" and steps["nvml"]["sample_rows"] > 0, steps["nvml"]
    assert steps["nvml"]["rows_util_over_50pct"] > 0
    assert steps["node"]["topo"]["reader"] == "nvsmi_topo"
    runs = {r["run"]: r for r in steps["sweep"]["runs"]}
    nccl_run = next(r for name, r in runs.items() if name.startswith("ddp-nccl"))
    assert nccl_run["status"] == "ok" and nccl_run["nvml_samples"] > 0
    assert nccl_run["kineto_gpu_events"] > 0  # the CUDA side of the torch profiler trace
    assert nccl_run["nccl_logs"] and all(log["nranks"] for log in nccl_run["nccl_logs"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert steps["device"]["status"] == "ok", steps["device"]


def test_device_checks_fail_without_device_time(tmp_path):
    """The device validations' evaluation on a CPU experiment (the bundled sample sweep as
    its first sweep): it runs through, finds no device time, and passes no check that needs
    it (every check here needs it)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_device_check

    sample = ROOT / "data" / "sample_sweep"
    if not sample.is_dir():
        pytest.skip("data/sample_sweep is not in this checkout")
    shutil.copytree(sample, tmp_path / "nccl")
    checks = gpu_device_check.evaluate(tmp_path)
    assert set(checks) == {"aa", "overhead", "gpu_sleep", "comm", "data", "item", "arrival"}
    needs_device = {k: c for k, c in checks.items() if k != "overhead"}
    assert all(c["status"] == "failed" for c in needs_device.values()), checks
    if _has_gpu():
        return
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_device_check.py"), "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    if not _has_gpu():
        assert p.returncode == 2 and "no usable NVIDIA GPU" in p.stderr, p.stderr
