"""``scalescope doctor``: what is installed and usable here, and what a missing piece disables.

torch and horovod are probed in a subprocess of the same interpreter, so the analysis
process itself never imports them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass

_PROBE = r"""
import json, sys
out = {}
try:
    import torch
    out["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                    "cuda_available": bool(torch.cuda.is_available()),
                    "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
                    "distributed": bool(torch.distributed.is_available()),
                    "gloo": bool(torch.distributed.is_available() and torch.distributed.is_gloo_available()),
                    "nccl": bool(torch.distributed.is_available() and torch.distributed.is_nccl_available()),
                    "mpi": bool(torch.distributed.is_available() and torch.distributed.is_mpi_available())}
except Exception as exc:
    out["torch"] = {"error": f"{type(exc).__name__}: {exc}"}
try:
    import horovod
    import horovod.torch as hvd
    out["horovod"] = {"version": horovod.__version__,
                      "controllers": {"gloo": bool(hvd.gloo_built()), "mpi": bool(hvd.mpi_built())},
                      "tensor_operations": {"nccl": bool(hvd.nccl_built()), "ddl": bool(hvd.ddl_built()),
                                            "ccl": bool(hvd.ccl_built()), "gloo": bool(hvd.gloo_built()),
                                            "mpi": bool(hvd.mpi_built())},
                      "cuda": bool(hvd.cuda_built())}
except Exception as exc:
    out["horovod"] = {"error": f"{type(exc).__name__}: {exc}"}
try:
    import pynvml
    try:
        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(n)]
        out["nvml"] = {"gpus": n, "names": [x.decode() if isinstance(x, bytes) else x for x in names],
                       "driver": pynvml.nvmlSystemGetDriverVersion()}
        pynvml.nvmlShutdown()
    except Exception as exc:
        out["nvml"] = {"error": f"{type(exc).__name__}: {exc}"}
except Exception as exc:
    out["nvml"] = {"error": f"nvidia-ml-py not installed ({exc})"}
try:
    import nvtx
    from importlib.metadata import version
    out["nvtx"] = {"version": version("nvtx")}
except Exception as exc:
    out["nvtx"] = {"error": f"{type(exc).__name__}: {exc}"}
try:
    import psutil
    out["psutil"] = {"version": psutil.__version__}
except Exception as exc:
    out["psutil"] = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(out))
