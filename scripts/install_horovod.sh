#!/usr/bin/env bash
# Build and install Horovod 0.28.1 against the torch in the current (or given) Python.
#
# Horovod 0.28.1 is Horovod's last release. Its CMakeLists.txt and horovod/torch/CMakeLists.txt
# ask for C++14, while PyTorch >= 2.1 needs C++17 (upstream horovod issue #3996, fixed by
# PR #3998 after the release). This script downloads the 0.28.1 sdist from PyPI, sets those
# two lines to 17 when torch >= 2.1, and builds a wheel with:
#   PyTorch + Gloo always; MPI when `mpicxx` is found; NCCL (HOROVOD_GPU_OPERATIONS=NCCL)
#   when torch has CUDA and NCCL headers/libraries are found; TensorFlow and MXNet off.
# The wheel is cached, keyed by Horovod, torch, Python and CUDA versions and the chosen
# operations, so the next run installs in seconds. The result is checked with
# `horovodrun --check-build`.
#
# Usage: scripts/install_horovod.sh [PYTHON]        (default: .venv/bin/python, else python3)
# Environment:
#   HOROVOD_VERSION       default 0.28.1
#   SCALESCOPE_WHEEL_CACHE  default ~/.cache/scalescope/wheels
#   SCALESCOPE_NO_APT=1   never run apt-get, even as root
#   HOROVOD_WITHOUT_MPI=1 build without MPI even when mpicxx exists
#   NCCL_HOME / HOROVOD_NCCL_HOME  where NCCL lives on a cluster (see README)
set -euo pipefail

HVD_VERSION="${HOROVOD_VERSION:-0.28.1}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${1:-}"
if [[ -z "$PY" ]]; then
  if [[ -x "$HERE/.venv/bin/python" ]]; then PY="$HERE/.venv/bin/python"; else PY="$(command -v python3)"; fi
fi
BIN="$(dirname "$PY")"
CACHE="${SCALESCOPE_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/scalescope/wheels}"
say() { printf '[install_horovod] %s\n' "$*"; }
die() { printf '[install_horovod] ERROR: %s\n' "$*" >&2; exit 1; }

# ---- 1. what we build against ---------------------------------------------------------
read -r TORCH_VER CUDA_VER PY_TAG < <("$PY" - <<'EOF' || true
import sys
try:
    import torch
except Exception:
    print("none none", f"cp{sys.version_info[0]}{sys.version_info[1]}")
else:
    print(torch.__version__.split("+")[0], torch.version.cuda or "cpu", f"cp{sys.version_info[0]}{sys.version_info[1]}")
EOF
)
[[ "${TORCH_VER:-none}" != none ]] || die "torch is not importable from $PY. Install torch first (make does: pip install torch==2.13.0)."

# ---- 2. MPI ----------------------------------------------------------------------------
if [[ -z "${HOROVOD_WITHOUT_MPI:-}" ]] && ! command -v mpicxx >/dev/null 2>&1; then
  if [[ "$(id -u)" == 0 && -z "${SCALESCOPE_NO_APT:-}" ]] && command -v apt-get >/dev/null 2>&1; then
    say "no mpicxx found: installing Open MPI from the distribution (openmpi-bin libopenmpi-dev)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null || die "apt-get update failed"
    apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null || die "apt-get install openmpi-bin libopenmpi-dev failed"
  else
    say "no mpicxx on PATH: building WITHOUT MPI (Gloo only)."
    say "  To get MPI: on Debian/Ubuntu 'sudo apt-get install openmpi-bin libopenmpi-dev';"
    say "  on a cluster 'module load openmpi' (or your site's MPI module) so that mpicxx is on PATH, then re-run."
  fi
fi
WITH_MPI=0
if [[ -z "${HOROVOD_WITHOUT_MPI:-}" ]] && command -v mpicxx >/dev/null 2>&1; then WITH_MPI=1; fi

# ---- 3. NCCL ---------------------------------------------------------------------------
WITH_NCCL=0
if [[ "$CUDA_VER" != cpu ]]; then
  nccl_home="${HOROVOD_NCCL_HOME:-${NCCL_HOME:-}}"
  if [[ -n "$nccl_home" && -e "$nccl_home/include/nccl.h" ]] || [[ -e /usr/include/nccl.h ]] \
     || ldconfig -p 2>/dev/null | grep -q libnccl.so; then
    WITH_NCCL=1
  else
    say "torch has CUDA $CUDA_VER but no NCCL was found: GPU tensors will be reduced through host memory."
    say "  Set NCCL_HOME (or HOROVOD_NCCL_HOME) to your NCCL install, or 'module load nccl', and re-run."
  fi
fi

