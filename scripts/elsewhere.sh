#!/usr/bin/env bash
# The tests as another machine would run them: what the machine decides, changed, so that no
# test passes on one machine's CPU name, terminal or time zone only.
#
#   HARNESS_TEST_CPU_NAME  a CPU named in 60 characters: harness.core.devices.cpu_name() reports it
#   TZ                     13 h 45 min ahead of UTC (a POSIX rule: no time zone files needed), so local
#                          dates differ from UTC's most of the day
#   COLUMNS, LINES         a terminal of 80 × 24, then of 200 × 60
#
# The 80-column pass runs every test that is not slow and the slow ones marked `elsewhere` (those whose
# assertions read the CPU's name, text a terminal wraps, or local time: a long name wraps there); the
# 200-column pass runs the tests that are not slow (the in-process commands, every table and note). PYTEST
# is the pytest command (`make test-elsewhere` passes its own, on every core); extra arguments go to pytest.
#
#   ELSEWHERE_WIDTHS  the passes to run: "80 200" (both, the default), "80" or "200"
#   --env             print the stand-ins as `export` lines and run nothing (CI runs all its tests under
#                     them: its output is no terminal, so `make test` is the 80-column pass there)
set -euo pipefail
cd "$(dirname "$0")/.."
CPU="Intel(R) Xeon(R) Platinum 8480+ 56-Core Processor (stand-in)"
ZONE="<+1345>-13:45"
if [[ ${1:-} == --env ]]; then
  printf 'export HARNESS_TEST_CPU_NAME=%q TZ=%q\n' "$CPU" "$ZONE"
  exit 0
fi
read -r -a pytest <<< "${PYTEST:-.venv/bin/python -m pytest}"
export HARNESS_TEST_CPU_NAME="$CPU" TZ="$ZONE"
say() { echo "elsewhere: a terminal of $1, TZ=$TZ, CPU \"$HARNESS_TEST_CPU_NAME\""; }
for width in ${ELSEWHERE_WIDTHS:-80 200}; do
  case $width in
    80) say "80 × 24"; COLUMNS=80 LINES=24 "${pytest[@]}" -m "elsewhere or not slow" "$@" ;;
    200) say "200 × 60"; COLUMNS=200 LINES=60 "${pytest[@]}" -m "not slow" "$@" ;;
    *) echo "elsewhere: ELSEWHERE_WIDTHS holds $width; the widths are 80 and 200" >&2; exit 2 ;;
  esac
done
