#!/usr/bin/env bash
# The bad-input and fault corpus: every file tests/corpus/cases_*.sh makes its own malformed inputs
# under a scratch directory and runs ShardLab on them. Each case must end with a non-zero exit
# below 128 (an error, not a signal), within its time limit, with output that names the file,
# field or rank at fault (a regular expression). Prints one markdown row per case, then
# "N passed, M failed"; exits non-zero when any case failed.
#
#   tests/corpus/run_corpus.sh BIN_DIR [TABLE.md] [FILTER]
#     BIN_DIR   the build's bin/ (holds shardlab, shardlab_viewer)
#     TABLE.md  also write the table there (docs/reliability.md embeds it)
#     FILTER    run only the cases_*.sh whose name contains it
# No pipefail: with it, `printf | grep -q` fails when grep stops reading early (printf gets
# SIGPIPE); matches are made on here-strings anyway.
set -u
here=$(cd "$(dirname "$0")" && pwd)
BIN=$(cd "${1:?usage: run_corpus.sh BIN_DIR [TABLE.md] [FILTER]}" && pwd)
table_out=${2:-}
filter=${3:-}
SHARDLAB=$BIN/shardlab
WORK=$(mktemp -d "${TMPDIR:-/tmp}/shardlab-corpus.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OPENBLAS_NUM_THREADS=1
passed=0
failed=0
rows=()
group=""

# Each cases file calls `section TITLE` first, then `bad` (and `good`) once per case.
section() { group=$1; }

# bad NAME REGEX [--timeout S] CMD...: CMD must fail cleanly with output matching REGEX.
bad() {
  local name=$1 regex=$2
  shift 2
  local limit=60
  if [ "${1:-}" = "--timeout" ]; then limit=$2; shift 2; fi
  local out rc verdict
  out=$(cd "$WORK" && timeout -k 5 "$limit" "$@" 2>&1 </dev/null)
  rc=$?
  local first
  first=$(grep -m1 -E -e "$regex" <<<"$out" || grep -m1 -v '^\s*$' <<<"$out")
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    verdict="FAIL: hung (killed after ${limit} s)"
  elif [ $rc -eq 0 ]; then
    verdict="FAIL: exit 0"
  elif [ $rc -ge 128 ]; then
    verdict="FAIL: signal $((rc - 128))"
  elif ! grep -q -E -e "$regex" <<<"$out"; then
    verdict="FAIL: message does not match /$regex/"
  else
    verdict="ok"
  fi
  record "$name" "$rc" "$first" "$verdict" "$out"
}

# good NAME REGEX CMD...: CMD must succeed (exit 0) with output matching REGEX; for the faults
# whose right answer is to recover (a leftover temporary directory, say).
good() {
  local name=$1 regex=$2
  shift 2
  local out rc verdict
  out=$(cd "$WORK" && timeout -k 5 60 "$@" 2>&1 </dev/null)
  rc=$?
  local first
  first=$(grep -m1 -E -e "$regex" <<<"$out" || head -n1 <<<"$out")
  if [ $rc -ne 0 ]; then verdict="FAIL: exit $rc"
  elif ! grep -q -E -e "$regex" <<<"$out"; then verdict="FAIL: message does not match /$regex/"
  else verdict="ok"; fi
  record "$name" "$rc" "$first" "$verdict" "$out"
}

# expect NAME COND-CMD...: a plain check after a case (a file untouched, no half-written output).
expect() {
  local name=$1
  shift
  if (cd "$WORK" && "$@") >/dev/null 2>&1; then record "$name" 0 "(check) $*" ok ""
  else record "$name" 1 "(check) $*" "FAIL: check failed" ""; fi
}

record() {
  local name=$1 rc=$2 first=$3 verdict=$4 out=$5
  first=${first//$WORK/\$WORK}
  first=${first//$BIN/\$BIN}  # the table reads the same from any checkout
  first=${first//|/\\|}
  [ ${#first} -gt 160 ] && first="${first:0:157}..."
  rows+=("| $group | $name | $rc | \`$first\` | $verdict |")
  if [ "$verdict" = ok ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    printf 'corpus: %s / %s: %s\n--- output ---\n%s\n---\n' "$group" "$name" "$verdict" "$out" >&2
  fi
}

for f in "$here"/cases_*.sh; do
  [ -n "$filter" ] && [[ "$f" != *"$filter"* ]] && continue
  # shellcheck source=/dev/null
  source "$f"
done

{
  echo "| area | case | exit | what it prints | verdict |"
  echo "| --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} > "$WORK/table.md"
cat "$WORK/table.md"
[ -n "$table_out" ] && cp "$WORK/table.md" "$table_out"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