OPS="gloo"; [[ $WITH_MPI == 1 ]] && OPS="$OPS-mpi"; [[ $WITH_NCCL == 1 ]] && OPS="$OPS-nccl"
KEY="horovod-${HVD_VERSION}+torch${TORCH_VER}.cuda${CUDA_VER}.${PY_TAG}.${OPS}"
say "target: $KEY (python: $PY)"

check_build() {
  local out
  out="$("$BIN/horovodrun" --check-build 2>&1)" || { echo "$out" >&2; return 1; }
  echo "$out"
  local missing=()
  grep -q '\[X\] PyTorch' <<<"$out" || missing+=("framework PyTorch")
  grep -q '\[X\] Gloo' <<<"$out" || missing+=("controller Gloo")
  if [[ $WITH_MPI == 1 ]]; then grep -q '\[X\] MPI' <<<"$out" || missing+=("controller MPI"); fi
  if [[ $WITH_NCCL == 1 ]]; then grep -q '\[X\] NCCL' <<<"$out" || missing+=("tensor operation NCCL"); fi
  if (( ${#missing[@]} )); then
    printf '[install_horovod] ERROR: horovodrun --check-build lacks: %s\n' "${missing[*]}" >&2
    return 2
  fi
}

# ---- 4. already installed and matching? -------------------------------------------------
STAMP="$(dirname "$BIN")/.horovod-build-key"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$KEY" ]] && "$PY" -c "import horovod.torch" 2>/dev/null; then
  if check_build >/dev/null 2>&1; then say "already installed: $KEY"; exit 0; fi
fi

# ---- 5. cached wheel, or build one --------------------------------------------------------
mkdir -p "$CACHE/$KEY"
WHEEL="$(ls "$CACHE/$KEY"/horovod-*.whl 2>/dev/null | head -n1 || true)"
if [[ -z "$WHEEL" ]]; then
  command -v cmake >/dev/null 2>&1 || "$PY" -m pip install -q "cmake>=3.13"
  "$PY" -m pip install -q setuptools wheel packaging psutil pyyaml cloudpickle cffi
  WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
  say "downloading the horovod==$HVD_VERSION sdist from PyPI"
  "$PY" -m pip download -q --no-deps --no-binary :all: -d "$WORK" "horovod==$HVD_VERSION" \
    || die "could not download horovod==$HVD_VERSION from PyPI"
  tar -xzf "$WORK"/horovod-"$HVD_VERSION".tar.gz -C "$WORK"
  SRC="$WORK/horovod-$HVD_VERSION"
  if "$PY" -c "import sys, torch; from packaging.version import Version as V; sys.exit(0 if V(torch.__version__.split('+')[0]) >= V('2.1') else 1)"; then
    say "torch $TORCH_VER >= 2.1: setting CMAKE_CXX_STANDARD 14 -> 17 (horovod PR #3998)"
    sed -i 's/^set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$SRC/CMakeLists.txt"
    sed -i 's/^\(\s*\)set(CMAKE_CXX_STANDARD 14)/\1set(CMAKE_CXX_STANDARD 17)/' "$SRC/horovod/torch/CMakeLists.txt"
    grep -q 'CMAKE_CXX_STANDARD 17' "$SRC/CMakeLists.txt" && grep -q 'CMAKE_CXX_STANDARD 17' "$SRC/horovod/torch/CMakeLists.txt" \
      || die "could not patch the C++ standard in the Horovod sources"
  fi
  export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_GLOO=1
  if [[ $WITH_MPI == 1 ]]; then export HOROVOD_WITH_MPI=1; else export HOROVOD_WITHOUT_MPI=1; unset HOROVOD_WITH_MPI || true; fi
  if [[ $WITH_NCCL == 1 ]]; then export HOROVOD_GPU_OPERATIONS=NCCL; else unset HOROVOD_GPU_OPERATIONS || true; fi
  export MAKEFLAGS="-j$(nproc)"
  say "building the wheel (5-8 minutes on 2 cores; log in $CACHE/$KEY/build.log)"
  if ! "$PY" -m pip wheel -v --no-deps --no-build-isolation -w "$CACHE/$KEY" "$SRC" >"$CACHE/$KEY/build.log" 2>&1; then
    tail -n 40 "$CACHE/$KEY/build.log" >&2
    die "the Horovod build failed; full log: $CACHE/$KEY/build.log"
  fi
  WHEEL="$(ls "$CACHE/$KEY"/horovod-*.whl | head -n1)"
  say "built $WHEEL"
else
  say "using the cached wheel $WHEEL"
fi

"$PY" -m pip install -q --force-reinstall --no-deps "$WHEEL"
"$PY" -m pip install -q cloudpickle psutil pyyaml packaging cffi
echo "$KEY" >"$STAMP"

# ---- 6. check -----------------------------------------------------------------------
if ! check_build; then
  rm -f "$STAMP"
  die "Horovod is installed but not with everything expected (see above). Remove $CACHE/$KEY to rebuild."
fi
say "ok: $KEY"