"""


@dataclass
class Finding:
    component: str
    ok: bool
    detail: str
    disables: str = ""


def _run(cmd: list[str], timeout: float = 20) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, (p.stdout + p.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)


def _bin(name: str) -> str | None:
    """A program next to this interpreter (the venv) first, then on PATH (as the sweep finds it)."""
    from instrumentation.sweep import find_tool

    try:
        return find_tool(name)
    except FileNotFoundError:
        return None


def find_nsys() -> str | None:
    """The Nsight Systems CLI (see :func:`instrumentation.profilers.find_nsys`)."""
    from instrumentation.profilers import find_nsys as _find

    return _find()


def find_browser() -> str | None:
    """The Chromium/Chrome kaleido will drive (see :func:`analysis.export.find_browser`)."""
    from analysis.export import find_browser as _find

    return _find()


def collect() -> list[Finding]:
    """Probe everything; never raises."""
    findings: list[Finding] = []
    rc, out = _run([sys.executable, "-c", _PROBE], timeout=120)
    try:
        probe = json.loads(out.splitlines()[-1]) if rc == 0 and out else {}
    except (json.JSONDecodeError, IndexError):
        probe = {}
    if not probe:
        findings.append(Finding("probe", False, f"could not probe the Python environment: {out[-300:]}"))

    for part in (_framework_findings(probe), _system_findings(probe), _tool_findings()):
        findings.extend(part)
    return findings


def _framework_findings(probe: dict) -> list[Finding]:
    """torch and Horovod, as the probe of the Python environment saw them."""
    findings: list[Finding] = []
    t = probe.get("torch", {"error": "not probed"})
    if "error" in t:
        findings.append(Finding("torch", False, t["error"], "instrumented training, the example workload, sweeps"))
    else:
        cuda = f"CUDA {t['cuda']}, {t['gpus']} GPU(s) visible" if t["cuda_available"] else (
            f"built with CUDA {t['cuda']} but no GPU visible" if t["cuda"] else "CPU build")
        backends = ", ".join(b for b in ("gloo", "nccl", "mpi") if t.get(b)) or "none"
        findings.append(Finding("torch", True, f"{t['version']} ({cuda}); torch.distributed backends: {backends}"))

    h = probe.get("horovod", {"error": "not probed"})
    if "error" in h:
        findings.append(Finding("horovod", False, h["error"],
                                "horovod-* sweep backends (run scripts/install_horovod.sh)"))
    else:
        ctrl = ", ".join(k.upper() if k == "mpi" else k.capitalize() for k, v in h["controllers"].items() if v)
        ops = ", ".join(k.upper() for k, v in h["tensor_operations"].items() if v)
        missing = [k for k, v in h["controllers"].items() if not v]
        findings.append(Finding(
            "horovod", True,
            f"{h['version']}; controllers: {ctrl or 'none'}; tensor operations: {ops or 'none'}",
            f"horovod-{'/'.join(missing)} backend" if missing else ""))
    return findings


def _system_findings(probe: dict) -> list[Finding]:
    """MPI on PATH; NVML, NVTX and psutil as the probe saw them."""
    findings: list[Finding] = []
    mpirun = shutil.which("mpirun")
    if mpirun:
        _, out = _run([mpirun, "--version"])
        first = out.splitlines()[0] if out else "unknown version"
        findings.append(Finding("mpi", True, f"{mpirun}: {first}"))
    else:
        findings.append(Finding("mpi", False, "mpirun not on PATH",
                                "horovod-mpi backend and mpirun launches (apt-get install openmpi-bin libopenmpi-dev, or module load openmpi)"))

    n = probe.get("nvml", {"error": "not probed"})
    if "error" in n:
        findings.append(Finding("nvml", False, n["error"],
                                "GPU sampling (the sampler records CPU utilisation and RSS instead)"))
    else:
        findings.append(Finding("nvml", True, f"driver {n['driver']}, {n['gpus']} GPU(s): {', '.join(n['names'])}"))

    v = probe.get("nvtx", {"error": "not probed"})
    findings.append(Finding("nvtx", "error" not in v, v.get("version", v.get("error", "")),
                            "" if "error" not in v else "NVTX ranges in Nsight Systems (own phase recording still works)"))
    p = probe.get("psutil", {"error": "not probed"})
    findings.append(Finding("psutil", "error" not in p, p.get("version", p.get("error", "")),
                            "" if "error" not in p else "CPU sampling on machines without NVML"))
    return findings


def _tool_findings() -> list[Finding]:
    """Nsight Systems, kaleido with a browser, and the launchers."""
    findings: list[Finding] = []
    nsys = find_nsys()
    if nsys:
        rc, out = _run([nsys, "--version"])
        findings.append(Finding("nsys", rc == 0, f"{nsys}: {out.splitlines()[0] if out else ''}"))
    else:
        findings.append(Finding("nsys", False, "Nsight Systems CLI not found",
                                "`scalescope sweep --nsys` (make test fetches Debian's nsight-systems into .tools/)"))

    try:
        from importlib.metadata import version

        kv = version("kaleido")
        browser = find_browser()
        if browser:
            findings.append(Finding("kaleido", True, f"kaleido {kv}, browser {browser}"))
        else:
            findings.append(Finding("kaleido", False, f"kaleido {kv} but no Chromium/Chrome found",
                                    "static PDF/SVG/PNG export (HTML still works): apt-get install chromium, or set BROWSER_PATH"))
    except Exception as exc:
        findings.append(Finding("kaleido", False, str(exc), "static PDF/SVG/PNG export (HTML still works)"))

    for tool in ("horovodrun", "torchrun"):
        path = _bin(tool)
        findings.append(Finding(tool, bool(path), path or "not found",
                                "" if path else f"launching {tool.replace('run', '')} runs from `scalescope sweep`"))
    return findings


def horovod_check_build() -> str | None:
    """The output of ``horovodrun --check-build``, or None when horovodrun is missing."""
    hr = _bin("horovodrun")
    if not hr:
        return None
    return _run([hr, "--check-build"], timeout=60)[1]


def main(*, as_json: bool = False) -> int:
    findings = collect()
    if as_json:
        print(json.dumps([asdict(f) for f in findings], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="scalescope doctor", show_lines=False)
    table.add_column("component")
    table.add_column("status")
    table.add_column("details")
    table.add_column("if missing, disables")
    for f in findings:
        table.add_row(f.component, "[green]ok[/]" if f.ok else "[red]missing[/]", f.detail, f.disables)
    console = Console(width=max(120, Console().width))
    console.print(table)
    check = horovod_check_build()
    if check:
        console.print("[bold]horovodrun --check-build[/]")
        console.print(re.sub(r"\n{2,}", "\n", check), markup=False)
    return 0


def gpu_check(*, out: str = "runs/gpu-check") -> int:
    """``scalescope doctor --gpu-check``: run ``scripts/gpu_check.py`` of this checkout.

    Returns its exit status (0 all passed, 1 a step failed, 2 no NVIDIA GPU). The script
    lives beside the packages in a source checkout; an installed wheel has no ``scripts/``.
    """
    from pathlib import Path

    from analysis.errors import ScalescopeError

    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"
    if not script.is_file():
        raise ScalescopeError(f"{script} not found: the GPU check runs from a source checkout of scalescope")
    return subprocess.call([sys.executable, str(script), "--out", str(out)], cwd=script.parents[1])
