#!/usr/bin/env bash
# Run the test suite with the project's venv (what `make test` runs).
#
#   local (CI unset):  ruff, then every test but those marked `slow` (real training sweeps,
#                      local SLURM jobs, the Horovod/nsys/Kineto/HTA cross-checks, notebooks,
#                      Perfetto, the Horovod build check): under 15 minutes on 2 cores.
#   CI set (.ci/run):  ruff, then the whole suite, `slow` included.
#
# SCALESCOPE_TESTS=all runs the whole suite locally too (SCALESCOPE_TESTS=fast the fast one
# under CI); a `-m EXPR` among the arguments replaces the marker selection altogether.
# pytest's exit code 5 ("no tests collected") is a failure here: a run that tested nothing
# must never pass.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${SCALESCOPE_PY:-$HERE/.venv/bin/python}"
cd "$HERE"
"$PY" -m ruff check . || { echo "ruff found problems"; exit 1; }

which="${SCALESCOPE_TESTS:-}"
if [[ -z "$which" ]]; then
  if [[ -n "${CI:-}" && "${CI}" != "false" && "${CI}" != "0" ]]; then which=all; else which=fast; fi
fi
select=()
chose_markers=0
for arg in "$@"; do
  [[ "$arg" == "-m" || "$arg" == -m* ]] && chose_markers=1
done
if [[ $chose_markers == 0 && "$which" == fast ]]; then
  select=(-m "not slow")
  echo "scalescope tests: the fast suite (-m 'not slow'); CI=1 or SCALESCOPE_TESTS=all runs everything"
else
  echo "scalescope tests: the whole suite"
fi
"$PY" -m pytest "${select[@]}" --durations=30 "$@"
rc=$?
if [[ $rc == 5 ]]; then
  echo "pytest collected no tests: failing"
  [[ ${#select[@]} -gt 0 ]] && echo "(every test selected is marked slow: SCALESCOPE_TESTS=all runs them)"
  exit 1
fi
exit $rc
