# `shardlab simulate`: a run directory with virtual times that says it is simulated, `summary`
# saying so, the predictions printed, and one clear error line, exit non-zero, for each bad
# cluster or placement (docs/simulate.md).
include(${CMAKE_CURRENT_LIST_DIR}/helpers/train_common.cmake)

set(sim simulate --model tiny --steps 2 --batch 8 --seq 32)

# ---- a run: predictions, a run directory marked simulated, summary says so
file(REMOVE_RECURSE ${WORK_DIR}/sim1)
run_ok(out ${sim} --cluster h100-sxm --ranks 8 --run-dir sim1)
foreach(want "parallel: full_shard on 8 ranks \\(sim" "predicted for 8 ranks on h100-sxm"
             "step time +[0-9.]+ ms" "tokens/s +[0-9]+" "MFU +[0-9.]+%" "exposed comm +[0-9.]+ ms"
             "peak memory +[0-9.]+ [KMG]iB per rank, of 80.00 GiB with headroom [0-9.]+ [KMG]iB: fits" "params_unsharded")
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "simulate output lacks '${want}':\n${out}")
  endif()
endforeach()
file(READ ${WORK_DIR}/sim1/meta.json meta)
foreach(want "\"simulated\"" "\"times\": \"virtual\"" "\"ranks\": 8" "\"backend\": \"sim\"")
  if(NOT meta MATCHES "${want}")
    message(FATAL_ERROR "meta.json lacks ${want}:\n${meta}")
  endif()
endforeach()
run_ok(summary summary sim1)
if(NOT summary MATCHES "simulated: the predicted timeline of rank 0 of 8 ranks on cluster h100-sxm")
  message(FATAL_ERROR "summary does not say the run is simulated:\n${summary}")
endif()

# A cluster file: the preset printed, edited, read back.
run_ok(preset simulate --print-cluster a100-40gb)
file(WRITE ${WORK_DIR}/a100.json "${preset}")
run_ok(from_file ${sim} --cluster a100.json --ranks 16 --batch 16 --trace off)
if(NOT from_file MATCHES "predicted for 16 ranks on a100-40gb")
  message(FATAL_ERROR "a cluster file was not used:\n${from_file}")
endif()

# ---- bad input: each names what is wrong
expect_error(unknown_preset "--cluster 'h200-nvl': unknown preset and no such file"
             ${sim} --cluster h200-nvl --ranks 8)
string(REPLACE "\"inter_node\": {\"bandwidth_GBps\": 25, \"latency_us\": 5}," "" no_inter "${preset}")
file(WRITE ${WORK_DIR}/missing.json "${no_inter}")
expect_error(missing_field "cluster file missing.json: field 'inter_node' is missing"
             ${sim} --cluster missing.json --ranks 8)
string(REPLACE "\"bandwidth_GBps\": 300" "\"bandwidth_GBps\": -300" negative "${preset}")
file(WRITE ${WORK_DIR}/negative.json "${negative}")
expect_error(negative_bandwidth "field 'intra_node.bandwidth_GBps' = -300 must be > 0"
             ${sim} --cluster negative.json --ranks 8)
string(REPLACE "\"bandwidth_GBps\": 25" "\"bandwidth_GBps\": 0" zero "${preset}")
file(WRITE ${WORK_DIR}/zero.json "${zero}")
expect_error(zero_bandwidth "field 'inter_node.bandwidth_GBps' = 0 must be > 0"
             ${sim} --cluster zero.json --ranks 8)
string(REPLACE "\"ranks_per_node\": 8" "\"ranks_per_node\": 0" zero_rpn "${preset}")
file(WRITE ${WORK_DIR}/zero_rpn.json "${zero_rpn}")
expect_error(zero_ranks_per_node "field 'ranks_per_node' = 0 must be in \\[1, 1048576\\]"
             ${sim} --cluster zero_rpn.json --ranks 8)
# Per-collective fits on a link (what calibrate writes): a bad figure names its field.
string(REPLACE "\"inter_node\": {\"bandwidth_GBps\": 25, \"latency_us\": 5}"
       "\"inter_node\": {\"bandwidth_GBps\": 25, \"latency_us\": 5, \"collectives\": {\"reduce_scatter\": [{\"up_to_bytes\": 4194304, \"bandwidth_GBps\": 9, \"latency_us\": 1}, {\"bandwidth_GBps\": -2, \"latency_us\": 0}]}}"
       per_op_negative "${preset}")
