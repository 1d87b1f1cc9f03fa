#!/usr/bin/env bash
# Runs the benchmark suites with JSON output and renders the report (bench/report.py) from them.
#   bench/run_bench.sh default BIN_DIR OUT_DIR   `make bench`: a few minutes on 2 cores
#   bench/run_bench.sh quick   BIN_DIR OUT_DIR   `make bench-quick` and the ctest: under a minute
# Add --no-report to only run the suites. OUT_DIR/data/ gets one JSON file per suite and run.log
# (machine, load average before and after each suite, the exact commands), which report.py reads.
# BENCH_SUITES="wrap capacity" runs only those suites (of train_step collectives capacity wrap
# mpi); the report then has only their sections.
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
    coll_args=(--benchmark_filter='/local/|/local_in_place/|memcpy' --memcpy_rounds=5)
    cap_args=(--ranks=1,2,4,8 --limit_mib=64 --width=256)
    # The wrap-policy sweep of docs/fsdp.md: full_shard, N = 4, small and medium.
    wrap_args=(--benchmark_min_time=1 --benchmark_repetitions=3
      --benchmark_enable_random_interleaving=true)
    ;;
  quick)
    train_args=(--presets=tiny --ranks=1,2,4 --benchmark_min_time=0.01 --ceiling_size=256)
    coll_args=('--benchmark_filter=/local/bytes:(1048576|67108864)/|memcpy' --memcpy_rounds=3)
    cap_args=(--ranks=1,2,4 --limit_mib=16 --width=128)
    wrap_args=(--presets=tiny --wraps=block,whole,layer --ranks=2 --benchmark_min_time=0.01)
    ;;
  *)
    echo "bench/run_bench.sh: unknown mode '$mode' (expected default or quick)" >&2
    exit 2
    ;;
esac

suites=${BENCH_SUITES:-train_step collectives capacity wrap mpi}
wants() { [[ " ${suites//,/ } " == *" $1 "* ]]; }

for b in bench_train_step bench_collectives bench_capacity bench_wrap; do
  if [ ! -x "$bin/$b" ]; then
    echo "bench/run_bench.sh: $bin/$b not found: build with SHARDLAB_BENCH=ON first" >&2
    exit 1
  fi
done

data="$out/data"
mkdir -p "$data"
log="$data/run.log"
: > "$log"
{
  echo "mode $mode"
  echo "suites $suites"
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine_cpu $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
  echo "machine_cores $(nproc)"
  echo "machine_mem_kib $(awk '/^MemTotal/ {print $2}' /proc/meminfo)"
  echo "git $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} >> "$log"

# One BLAS thread per rank: the binaries set it too; the variable covers OpenBLAS's start-up.
export OPENBLAS_NUM_THREADS=1
# The environment a command line needs to run again as it ran here: OPENBLAS_CORETYPE when set
# (the Makefile sets it on AMD Zen 4).
blas_env="OPENBLAS_NUM_THREADS=1${OPENBLAS_CORETYPE:+ OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE}"
echo "blas_core $(OPENBLAS_VERBOSE=2 "$bin/bench_train_step" --help 2>&1 | sed -n 's/^Core: *//p' | head -n 1)${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)}" >> "$log"

# The command as one line a shell can run again: arguments with special characters single-quoted.
quoted() {
  local out=() a
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:=,+-]*$ ]]; then out+=("$a"); else out+=("'$a'"); fi
  done
  echo "${out[*]}"
}

# run_suite NAME CMD...: runs CMD with its JSON written to $data/NAME.json, logging the load
# average before and after and the exact command.
run_suite() {
  local name=$1
  shift
  local json="$data/$name.json"
  local cmd=("$@" --benchmark_out_format=json "--benchmark_out=$json")
  echo "load_before $name $(cut -d' ' -f1-3 /proc/loadavg)" >> "$log"
  echo "command $name $blas_env $(quoted "${cmd[@]}")" >> "$log"
  echo "== $(quoted "${cmd[@]}")"
  "${cmd[@]}"
  echo "load_after $name $(cut -d' ' -f1-3 /proc/loadavg)" >> "$log"
}

wants train_step && run_suite train_step "$bin/bench_train_step" "${train_args[@]}"
wants collectives && run_suite collectives "$bin/bench_collectives" "${coll_args[@]}"
wants capacity && run_suite capacity "$bin/bench_capacity" "${cap_args[@]}"
wants wrap && run_suite wrap "$bin/bench_wrap" "${wrap_args[@]}"

# The MPI backend (default suite only, when mpirun is there): processes instead of threads.
# SHARDLAB_MPIRUN_FLAGS replaces the flags, e.g. add `--mca btl_vader_single_copy_mechanism none`
# where the sandbox forbids ptrace (then every shared-memory message is copied twice).
if [ "$mode" = default ] && wants mpi; then
  if command -v mpirun > /dev/null; then
    read -r -a mpi_flags <<< "${SHARDLAB_MPIRUN_FLAGS:---oversubscribe --mca btl self,vader}"
    [ "$(id -u)" = 0 ] && mpi_flags+=(--allow-run-as-root)
    for np in 2 4; do
      run_suite "train_step_mpi_np$np" mpirun "${mpi_flags[@]}" -np "$np" \
        "$bin/bench_train_step" --presets=tiny,small --mpi_steps=10
      run_suite "collectives_mpi_np$np" mpirun "${mpi_flags[@]}" -np "$np" \
        "$bin/bench_collectives" --benchmark_filter=/mpi/
    done
  else
    echo "mpi skipped: no mpirun on PATH" >> "$log"
  fi
fi

if [ "$report" = 1 ]; then
  echo "== /usr/bin/python3 $here/report.py $data $out"
  /usr/bin/python3 "$here/report.py" "$data" "$out"
fi
