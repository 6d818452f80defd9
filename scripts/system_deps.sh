#!/usr/bin/env bash
# System packages scalescope uses beyond Python: Open MPI (Horovod's MPI controller and
# mpirun), Chromium (kaleido's static figure export), a minimal TeX Live with poppler (pdflatex
# compiles the exported LaTeX tables in tests/test_latex.py; booktabs comes with
# texlive-latex-recommended, graphicx with texlive-latex-base) and SLURM with munge (the one-node
# cluster of scripts/local_slurm.sh, on which the SLURM tests submit real sweeps). Installs them with apt-get when run
# as root on Debian/Ubuntu and they are missing; otherwise says what to install and what a
# missing piece disables. Never fails the set-up: everything it installs is optional.
set -uo pipefail
say() { printf '[system_deps] %s\n' "$*"; }
need=()
command -v mpicxx >/dev/null 2>&1 || need+=(openmpi-bin libopenmpi-dev)
chromium_found=0
for b in chromium chromium-browser google-chrome google-chrome-stable; do
  command -v "$b" >/dev/null 2>&1 && chromium_found=1
done
[[ $chromium_found == 1 ]] || need+=(chromium)
command -v pdflatex >/dev/null 2>&1 && kpsewhich booktabs.sty >/dev/null 2>&1 \
  || need+=(texlive-latex-base texlive-latex-recommended)
command -v pdftotext >/dev/null 2>&1 || need+=(poppler-utils)
# Debian's SLURM 22.05: slurmctld + slurmd + client commands, their plugins (mpi/pmix,
# task/affinity, select/cons_tres) and munge for authentication.
for pair in munged:munge slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client; do
  PATH="$PATH:/usr/sbin:/sbin" command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
[[ " ${need[*]} " == *" slurmd "* ]] && need+=(slurm-wlm-basic-plugins)
(( ${#need[@]} )) || exit 0
if [[ "$(id -u)" == 0 && -z "${SCALESCOPE_NO_APT:-}" ]] && command -v apt-get >/dev/null 2>&1; then
  say "installing ${need[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  if apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1; then
    say "installed ${need[*]}"
  else
    say "WARNING: apt-get could not install ${need[*]}"
  fi
else
  say "missing system packages: ${need[*]}"
  say "  openmpi: without it Horovod builds with Gloo only (no horovod-mpi backend)."
  say "    Debian/Ubuntu: sudo apt-get install openmpi-bin libopenmpi-dev; on a cluster: module load openmpi"
  say "  chromium: without it figures export as HTML only (no PDF/SVG/PNG through kaleido)."
  say "    Debian/Ubuntu: sudo apt-get install chromium; elsewhere install Chrome and set BROWSER_PATH"
  say "  texlive-latex-base, texlive-latex-recommended, poppler-utils: without them the LaTeX compile test skips."
  say "    Debian/Ubuntu: sudo apt-get install texlive-latex-base texlive-latex-recommended poppler-utils"
  say "  munge, slurmctld, slurmd, slurm-client: without them the SLURM tests (a local one-node cluster) skip."
  say "    Debian/Ubuntu: sudo apt-get install munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins"
fi
exit 0
