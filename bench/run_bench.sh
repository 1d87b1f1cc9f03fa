#!/usr/bin/env bash
# Runs the benchmark suites with JSON output and renders the report (bench/report.py) from them.
#   bench/run_bench.sh default BIN_DIR OUT_DIR   `make bench`: a few minutes on 2 cores
#   bench/run_bench.sh quick   BIN_DIR OUT_DIR   `make bench-quick` and the ctest: under a minute
# Add --no-report to only run the suites. OUT_DIR/data/ gets one JSON file per suite and run.log
# (machine, load average before and after each suite, the exact commands), which report.py reads.
set -euo pipefail

if [ $# -lt 3 ]; then
  echo "usage: bench/run_bench.sh default|quick BIN_DIR OUT_DIR [--no-report]" >&2
  exit 2
fi
mode=$1
bin=$2
out=$3
report=1
[ "${4:-}" = "--no-report" ] && report=0
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

case "$mode" in
  default)
    train_args=(--presets=tiny,small --ranks=1,2,4,8 --benchmark_min_time=0.5)
    coll_args=(--benchmark_filter='/local/|memcpy')
    cap_args=(--ranks=1,2,4,8 --limit_mib=64 --width=256)
    ;;
  quick)
    train_args=(--presets=tiny --ranks=1,2,4 --benchmark_min_time=0.01)
    coll_args=('--benchmark_filter=/local/bytes:(1048576|67108864)/|memcpy' --benchmark_min_time=0.01)
    cap_args=(--ranks=1,2,4 --limit_mib=16 --width=128)
    ;;
  *)
    echo "bench/run_bench.sh: unknown mode '$mode' (expected default or quick)" >&2
    exit 2
    ;;
esac

for b in bench_train_step bench_collectives bench_capacity; do
  if [ ! -x "$bin/$b" ]; then
    echo "bench/run_bench.sh: $bin/$b not found: build with SHARDLAB_BENCH=ON first (make build)" >&2
    exit 1
  fi
done

data="$out/data"
mkdir -p "$data"
log="$data/run.log"
: > "$log"
{
  echo "mode $mode"
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine_cpu $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
  echo "machine_cores $(nproc)"
  echo "machine_mem_kib $(awk '/^MemTotal/ {print $2}' /proc/meminfo)"
  echo "git $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} >> "$log"

# One BLAS thread per rank: the binaries set it too; the variable covers OpenBLAS's start-up.
export OPENBLAS_NUM_THREADS=1

# The command as one line a shell can run again: arguments with special characters single-quoted.
quoted() {
  local out=() a
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:=,+-]*$ ]]; then out+=("$a"); else out+=("'$a'"); fi
  done
  echo "${out[*]}"
}

run_suite() {
  local name=$1
  shift
  local json="$data/$name.json"
  local cmd=("$bin/bench_$name" "$@" --benchmark_out_format=json "--benchmark_out=$json")
  echo "load_before $name $(cut -d' ' -f1-3 /proc/loadavg)" >> "$log"
  echo "command $name OPENBLAS_NUM_THREADS=1 $(quoted "${cmd[@]}")" >> "$log"
  echo "== $(quoted "${cmd[@]}")"
  "${cmd[@]}"
  echo "load_after $name $(cut -d' ' -f1-3 /proc/loadavg)" >> "$log"
}

run_suite train_step "${train_args[@]}"
run_suite collectives "${coll_args[@]}"
run_suite capacity "${cap_args[@]}"

if [ "$report" = 1 ]; then
  echo "== /usr/bin/python3 $here/report.py $data $out"
  /usr/bin/python3 "$here/report.py" "$data" "$out"
fi
