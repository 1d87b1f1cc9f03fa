section "cluster specs"
# Cluster files for `simulate`, `plan --cluster`, `--recommend` and `--collective-times` (sourced
# by run_corpus.sh; core/device/cluster_spec.cpp). Extreme but finite figures made the int64
# nanosecond clock wrap (a peak of 1e-300 FLOP/s gave a faster step and an MFU of 1e62 %); a
# nesting of 10^5 levels overflowed the stack; a repeated or misspelt key was taken silently.
cs=$WORK/clusters
mkdir -p "$cs"
"$SHARDLAB" simulate --print-cluster h100-sxm >"$cs/h100.json" 2>/dev/null
# cs_edit NAME PYTHON: the preset with PYTHON run on its JSON object j, as $cs/NAME.json.
cs_edit() {
  python3 - "$cs/h100.json" "$cs/$1.json" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
exec(sys.argv[3])
open(sys.argv[2], "w").write(json.dumps(j, indent=1))
PY
}
sim=(simulate --model tiny --steps 2 --batch 8 --seq 32 --ranks 8 --trace off)

cs_edit peak_1e-300 'j["gpu"]["peak_tflops"]["fp32"] = 1e-300'
bad cluster_peak_1e-300 "field 'gpu.peak_tflops.fp32' = 1e-300 is outside the physical range \[1e-06, 1e\+06\] TFLOP/s" \
  "$SHARDLAB" "${sim[@]}" --cluster "$cs/peak_1e-300.json"
cs_edit bandwidth_1e-300 'j["inter_node"]["bandwidth_GBps"] = 1e-300'
bad cluster_bandwidth_1e-300_collective_times "field 'inter_node.bandwidth_GBps' = 1e-300 is outside the physical range" \
  "$SHARDLAB" simulate --cluster "$cs/bandwidth_1e-300.json" --ranks 16 --collective-times
bad cluster_bandwidth_1e-300_recommend "field 'inter_node.bandwidth_GBps' = 1e-300 is outside the physical range" \
  "$SHARDLAB" plan --recommend --cluster "$cs/bandwidth_1e-300.json" --model tiny --ranks 16 --global-batch 16
cs_edit memory_1e12 'j["gpu"]["memory_GiB"] = 1e12'
bad cluster_memory_1e12_GiB "field 'gpu.memory_GiB' = [0-9.e+]+ is outside the physical range" \
  "$SHARDLAB" "${sim[@]}" --cluster "$cs/memory_1e12.json"
cs_edit efficiency_tiny 'j["efficiency"] = {"gemm_efficiency": 1e-300}'
bad cluster_efficiency_1e-300 "field 'efficiency.gemm_efficiency' = 1e-300 is outside the physical range" \
  "$SHARDLAB" "${sim[@]}" --cluster "$cs/efficiency_tiny.json"
# Every figure at the slow end of its range, and a model far too large for it: the virtual clock
# refuses to pass 2^60 ns instead of wrapping to a negative time.
cs_edit slowest 'j["gpu"]["peak_tflops"] = {"fp32": 1e-6, "tf32": 1e-6, "bf16": 1e-6}; j["efficiency"] = {"gemm_efficiency": 0.001}'
bad cluster_clock_past_2_60 "beyond the virtual clock's 2\^60 ns|passes the virtual clock's 2\^60 ns" --timeout 120 \
  "$SHARDLAB" simulate --cluster "$cs/slowest.json" --model gpt2 --ranks 8 --batch 64 --seq 1024 --steps 1 --trace off

# Keys: repeated (the last one won), unknown (a typo left the default in place).
python3 -c 'import sys; t = open(sys.argv[1]).read(); open(sys.argv[2], "w").write(t.replace("\"ranks_per_node\": 8", "\"ranks_per_node\": 8, \"ranks_per_node\": 4", 1))' \
  "$cs/h100.json" "$cs/dup.json"
bad cluster_duplicate_key "dup.json: key 'ranks_per_node' appears twice in one object" \
  "$SHARDLAB" "${sim[@]}" --cluster "$cs/dup.json"
cs_edit typo_efficiency 'j["efficiency"] = {"gemm_eficiency": 0.5}'
bad cluster_unknown_key_gemm_eficiency "unknown field 'efficiency.gemm_eficiency' \(did you mean 'gemm_efficiency'\?\)" \
  "$SHARDLAB" "${sim[@]}" --cluster "$cs/typo_efficiency.json"
cs_edit typo_devices 'j["devices_per_nod"] = 4'
bad cluster_unknown_key_devices_per_nod "unknown field 'devices_per_nod' \(did you mean 'devices_per_node'\?\)" \
  "$SHARDLAB" "${sim[@]}" --cluster "$cs/typo_devices.json"
# nodes x ranks_per_node as int: 2^20 x 2^11 printed "-2147483648 ranks".
cs_edit ranks_2_31 'j["nodes"] = 1048576; j["ranks_per_node"] = 2048'
bad cluster_ranks_2_31 "nodes 1048576 x ranks_per_node 2048 = 2147483648 ranks, more than the 16777216" \
  "$SHARDLAB" "${sim[@]}" --cluster "$cs/ranks_2_31.json"

# 10^5 levels of nesting, in a value and in an unknown key: a stack overflow (SIGSEGV) before.
python3 -c 'import sys; open(sys.argv[1], "w").write("{\"name\": \"deep\", \"source\": \"x\", \"nodes\": " + "[" * 100000 + "]" * 100000 + "}")' "$cs/deep.json"
python3 -c 'import sys; open(sys.argv[1], "w").write("{\"name\": \"deep\", \"x\": " + "{\"a\": " * 100000 + "1" + "}" * 100000 + "}")' "$cs/deep_key.json"
for cmd in simulate plan recommend collective_times; do
  case $cmd in
    simulate) args=("${sim[@]}") ;;
    plan) args=(plan --model tiny --ranks 8) ;;
    recommend) args=(plan --recommend --model tiny --ranks 8 --global-batch 8) ;;
    collective_times) args=(simulate --ranks 8 --collective-times) ;;
  esac
  bad "cluster_nested_1e5_$cmd" 'deep.json: arrays and objects nest deeper than 64 levels' \
    "$SHARDLAB" "${args[@]}" --cluster "$cs/deep.json"
done
bad cluster_nested_1e5_unknown_key 'deep_key.json: arrays and objects nest deeper than 64 levels' \
  "$SHARDLAB" "${sim[@]}" --cluster "$cs/deep_key.json"

# --print-cluster: a file is read and printed; this-machine measures; '' is not a name.
good print_cluster_file '"name": "h100-sxm"' "$SHARDLAB" simulate --print-cluster "$cs/h100.json"
bad print_cluster_empty "print-cluster '': name a preset" "$SHARDLAB" simulate --print-cluster ''
bad print_cluster_unknown "print-cluster|unknown preset and no such file" \
  "$SHARDLAB" simulate --print-cluster no-such-cluster
bad print_cluster_bad_file "typo_devices.json: unknown field 'devices_per_nod'" \
  "$SHARDLAB" simulate --print-cluster "$cs/typo_devices.json"
