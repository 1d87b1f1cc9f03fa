#!/usr/bin/env bash
# `make test-asan` / `make test-tsan`: configure a sanitizer preset (CMakePresets.json) into its
# build directory, build it, run every ctest entry, and fail on any sanitizer report. AddressSanitizer,
# LeakSanitizer and ThreadSanitizer reports fail their test by themselves; UBSan's "runtime error"
# lines do not (the preset recovers from them), so the full ctest output is kept and searched.
#
#   tests/sanitizers/run_sanitized.sh PRESET [JOBS] [CTEST_ARGS...]
#     PRESET  asan | tsan
#   The log is BUILD/ctest-sanitized.log (every test's output); the reports found are printed.
set -uo pipefail
preset=${1:?usage: run_sanitized.sh asan|tsan [JOBS] [CTEST_ARGS...]}
jobs=${2:-2}
shift $(( $# >= 2 ? 2 : 1 ))
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-$preset
log=$build/ctest-sanitized.log
cd "$root" || exit 1
cmake --preset "$preset" >/dev/null || exit 1
cmake --build "$build" -j "$jobs" || exit 1

cd "$build" || exit 1
# -V puts every test's output in the log; the console gets ctest's one line per test.
ctest -V -j "$jobs" --timeout 1800 "$@" >"$log" 2>&1
ctest_rc=$?
grep -E '^ *[0-9]+/[0-9]+ Test +#|tests passed|tests failed|\(Failed\)|\(Timeout\)|\*\*\*' "$log" |
  grep -vE '^ *[0-9]+/[0-9]+ Test +#.* Passed ' | tail -n 60
reports=$(grep -E 'runtime error:|ERROR: AddressSanitizer|ERROR: LeakSanitizer|WARNING: ThreadSanitizer' \
            "$log" | sed -E 's/^[0-9]+: //' | sort | uniq -c | sort -rn)
if [ -n "$reports" ]; then
  echo "sanitizer reports in $log (count, first line):"
  printf '%s\n' "$reports"
fi
[ $ctest_rc -eq 0 ] && [ -z "$reports" ]