file(WRITE ${WORK_DIR}/per_op_negative.json "${per_op_negative}")
expect_error(per_op_negative_bandwidth
             "cluster file per_op_negative.json: field 'inter_node.collectives.reduce_scatter\\[1\\].bandwidth_GBps' = -2 must be > 0"
             ${sim} --cluster per_op_negative.json --ranks 8)
file(WRITE ${WORK_DIR}/broken.json "{\"name\": \"x\",")
expect_error(not_json "cluster file broken.json: not valid JSON" ${sim} --cluster broken.json)
expect_error(ranks_not_whole_nodes "--ranks 12 is not a multiple of cluster 'h100-sxm' ranks_per_node 8"
             ${sim} --cluster h100-sxm --ranks 12 --batch 12)
expect_error(ranks_beyond_cluster "--ranks 8192 exceeds cluster 'h100-sxm'"
             ${sim} --cluster h100-sxm --ranks 8192 --batch 8192)
expect_error(hybrid_fraction "--hybrid-group 12 spans a fraction of a node of cluster 'h100-sxm' \\(ranks_per_node 8\\)"
             ${sim} --cluster h100-sxm --ranks 24 --batch 24 --strategy hybrid_shard --hybrid-group 12)
expect_error(hybrid_straddles "--hybrid-group 3 spans a fraction of a node"
             ${sim} --cluster h100-sxm --ranks 24 --batch 24 --strategy hybrid_shard --hybrid-group 3)
expect_error(bad_math "unknown GEMM math 'fp8'" ${sim} --ranks 8 --math fp8)
expect_error(batch_split "--batch 8 must split evenly over --ranks 16" ${sim} --ranks 16)

# ---- calibrate: a measured spec that simulate reads; --cluster this-machine measures in place
run_ok(cal calibrate --seconds 0.02 --out measured.json)
file(READ ${WORK_DIR}/measured.json measured)
foreach(want "\"name\": \"this-machine\"" "\"source\": \"measured by shardlab calibrate" "\"ranks_per_node\": 2"
             "\"collectives\": {" "\"all_gather\": \\[" "\"reduce_scatter\": \\[" "\"all_reduce\": \\["
             "\"devices_per_node\": [0-9]+" "\"host\": {\n *\"memory_bandwidth_GBps\"")
  if(NOT measured MATCHES "${want}")
    message(FATAL_ERROR "the measured spec lacks ${want}:\n${measured}")
  endif()
endforeach()
run_ok(on_measured ${sim} --cluster measured.json --ranks 2 --trace off)
run_ok(on_this ${sim} --cluster this-machine --ranks 2 --trace off)
if(NOT on_this MATCHES "calibrating this machine" OR NOT on_this MATCHES "predicted for 2 ranks on this-machine")
  message(FATAL_ERROR "--cluster this-machine did not measure:\n${on_this}")
endif()
expect_error(calibrate_one_rank "calibrate: --ranks 1 must be >= 2" calibrate --ranks 1)
# --link-groups: the link timed on groups of ranks at once (r mod G), each group's size the ring's n
run_ok(cal_groups calibrate --ranks 4 --link-groups 2 --seconds 0.02 --out grouped.json)
file(READ ${WORK_DIR}/grouped.json grouped)
foreach(want "on 2 groups of ranks at once" "\"ranks_per_node\": 2")
  if(NOT grouped MATCHES "${want}")
    message(FATAL_ERROR "the spec measured on groups lacks ${want}:\n${grouped}")
  endif()
endforeach()
expect_error(calibrate_groups "calibrate: --link-groups 3 must divide --ranks 4 into groups of two"
             calibrate --ranks 4 --link-groups 3)

# ---- the cluster changed from the command line: a slower link between nodes, fewer GPUs a node
set(big simulate --model small --steps 2 --batch 64 --seq 64 --ranks 64 --trace off
    --param-dtype bf16 --reduce-dtype bf16 --cluster h100-sxm)
run_ok(fast ${big})
run_ok(slow ${big} --inter-node-gbps 25)
string(REGEX MATCH "tokens/s +([0-9]+)" m "${fast}")
set(fast_tps ${CMAKE_MATCH_1})
string(REGEX MATCH "tokens/s +([0-9]+)" m "${slow}")
set(slow_tps ${CMAKE_MATCH_1})
if(NOT slow MATCHES "on h100-sxm with --inter-node-gbps 25" OR NOT slow_tps LESS fast_tps)
  message(FATAL_ERROR "--inter-node-gbps 25 (${slow_tps} tokens/s) is not slower than the "
                      "preset's 400 (${fast_tps}):\n${slow}")
