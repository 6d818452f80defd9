#!/usr/bin/env bash
# Run the whole test suite with the project's venv. pytest's exit code 5 ("no tests
# collected") is a failure here: a run that tested nothing must never pass.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${SCALESCOPE_PY:-$HERE/.venv/bin/python}"
cd "$HERE"
"$PY" -m ruff check . || { echo "ruff found problems"; exit 1; }
"$PY" -m pytest "$@"
rc=$?
if [[ $rc == 5 ]]; then echo "pytest collected no tests: failing"; exit 1; fi
exit $rc
