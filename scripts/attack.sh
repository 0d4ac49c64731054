#!/usr/bin/env bash
# Every attack on the harness (tests marked `attack`: hostile inputs, faults, the Hypothesis fuzzer), with the
# counts: tried, clear errors, right results, tracebacks, files changed, runs lost (the last three must be 0).
#
#   scripts/attack.sh           all of them, the fuzzer's slow set included (2,000 examples; ~20 minutes on 2 cores)
#   scripts/attack.sh --quick   the short fuzz profile only
#   extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
marker="attack"
if [ "${1:-}" = "--quick" ]; then
    marker="attack and not slow"
    shift
fi
export PYTHONPATH="$PWD:$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m pytest -q -m "$marker" -p attack_plugin -p no:cacheprovider "$@" tests