endif()
expect_error(override_range "with --inter-node-gbps 1e\\+12: field 'inter_node.bandwidth_GBps'"
             ${sim} --cluster h100-sxm --ranks 8 --inter-node-gbps 1e12)
expect_error(override_ranks "2 nodes x ranks_per_node 4 = 8 ranks"
             ${sim} --cluster h100-sxm --ranks 16 --nodes 2 --gpus-per-node 4)
expect_error(override_needs_cluster "give --cluster" plan --model tiny --nodes 2)

# ---- "fits" with the GPU's headroom (docs/simulate.md): shown, counted, and settable
set(fit simulate --model gpt2 --steps 1 --batch 64 --seq 1024 --ranks 8 --trace off
    --param-dtype bf16 --attention flash --cluster a100-80gb)
run_ok(fit_default ${fit})
if(NOT fit_default MATCHES "headroom +context 1.15 GiB \\+ NCCL 1.00 GiB \\(1 communicator\\) \\+ fragmentation 1.7% "
   OR NOT fit_default MATCHES "of 80.00 GiB with headroom [0-9.]+ GiB: fits")
  message(FATAL_ERROR "simulate does not show the preset's headroom:\n${fit_default}")
endif()
# The same peak with a context that leaves no room: no longer fits, and the cluster says why.
run_ok(fit_tight ${fit} --headroom context=75GiB)
if(NOT fit_tight MATCHES "does NOT fit" OR NOT fit_tight MATCHES "with --headroom context=75GiB")
  message(FATAL_ERROR "--headroom context=75GiB still fits:\n${fit_tight}")
endif()
run_ok(fit_none ${fit} --headroom none)
if(NOT fit_none MATCHES "with headroom 0 B: fits")
  message(FATAL_ERROR "--headroom none left some headroom:\n${fit_none}")
endif()
expect_error(headroom_key "--headroom 'contxt=1GiB': unknown key 'contxt'"
             ${sim} --cluster h100-sxm --ranks 8 --headroom contxt=1GiB)
expect_error(headroom_value "--headroom fragmentation 'lots': not a number"
             ${sim} --cluster h100-sxm --ranks 8 --headroom fragmentation=lots)
expect_error(headroom_range "field 'headroom.fragmentation' = 2.0 must be in \\[0, 1\\]"
             ${sim} --cluster h100-sxm --ranks 8 --headroom fragmentation=2)
expect_error(headroom_all "leave nothing of gpu.memory_GiB"
             ${sim} --cluster h100-sxm --ranks 8 --headroom context=80GiB)
# hybrid_shard uses two communicators (its shard and replica groups), full_shard one.
run_ok(fit_hsdp simulate --model tiny --steps 1 --batch 16 --seq 32 --ranks 16 --trace off
       --cluster h100-sxm --strategy hybrid_shard --hybrid-group 8)
if(NOT fit_hsdp MATCHES "NCCL 2.00 GiB \\(2 communicators\\)")
  message(FATAL_ERROR "hybrid_shard's headroom does not count two communicators:\n${fit_hsdp}")
endif()

# ---- fabrics by name: a slower one is slower; one link setting at a time
run_ok(ndr ${big} --fabric ndr400)
run_ok(eth ${big} --fabric eth25)
string(REGEX MATCH "tokens/s +([0-9]+)" m "${ndr}")
set(ndr_tps ${CMAKE_MATCH_1})
string(REGEX MATCH "tokens/s +([0-9]+)" m "${eth}")
set(eth_tps ${CMAKE_MATCH_1})
if(NOT eth MATCHES "with --fabric eth25" OR NOT eth_tps LESS ndr_tps)
  message(FATAL_ERROR "--fabric eth25 (${eth_tps} tokens/s) is not slower than ndr400 "
                      "(${ndr_tps}):\n${eth}")
endif()
expect_error(fabric_unknown "--fabric 'ndr800': unknown" ${sim} --cluster h100-sxm --fabric ndr800)
expect_error(fabric_twice "both set the link between nodes"
             ${sim} --cluster h100-sxm --fabric hdr200 --inter-node-gbps 100)
run_ok(b200 simulate --print-cluster b200)
if(NOT b200 MATCHES "\"bf16\": 2250" OR NOT b200 MATCHES "\"headroom\"")
  message(FATAL_ERROR "--print-cluster b200:\n${b200}")
endif()
