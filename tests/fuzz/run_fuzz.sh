#!/usr/bin/env bash
# make fuzz: libFuzzer over the readers of user-supplied JSON (tests/fuzz/fuzz_*.cpp), each for
# SECONDS (default 600), one after another. Builds the "fuzz" preset (clang 14, ASan + UBSan) into
# build-fuzz/, makes seed inputs with the regular build's shardlab, keeps the corpora in
# build-fuzz/corpus/<target>/ (each run starts from the last), writes any crashing input to
# build-fuzz/artifacts/ and one summary line per target to build-fuzz/fuzz-summary.txt. Exits
# non-zero when a target found a crash.
#
#   tests/fuzz/run_fuzz.sh BIN_DIR [SECONDS] [TARGET...]
#     BIN_DIR  the regular build's bin/ (its shardlab makes the seeds)
#     TARGET   cluster_spec checkpoint_index run_lines safetensors_header (default: all)
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN=$(cd "${1:?usage: run_fuzz.sh BIN_DIR [SECONDS] [TARGET...]}" && pwd)
seconds=${2:-600}
shift $(( $# >= 2 ? 2 : 1 ))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(cluster_spec checkpoint_index run_lines safetensors_header)
out=$root/build-fuzz
set -e
[ -f "$out/CMakeCache.txt" ] || (cd "$root" && cmake --preset fuzz >/dev/null)
cmake --build "$out" -j "${JOBS:-2}" $(printf -- '--target fuzz_%s ' "${targets[@]}")
set +e

# ---- seeds: real files of each format, made now
seeds=$out/seeds
rm -rf "$seeds" && mkdir -p "$seeds"/{cluster_spec,checkpoint_index,run_lines,safetensors_header}
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
for p in h100-sxm a100-40gb; do "$BIN/shardlab" simulate --print-cluster $p >"$seeds/cluster_spec/$p.json"; done
"$BIN/shardlab" train --model tiny --steps 2 --ranks 2 --save-every 2 --ckpt-dir "$work/ck" \
  --run-dir "$work/run" >/dev/null 2>&1
cp "$work/ck/step-2/index.json" "$seeds/checkpoint_index/"
head -c 65536 "$work/run/rank0.jsonl" >"$seeds/run_lines/rank0.jsonl"
head -n 40 "$work/run/rank1.jsonl" >"$seeds/run_lines/rank1_head.jsonl"
"$BIN/shardlab" simulate --model tiny --steps 2 --batch 8 --seq 32 --ranks 8 --run-dir "$work/sim" \
  >/dev/null 2>&1
head -n 60 "$work/sim/rank0.jsonl" >"$seeds/run_lines/sim_head.jsonl"
"$BIN/shardlab" export "$work/ck" "$work/m.safetensors" >/dev/null
python3 - "$work/m.safetensors" "$seeds/safetensors_header/tiny" <<'PY'
import os, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
data = len(raw) - 8 - n
open(sys.argv[2], "wb").write(struct.pack("<Q", data << 1) + raw[8:8 + n])
PY

# ---- run each target
mkdir -p "$out/artifacts"
found=0
for t in "${targets[@]}"; do
  corpus=$out/corpus/$t
  mkdir -p "$corpus"
  log=$out/fuzz-$t.log
  echo "fuzz_$t: $seconds s"
  "$out/bin/fuzz_$t" "$corpus" "$seeds/$t" -dict="$here/json.dict" -max_total_time="$seconds" \
    -max_len=131072 -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$t-" >"$log" 2>&1
  rc=$?
  execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  crashes=$(ls "$out/artifacts" 2>/dev/null | grep -c "^$t-")
  line="fuzz_$t: ${seconds} s, ${execs:-?} executions, exit $rc, corpus $(ls "$corpus" | wc -l) inputs, crash/leak/timeout files: $crashes"
  echo "$line" | tee -a "$out/fuzz-summary.txt"
  [ $rc -ne 0 ] && { found=1; tail -n 40 "$log"; }
done
exit $found
