#!/usr/bin/env bash
# Issue 16, first stage, in one call on a lent GPU machine (docs/gpu.md, "On a lent GPU"): run
# from the repository root there, with build-cuda/gpu-bundle carried (bench/gpu/bundle.sh makes
# it on any machine). In order, each step's output in $OUT (the device tool brings back at most
# 8 files):
#   machine.txt      nvidia-smi, the driver, the libraries found, ldd of both binaries
#   cuda_tests.log   shardlab_cuda_tests, every GPU test against the CPU device (+ .json)
#   memcheck.log     the same tests under compute-sanitizer --tool memcheck
#   racecheck.log    the kernel tests under compute-sanitizer --tool racecheck
#   losses.txt       each strategy at --ranks 1, 20 steps of `small` on the GPU against the same
#                    run on the CPU (bench/gpu/compare_losses.py, within 1e-4)
#   summary.txt      one line per check, also printed last
# Every step runs even when one before it failed; the exit status is the number of failed checks.
# Each step has a time limit (120 + 240 + 120 s, then 60 s a GPU run) so that the losses are
# reached within the device tool's 600 s a call; what $OUT holds comes back even after a kill.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${BUNDLE:-build-cuda/gpu-bundle}
OUT=${OUT:-/tmp/shardlab-device-check}
STEPS=${STEPS:-20}
# Time limits of the steps, in seconds, and which steps run: CHECKS, any of "tests sanitizers
# losses" (a call can run the sanitizers last, after other work, with APPEND=1 so that
# summary.txt keeps the earlier lines). TESTS_JSON: where gtest's JSON goes (the device tool
# brings back 8 files at most).
T_TESTS=${T_TESTS:-120} T_MEMCHECK=${T_MEMCHECK:-240} T_RACECHECK=${T_RACECHECK:-120} T_RUN=${T_RUN:-60}
CHECKS=${CHECKS:-tests sanitizers losses}
TESTS_JSON=${TESTS_JSON:-$OUT/cuda_tests.json}
runs() { [[ " $CHECKS " == *" $1 "* ]]; }
mkdir -p "$OUT"
[ "${APPEND:-0}" = 1 ] || : >"$OUT/summary.txt"
failed=0
result() {  # result NAME STATUS DETAIL (status 124: timeout's, the step ran out of time)
  local line detail=$3
  [ "$2" = 124 ] && detail="timed out; $detail"
  line=$(printf '%-28s %-5s %s' "$1" "$([ "$2" = 0 ] && echo ok || echo FAIL)" "$detail")
  echo "$line" >>"$OUT/summary.txt"
  [ "$2" = 0 ] || failed=$((failed + 1))
}

if [ ! -x "$B/bin/shardlab" ] || [ ! -x "$B/bin/shardlab_cuda_tests" ]; then
  echo "device_check.sh: $B/bin lacks shardlab or shardlab_cuda_tests: run bench/gpu/bundle.sh" \
       "here and carry $B" >&2
  exit 2
fi
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "device_check.sh: no GPU on this machine (nvidia-smi -L fails): run it on a lent GPU" >&2
  exit 2
fi

# ---- the libraries: the carried packages unpacked aside; CUDA's from the toolkit or pip -------
source bench/gpu/gpu_env.sh

{
  date -u +%FT%TZ
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit \
    --format=csv
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd --version | head -1
  for b in "$B"/bin/*; do echo "== ldd $b"; ldd "$b"; done
} >"$OUT/machine.txt" 2>&1
if grep -q "not found" "$OUT/machine.txt"; then
  result libraries 1 "$(grep 'not found' "$OUT/machine.txt" | sort -u | tr -s ' \t' ' ' | head -3)"
else
  result libraries 0 "every library found ($(nvidia-smi --query-gpu=name --format=csv,noheader))"
fi

# ---- the GPU tests, then under compute-sanitizer ----------------------------------------------
if runs tests; then
  timeout "$T_TESTS" "$B/bin/shardlab_cuda_tests" --gtest_output="json:$TESTS_JSON" \
    >"$OUT/cuda_tests.log" 2>&1
  rc=$?
  # gtest's closing counts: "[  PASSED  ] 8 tests." and the like (a test that needs two GPUs skips)
  result cuda_tests "$rc" "$(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' \
    "$OUT/cuda_tests.log" | sed -E 's/^\[ +([A-Z]+) +\] ([0-9]+) tests?.*/\1 \2/' | tr '\n' ' ')"
fi
if ! runs sanitizers; then
  :  # left for later
elif command -v compute-sanitizer >/dev/null; then
  timeout "$T_MEMCHECK" compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
    "$B/bin/shardlab_cuda_tests" --gtest_filter='-CudaCheckDeathTest.*' >"$OUT/memcheck.log" 2>&1
  rc=$?
  result memcheck "$rc" "$(grep -m1 -E 'ERROR SUMMARY' "$OUT/memcheck.log")"
  timeout "$T_RACECHECK" compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 20 \
    "$B/bin/shardlab_cuda_tests" --gtest_filter='CudaKernels*' >"$OUT/racecheck.log" 2>&1
  rc=$?
  result racecheck "$rc" "$(grep -m1 -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log")"
else
  result compute-sanitizer 1 "not on PATH"
fi

# ---- every strategy: the GPU's losses against the CPU's -----------------------------------------
runs losses && : >"$OUT/losses.txt" || LOSS_STRATEGIES=
for s in ${LOSS_STRATEGIES-no_shard shard_optim shard_grad_op full_shard hybrid_shard}; do
  args=(train --model small --ranks 1 --strategy "$s" --steps "$STEPS" --batch 4 --seq 128
        --seed 1337 --overwrite)
  {
    echo "==== $s"
    "$B/bin/shardlab" "${args[@]}" --device cpu --backend local --run-dir "/tmp/sl-cpu-$s" |
      tail -2
    timeout "$T_RUN" "$B/bin/shardlab" "${args[@]}" --device cuda --backend nccl \
      --run-dir "/tmp/sl-cuda-$s" | tail -4
  } >>"$OUT/losses.txt" 2>&1
  python3 bench/gpu/compare_losses.py "/tmp/sl-cpu-$s" "/tmp/sl-cuda-$s" --tol 1e-4 \
    >>"$OUT/losses.txt" 2>&1
  rc=$?
  result "losses $s" "$rc" "$(tail -1 "$OUT/losses.txt")"
done

echo "== $failed of $(wc -l <"$OUT/summary.txt") checks failed" >>"$OUT/summary.txt"
cat "$OUT/summary.txt"
exit "$failed"
