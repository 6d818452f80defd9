"""Horovod as `make` installs it: real 2-rank runs over Gloo and MPI on this machine, with the
Horovod timeline written, and `scalescope doctor` reporting the build correctly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
HOROVODRUN = BIN / "horovodrun"

pytestmark = [pytest.mark.horovod, pytest.mark.slow]


def _require_horovod() -> None:
    try:
        import importlib.util

        if importlib.util.find_spec("horovod") is None:
            raise ImportError
    except ImportError:
        pytest.fail("horovod is not installed in this environment: `make test` installs it "
                    "with scripts/install_horovod.sh")
    if not HOROVODRUN.exists():
        pytest.fail(f"{HOROVODRUN} is missing")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    if os.geteuid() == 0:  # mpirun refuses root without these; only set where needed
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


def check_build() -> str:
    return subprocess.run([str(HOROVODRUN), "--check-build"], capture_output=True, text=True,
                          timeout=120, check=True).stdout


def _run(controller: str, tmp_path: Path) -> tuple[list[dict], Path]:
    timeline = tmp_path / f"timeline_{controller}.json"
    env = _env()
    env["HOROVOD_TIMELINE"] = str(timeline)
    out_dir = tmp_path / f"results_{controller}"
    out_dir.mkdir()
    cmd = [str(HOROVODRUN), "-np", "2", "-H", "localhost:2", f"--{controller}",
           sys.executable, str(HERE / "allreduce_prog.py"), str(out_dir)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert p.returncode == 0, f"horovodrun --{controller} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    results = [json.loads(f.read_text()) for f in sorted(out_dir.glob("rank*.json"))]
    return results, timeline


def test_check_build_lists_pytorch_gloo_mpi():
    _require_horovod()
    out = check_build()
    assert re.search(r"\[X\] PyTorch", out), out
    assert re.search(r"\[X\] Gloo", out), out
    assert re.search(r"\[X\] MPI", out), out


@pytest.mark.parametrize("controller,activity", [("gloo", "GLOO_ALLREDUCE"), ("mpi", "MPI_ALLREDUCE")])
def test_two_rank_allreduce_with_timeline(controller, activity, tmp_path):
    _require_horovod()
    results, timeline = _run(controller, tmp_path)
    assert sorted(r["rank"] for r in results) == [0, 1]
    for r in results:
        assert r["size"] == 2
        assert r["ok"], r
        assert r["sum"] == 3.0
    text = timeline.read_text()
    assert '"ALLREDUCE"' in text
    assert activity in text, f"{activity} not in the {controller} timeline"
    # The file is a JSON array as Horovod >= 0.20.1 writes it (closed at a clean shutdown).
    events = json.loads(text)
    names = {e.get("name") for e in events}
    assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE", activity} <= names


def test_doctor_reports_horovod_controllers():
    _require_horovod()
    from analysis import doctor

    findings = {f.component: f for f in doctor.collect()}
    hv = findings["horovod"]
    assert hv.ok, hv.detail
    out = check_build()
    for label, name in (("Gloo", "Gloo"), ("MPI", "MPI")):
        built = bool(re.search(rf"\[X\] {label}\b", out))
        assert (name in hv.detail.split("tensor operations")[0]) == built, (hv.detail, out)
    assert findings["torch"].ok


def test_doctor_cli_runs():
    p = subprocess.run([str(BIN / "scalescope"), "doctor"], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    for component in ("torch", "horovod", "nvml", "nvtx", "nsys", "kaleido"):
        assert component in p.stdout
    j = subprocess.run([str(BIN / "scalescope"), "doctor", "--json"], capture_output=True, text=True, timeout=180)
    data = json.loads(j.stdout)
    assert {d["component"] for d in data} >= {"torch", "horovod", "mpi", "nvml", "nsys", "kaleido"}
    nvml = next(d for d in data if d["component"] == "nvml")
    if not nvml["ok"]:  # no GPU here: it must say what that disables
        assert "CPU" in nvml["disables"]
